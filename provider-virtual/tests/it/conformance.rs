//! The driver conformance kit passes for provider-virtual.

use std::sync::Arc;
use std::time::Duration;

use mcm_provider_proto::conformance::{
    Fixture, HotUpdate, InvalidSpec, Outcome, SlowCreate, check_driver,
};
use mcm_provider_virtual::driver::{Fleet, VirtualDriver};
use serde_json::json;

use crate::common::class;

fn fixture() -> Fixture {
    Fixture {
        namespace: "shoot--test".into(),
        machine_prefix: "conformance".into(),
        class: class(
            "main",
            json!({"requiresInitialization": true, "tags": {"team": "a"}}),
        ),
        other_class: class("other", json!({})),
        secret: [("userData".to_owned(), b"#cloud-config".to_vec())].into(),
        invalid: Some(InvalidSpec {
            class: class("main", json!({"bootDelay": "soon"})),
            field_path: "providerSpec.bootDelay".into(),
        }),
        hot_update: Some(HotUpdate {
            hot_class: class(
                "main",
                json!({"requiresInitialization": true, "tags": {"team": "b"}}),
            ),
            cold_class: class(
                "main",
                json!({"requiresInitialization": true, "tags": {"team": "b"}, "bootDelay": "1m"}),
            ),
            cold_path: "providerSpec.bootDelay".into(),
        }),
        slow_create: Some(SlowCreate {
            class: class("slow", json!({"createLatency": "10m"})),
            deadline: Duration::from_millis(300),
        }),
    }
}

#[tokio::test]
async fn provider_virtual_passes_the_conformance_kit_in_memory() {
    let driver = Arc::new(VirtualDriver::new(Arc::new(Fleet::in_memory())));
    let report = check_driver(driver, &fixture()).await;
    report.assert_passed();
    assert!(
        report
            .cases
            .iter()
            .all(|(_, outcome)| *outcome == Outcome::Passed),
        "{report}"
    );
}

#[tokio::test]
async fn provider_virtual_passes_the_conformance_kit_with_a_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Arc::new(Fleet::open(dir.path().join("state.json")).unwrap());
    let report = check_driver(Arc::new(VirtualDriver::new(fleet)), &fixture()).await;
    report.assert_passed();
}

/// As the binary serves it: wrapped in the metrics layer, every method (ValidateMachineClass too)
/// reaches the driver.
#[tokio::test]
async fn provider_virtual_behind_its_metrics_layer_passes_the_conformance_kit() {
    let fleet = Arc::new(Fleet::in_memory());
    let metrics = Arc::new(mcm_provider_virtual::metrics::Metrics::new());
    let driver =
        mcm_provider_virtual::metrics::Metered::new(VirtualDriver::new(fleet), metrics, || 0);
    let report = check_driver(Arc::new(driver), &fixture()).await;
    report.assert_passed();
    assert_eq!(
        report.outcome("validate_machine_class"),
        Some(&Outcome::Passed),
        "{report}"
    );
}
