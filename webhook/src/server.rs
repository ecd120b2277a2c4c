//! HTTP layer: the webhook router (admission and conversion), the admin router (health,
//! readiness, metrics) and an HTTPS accept loop over tokio-rustls.
//!
//! Handlers are thin: they time the request, call the pure decision functions of
//! [`crate::admission`] and [`mcm_conversion`], record metrics and log. Every policy decision is
//! an HTTP 200 with an `AdmissionReview`/`ConversionReview`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use kube::core::conversion::ConversionReview;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::admission::{self, Action, Kind};
use crate::limits::{ConnectionLimits, Tracked};
use crate::metrics::{ConnectionMetrics, DenialLabels, EndpointLabels, Metrics, RequestLabels};
use crate::tls::CertStore;

/// Largest request body accepted (API server requests are ≤3 MiB plus the old object).
pub const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// Shared state of the handlers.
#[derive(Debug)]
pub struct AppState {
    /// Metrics.
    pub metrics: Metrics,
    /// The serving certificate (readiness: ready once one is loaded).
    pub certs: Arc<CertStore>,
}

impl AppState {
    /// State serving the given certificate store.
    #[must_use]
    pub fn new(certs: Arc<CertStore>) -> Arc<Self> {
        Arc::new(Self {
            metrics: Metrics::default(),
            certs,
        })
    }
}

/// The webhook routes: `/validate-machine-sapcloud-io-<kind>`, `/mutate-machine-sapcloud-io-<kind>`
/// for the four kinds, and `/convert`.
pub fn router(state: Arc<AppState>) -> Router {
    let mut router = Router::new().route("/convert", post(convert));
    for kind in Kind::ALL {
        router = router
            .route(
                &format!("/validate-machine-sapcloud-io-{}", kind.path_name()),
                post(move |state: State<Arc<AppState>>, body: Bytes| {
                    admit(state, kind, Action::Validate, body)
                }),
            )
            .route(
                &format!("/mutate-machine-sapcloud-io-{}", kind.path_name()),
                post(move |state: State<Arc<AppState>>, body: Bytes| {
                    admit(state, kind, Action::Mutate, body)
                }),
            );
    }
    router
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// The admin routes: `/healthz`, `/readyz` (ready only once a certificate is loaded) and
/// `/metrics`.
pub fn admin_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(state): State<Arc<AppState>>| async move {
                if state.certs.is_loaded() {
                    (StatusCode::OK, "ok")
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "no serving certificate loaded",
                    )
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(state): State<Arc<AppState>>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    state.metrics.encode(),
                )
            }),
        )
        .with_state(state)
}

/// Serialises `value` into a buffer of `capacity` bytes to start with (an empty body if
/// serialisation fails, which plain JSON data cannot).
fn to_json(value: &impl serde::Serialize, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    if serde_json::to_writer(&mut out, value).is_err() {
        out.clear();
    }
    out
}

fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn admit(
    State(state): State<Arc<AppState>>,
    kind: Kind,
    action: Action,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let answer = admission::review(kind, action, &body);
    let endpoint = match action {
        Action::Validate => "validate",
        Action::Mutate => "mutate",
    };
    let outcome = if answer.patched {
        "patched"
    } else if answer.allowed {
        "allowed"
    } else if answer.denied_by == ["bad-request"] {
        "error"
    } else {
        "denied"
    };
    state
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            endpoint,
            kind: kind.name(),
            outcome,
        })
        .inc();
    if answer.dry_run {
        tracing::debug!(kind = kind.name(), name = %answer.name, outcome, "dry-run admission");
    } else {
        for rule in &answer.denied_by {
            state
                .metrics
                .denials
                .get_or_create(&DenialLabels {
                    kind: kind.name(),
                    rule,
                })
                .inc();
        }
        if !answer.allowed {
            tracing::info!(kind = kind.name(), name = %answer.name, rules = ?answer.denied_by, "admission denied");
        }
    }
    let body = to_json(&answer.review, 512);
    state
        .metrics
        .latency
        .get_or_create(&EndpointLabels { endpoint })
        .observe(started.elapsed().as_secs_f64());
    json_response(body)
}

async fn convert(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let started = Instant::now();
    let (review, outcome, count) = match serde_json::from_slice::<ConversionReview>(&body) {
        Ok(review) => {
            let answer = mcm_conversion::convert_review(review);
            let converted = answer
                .response
                .as_ref()
                .map_or(0, |r| r.converted_objects.len());
            let ok = answer.response.as_ref().is_some_and(|r| {
                r.result.status == Some(kube::core::response::StatusSummary::Success)
            });
            (
                // The answer is about as large as the request: size the buffer once.
                to_json(&answer, body.len() + 512),
                if ok { "converted" } else { "error" },
                converted,
            )
        }
        Err(e) => {
            let invalid =
                kube::core::conversion::ConversionResponse::invalid(kube::core::Status::failure(
                    &format!("body is not a ConversionReview: {e}"),
                    "BadRequest",
                ));
            (to_json(&invalid.into_review(), 512), "error", 0)
        }
    };
    state
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            endpoint: "convert",
            kind: "",
            outcome,
        })
        .inc();
    state.metrics.converted_objects.inc_by(count as u64);
    state
        .metrics
        .latency
        .get_or_create(&EndpointLabels {
            endpoint: "convert",
        })
        .observe(started.elapsed().as_secs_f64());
    json_response(review)
}

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

/// Serves `router` over TLS on `listener` until the task is dropped. Each connection is HTTP/1.1
/// (ALPN `http/1.1`) and bounded by `limits`; connections closed by a limit are counted in
/// `metrics` (pass [`Metrics::connections`] to expose them); handshake failures and timeouts are
/// logged at debug and do not stop the loop.
pub async fn serve_tls_with_limits(
    listener: TcpListener,
    router: Router,
    tls: Arc<rustls::ServerConfig>,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
) {
    let acceptor = TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut saturated = false;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                continue;
            }
        };
        // Accepting and closing at once (rather than not accepting) keeps the kernel backlog
        // empty, and the client learns at once that it was refused.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !saturated {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "connection limit reached; refusing new connections"
                );
            }
            saturated = true;
            tracing::debug!(%peer, "connection refused: limit reached");
            metrics.closed_by("refused");
            drop(stream);
            continue;
        };
        saturated = false;
        metrics.open.inc();
        let acceptor = acceptor.clone();
        let router = router.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            if let Some(reason) = serve_connection(acceptor, stream, peer, router, limits).await {
                metrics.closed_by(reason);
            }
            metrics.open.dec();
            drop(slot);
        });
    }
}

/// Serves one connection; returns the limit that closed it, if one did.
async fn serve_connection(
    acceptor: TlsAcceptor,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
) -> Option<&'static str> {
    let _ = stream.set_nodelay(true);
    let tls = match tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(stream))
        .await
    {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, timeout = ?limits.tls_handshake_timeout, "TLS handshake timed out");
            return Some("tls_handshake_timeout");
        }
    };
    let (io, clock) = Tracked::new(tls);
    let service = TowerToHyperService::new(router);
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    // hyper's header timer would also end idle keep-alive connections (see `limits`); the
    // header timeout is enforced below instead.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    // Set once the idle timeout asked for a graceful close: the request in progress gets one
    // more idle period to finish.
    let mut close_by: Option<Instant> = None;
    loop {
        let idle_deadline = close_by.unwrap_or(clock.last_traffic() + limits.idle_timeout);
        let deadline = match clock.head_started() {
            Some(started) => idle_deadline.min(started + limits.header_read_timeout),
            None => idle_deadline,
        };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                }
                return close_by.map(|_| "idle_timeout");
            }
            // A head started: its deadline may be nearer; compute again.
            () = clock.head_start() => {}
            () = tokio::time::sleep_until(deadline) => {
                let now = Instant::now();
                if clock.head_started().is_some_and(|started| started + limits.header_read_timeout <= now) {
                    tracing::debug!(%peer, timeout = ?limits.header_read_timeout, "request headers not complete in time; closing");
                    return Some("header_read_timeout");
                }
                match close_by {
                    Some(close_by) if close_by <= now => {
                        tracing::debug!(%peer, "request still not finished after the idle close; dropping");
                        return Some("idle_timeout");
                    }
                    Some(_) => {}
                    None if clock.last_traffic() + limits.idle_timeout <= now => {
                        tracing::debug!(%peer, timeout = ?limits.idle_timeout, "closing idle connection");
                        connection.as_mut().graceful_shutdown();
                        close_by = Some(now + limits.idle_timeout);
                    }
                    None => {}
                }
            }
        }
    }
}

/// Serves `router` over plain HTTP (the admin port).
pub async fn serve_plain(listener: TcpListener, router: Router) -> std::io::Result<()> {
    axum::serve(listener, router).await
}
