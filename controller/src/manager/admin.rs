//! The admin HTTP server: `/healthz`, `/readyz` and `/metrics` on `--address:--port`.
//!
//! * `/healthz` answers 200 `ok` while the process is healthy and 500 naming the stopped
//!   controllers once one of them ended (the process is about to exit then; the probe failing
//!   makes sure a process that hangs on its way out is restarted anyway).
//! * `/readyz` answers 200 `ok` once the control API was reached and every controller's caches
//!   are synced, **whether or not this replica holds the lease**. Standby replicas warm their
//!   caches too; they are ready to take over, and a readiness that depended on leadership would
//!   make rolling updates of a two-replica Deployment wait for a lease hand-over. (The manager
//!   serves no traffic besides this admin port, so readiness gates nothing else.) Before that it
//!   answers 503 with the reason.
//! * `/metrics` serves [`Metrics::encode`] as OpenMetrics text.
//!
//! Upstream's `/configz` and pprof handlers are not served.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::platform::metrics::{CONTENT_TYPE, Metrics, MetricsPort};

#[derive(Debug, Default)]
struct HealthState {
    ready: bool,
    not_ready_reason: String,
    stopped_controllers: BTreeSet<String>,
}

/// Health and readiness shared between the manager and the admin server. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Health(Arc<Mutex<HealthState>>);

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// Healthy and not ready ("starting").
    pub fn new() -> Self {
        Self(Arc::new(Mutex::new(HealthState {
            not_ready_reason: "starting".to_owned(),
            ..HealthState::default()
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Marks the process ready (control API reached, caches synced).
    pub fn set_ready(&self) {
        let mut state = self.state();
        state.ready = true;
        state.not_ready_reason.clear();
    }

    /// Marks the process not ready, with a reason shown by `/readyz`.
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        let mut state = self.state();
        state.ready = false;
        state.not_ready_reason = reason.into();
    }

    /// Records that a controller stopped; `/healthz` fails from now on.
    pub fn controller_stopped(&self, controller: impl Into<String>) {
        self.state().stopped_controllers.insert(controller.into());
    }

    /// Whether no controller stopped.
    pub fn is_healthy(&self) -> bool {
        self.state().stopped_controllers.is_empty()
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.state().ready
    }
}

#[derive(Clone)]
struct AdminState {
    health: Health,
    metrics: Metrics,
    port: MetricsPort,
}

/// The admin routes, `/metrics` serving every series.
pub fn router(health: Health, metrics: Metrics) -> Router {
    router_for(health, metrics, MetricsPort::Both)
}

/// The admin routes, `/metrics` serving the series of `port`.
pub fn router_for(health: Health, metrics: Metrics, port: MetricsPort) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_handler))
        .with_state(AdminState {
            health,
            metrics,
            port,
        })
}

async fn healthz(State(state): State<AdminState>) -> Response {
    let stopped = state.health.state().stopped_controllers.clone();
    if stopped.is_empty() {
        (StatusCode::OK, "ok").into_response()
    } else {
        let names: Vec<String> = stopped.into_iter().collect();
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("unhealthy: controller(s) stopped: {}", names.join(", ")),
        )
            .into_response()
    }
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let health = state.health.state();
    if health.ready {
        (StatusCode::OK, "ok").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", health.not_ready_reason),
        )
            .into_response()
    }
}

async fn metrics_handler(State(state): State<AdminState>) -> Response {
    // Scrape hooks may walk large caches: keep that off the async workers.
    let metrics = state.metrics.clone();
    let port = state.port;
    match tokio::task::spawn_blocking(move || metrics.encode_port(port)).await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Ok(Err(error)) => {
            tracing::error!(%error, "encoding metrics failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "encoding metrics failed").into_response()
        }
        Err(error) => {
            tracing::error!(%error, "metrics encoding task failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "encoding metrics failed").into_response()
        }
    }
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then finishes open requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

#[cfg(test)]
#[path = "admin_tests.rs"]
mod tests;
