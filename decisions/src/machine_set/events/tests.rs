//! Tests of the create and delete events.
#![allow(clippy::unwrap_used)]

use crate::machine_set::events;

#[test]
fn creation_and_deletion_events_are_one_per_pass() {
    let one = events::created(&["pool-a".to_owned()]);
    assert_eq!(one.message, "Created Machine: pool-a");
    let names: Vec<String> = (0..8).map(|i| format!("pool-{i}")).collect();
    let many = events::created(&names);
    assert_eq!(many.reason, "SuccessfulCreate");
    assert_eq!(
        many.message,
        "Created 8 machines: pool-0, pool-1, pool-2, pool-3, pool-4 (+3 more)"
    );
    let deleted = events::deleted(&names[..2]);
    assert_eq!(deleted.reason, "SuccessfulDelete");
    assert_eq!(deleted.message, "Deleted 2 machines: pool-0, pool-1");
    assert_eq!(
        events::deleted(&names[..1]).message,
        "Deleted machine: pool-0"
    );
}

#[test]
fn a_preserved_machine_deleted_by_the_set_is_a_warning_naming_the_expiry() {
    let e = events::preserved_deleted("m-1", "2026-11-29T10:00:00Z");
    assert_eq!(e.reason, "PreservedMachineDeleted");
    assert_eq!(e.type_, crate::vocabulary::EventType::Warning);
    assert!(
        e.message
            .contains("m-1 although it was preserved until 2026-11-29T10:00:00Z")
    );
}
