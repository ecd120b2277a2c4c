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

use std::cmp::Reverse;
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
/// headers, thousands of keep-alive connections left open, or connections opened and opened
/// again as fast as they are closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time a client has to complete the TLS handshake after connecting.
    pub tls_handshake_timeout: Duration,
    /// Time from the first byte of a request to the end of its headers.
    pub header_read_timeout: Duration,
    /// Time a connection may stay without any byte read or written before it is closed
    /// (gracefully: a request in progress is answered first, within one more idle period).
    pub idle_timeout: Duration,
    /// Most open connections. When they are all open, a new connection takes the place of one
    /// that may be given up (see [`admit`]); it is refused only if none may.
    pub max_connections: usize,
    /// Most open connections from one peer IP address. A new connection from a peer that holds
    /// this many takes the place of one of the peer's own connections that is neither busy nor
    /// has delivered a review (see [`admit`]); it is refused only if there is none.
    pub max_connections_per_peer: usize,
    /// How long a connection may take for one step (the ClientHello, finishing the TLS handshake
    /// once the server answered, starting a request once established, completing a request
    /// head) before it counts as stalled: given up for a new connection before the connections
    /// that are taking their steps ([`Tier`]). A legitimate client takes each step within a
    /// round trip.
    pub eviction_grace: Duration,
}

impl Default for ConnectionLimits {
    /// 10 s handshake, 10 s header read, 90 s idle (as long as the API server's Go client keeps
    /// idle connections, so the server rarely closes one the client is about to reuse), 1,000
    /// connections, 200 per peer (an API server holds one connection per webhook call in flight,
    /// and keeps at most 25 idle ones; see `docs/webhook-rules.md#connection-limits`), 1 s for
    /// each step of a connection before it counts as stalled.
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
    /// Refused at accept: the peer holds `max_connections_per_peer`, none of which may be given
    /// up.
    PerPeerLimit,
    /// Given up for a new connection of the same peer, which held `max_connections_per_peer`.
    PerPeerLimitEvicted,
    /// Refused at accept: `max_connections` are open and none may be given up.
    GlobalLimit,
    /// Given up for a new connection while `max_connections` were open.
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
    pub const ALL: [Self; 7] = [
        Self::PerPeerLimit,
        Self::PerPeerLimitEvicted,
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
            Self::PerPeerLimitEvicted => "per_peer_limit_evicted",
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
    /// The connection has delivered a review the webhook could read.
    proven: AtomicBool,
    /// A request has started on the connection.
    requested: AtomicBool,
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

    /// Notes that the connection delivered a review the webhook could read (see [`Tier`]).
    pub fn mark_proven(&self) {
        self.shared.proven.store(true, Ordering::Relaxed);
    }

    /// What the connection is doing, for [`admit`].
    #[must_use]
    pub fn state(&self) -> ConnState<Instant> {
        if let Some(since) = self.head_started() {
            ConnState::Head { since }
        } else if self.shared.in_request.load(Ordering::Relaxed) {
            ConnState::Busy
        } else if !self.shared.requested.load(Ordering::Relaxed) {
            ConnState::Established {
                since: self.shared.origin,
            }
        } else {
            ConnState::Idle {
                since: self.last_traffic(),
                proven: self.shared.proven.load(Ordering::Relaxed),
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
            proven: AtomicBool::new(false),
            requested: AtomicBool::new(false),
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
                self.shared.requested.store(true, Ordering::Relaxed);
                self.shared.head_started_ms.store(now, Ordering::Relaxed);
                self.shared.head_start.notify_one();
            }
            HeadChange::Completed => {
                self.shared.requested.store(true, Ordering::Relaxed);
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

/// Milliseconds value meaning "not answered yet".
const NOT_ANSWERED: u64 = u64::MAX;

/// When the server answered a connection's ClientHello, shared between a [`HandshakeWatch`]
/// stream and the pool.
#[derive(Clone, Debug)]
pub struct HandshakeClock {
    origin: Instant,
    answered_ms: Arc<AtomicU64>,
}

impl HandshakeClock {
    /// When the server first wrote to the connection (its answer to a complete ClientHello, or
    /// an alert), if it has.
    #[must_use]
    pub fn answered(&self) -> Option<Instant> {
        match self.answered_ms.load(Ordering::Relaxed) {
            NOT_ANSWERED => None,
            ms => Some(self.origin + Duration::from_millis(ms)),
        }
    }

    /// What the connection is doing while its TLS handshake has not completed.
    #[must_use]
    pub fn state(&self, accepted: Instant) -> ConnState<Instant> {
        match self.answered() {
            Some(since) => ConnState::Answered { since },
            None => ConnState::Handshake { since: accepted },
        }
    }
}

/// The accepted TCP stream under TLS, recording when the server first writes to it: the TLS
/// server writes only once a complete ClientHello has arrived, so a silent client, or one that
/// sends part of a ClientHello and stalls, is told from one whose handshake is under way.
#[derive(Debug)]
pub struct HandshakeWatch<S> {
    inner: S,
    clock: HandshakeClock,
}

impl<S> HandshakeWatch<S> {
    /// Wraps `inner`, accepted now.
    pub fn new(inner: S) -> (Self, HandshakeClock) {
        let clock = HandshakeClock {
            origin: Instant::now(),
            answered_ms: Arc::new(AtomicU64::new(NOT_ANSWERED)),
        };
        (
            Self {
                inner,
                clock: clock.clone(),
            },
            clock,
        )
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped stream.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn record_write(&self) {
        if self.clock.answered_ms.load(Ordering::Relaxed) == NOT_ANSWERED {
            let ms = u64::try_from(self.clock.origin.elapsed().as_millis())
                .unwrap_or(NOT_ANSWERED - 1)
                .min(NOT_ANSWERED - 1);
            self.clock.answered_ms.store(ms, Ordering::Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for HandshakeWatch<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HandshakeWatch<S> {
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
