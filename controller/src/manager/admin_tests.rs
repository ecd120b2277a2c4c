#![allow(clippy::unwrap_used)]

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

use super::*;

async fn get(router: &Router, path: &str) -> (StatusCode, String, Option<String>) {
    let response = router
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|value| value.to_str().unwrap().to_owned());
    let body = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .unwrap();
    (
        status,
        String::from_utf8(body.to_vec()).unwrap(),
        content_type,
    )
}

#[tokio::test]
async fn healthz_fails_once_a_controller_stopped() {
    let health = Health::new();
    let router = router(health.clone(), Metrics::new());
    let (status, body, _) = get(&router, "/healthz").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));

    health.controller_stopped("machineset");
    let (status, body, _) = get(&router, "/healthz").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body.contains("machineset"), "{body}");
    assert!(!health.is_healthy());
}

#[tokio::test]
async fn readyz_follows_readiness() {
    let health = Health::new();
    let router = router(health.clone(), Metrics::new());
    let (status, body, _) = get(&router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "not ready: starting");

    health.set_ready();
    let (status, body, _) = get(&router, "/readyz").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));

    health.set_not_ready("shutting down");
    let (status, body, _) = get(&router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "not ready: shutting down");
}

#[tokio::test]
async fn metrics_serves_openmetrics_with_the_registered_names() {
    let metrics = Metrics::new();
    metrics.set_workqueue_depth("machineset", 3);
    metrics.reconcile_finished("machineset", std::time::Duration::from_millis(2));
    metrics.driver_call(
        "virtual",
        "GetMachineStatus",
        "NotFound",
        std::time::Duration::from_millis(1),
    );
    let router = router(Health::new(), metrics);
    let (status, body, content_type) = get(&router, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        content_type.as_deref(),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    for name in [
        "# TYPE mcm_machine_items_total gauge",
        "# TYPE mcm_machine_set_items_total gauge",
        "# TYPE mcm_machine_deployment_items_total gauge",
        "# TYPE mcm_machine_stale_machines counter",
        "# TYPE mcm_reconcile_duration_seconds histogram",
        "# TYPE mcm_driver_call_duration_seconds histogram",
        "mcm_workqueue_depth{name=\"machineset\",queue=\"machineset\"} 3",
    ] {
        assert!(body.contains(name), "{name} missing:\n{body}");
    }
}

#[tokio::test]
async fn unknown_paths_are_not_found() {
    let router = router(Health::new(), Metrics::new());
    let (status, _, _) = get(&router, "/debug/pprof/").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn serve_stops_on_cancellation() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve(
        listener,
        router(Health::new(), Metrics::new()),
        shutdown.clone(),
    ));
    shutdown.cancel();
    server.await.unwrap().unwrap();
}
