//! Connection limits of the HTTPS listener: how long a client may take for the TLS handshake and
//! for a request's headers, how long a connection may stay idle, and how many may be open.
//!
//! hyper's own header-read timer also runs while a keep-alive connection waits for its next
//! request, so it would close every idle connection after the header timeout and make an idle
//! timeout longer than that meaningless. The header timeout is therefore measured here: from the
//! first byte of a request to the blank line that ends its headers ([`HeadScanner`], pure), on
//! the plaintext seen by [`Tracked`], a stream wrapper that also records the last traffic.
//!
//! One client must not be able to take the listener down by holding many connections (issue 26):
//! connections are counted per peer ([`peer_key`], its IP address) and bounded by
//! [`ConnectionLimits::max_connections_per_peer`], and when the global cap is reached the
//! connection that has waited longest without doing anything useful ([`pick_victim`]: idle
//! between requests, or stuck in the TLS handshake or in a request head) is given up for the new
//! one. The decisions are pure functions of a snapshot; [`crate::pool`] keeps the snapshot.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Bounds on the connections of the HTTPS listener, so idle or slow clients cannot hold the
/// server's sockets and memory (a client that connects and sends nothing, one that trickles its
/// headers, or thousands of keep-alive connections left open).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time a client has to complete the TLS handshake after connecting.
    pub tls_handshake_timeout: Duration,
    /// Time from the first byte of a request to the end of its headers.
    pub header_read_timeout: Duration,
    /// Time a connection may stay without any byte read or written before it is closed
    /// (gracefully: a request in progress is answered first, within one more idle period).
    pub idle_timeout: Duration,
    /// Most open connections. When they are all open, a new connection takes the place of the
    /// one idle longest (see [`pick_victim`]); it is refused only if none may be given up.
    pub max_connections: usize,
    /// Most open connections from one peer IP address; more are closed right after accept.
    pub max_connections_per_peer: usize,
    /// How long a connection must have been in the TLS handshake, or in an incomplete request
    /// head, before it may be given up for a new connection when the server is full (connections
    /// idle between requests may be given up at once, longest idle first).
    pub eviction_grace: Duration,
}

impl Default for ConnectionLimits {
    /// 10 s handshake, 10 s header read, 90 s idle (as long as the API server's Go client keeps
    /// idle connections, so the server rarely closes one the client is about to reuse), 1,000
    /// connections, 200 per peer (an API server holds one connection per webhook call in flight,
    /// and keeps at most 25 idle ones; see `docs/webhook-rules.md#connection-limits`), 1 s grace
    /// for handshakes and request heads before they may be given up.
    fn default() -> Self {
        Self {
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            max_connections: 1000,
            max_connections_per_peer: 200,
            eviction_grace: Duration::from_secs(1),
        }
    }
}

/// The key connections are counted by for [`ConnectionLimits::max_connections_per_peer`]: the
/// peer's IP address (an IPv4-mapped IPv6 address, as a dual-stack listener reports IPv4 peers,
/// counts as the IPv4 address). The port is not part of it: every connection has its own.
#[must_use]
pub fn peer_key(peer: SocketAddr) -> IpAddr {
    peer.ip().to_canonical()
}

/// Why the listener closed or refused a connection: the value of the `reason` label of
/// `machine_webhook_closed_connections_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// Refused at accept: the peer already holds `max_connections_per_peer`.
    PerPeerLimit,
    /// Refused at accept: `max_connections` are open and none may be given up.
    GlobalLimit,
    /// Given up for a new connection while `max_connections` were open: idle between requests,
    /// or in the handshake or a request head for longer than the eviction grace.
    GlobalLimitEvictedIdle,
    /// The TLS handshake did not complete within `tls_handshake_timeout`.
    TlsHandshakeTimeout,
    /// A request head did not complete within `header_read_timeout`.
    HeaderReadTimeout,
    /// No traffic for `idle_timeout`.
    IdleTimeout,
}

impl CloseReason {
    /// Every reason, so each label value can be exported (at 0) from the start.
    pub const ALL: [Self; 6] = [
        Self::PerPeerLimit,
        Self::GlobalLimit,
        Self::GlobalLimitEvictedIdle,
        Self::TlsHandshakeTimeout,
        Self::HeaderReadTimeout,
        Self::IdleTimeout,
    ];

    /// The metric label value.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::PerPeerLimit => "per_peer_limit",
            Self::GlobalLimit => "global_limit",
            Self::GlobalLimitEvictedIdle => "global_limit_evicted_idle",
            Self::TlsHandshakeTimeout => "tls_handshake_timeout",
            Self::HeaderReadTimeout => "header_read_timeout",
            Self::IdleTimeout => "idle_timeout",
        }
    }
}

/// What an open connection is doing, as far as giving it up for a new one is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState<T> {
    /// Accepted; the TLS handshake has not completed. `since`: accept time.
    Handshake {
        /// When the connection was accepted.
        since: T,
    },
    /// Between requests (or before the first one): nothing in progress since the last traffic.
    Idle {
        /// The last byte read or written.
        since: T,
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

/// What to do with a connection that was just accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission<Id> {
    /// Serve it.
    Accept,
    /// Serve it and close `victim` to make room.
    Evict {
        /// The connection to give up.
        victim: Id,
    },
    /// Close it at once.
    Refuse(CloseReason),
}

/// Decides on a connection from a peer that holds `peer_open` connections while `open` are open
/// in all; `connections` is consulted only when the global cap is reached. The per-peer limit
/// refuses outright: a peer at its limit only displaces its own connections elsewhere, and an
/// API server that reached it has that many calls in flight (its idle connections are few).
pub fn admit<Id: Copy, T: Copy + Ord>(
    open: usize,
    peer_open: usize,
    limits: &ConnectionLimits,
    connections: impl FnOnce() -> Vec<(Id, ConnState<T>)>,
    grace_cutoff: T,
) -> Admission<Id> {
    if peer_open >= limits.max_connections_per_peer {
        return Admission::Refuse(CloseReason::PerPeerLimit);
    }
    if open < limits.max_connections {
        return Admission::Accept;
    }
    match pick_victim(connections(), grace_cutoff) {
        Some(victim) => Admission::Evict { victim },
        None => Admission::Refuse(CloseReason::GlobalLimit),
    }
}

/// The connection to give up for a new one: one being closed anyway, else the one that has
/// waited longest without progress among those idle between requests (any age) and those in the
/// handshake or in a request head that started at or before `grace_cutoff` (now minus the
/// eviction grace, so a legitimate handshake in progress is not cut). The newest connections
/// are given up last, so a client that connects to send a request gets to send it. `None` if
/// every connection is busy or too young.
pub fn pick_victim<Id: Copy, T: Copy + Ord>(
    connections: impl IntoIterator<Item = (Id, ConnState<T>)>,
    grace_cutoff: T,
) -> Option<Id> {
    // Closing first (key None sorts lowest), then the oldest `since`.
    connections
        .into_iter()
        .filter_map(|(id, state)| {
            let key = match state {
                ConnState::Closing => None,
                ConnState::Idle { since } => Some(since),
                ConnState::Handshake { since } | ConnState::Head { since }
                    if since <= grace_cutoff =>
                {
                    Some(since)
                }
                ConnState::Handshake { .. } | ConnState::Head { .. } | ConnState::Busy => {
                    return None;
                }
            };
            Some((key, id))
        })
        .min_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, id)| id)
}

/// Finds where request heads start and end in the bytes a server reads (HTTP/1.1, one request
/// at a time): a head starts with the first byte read after a response was written (or on a new
/// connection) and ends with the blank line `\r\n\r\n`. Pure: no I/O, no clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeadScanner {
    /// A head has started and its end has not been seen.
    in_head: bool,
    /// The head of the current request has been read (its body may follow).
    in_request: bool,
    /// The last four bytes of the head so far, to find `\r\n\r\n` across reads.
    window: u32,
}

/// What one read changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadChange {
    /// Nothing about heads.
    None,
    /// A head started and is not complete yet.
    Started,
    /// The head in progress (or one that started and ended in this read) is complete.
    Completed,
}

impl HeadScanner {
    /// Feeds bytes that were read.
    pub fn on_read(&mut self, bytes: &[u8]) -> HeadChange {
        if bytes.is_empty() || self.in_request {
            return HeadChange::None;
        }
        let started = !self.in_head;
        self.in_head = true;
        for byte in bytes {
            self.window = (self.window << 8) | u32::from(*byte);
            if self.window == u32::from_be_bytes(*b"\r\n\r\n") {
                self.in_head = false;
                self.in_request = true;
                self.window = 0;
                return HeadChange::Completed;
            }
        }
        if started {
            HeadChange::Started
        } else {
            HeadChange::None
        }
    }

    /// Notes that bytes were written: a response, so the next byte read starts a new request.
    pub fn on_write(&mut self) {
        if self.in_request {
            self.in_request = false;
            self.window = 0;
        }
    }
}

/// Milliseconds value meaning "no head in progress".
const NO_HEAD: u64 = u64::MAX;

/// Traffic facts shared between a [`Tracked`] stream and the task watching it.
#[derive(Debug)]
struct Shared {
    /// When the connection was set up; the other fields count milliseconds from here.
    origin: Instant,
    last_traffic_ms: AtomicU64,
    head_started_ms: AtomicU64,
    /// A request head has been read and its response not started yet.
    in_request: AtomicBool,
    /// Wakes the watcher when a head starts: its deadline is then nearer than the one it
    /// sleeps for.
    head_start: Notify,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }
}

/// Reads the traffic facts of a [`Tracked`] stream from the task that enforces the limits.
#[derive(Clone, Debug)]
pub struct TrafficClock {
    shared: Arc<Shared>,
}

impl TrafficClock {
    /// When a byte was last read or written (the setup time if none yet).
    #[must_use]
    pub fn last_traffic(&self) -> Instant {
        self.shared.origin
            + Duration::from_millis(self.shared.last_traffic_ms.load(Ordering::Relaxed))
    }

    /// Completes when a request head starts (at once if one started since the last call).
    pub async fn head_start(&self) {
        self.shared.head_start.notified().await;
    }

    /// When the request head being read started, if one is in progress.
    #[must_use]
    pub fn head_started(&self) -> Option<Instant> {
        match self.shared.head_started_ms.load(Ordering::Relaxed) {
            NO_HEAD => None,
            ms => Some(self.shared.origin + Duration::from_millis(ms)),
        }
    }

    /// What the connection is doing, for [`pick_victim`].
    #[must_use]
    pub fn state(&self) -> ConnState<Instant> {
        if let Some(since) = self.head_started() {
            ConnState::Head { since }
        } else if self.shared.in_request.load(Ordering::Relaxed) {
            ConnState::Busy
        } else {
            ConnState::Idle {
                since: self.last_traffic(),
            }
        }
    }
}

/// A stream that records its traffic for [`TrafficClock`]: the last byte in either direction
/// and whether a request head is being read.
#[derive(Debug)]
pub struct Tracked<S> {
    inner: S,
    scanner: HeadScanner,
    shared: Arc<Shared>,
}

impl<S> Tracked<S> {
    /// Wraps `inner`; the connection counts as active from now.
    pub fn new(inner: S) -> (Self, TrafficClock) {
        let shared = Arc::new(Shared {
            origin: Instant::now(),
            last_traffic_ms: AtomicU64::new(0),
            head_started_ms: AtomicU64::new(NO_HEAD),
            in_request: AtomicBool::new(false),
            head_start: Notify::new(),
        });
        let clock = TrafficClock {
            shared: shared.clone(),
        };
        (
            Self {
                inner,
                scanner: HeadScanner::default(),
                shared,
            },
            clock,
        )
    }

    /// The wrapped stream (to close it once HTTP is done with it).
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn record_read(&mut self, bytes: &[u8]) {
        let now = self.shared.now_ms();
        self.shared.last_traffic_ms.store(now, Ordering::Relaxed);
        match self.scanner.on_read(bytes) {
            HeadChange::Started => {
                self.shared.head_started_ms.store(now, Ordering::Relaxed);
                self.shared.head_start.notify_one();
            }
            HeadChange::Completed => {
                self.shared.in_request.store(true, Ordering::Relaxed);
                self.shared
                    .head_started_ms
                    .store(NO_HEAD, Ordering::Relaxed);
            }
            HeadChange::None => {}
        }
    }

    fn record_write(&mut self) {
        let now = self.shared.now_ms();
        self.shared.last_traffic_ms.store(now, Ordering::Relaxed);
        self.scanner.on_write();
        self.shared.in_request.store(false, Ordering::Relaxed);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.record_read(&buf.filled()[before..]);
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            self.record_write();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            self.record_write();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    /// Connections as (id, state) with `since` in seconds; the grace cutoff is 10.
    fn pick(connections: &[(u32, ConnState<u32>)]) -> Option<u32> {
        pick_victim(connections.iter().copied(), 10)
    }

    #[test]
    fn below_both_caps_a_connection_is_accepted_without_looking_at_the_others() {
        let admission = admit::<u32, u32>(
            5,
            2,
            &limits(10, 3),
            || panic!("the snapshot is only needed at the global cap"),
            0,
        );
        assert_eq!(admission, Admission::Accept);
    }

    #[test]
    fn a_peer_at_its_cap_is_refused_even_with_idle_connections_around() {
        let admission = admit(
            10,
            3,
            &limits(10, 3),
            || vec![(1, ConnState::Idle { since: 0 })],
            10,
        );
        assert_eq!(admission, Admission::Refuse(CloseReason::PerPeerLimit));
        let admission = admit::<u32, u32>(2, 3, &limits(10, 3), Vec::new, 10);
        assert_eq!(admission, Admission::Refuse(CloseReason::PerPeerLimit));
    }

    #[test]
    fn at_the_global_cap_the_longest_idle_connection_makes_room() {
        let connections = vec![
            (1, ConnState::Idle { since: 7 }),
            (2, ConnState::Busy),
            (3, ConnState::Idle { since: 3 }),
            (4, ConnState::Idle { since: 12 }),
        ];
        let admission = admit(4, 0, &limits(4, 3), || connections, 10);
        assert_eq!(admission, Admission::Evict { victim: 3 });
    }

    #[test]
    fn at_the_global_cap_with_every_connection_busy_or_young_the_new_one_is_refused() {
        let connections = vec![
            (1, ConnState::Busy),
            (2, ConnState::Handshake { since: 11 }),
            (3, ConnState::Head { since: 15 }),
        ];
        let admission = admit(3, 0, &limits(3, 3), || connections, 10);
        assert_eq!(admission, Admission::Refuse(CloseReason::GlobalLimit));
    }

    #[test]
    fn handshakes_and_heads_past_the_grace_are_given_up_oldest_first() {
        // The handshake since 9 has waited longest; the handshake since 11 is within the grace
        // and spared although it is older than the idle connection since 12.
        assert_eq!(
            pick(&[
                (1, ConnState::Handshake { since: 11 }),
                (2, ConnState::Head { since: 10 }),
                (3, ConnState::Handshake { since: 9 }),
                (4, ConnState::Idle { since: 12 }),
            ]),
            Some(3)
        );
        assert_eq!(
            pick(&[
                (1, ConnState::Handshake { since: 11 }),
                (2, ConnState::Head { since: 10 }),
            ]),
            Some(2)
        );
        // Idle connections have no grace: the youngest idle one still goes before nothing.
        assert_eq!(
            pick(&[
                (1, ConnState::Handshake { since: 11 }),
                (2, ConnState::Idle { since: 20 }),
            ]),
            Some(2)
        );
    }

    #[test]
    fn a_closing_connection_goes_first() {
        assert_eq!(
            pick(&[
                (1, ConnState::Idle { since: 0 }),
                (2, ConnState::Closing),
                (3, ConnState::Handshake { since: 0 }),
            ]),
            Some(2)
        );
        assert_eq!(pick(&[(1, ConnState::Busy)]), None);
        assert_eq!(pick(&[]), None);
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

    proptest! {
        /// The victim is never busy, never a handshake or head younger than the grace, and no
        /// eligible connection has waited longer than it.
        #[test]
        fn the_victim_is_eligible_and_has_waited_longest(states in proptest::collection::vec((0_u8..5, 0_u32..20), 0..12)) {
            let connections: Vec<(usize, ConnState<u32>)> = states
                .iter()
                .enumerate()
                .map(|(id, (kind, since))| {
                    let since = *since;
                    let state = match kind {
                        0 => ConnState::Handshake { since },
                        1 => ConnState::Idle { since },
                        2 => ConnState::Head { since },
                        3 => ConnState::Busy,
                        _ => ConnState::Closing,
                    };
                    (id, state)
                })
                .collect();
            // Rank: Closing 0, else 1 + since; None when not eligible.
            let rank = |state: ConnState<u32>| match state {
                ConnState::Closing => Some(0),
                ConnState::Idle { since } => Some(1 + since),
                ConnState::Handshake { since } | ConnState::Head { since } if since <= 10 => Some(1 + since),
                _ => None,
            };
            let best = connections.iter().filter_map(|(_, s)| rank(*s)).min();
            match pick_victim(connections.iter().copied(), 10) {
                None => prop_assert_eq!(best, None),
                Some(victim) => prop_assert_eq!(rank(connections[victim].1), best),
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
