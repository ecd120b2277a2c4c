//! Connection limits of the HTTPS listener: how long a client may take for the TLS handshake and
//! for a request's headers, how long a connection may stay idle, and how many may be open.
//!
//! hyper's own header-read timer also runs while a keep-alive connection waits for its next
//! request, so it would close every idle connection after the header timeout and make an idle
//! timeout longer than that meaningless. The header timeout is therefore measured here: from the
//! first byte of a request to the blank line that ends its headers ([`HeadScanner`], pure), on
//! the plaintext seen by [`Tracked`], a stream wrapper that also records the last traffic.
//!
//! One client must not be able to starve the others by opening connections, from one address or
//! many, however fast it reconnects. Connections are counted per peer ([`peer_key`], its IP
//! address). When a cap is reached, a new connection is not refused while an open one may be
//! given up for it ([`admit`]): at the per-peer cap one of that peer's own connections, at the
//! global cap preferably one of the peer holding the most. Which one is ranked by what a
//! legitimate client (an API server) does and a flood does not ([`Tier`]): it takes each step
//! of a connection (ClientHello, finishing the handshake, sending a request head) within a
//! round trip, and it sends reviews the webhook can read. A connection stuck in a step for
//! longer than the eviction grace, or idle after requests that were not reviews, goes first;
//! then the one that has been longest in its step; a connection that delivered a review is
//! given up only for a peer holding fewer connections, and one with a request in progress
//! never. A flood that reconnects at once therefore only cycles through its own connections,
//! while a client that keeps taking steps stays among the newest. The decisions are pure
//! functions of a snapshot; [`crate::pool`] keeps the snapshot.

mod config;
mod eviction;
mod handshake;
mod head;
mod tracked;

pub use config::{CloseReason, ConnectionLimits, peer_key};
pub use eviction::{Admission, ConnState, Open, Tier, admit, pick_own_victim, pick_victim, tier};
pub use handshake::{HandshakeClock, HandshakeWatch};
pub use head::{HeadChange, HeadScanner};
pub use tracked::{Tracked, TrafficClock};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::net::SocketAddr;

    const REQUEST: &[u8] = b"POST /convert HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";

    #[test]
    fn a_head_starts_with_its_first_byte_and_ends_with_the_blank_line() {
        let mut scanner = HeadScanner::default();
        assert_eq!(scanner.on_read(b"POST / HTTP/1.1\r\n"), HeadChange::Started);
        assert_eq!(scanner.on_read(b"host: x\r\n"), HeadChange::None);
        assert_eq!(scanner.on_read(b"\r"), HeadChange::None);
        assert_eq!(scanner.on_read(b"\n{\"a\""), HeadChange::Completed);
        // The body is not a new head, even if it contains a blank line.
        assert_eq!(scanner.on_read(b"x\r\n\r\n"), HeadChange::None);
        scanner.on_write();
        assert_eq!(scanner.on_read(REQUEST), HeadChange::Completed);
    }

    #[test]
    fn a_write_before_the_head_ends_does_not_end_it() {
        let mut scanner = HeadScanner::default();
        assert_eq!(scanner.on_read(b"GET / HTTP/1.1\r\n"), HeadChange::Started);
        scanner.on_write();
        assert_eq!(scanner.on_read(b"\r\n"), HeadChange::Completed);
    }

    fn limits(max_connections: usize, max_connections_per_peer: usize) -> ConnectionLimits {
        ConnectionLimits {
            max_connections,
            max_connections_per_peer,
            ..ConnectionLimits::default()
        }
    }

    type Own = Vec<(u32, ConnState<u32>)>;
    type All = Vec<Open<u32, u32>>;

    fn never_own() -> Own {
        panic!("the peer's connections are only needed at the per-peer cap")
    }

    fn never_all() -> All {
        panic!("every connection is only needed at the global cap")
    }

    fn open(id: u32, peer_open: usize, state: ConnState<u32>) -> Open<u32, u32> {
        Open {
            id,
            peer_open,
            state,
        }
    }

    fn idle(since: u32, proven: bool) -> ConnState<u32> {
        ConnState::Idle { since, proven }
    }

    /// The grace cutoff of these tests: `since` values above it are within the grace.
    const CUTOFF: u32 = 10;

    #[test]
    fn below_both_caps_a_connection_is_accepted_without_looking_at_the_others() {
        let admission = admit(5, 2, &limits(10, 3), never_own, never_all, CUTOFF);
        assert_eq!(admission, Admission::Accept);
    }

    #[test]
    fn a_peer_at_its_cap_gives_up_its_own_connection_stuck_longest() {
        let own = vec![
            (1, ConnState::Busy),
            (2, idle(0, true)),
            (3, ConnState::Handshake { since: 5 }),
            (4, idle(3, false)),
            (5, ConnState::Answered { since: 1 }),
            (6, ConnState::Head { since: 11 }),
        ];
        // The answered handshake since 1 is stuck longest; the proven idle connection since 0
        // stays.
        let admission = admit(4, 3, &limits(10, 3), || own.clone(), never_all, CUTOFF);
        assert_eq!(
            admission,
            Admission::Evict {
                victim: 5,
                reason: CloseReason::PerPeerLimitEvicted
            }
        );
        let without = own
            .into_iter()
            .filter(|(id, _)| *id != 5)
            .collect::<Vec<_>>();
        assert_eq!(pick_own_victim(without, CUTOFF), Some(4));
    }

    #[test]
    fn a_peer_at_its_cap_gives_up_a_fresh_connection_only_when_none_is_stalled() {
        let own = vec![
            (1, ConnState::Busy),
            (2, idle(0, true)),
            (3, ConnState::Head { since: 12 }),
            (4, ConnState::Established { since: 13 }),
            (5, ConnState::Handshake { since: 14 }),
            (6, ConnState::Answered { since: 11 }),
        ];
        // The answered handshake has been longest in its step.
        assert_eq!(pick_own_victim(own.clone(), CUTOFF), Some(6));
        // Idle after a request that was not a review: stalled, however recent.
        let mut with_stalled = own;
        with_stalled.push((7, idle(19, false)));
        assert_eq!(pick_own_victim(with_stalled, CUTOFF), Some(7));
    }

    #[test]
    fn a_peer_at_its_cap_with_only_busy_or_proven_connections_is_refused() {
        let own = vec![(1, ConnState::Busy), (2, idle(0, true))];
        // Even with the listener full of other peers' stalled connections.
        let all = vec![open(9, 50, ConnState::Handshake { since: 0 })];
        let admission = admit(10, 2, &limits(10, 2), || own, || all, CUTOFF);
        assert_eq!(admission, Admission::Refuse(CloseReason::PerPeerLimit));
    }

    #[test]
    fn at_the_global_cap_the_peer_holding_most_gives_up_a_stalled_connection_first() {
        let all = vec![
            open(1, 1, ConnState::Handshake { since: 0 }),
            open(2, 5, ConnState::Handshake { since: 9 }),
            open(3, 5, idle(12, false)),
            open(4, 7, ConnState::Busy),
            open(5, 7, idle(0, true)),
            open(6, 7, ConnState::Handshake { since: 11 }),
        ];
        // Stalled: 1 (peer of 1), 2 and 3 (peer of 5). The larger peer goes first, and of its
        // two the one stuck longest.
        let admission = admit(4, 0, &limits(4, 10), never_own, || all, CUTOFF);
        assert_eq!(
            admission,
            Admission::Evict {
                victim: 2,
                reason: CloseReason::GlobalLimitEvictedIdle
            }
        );
    }

    #[test]
    fn a_closing_connection_goes_first() {
        let all = vec![
            open(1, 9, ConnState::Handshake { since: 0 }),
            open(2, 1, ConnState::Closing),
        ];
        assert_eq!(pick_victim(all, 0, CUTOFF), Some(2));
        let own = vec![
            (1, ConnState::Handshake { since: 0 }),
            (2, ConnState::Closing),
        ];
        assert_eq!(pick_own_victim(own, CUTOFF), Some(2));
        assert_eq!(
            pick_victim(vec![open(1, 9, ConnState::Busy)], 0, CUTOFF),
            None
        );
        assert_eq!(pick_victim(Vec::<Open<u32, u32>>::new(), 0, CUTOFF), None);
    }

    #[test]
    fn fresh_and_proven_connections_make_room_at_the_global_cap_only_for_a_peer_holding_fewer() {
        let all = vec![
            open(1, 3, ConnState::Handshake { since: 11 }),
            open(2, 3, idle(5, true)),
            open(3, 3, ConnState::Busy),
        ];
        // A newcomer whose peer will hold 3 too: nothing may be given up, so a flood spread
        // over many addresses is refused rather than cycling through the listener.
        let admission = admit(3, 2, &limits(3, 10), never_own, || all.clone(), CUTOFF);
        assert_eq!(admission, Admission::Refuse(CloseReason::GlobalLimit));
        // A newcomer whose peer holds one: the proven idle connection goes before the fresh
        // handshake (a request is about to come on that one).
        assert_eq!(pick_victim(all.clone(), 1, CUTOFF), Some(2));
        let fresh = all.into_iter().filter(|o| o.id != 2).collect::<Vec<_>>();
        assert_eq!(pick_victim(fresh, 1, CUTOFF), Some(1));
    }

    #[test]
    fn a_stalled_connection_of_a_small_peer_goes_before_a_proven_one_of_a_large_peer() {
        let all = vec![
            open(1, 1, ConnState::Handshake { since: 9 }),
            open(2, 100, idle(0, true)),
        ];
        assert_eq!(pick_victim(all, 0, CUTOFF), Some(1));
    }

    #[test]
    fn ipv4_mapped_peers_count_as_their_ipv4_address_and_ports_do_not_matter() {
        let mapped: SocketAddr = "[::ffff:10.0.0.7]:4000".parse().unwrap();
        let plain: SocketAddr = "10.0.0.7:5000".parse().unwrap();
        assert_eq!(peer_key(mapped), peer_key(plain));
        let other: SocketAddr = "10.0.0.8:4000".parse().unwrap();
        assert_ne!(peer_key(other), peer_key(plain));
    }

    #[test]
    fn every_close_reason_has_its_own_label() {
        let labels: std::collections::HashSet<_> =
            CloseReason::ALL.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), CloseReason::ALL.len());
    }

    fn state(kind: u8, since: u32) -> ConnState<u32> {
        match kind {
            0 => ConnState::Handshake { since },
            1 => ConnState::Answered { since },
            2 => idle(since, false),
            3 => idle(since, true),
            4 => ConnState::Head { since },
            5 => ConnState::Busy,
            6 => ConnState::Established { since },
            _ => ConnState::Closing,
        }
    }

    /// Rank of a connection as the rules state it, lowest given up first: closing; stalled (idle
    /// without a review, or in a step since the cutoff or before); proven idle; fresh (in a
    /// step since after the cutoff); `None` for busy.
    fn rank(state: ConnState<u32>) -> Option<(u8, u32)> {
        match state {
            ConnState::Closing => Some((0, 0)),
            ConnState::Idle {
                since,
                proven: false,
            } => Some((1, since)),
            ConnState::Idle {
                since,
                proven: true,
            } => Some((2, since)),
            ConnState::Handshake { since }
            | ConnState::Answered { since }
            | ConnState::Established { since }
            | ConnState::Head { since } => Some((if since <= CUTOFF { 1 } else { 3 }, since)),
            ConnState::Busy => None,
        }
    }

    proptest! {
        /// At the per-peer cap the victim is never busy or proven, and no other connection of
        /// the peer ranks before it (lower tier, then longer wait).
        #[test]
        fn the_own_victim_is_neither_busy_nor_proven_and_ranks_first(states in proptest::collection::vec((0_u8..8, 0_u32..20), 0..12)) {
            let own: Vec<(usize, ConnState<u32>)> = states
                .iter()
                .enumerate()
                .map(|(id, (kind, since))| (id, state(*kind, *since)))
                .collect();
            let eligible = |state| rank(state).filter(|(tier, _)| *tier != 2);
            let best = own.iter().filter_map(|(_, s)| eligible(*s)).min();
            match pick_own_victim(own.iter().copied(), CUTOFF) {
                None => prop_assert_eq!(best, None),
                Some(victim) => prop_assert_eq!(eligible(own[victim].1), best),
            }
        }

        /// At the global cap the victim is never busy; proven or fresh only if its peer holds
        /// more than the newcomer's will; and no eligible connection ranks before it (lower
        /// tier, then larger peer, then longer wait).
        #[test]
        fn the_victim_is_eligible_and_ranks_first(
            states in proptest::collection::vec((0_u8..8, 0_u32..20, 1_usize..6), 0..12),
            newcomer_open in 0_usize..5,
        ) {
            let all: Vec<Open<usize, u32>> = states
                .iter()
                .enumerate()
                .map(|(id, (kind, since, peer_open))| Open { id, peer_open: *peer_open, state: state(*kind, *since) })
                .collect();
            let key = |open: &Open<usize, u32>| {
                let (tier, since) = rank(open.state)?;
                (tier <= 1 || open.peer_open > newcomer_open + 1)
                    .then_some((tier, Reverse(open.peer_open), since))
            };
            let best = all.iter().filter_map(key).min();
            match pick_victim(all.iter().copied(), newcomer_open, CUTOFF) {
                None => prop_assert_eq!(best, None),
                Some(victim) => prop_assert_eq!(key(&all[victim]), best),
            }
        }
    }

    proptest! {
        /// However a request is split into reads, its head completes exactly once, and never
        /// before the blank line has been read.
        #[test]
        fn any_split_of_a_request_completes_its_head_once(cuts in proptest::collection::btree_set(1..REQUEST.len(), 0..8)) {
            let mut scanner = HeadScanner::default();
            let mut start = 0;
            let mut completions = Vec::new();
            for end in cuts.into_iter().chain([REQUEST.len()]) {
                if scanner.on_read(&REQUEST[start..end]) == HeadChange::Completed {
                    completions.push(end);
                }
                start = end;
            }
            let head_end = REQUEST.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            prop_assert_eq!(completions.len(), 1);
            prop_assert!(completions[0] >= head_end);
        }
    }
}
