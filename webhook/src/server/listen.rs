//! The HTTPS accept loop over tokio-rustls, bounded by the connection limits, one connection's
//! serving and closing, and the plain HTTP server of the admin port.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::Response;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::limits::{CloseReason, ConnectionLimits, HandshakeWatch, Tracked, peer_key};
use crate::metrics::ConnectionMetrics;
use crate::pool::{Admitted, Lease, Pool};

use super::handlers::ReadableReview;

/// Serves `router` over TLS on `listener` with the default [`ConnectionLimits`], until the task
/// is dropped.
pub async fn serve_tls(listener: TcpListener, router: Router, tls: Arc<rustls::ServerConfig>) {
    serve_tls_with_limits(
        listener,
        router,
        tls,
        ConnectionLimits::default(),
        ConnectionMetrics::default(),
    )
    .await;
}

/// How long a closing connection reads (and discards) what its client still sends after the last
/// response: closing a socket with unread data makes the kernel answer with a reset, which can
/// destroy the response before the client reads it (a 413 for a body the client is still
/// sending).
const LINGER: Duration = Duration::from_secs(2);

/// Rate limit of the warnings about refused and evicted connections.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Serves `router` over TLS on `listener` until the task is dropped. Each connection is HTTP/1.1
/// (ALPN `http/1.1`) and bounded by `limits` (per peer, in all, timeouts); connections closed or
/// refused by a limit are counted in `metrics` (pass [`Metrics::connections`] to expose them);
/// handshake failures and timeouts are logged at debug and do not stop the loop.
///
/// [`Metrics::connections`]: crate::metrics::Metrics::connections
pub async fn serve_tls_with_limits(
    listener: TcpListener,
    router: Router,
    tls: Arc<rustls::ServerConfig>,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
) {
    let acceptor = TlsAcceptor::from(tls);
    let pool = Pool::new(limits);
    let mut last_warning: HashMap<CloseReason, Instant> = HashMap::new();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                continue;
            }
        };
        let now = Instant::now();
        let mut warn = |reason: CloseReason| {
            let due = last_warning
                .get(&reason)
                .is_none_or(|last| now.duration_since(*last) >= WARN_EVERY);
            if due {
                last_warning.insert(reason, now);
            }
            due
        };
        let (stream, handshake) = HandshakeWatch::new(stream);
        let lease = match pool.admit(peer_key(peer), now, handshake) {
            Admitted::Yes { lease, evicted } => {
                if let Some(reason) = evicted {
                    metrics.closed_by(reason);
                    if warn(reason) {
                        tracing::warn!(
                            %peer,
                            reason = reason.label(),
                            max_connections = limits.max_connections,
                            max_connections_per_peer = limits.max_connections_per_peer,
                            "connection limit reached; giving up connections that are not serving \
                             requests for new ones (logged once a minute per limit)"
                        );
                    }
                }
                lease
            }
            // Accepting and closing at once (rather than not accepting) keeps the kernel backlog
            // empty, and the client learns at once that it was refused.
            Admitted::No(reason) => {
                if warn(reason) {
                    tracing::warn!(
                        %peer,
                        reason = reason.label(),
                        max_connections = limits.max_connections,
                        max_connections_per_peer = limits.max_connections_per_peer,
                        "connection refused by a limit (logged once a minute per limit)"
                    );
                }
                tracing::debug!(%peer, reason = reason.label(), "connection refused");
                metrics.closed_by(reason);
                drop(stream);
                continue;
            }
        };
        metrics.open.inc();
        let acceptor = acceptor.clone();
        let router = router.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            if let Some(reason) =
                serve_connection(acceptor, stream, peer, router, limits, &lease).await
            {
                metrics.closed_by(reason);
            }
            metrics.open.dec();
            drop(lease);
        });
    }
}

/// Serves one connection; returns the limit that closed it, if one did (an eviction is counted
/// by the accept loop).
async fn serve_connection(
    acceptor: TlsAcceptor,
    stream: HandshakeWatch<tokio::net::TcpStream>,
    peer: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    lease: &Lease,
) -> Option<CloseReason> {
    let _ = stream.get_ref().set_nodelay(true);
    let handshake = tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(stream));
    let tls = tokio::select! {
        result = handshake => match result {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => {
                tracing::debug!(%peer, %error, "TLS handshake failed");
                return None;
            }
            Err(_) => {
                tracing::debug!(%peer, timeout = ?limits.tls_handshake_timeout, "TLS handshake timed out");
                return Some(CloseReason::TlsHandshakeTimeout);
            }
        },
        () = lease.evicted() => {
            tracing::debug!(%peer, "connection given up in the TLS handshake for a new one");
            return None;
        }
    };
    let (io, clock) = Tracked::new(tls);
    lease.established(clock.clone());
    // A response to a review the webhook could read proves the connection (see `limits`).
    let proven = clock.clone();
    let service = TowerToHyperService::new(tower::util::MapResponse::new(
        router,
        move |response: Response| {
            if response.extensions().get::<ReadableReview>().is_some() {
                proven.mark_proven();
            }
            response
        },
    ));
    let mut builder = hyper::server::conn::http1::Builder::new();
    // hyper's header timer would also end idle keep-alive connections (see `limits`); the
    // header timeout is enforced below instead.
    builder.timer(TokioTimer::new()).header_read_timeout(None);
    // Without shutdown: the connection is closed below, reading what the client still sends.
    let mut connection = builder.serve_connection(TokioIo::new(io), service);
    // Set once the idle timeout asked for a graceful close: the request in progress gets one
    // more idle period to finish.
    let mut close_by: Option<Instant> = None;
    let reason = loop {
        let idle_deadline = close_by.unwrap_or(clock.last_traffic() + limits.idle_timeout);
        let deadline = match clock.head_started() {
            Some(started) => idle_deadline.min(started + limits.header_read_timeout),
            None => idle_deadline,
        };
        tokio::select! {
            result = std::future::poll_fn(|cx| connection.poll_without_shutdown(cx)) => {
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                    return close_by.map(|_| CloseReason::IdleTimeout);
                }
                break close_by.map(|_| CloseReason::IdleTimeout);
            }
            () = lease.evicted() => {
                tracing::debug!(%peer, "idle connection given up for a new one");
                return None;
            }
            // A head started: its deadline may be nearer; compute again.
            () = clock.head_start() => {}
            () = tokio::time::sleep_until(deadline) => {
                let now = Instant::now();
                if clock.head_started().is_some_and(|started| started + limits.header_read_timeout <= now) {
                    tracing::debug!(%peer, timeout = ?limits.header_read_timeout, "request headers not complete in time; closing");
                    return Some(CloseReason::HeaderReadTimeout);
                }
                match close_by {
                    Some(close_by) if close_by <= now => {
                        tracing::debug!(%peer, "request still not finished after the idle close; dropping");
                        return Some(CloseReason::IdleTimeout);
                    }
                    Some(_) => {}
                    None if clock.last_traffic() + limits.idle_timeout <= now => {
                        tracing::debug!(%peer, timeout = ?limits.idle_timeout, "closing idle connection");
                        std::pin::Pin::new(&mut connection).graceful_shutdown();
                        close_by = Some(now + limits.idle_timeout);
                    }
                    None => {}
                }
            }
        }
    };
    lease.closing();
    let tls = connection.into_parts().io.into_inner().into_inner();
    tokio::select! {
        () = linger_close(tls) => {}
        () = lease.evicted() => {}
    }
    reason
}

/// Closes a connection whose last response was written: TLS `close_notify` and TCP FIN, then
/// reads and discards what the client still sends (the rest of a request body the server did
/// not read) until it closes its side or [`LINGER`] passes, so the client reads the response
/// instead of a reset.
async fn linger_close(
    mut tls: tokio_rustls::server::TlsStream<HandshakeWatch<tokio::net::TcpStream>>,
) {
    if tokio::time::timeout(LINGER, tls.shutdown()).await.is_err() {
        return;
    }
    let mut tcp = tls.into_inner().0.into_inner();
    let mut sink = vec![0_u8; 16 * 1024];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(read) = tcp.read(&mut sink).await
            && read > 0
        {}
    })
    .await;
}

/// Serves `router` over plain HTTP (the admin port).
pub async fn serve_plain(listener: TcpListener, router: Router) -> std::io::Result<()> {
    axum::serve(listener, router).await
}
