//! The conformance kit passes a correct driver and reports each deliberate contract violation.

use std::sync::Arc;
use std::time::Duration;

use mcm_provider_proto::conformance::{
    Fixture, HotUpdate, InvalidSpec, Outcome, SlowCreate, check_driver,
};
use serde_json::json;

use crate::memory_driver::{Flaws, MemoryDriver, class};

fn fixture() -> Fixture {
    Fixture {
        namespace: "test".into(),
        machine_prefix: "conf".into(),
        class: class("a", json!({"size": "s", "tags": {"t": "1"}}), "memory"),
        other_class: class("b", json!({"size": "s"}), "memory"),
        secret: Default::default(),
        invalid: Some(InvalidSpec {
            class: class("a", json!({"size": 5}), "memory"),
            field_path: "providerSpec.size".into(),
        }),
        hot_update: Some(HotUpdate {
            hot_class: class("a", json!({"size": "s", "tags": {"t": "2"}}), "memory"),
            cold_class: class("a", json!({"size": "l", "tags": {"t": "2"}}), "memory"),
            cold_path: "providerSpec.size".into(),
        }),
        slow_create: Some(SlowCreate {
            class: class("slow", json!({"slow": true}), "memory"),
            deadline: Duration::from_millis(200),
        }),
    }
}

#[tokio::test]
async fn a_correct_driver_passes_every_check() {
    let report = check_driver(Arc::new(MemoryDriver::new(Flaws::default())), &fixture()).await;
    report.assert_passed();
    assert!(report.cases.len() >= 11, "{report}");
    assert!(
        report
            .cases
            .iter()
            .all(|(_, outcome)| *outcome == Outcome::Passed),
        "nothing may be skipped with a full fixture:\n{report}"
    );
}

fn failed(report: &mcm_provider_proto::conformance::Report, name: &str) -> bool {
    matches!(report.outcome(name), Some(Outcome::Failed(_)))
}

#[tokio::test]
async fn a_non_idempotent_create_is_reported() {
    let flaws = Flaws {
        non_idempotent_create: true,
        ..Flaws::default()
    };
    let report = check_driver(Arc::new(MemoryDriver::new(flaws)), &fixture()).await;
    assert!(
        failed(&report, "create_is_idempotent_by_machine_name"),
        "{report}"
    );
}

#[tokio::test]
async fn a_list_leaking_other_classes_is_reported() {
    let flaws = Flaws {
        list_ignores_class: true,
        ..Flaws::default()
    };
    let report = check_driver(Arc::new(MemoryDriver::new(flaws)), &fixture()).await;
    assert!(
        failed(&report, "list_returns_exactly_the_vms_of_the_class"),
        "{report}"
    );
    assert!(
        !failed(&report, "create_is_idempotent_by_machine_name"),
        "{report}"
    );
}

#[tokio::test]
async fn not_found_on_delete_of_an_absent_vm_is_reported() {
    let flaws = Flaws {
        delete_absent_is_not_found: true,
        ..Flaws::default()
    };
    let report = check_driver(Arc::new(MemoryDriver::new(flaws)), &fixture()).await;
    assert!(failed(&report, "delete_of_absent_vm_is_ok"), "{report}");
}

#[tokio::test]
async fn accepting_a_wrong_provider_is_reported() {
    let flaws = Flaws {
        ignores_provider: true,
        ..Flaws::default()
    };
    let report = check_driver(Arc::new(MemoryDriver::new(flaws)), &fixture()).await;
    assert!(
        failed(&report, "wrong_provider_is_invalid_argument"),
        "{report}"
    );
}

#[tokio::test]
async fn an_error_not_naming_the_field_is_reported() {
    let mut fixture = fixture();
    if let Some(invalid) = fixture.invalid.as_mut() {
        invalid.field_path = "providerSpec.somethingElse".into();
    }
    let report = check_driver(Arc::new(MemoryDriver::new(Flaws::default())), &fixture).await;
    assert!(
        failed(&report, "invalid_provider_spec_is_invalid_argument"),
        "{report}"
    );
}

#[tokio::test]
async fn the_suite_can_run_on_a_spawned_task() {
    // `run` is Send, so a test harness may spawn it.
    let report = tokio::spawn(async {
        check_driver(Arc::new(MemoryDriver::new(Flaws::default())), &fixture()).await
    })
    .await
    .unwrap();
    report.assert_passed();
}

#[tokio::test]
async fn a_driver_without_validation_passes_by_answering_unimplemented() {
    let report = check_driver(Arc::new(MemoryDriver::new(Flaws::default())), &fixture()).await;
    assert_eq!(
        report.outcome("validate_machine_class"),
        Some(&Outcome::Passed),
        "{report}"
    );
}

#[tokio::test]
async fn a_driver_with_validation_passes_every_check() {
    let flaws = Flaws {
        validates: true,
        ..Flaws::default()
    };
    let report = check_driver(Arc::new(MemoryDriver::new(flaws)), &fixture()).await;
    report.assert_passed();
    assert_eq!(
        report.outcome("validate_machine_class"),
        Some(&Outcome::Passed),
        "{report}"
    );
}

#[tokio::test]
async fn validation_accepting_the_invalid_class_is_reported() {
    let flaws = Flaws {
        validates: true,
        validation_accepts_everything: true,
        ..Flaws::default()
    };
    let report = check_driver(Arc::new(MemoryDriver::new(flaws)), &fixture()).await;
    assert!(failed(&report, "validate_machine_class"), "{report}");
}

#[tokio::test]
async fn validation_answering_without_being_advertised_is_reported() {
    let flaws = Flaws {
        validates: true,
        hides_validation: true,
        ..Flaws::default()
    };
    let report = check_driver(Arc::new(MemoryDriver::new(flaws)), &fixture()).await;
    assert!(failed(&report, "validate_machine_class"), "{report}");
}
