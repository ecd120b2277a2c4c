//! The HTTP endpoint of the provider: `/metrics`, `/healthz`, and admin routes for tests.
//!
//! - `GET /admin/vms`: every VM as JSON (with `initializeCalls`, the InitializeMachine calls it
//!   received; `/metrics` sums them up as `provider_virtual_vms_by_initialize_calls{calls}`).
//! - `PUT /admin/nodes/{node}/conditions` with a JSON object such as
//!   `{"Ready": "False", "DiskPressure": "True"}`: overrides those conditions of the node
//!   (statuses `True`, `False`, `Unknown`); `DELETE` on the same path removes the overrides.
//!   Both answer 404 for a node no VM of this provider has (a typo must not look applied).
//!   The Node annotation `provider-virtual.mcm.gardener.cloud/conditions` does the same through the
//!   API server and wins for the types it names.
//! - `PUT /admin/nodes/{node}/heartbeat` with `{"stopped": true}` stops the node's heartbeat (no
//!   Lease renewal, no status post, as a kubelet cut off from the API server); `{"stopped": false}`
//!   or `DELETE` resumes it, and the first heartbeat posts the status. 404 for an unknown node.
//!   The Node annotation `provider-virtual.mcm.gardener.cloud/heartbeat: stopped` does the same
//!   through the API server.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};

use crate::driver::Fleet;
use crate::metrics::Metrics;

#[derive(Clone)]
struct AppState {
    fleet: Arc<Fleet>,
    metrics: Arc<Metrics>,
}

/// The router of the endpoint.
pub fn router(fleet: Arc<Fleet>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/admin/vms", get(vms))
        .route(
            "/admin/nodes/{node}/conditions",
            put(set_conditions).delete(clear_conditions),
        )
        .route(
            "/admin/nodes/{node}/heartbeat",
            put(set_heartbeat).delete(resume_heartbeat),
        )
        .with_state(AppState { fleet, metrics })
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    state
        .metrics
        .set_initialize_call_counts(&state.fleet.initialize_call_counts());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

async fn vms(State(state): State<AppState>) -> Response {
    Json(state.fleet.vms()).into_response()
}

async fn set_conditions(
    State(state): State<AppState>,
    Path(node): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let overrides: BTreeMap<String, String> = match serde_json::from_slice(&body) {
        Ok(overrides) => overrides,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("expected a JSON object of condition type to status: {error}\n"),
            )
                .into_response();
        }
    };
    if let Some((type_, status)) = overrides.iter().find(|(type_, status)| {
        type_.is_empty() || !["True", "False", "Unknown"].contains(&status.as_str())
    }) {
        return (
            StatusCode::BAD_REQUEST,
            format!(
                "invalid override {type_:?}: {status:?} (status must be True, False or Unknown)\n"
            ),
        )
            .into_response();
    }
    if let Some(missing) = unknown_node(&state.fleet, &node) {
        return missing;
    }
    tracing::info!(%node, ?overrides, "condition overrides set");
    state.fleet.set_overrides(&node, overrides);
    StatusCode::NO_CONTENT.into_response()
}

/// 404 when no VM has Node `node`.
fn unknown_node(fleet: &Fleet, node: &str) -> Option<Response> {
    (!fleet.has_node(node)).then(|| {
        (
            StatusCode::NOT_FOUND,
            format!("no VM of this provider has node {node:?}\n"),
        )
            .into_response()
    })
}

/// The body of `PUT /admin/nodes/{node}/heartbeat`.
#[derive(serde::Deserialize)]
struct HeartbeatSwitch {
    stopped: bool,
}

async fn set_heartbeat(
    State(state): State<AppState>,
    Path(node): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let switch: HeartbeatSwitch = match serde_json::from_slice(&body) {
        Ok(switch) => switch,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("expected {{\"stopped\": true|false}}: {error}\n"),
            )
                .into_response();
        }
    };
    if let Some(missing) = unknown_node(&state.fleet, &node) {
        return missing;
    }
    tracing::info!(%node, stopped = switch.stopped, "heartbeat switched");
    state.fleet.set_heartbeat_stopped(&node, switch.stopped);
    StatusCode::NO_CONTENT.into_response()
}

async fn resume_heartbeat(State(state): State<AppState>, Path(node): Path<String>) -> Response {
    if let Some(missing) = unknown_node(&state.fleet, &node) {
        return missing;
    }
    state.fleet.set_heartbeat_stopped(&node, false);
    StatusCode::NO_CONTENT.into_response()
}

async fn clear_conditions(State(state): State<AppState>, Path(node): Path<String>) -> Response {
    if let Some(missing) = unknown_node(&state.fleet, &node) {
        return missing;
    }
    state.fleet.set_overrides(&node, BTreeMap::new());
    StatusCode::NO_CONTENT.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    fn app() -> (Router, Arc<Fleet>) {
        let fleet = Arc::new(Fleet::in_memory());
        (router(fleet.clone(), Arc::new(Metrics::new())), fleet)
    }

    async fn send(app: &Router, method: &str, uri: &str, body: &str) -> (StatusCode, String) {
        let response = app
            .clone()
            .oneshot(
                Request::builder()
                    .method(method)
                    .uri(uri)
                    .body(Body::from(body.to_owned()))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    async fn with_vm(fleet: &Arc<Fleet>, name: &str) {
        let class: mcm_api::v1alpha1::MachineClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "c", "namespace": "ns"}, "provider": "virtual", "providerSpec": {}
        }))
        .unwrap();
        let request = mcm_provider_proto::MachineRequest {
            machine: mcm_provider_proto::conformance::machine("ns", name, "c", None),
            class,
            secret: mcm_provider_proto::SecretData::new(),
        };
        mcm_provider_proto::Driver::create_machine(
            &crate::driver::VirtualDriver::new(Arc::clone(fleet)),
            request,
        )
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_node_no_vm_has_is_404_and_gets_no_overrides() {
        let (app, fleet) = app();
        for method in ["PUT", "DELETE"] {
            let (status, body) = send(
                &app,
                method,
                "/admin/nodes/nope/conditions",
                r#"{"Ready": "False"}"#,
            )
            .await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{method}: {body}");
            assert!(body.contains("nope"), "{body}");
        }
        assert!(fleet.overrides("nope").is_empty());
    }

    #[tokio::test]
    async fn the_heartbeat_switch_stops_and_resumes_a_known_node_only() {
        let (app, fleet) = app();
        with_vm(&fleet, "n1").await;
        let (status, _) = send(
            &app,
            "PUT",
            "/admin/nodes/n1/heartbeat",
            r#"{"stopped": true}"#,
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert!(fleet.heartbeat_stopped("n1"));
        let (status, _) = send(&app, "PUT", "/admin/nodes/n1/heartbeat", "stopped").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            fleet.heartbeat_stopped("n1"),
            "a refused request changes nothing"
        );
        let (status, _) = send(&app, "DELETE", "/admin/nodes/n1/heartbeat", "").await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert!(!fleet.heartbeat_stopped("n1"));
        let (status, _) = send(
            &app,
            "PUT",
            "/admin/nodes/n1/heartbeat",
            r#"{"stopped": false}"#,
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (status, _) = send(
            &app,
            "PUT",
            "/admin/nodes/nope/heartbeat",
            r#"{"stopped": true}"#,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(!fleet.heartbeat_stopped("nope"));
    }

    #[tokio::test]
    async fn overrides_are_set_validated_and_cleared() {
        let (app, fleet) = app();
        with_vm(&fleet, "n1").await;
        let (status, _) = send(
            &app,
            "PUT",
            "/admin/nodes/n1/conditions",
            r#"{"Ready": "False"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert_eq!(
            fleet.overrides("n1").get("Ready").map(String::as_str),
            Some("False")
        );
        let (status, body) = send(
            &app,
            "PUT",
            "/admin/nodes/n1/conditions",
            r#"{"Ready": "Maybe"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("Maybe"), "{body}");
        let (status, _) = send(&app, "PUT", "/admin/nodes/n1/conditions", "[1]").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            fleet.overrides("n1").len(),
            1,
            "refused requests change nothing"
        );
        let (status, _) = send(&app, "DELETE", "/admin/nodes/n1/conditions", "").await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert!(fleet.overrides("n1").is_empty());
    }

    #[tokio::test]
    async fn initialize_calls_are_counted_per_vm() {
        let (app, fleet) = app();
        with_vm(&fleet, "n1").await;
        with_vm(&fleet, "n2").await;
        let driver = crate::driver::VirtualDriver::new(Arc::clone(&fleet));
        let class: mcm_api::v1alpha1::MachineClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "c", "namespace": "ns"}, "provider": "virtual", "providerSpec": {}
        }))
        .unwrap();
        for _ in 0..2 {
            mcm_provider_proto::Driver::initialize_machine(
                &driver,
                mcm_provider_proto::MachineRequest {
                    machine: mcm_provider_proto::conformance::machine("ns", "n1", "c", None),
                    class: class.clone(),
                    secret: mcm_provider_proto::SecretData::new(),
                },
            )
            .await
            .unwrap();
        }
        let (_, body) = send(&app, "GET", "/metrics", "").await;
        for expected in [
            r#"provider_virtual_vms_by_initialize_calls{calls="0"} 1"#,
            r#"provider_virtual_vms_by_initialize_calls{calls="2"} 1"#,
        ] {
            assert!(body.contains(expected), "{expected} missing in\n{body}");
        }
        assert!(!body.contains(r#"calls="1""#), "{body}");
        let (_, body) = send(&app, "GET", "/admin/vms", "").await;
        let vms: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
        let calls: Vec<(&str, u64)> = vms
            .iter()
            .map(|vm| {
                (
                    vm["machineName"].as_str().unwrap(),
                    vm["initializeCalls"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(calls.len(), 2);
        assert!(
            calls.contains(&("n1", 2)) && calls.contains(&("n2", 0)),
            "{calls:?}"
        );
    }

    #[tokio::test]
    async fn metrics_health_and_vms_are_served() {
        let (app, _) = app();
        let (status, body) = send(&app, "GET", "/healthz", "").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
        let (status, body) = send(&app, "GET", "/metrics", "").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("provider_virtual_vms"), "{body}");
        let (status, body) = send(&app, "GET", "/admin/vms", "").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "[]"));
    }
}
