//! HTTP layer: the webhook router (admission and conversion), the admin router (health,
//! readiness, metrics) and an HTTPS accept loop over tokio-rustls.
//!
//! Handlers are thin: they time the request, call the pure decision functions of
//! [`crate::admission`] and [`mcm_conversion`], record metrics and log. Every policy decision is
//! an HTTP 200 with an `AdmissionReview`/`ConversionReview`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use kube::core::conversion::ConversionReview;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::admission::{self, Action, Kind};
use crate::limits::{CloseReason, ConnectionLimits, HandshakeWatch, Tracked, peer_key};
use crate::metrics::{ConnectionMetrics, DenialLabels, EndpointLabels, Metrics, RequestLabels};
use crate::pool::{Admitted, Lease, Pool};
use crate::preview::{Preview, append_warnings};
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
    /// The rollout preview of validated updates (reads with its own client and deadline).
    pub preview: Preview,
}

impl AppState {
    /// State serving the given certificate store.
    #[must_use]
    pub fn new(certs: Arc<CertStore>) -> Arc<Self> {
        Self::with_preview(certs, Preview::default())
    }

    /// State serving the given certificate store, previewing updates with `preview`.
    #[must_use]
    pub fn with_preview(certs: Arc<CertStore>, preview: Preview) -> Arc<Self> {
        Arc::new(Self {
            metrics: Metrics::default(),
            certs,
            preview,
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
                post(move |state: State<Arc<AppState>>, request: Request| {
                    admit(state, kind, Action::Validate, request)
                }),
            )
            .route(
                &format!("/mutate-machine-sapcloud-io-{}", kind.path_name()),
                post(move |state: State<Arc<AppState>>, request: Request| {
                    admit(state, kind, Action::Mutate, request)
                }),
            );
    }
    router.with_state(state)
}

/// A Kubernetes `Status` (`kind: Status`, `status: Failure`) answering a request the webhook did
/// not take in, with the HTTP status `code`.
fn status_response(code: StatusCode, reason: &str, message: &str) -> Response {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        to_json(&status, 256),
    )
        .into_response()
}

/// Reads a request body of at most [`BODY_LIMIT`] bytes. A larger one is answered with 413 and a
/// `Status` (reason `RequestEntityTooLarge`): at once when its `Content-Length` says so, else
/// once the limit is crossed. The rest of the body is left unread; the connection then closes
/// and discards it (`linger_close`), so the client reads the 413 instead of a reset.
async fn read_body(request: Request) -> Result<Bytes, Response> {
    let too_large = || {
        status_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            &format!("request body is larger than the webhook's limit of {BODY_LIMIT} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > BODY_LIMIT as u64) {
        return Err(too_large());
    }
    match axum::body::to_bytes(request.into_body(), BODY_LIMIT).await {
        Ok(body) => Ok(body),
        Err(error) if is_length_limit(&error) => Err(too_large()),
        Err(error) => Err(status_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("cannot read the request body: {error}"),
        )),
    }
}

/// Whether reading a body failed because it crossed the limit (the error wraps
/// `http_body_util::LengthLimitError`).
fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if current
            .downcast_ref::<http_body_util::LengthLimitError>()
            .is_some()
        {
            return true;
        }
        source = current.source();
    }
    false
}

/// Counts a request whose body was not taken in (too large or unreadable).
fn count_unread(state: &AppState, endpoint: &'static str, kind: &'static str) {
    state
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            endpoint,
            kind,
            outcome: "error",
        })
        .inc();
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

/// Marks the response to a review the webhook could read (an `AdmissionReview` with a request,
/// a `ConversionReview`): the connection it came on behaves like an API server's, which the
/// connection limits take into account (`limits::Tier::Proven`).
#[derive(Clone, Copy, Debug)]
struct ReadableReview;

/// `response`, marked as the answer to a review the webhook could read.
fn readable_review(mut response: Response) -> Response {
    response.extensions_mut().insert(ReadableReview);
    response
}

async fn admit(
    State(state): State<Arc<AppState>>,
    kind: Kind,
    action: Action,
    request: Request,
) -> Response {
    let started = Instant::now();
    let endpoint = match action {
        Action::Validate => "validate",
        Action::Mutate => "mutate",
    };
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(response) => {
            count_unread(&state, endpoint, kind.name());
            return response;
        }
    };
    let mut answer = admission::review(kind, action, &body);
    // Know before you roll: an allowed update that touches machines says so. Never a denial.
    if action == Action::Validate
        && answer.allowed
        && matches!(kind, Kind::MachineDeployment | Kind::MachineClass)
    {
        let lines = state.preview.warnings(kind, &body).await;
        append_warnings(&mut answer.review, lines);
    }
    // A template naming a class the driver found invalid: a warning, never a denial.
    if action == Action::Validate
        && answer.allowed
        && matches!(kind, Kind::MachineDeployment | Kind::MachineSet)
    {
        let lines = state.preview.invalid_class_warnings(kind, &body).await;
        append_warnings(&mut answer.review, lines);
    }
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
    if outcome == "error" {
        json_response(body)
    } else {
        readable_review(json_response(body))
    }
}

async fn convert(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let started = Instant::now();
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(response) => {
            count_unread(&state, "convert", "");
            return response;
        }
    };
    let readable = serde_json::from_slice::<ConversionReview>(&body);
    let read = readable.is_ok();
    let (review, outcome, count) = match readable {
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
    if read {
        readable_review(json_response(review))
    } else {
        json_response(review)
    }
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
