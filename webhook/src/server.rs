//! HTTP layer: the webhook router (admission and conversion), the admin router (health,
//! readiness, metrics) and an HTTPS accept loop over tokio-rustls.
//!
//! Handlers are thin: they time the request, call the pure decision functions of
//! [`crate::admission`] and [`mcm_conversion`], record metrics and log. Every policy decision is
//! an HTTP 200 with an `AdmissionReview`/`ConversionReview`.

mod handlers;
mod listen;
mod routes;

pub use handlers::{AppState, BODY_LIMIT};
pub use listen::{serve_plain, serve_tls, serve_tls_with_limits};
pub use routes::{admin_router, router};
