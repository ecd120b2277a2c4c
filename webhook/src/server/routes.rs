//! The webhook router (admission and conversion) and the admin router (health, readiness,
//! metrics).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::routing::{get, post};

use crate::admission::{Action, Kind};

use super::handlers::{AppState, admit, convert};

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
