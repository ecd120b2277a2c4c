//! Which connection to give up for a new one, or whether to refuse it ([`admit`]): the state of
//! an open connection ([`ConnState`]), its [`Tier`], and the choice of a victim (pure).

use std::cmp::Reverse;

use super::config::{CloseReason, ConnectionLimits};

/// What an open connection is doing, as far as giving it up for a new one is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState<T> {
    /// Accepted; the server has not answered a ClientHello (none, or part of one, arrived).
    Handshake {
        /// When the connection was accepted.
        since: T,
    },
    /// The server answered the ClientHello; the client has not finished the handshake.
    Answered {
        /// When the server answered.
        since: T,
    },
    /// The TLS handshake completed and no request has started yet.
    Established {
        /// When the handshake completed.
        since: T,
    },
    /// Between requests: nothing in progress since the last traffic.
    Idle {
        /// The last byte read or written.
        since: T,
        /// The connection has delivered a review the webhook could read.
        proven: bool,
    },
    /// A request head is being read and is not complete yet.
    Head {
        /// The head's first byte.
        since: T,
    },
    /// A request is being read, handled or answered: never given up.
    Busy,
    /// The server is closing it (after the last response, reading what the client still
    /// sends); may always be given up.
    Closing,
}

/// How readily a connection is given up for a new one, first to last; a busy connection has
/// no tier (it is never given up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Being closed anyway.
    Closing,
    /// Stuck: in the TLS handshake or in a request head for longer than the eviction grace (a
    /// ClientHello not answered, a client that does not finish the handshake, a head not
    /// complete), established without a request for longer than it, or idle after requests
    /// that were not reviews. Given up for any new connection, the one stuck longest first.
    Stalled,
    /// Idle after delivering a review: never given up for a connection of its own peer; at the
    /// global cap only for a peer holding fewer connections, longest idle first.
    Proven,
    /// In the TLS handshake, established without a request, or in a request head, for less
    /// than the eviction grace: a legitimate client about to send a request looks like this.
    /// Given up for a connection of its own peer only when the peer has no closing or stalled
    /// connection left, the one longest in its step first; at the global cap only for a peer
    /// holding fewer connections.
    Fresh,
}

/// The tier of a connection in `state` and the time it has been waiting since (`None` for a
/// closing one); `None` if it must not be given up. `grace_cutoff` is now minus the eviction
/// grace.
pub fn tier<T: Copy + Ord>(state: ConnState<T>, grace_cutoff: T) -> Option<(Tier, Option<T>)> {
    match state {
        ConnState::Closing => Some((Tier::Closing, None)),
        ConnState::Idle {
            since,
            proven: false,
        } => Some((Tier::Stalled, Some(since))),
        ConnState::Idle {
            since,
            proven: true,
        } => Some((Tier::Proven, Some(since))),
        ConnState::Handshake { since }
        | ConnState::Answered { since }
        | ConnState::Established { since }
        | ConnState::Head { since } => {
            let tier = if since <= grace_cutoff {
                Tier::Stalled
            } else {
                Tier::Fresh
            };
            Some((tier, Some(since)))
        }
        ConnState::Busy => None,
    }
}

/// One open connection as [`admit`] sees it at the global cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Open<Id, T> {
    /// The connection.
    pub id: Id,
    /// Connections its peer holds (this one included).
    pub peer_open: usize,
    /// What it is doing.
    pub state: ConnState<T>,
}

/// What to do with a connection that was just accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission<Id> {
    /// Serve it.
    Accept,
    /// Serve it and close `victim` to make room.
    Evict {
        /// The connection to give up.
        victim: Id,
        /// Which cap made room necessary: [`CloseReason::PerPeerLimitEvicted`] or
        /// [`CloseReason::GlobalLimitEvictedIdle`].
        reason: CloseReason,
    },
    /// Close it at once.
    Refuse(CloseReason),
}

/// Decides on a connection from a peer that holds `peer_open` connections while `open` are
/// open in all. `own` lists that peer's connections and is consulted only at the per-peer cap;
/// `all` lists every connection and is consulted only at the global cap. `grace_cutoff` is now
/// minus the eviction grace.
///
/// At the per-peer cap the new connection takes the place of one of the peer's own connections
/// that is neither busy nor proven ([`pick_own_victim`]): a flood sharing an API server's
/// address only cycles through its own connections, and the API server's proven ones stay. At
/// the global cap it takes the place of a stalled connection of the peer holding the most, or
/// of a fresh or proven one of a peer holding more than the newcomer's will ([`pick_victim`]).
pub fn admit<Id, T, O, A>(
    open: usize,
    peer_open: usize,
    limits: &ConnectionLimits,
    own: impl FnOnce() -> O,
    all: impl FnOnce() -> A,
    grace_cutoff: T,
) -> Admission<Id>
where
    Id: Copy,
    T: Copy + Ord,
    O: IntoIterator<Item = (Id, ConnState<T>)>,
    A: IntoIterator<Item = Open<Id, T>>,
{
    if peer_open >= limits.max_connections_per_peer {
        return match pick_own_victim(own(), grace_cutoff) {
            Some(victim) => Admission::Evict {
                victim,
                reason: CloseReason::PerPeerLimitEvicted,
            },
            None => Admission::Refuse(CloseReason::PerPeerLimit),
        };
    }
    if open < limits.max_connections {
        return Admission::Accept;
    }
    match pick_victim(all(), peer_open, grace_cutoff) {
        Some(victim) => Admission::Evict {
            victim,
            reason: CloseReason::GlobalLimitEvictedIdle,
        },
        None => Admission::Refuse(CloseReason::GlobalLimit),
    }
}

/// The connection of one peer to give up for that peer's new connection: a closing one, else
/// the [`Tier::Stalled`] one stuck longest, else the [`Tier::Fresh`] one longest in its step.
/// `None` if every connection of the peer is busy or proven (the peer holds its cap of
/// connections that serve it).
pub fn pick_own_victim<Id: Copy, T: Copy + Ord>(
    connections: impl IntoIterator<Item = (Id, ConnState<T>)>,
    grace_cutoff: T,
) -> Option<Id> {
    connections
        .into_iter()
        .filter_map(|(id, state)| match tier(state, grace_cutoff)? {
            (Tier::Proven, _) => None,
            (tier, since) => Some(((tier, since), id)),
        })
        .min_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, id)| id)
}

/// The connection to give up for a new one from a peer holding `newcomer_open` connections
/// when the listener is full: the lowest [`Tier`] first; within a tier, a connection of the
/// peer holding the most first, then the one waiting longest. Closing and [`Tier::Stalled`]
/// connections may always be given up; [`Tier::Proven`] and [`Tier::Fresh`] ones only if their
/// peer holds more than the newcomer's will (more than `newcomer_open + 1`), so that no peer
/// is pushed below another's share. `None` if nothing may be given up.
pub fn pick_victim<Id: Copy, T: Copy + Ord>(
    connections: impl IntoIterator<Item = Open<Id, T>>,
    newcomer_open: usize,
    grace_cutoff: T,
) -> Option<Id> {
    connections
        .into_iter()
        .filter_map(|open| {
            let (tier, since) = tier(open.state, grace_cutoff)?;
            let fair = open.peer_open > newcomer_open.saturating_add(1);
            match tier {
                Tier::Closing | Tier::Stalled => {}
                Tier::Proven | Tier::Fresh if fair => {}
                Tier::Proven | Tier::Fresh => return None,
            }
            Some(((tier, Reverse(open.peer_open), since), open.id))
        })
        .min_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, id)| id)
}
