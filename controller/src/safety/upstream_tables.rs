//! Upstream conformance tables of `machine_safety_test.go` (see `docs/upstream-conformance.md`):
//! `#machine_safety` `##reconcileClusterMachineSafetyAPIServer` and `#Event Handling functions`
//! `##updateMachineToSafety` / `##deleteMachineToSafety`.

#![allow(clippy::unwrap_used)]

use jiff::Timestamp;
use mcm_api::v1alpha1::{LastOperation, Machine, MachineStatus};

use crate::machine::plan::routing::triggers_orphan_collection;
use crate::machine::plan::test_support::{at, machine};
use crate::safety::apiserver::plan::{ApiServerSafetySettings, FreezeState, plan_apiserver_check};

/// How long the API servers have been seen unreachable before the check (upstream's
/// `apiServerInactiveDuration`: zero, five seconds, five minutes against the 30s timeout).
#[derive(Clone, Copy, Debug)]
enum Inactive {
    /// The timer is not running.
    NotStarted,
    /// Started 5s ago.
    Started,
    /// Started 5m ago.
    Elapsed,
}

/// `(control up, target up, inactive timer, frozen before, frozen after)`.
const API_SERVER: &[(bool, bool, Inactive, bool, bool)] = &[
    (true, true, Inactive::NotStarted, false, false),
    (true, true, Inactive::NotStarted, true, false),
    (true, true, Inactive::Started, false, false),
    (true, true, Inactive::Started, true, false),
    (true, true, Inactive::Elapsed, false, false),
    (true, true, Inactive::Elapsed, true, false),
    (true, false, Inactive::NotStarted, false, false),
    (true, false, Inactive::NotStarted, true, true),
    (true, false, Inactive::Started, false, false),
    (true, false, Inactive::Started, true, true),
    (true, false, Inactive::Elapsed, false, true),
    (true, false, Inactive::Elapsed, true, true),
    (false, true, Inactive::NotStarted, false, false),
    (false, true, Inactive::NotStarted, true, true),
    (false, true, Inactive::Started, false, false),
    (false, true, Inactive::Started, true, true),
    (false, true, Inactive::Elapsed, false, true),
    (false, true, Inactive::Elapsed, true, true),
    (false, false, Inactive::NotStarted, false, false),
    (false, false, Inactive::NotStarted, true, true),
    (false, false, Inactive::Started, false, false),
    (false, false, Inactive::Started, true, true),
    (false, false, Inactive::Elapsed, false, true),
    (false, false, Inactive::Elapsed, true, true),
];

fn reachable(up: bool) -> &'static str {
    if up { "Reachable" } else { "UnReachable" }
}

#[test]
fn reconcile_cluster_machine_safety_api_server_table() {
    let now = at(1_000);
    for (control, target, inactive, before, after) in API_SERVER {
        // Upstream's entry names, rebuilt from the row.
        let timer = match inactive {
            Inactive::NotStarted => "Inactive",
            Inactive::Started => "Started",
            Inactive::Elapsed => "Elapsed",
        };
        let entry = format!(
            "Control APIServer: {}, Target APIServer: {}, Inactive Timer: {timer}, Pre-Frozen: {before} = Post-Frozen: {after}",
            reachable(*control),
            reachable(*target)
        );
        let down_since: Option<Timestamp> = match inactive {
            Inactive::NotStarted => None,
            Inactive::Started => Some(at(1_000 - 5)),
            Inactive::Elapsed => Some(at(1_000 - 300)),
        };
        let state = FreezeState {
            frozen: *before,
            down_since,
        };
        let decision = plan_apiserver_check(
            state,
            *control,
            *target,
            ApiServerSafetySettings::default(),
            now,
        );
        assert_eq!(decision.state.frozen, *after, "{entry}");
        // Unfreezing resets the health timeouts of Unknown machines (upstream: the Unknown test
        // machine is reset to Running) and re-enqueues every machine.
        assert_eq!(
            decision.reset_unknown_machines,
            *before && !*after,
            "{entry}"
        );
    }
}

fn with_description(description: &str) -> Machine {
    let mut m = machine("testmachine");
    m.status = Some(MachineStatus {
        last_operation: Some(LastOperation {
            description: Some(description.to_owned()),
            ..LastOperation::default()
        }),
        ..MachineStatus::default()
    });
    m
}

/// `(entry, old lastOperation description, new lastOperation description, orphan collection
/// triggered?)`.
const MULTIPLE_VMS_NOT_FOUND: &str = "Cloud provider message - machine codes error: code = [NotFound] message = [AWS plugin is returning multiple VM instances backing this machine object. IDs for all backing VMs - [i-1234abcd i-5678efgh]";
const MULTIPLE_VMS_OUT_OF_RANGE: &str = "Cloud provider message - machine codes error: code = [OutOfRange] message = [AWS plugin is returning multiple VM instances backing this machine object. IDs for all backing VMs - [i-1234abcd i-5678efgh]";

/// `(entry, old lastOperation description, new lastOperation description, orphan collection
/// triggered?)`.
const UPDATE_TO_SAFETY: &[(&str, &str, &str, bool)] = &[
    (
        "shouldn't enqueue machine key if OutOfRange error not there in last reconciliation",
        "",
        "",
        false,
    ),
    (
        "shouldn't enqueue machine key if no OutOfRange error in last reconciliation",
        "",
        MULTIPLE_VMS_NOT_FOUND,
        false,
    ),
    (
        "should enqueue machine key if OutOfRange error in last reconciliation",
        "",
        MULTIPLE_VMS_OUT_OF_RANGE,
        true,
    ),
    (
        "shouldn't enqueue if new machine obj doesn't have OutOfRange error which old machine obj had",
        MULTIPLE_VMS_OUT_OF_RANGE,
        "Machine abc successfully joined the cluster",
        false,
    ),
];

#[test]
fn update_machine_to_safety_table() {
    for (entry, old, new, expected) in UPDATE_TO_SAFETY {
        assert_eq!(
            triggers_orphan_collection(&with_description(old), &with_description(new)),
            *expected,
            "{entry}"
        );
    }
}
