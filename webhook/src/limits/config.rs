//! The limits themselves ([`ConnectionLimits`]), the key connections are counted by per peer
//! ([`peer_key`]) and why the listener closes or refuses a connection ([`CloseReason`]).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

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
    ///
    /// [`admit`]: super::eviction::admit
    pub max_connections: usize,
    /// Most open connections from one peer IP address. A new connection from a peer that holds
    /// this many takes the place of one of the peer's own connections that is neither busy nor
    /// has delivered a review (see [`admit`]); it is refused only if there is none.
    ///
    /// [`admit`]: super::eviction::admit
    pub max_connections_per_peer: usize,
    /// How long a connection may take for one step (the ClientHello, finishing the TLS handshake
    /// once the server answered, starting a request once established, completing a request
    /// head) before it counts as stalled: given up for a new connection before the connections
    /// that are taking their steps ([`Tier`]). A legitimate client takes each step within a
    /// round trip.
    ///
    /// [`Tier`]: super::eviction::Tier
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
