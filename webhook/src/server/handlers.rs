//! The handlers' shared state ([`AppState`]), reading a request body within [`BODY_LIMIT`], and
//! the admission and conversion handlers.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use kube::core::conversion::ConversionReview;
use tokio::time::Instant;

use crate::admission::{self, Action, Kind};
use crate::metrics::{DenialLabels, EndpointLabels, Metrics, RequestLabels};
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
pub(super) struct ReadableReview;

/// `response`, marked as the answer to a review the webhook could read.
fn readable_review(mut response: Response) -> Response {
    response.extensions_mut().insert(ReadableReview);
    response
}

pub(super) async fn admit(
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

pub(super) async fn convert(State(state): State<Arc<AppState>>, request: Request) -> Response {
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
