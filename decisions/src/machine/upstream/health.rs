//! `machine_test.go` `#isHealthy`, `#criticalComponentsNotReadyTaintPresent` and
//! `machine_util_test.go` `#reconcileMachineHealth` (both tables).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use mcm_api::duration::Duration;
use mcm_api::keys::{label, taint as taint_key, value};
use mcm_api::v1alpha1::{Machine, MachinePhase as P};

use crate::machine::health::{
    FailurePermit, HealthInput, HealthOutcome, NodeLookup, is_healthy, node_has_taint, plan_health,
};
use crate::test_support::*;
use crate::vocabulary::{ControllerSettings, Retry, effective_settings};

/// Upstream's `nodeConditions(kubeletReady, readOnlyFileSystem, networkUnavailable, diskPressure,
/// kernelDeadlock)` helper: the five condition types with True/False statuses.
fn conditions(
    ready: bool,
    read_only: bool,
    network: bool,
    disk: bool,
    deadlock: bool,
) -> Vec<NodeCondition> {
    let text = |flag: bool| if flag { "True" } else { "False" };
    vec![
        condition("Ready", text(ready), at(0)),
        condition("KernelDeadlock", text(deadlock), at(0)),
        condition("ReadonlyFilesystem", text(read_only), at(0)),
        condition("DiskPressure", text(disk), at(0)),
        condition("NetworkUnavailable", text(network), at(0)),
    ]
}

// ---------------------------------------------------------------------------------------------
// machine_test.go: #isHealthy / "Checking health of the machine"
// ---------------------------------------------------------------------------------------------

/// `(entry, condition type changed, its new status, healthy?)`. The machine starts with
/// DiskPressure, MemoryPressure and NetworkUnavailable False and Ready True; the controller's
/// `--node-conditions` is `ReadonlyFilesystem,KernelDeadlock,DiskPressure,NetworkUnavailable`.
const IS_HEALTHY: &[(&str, &str, &str, bool)] = &[
    ("with NodeReady is True", "Ready", "True", true),
    ("with NodeReady is False", "Ready", "False", false),
    ("with NodeReady is Unknown", "Ready", "Unknown", false),
    (
        "with NodeDiskPressure is True",
        "DiskPressure",
        "True",
        false,
    ),
    (
        "with NodeDiskPressure is False",
        "DiskPressure",
        "False",
        true,
    ),
    (
        "with NodeDiskPressure is Unknown",
        "DiskPressure",
        "Unknown",
        false,
    ),
    (
        "with NodeMemoryPressure is True",
        "MemoryPressure",
        "True",
        true,
    ),
    (
        "with NodeMemoryPressure is False",
        "MemoryPressure",
        "False",
        true,
    ),
    (
        "with NodeMemoryPressure is Unknown",
        "MemoryPressure",
        "Unknown",
        true,
    ),
    (
        "with NodeNetworkUnavailable is True",
        "NetworkUnavailable",
        "True",
        false,
    ),
    (
        "with NodeNetworkUnavailable is False",
        "NetworkUnavailable",
        "False",
        true,
    ),
    (
        "with NodeNetworkUnavailable is Unknown",
        "NetworkUnavailable",
        "Unknown",
        false,
    ),
    // Upstream lists the three Ready entries twice.
    ("with NodeReady is True (2nd)", "Ready", "True", true),
    ("with NodeReady is False (2nd)", "Ready", "False", false),
    ("with NodeReady is Unknown (2nd)", "Ready", "Unknown", false),
];

#[test]
fn is_healthy_table() {
    let node_conditions: Vec<String> =
        "ReadonlyFilesystem,KernelDeadlock,DiskPressure,NetworkUnavailable"
            .split(',')
            .map(str::to_owned)
            .collect();
    for (entry, type_, status, expected) in IS_HEALTHY {
        let mut list = vec![
            condition("DiskPressure", "False", at(0)),
            condition("MemoryPressure", "False", at(0)),
            condition("NetworkUnavailable", "False", at(0)),
            condition("Ready", "True", at(0)),
        ];
        for condition in &mut list {
            if condition.type_ == *type_ {
                condition.status = (*status).to_owned();
            }
        }
        assert_eq!(is_healthy(&list, &node_conditions), *expected, "{entry}");
    }
}

#[test]
fn is_healthy_without_conditions_is_unhealthy() {
    // Not an upstream entry: upstream's isHealthy returns false for an empty list too.
    assert!(!is_healthy(&[], &["Ready".to_owned()]));
}

// ---------------------------------------------------------------------------------------------
// machine_test.go: #criticalComponentsNotReadyTaintPresent / "Checking readiness of the node"
// ---------------------------------------------------------------------------------------------

/// `(entry, taints (key, effect), present?)`; `None` = no taints list at all.
#[allow(clippy::type_complexity)]
const CRITICAL_TAINT: &[(&str, Option<&[(&str, &str)]>, bool)] = &[
    ("with no taints is False", None, false),
    ("with empty taints is False", Some(&[]), false),
    (
        "with unrelated taints is False",
        Some(&[("unrelated", "NoSchedule")]),
        false,
    ),
    (
        "with critical-components-not-ready taint is True",
        Some(&[(
            "node.gardener.cloud/critical-components-not-ready",
            "NoSchedule",
        )]),
        true,
    ),
];

#[test]
fn critical_components_not_ready_taint_table() {
    for (entry, taints, expected) in CRITICAL_TAINT {
        let mut n = node("testnode", Vec::new(), Vec::new());
        n.spec.as_mut().unwrap().taints = taints.map(|list| {
            list.iter()
                .map(|(key, effect)| taint(key, effect))
                .collect()
        });
        assert_eq!(
            node_has_taint(
                &n,
                taint_key::CRITICAL_COMPONENTS_NOT_READY,
                Some("NoSchedule")
            ),
            *expected,
            "{entry}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// machine_util_test.go: #reconcileMachineHealth
// ---------------------------------------------------------------------------------------------

const NOW: i64 = 100_000;

fn minutes_ago(minutes: i64) -> Timestamp {
    at(NOW - minutes * 60)
}

/// One machine of a health row.
#[derive(Clone)]
struct M {
    phase: Option<&'static str>,
    /// `currentStatus.lastUpdateTime`, minutes before now.
    status_age: i64,
    /// Minutes since creation.
    created_age: i64,
    /// `status.conditions` (upstream's nodeConditions flags), if any.
    conditions: Option<[bool; 5]>,
    /// Label `name` (the MachineDeployment), if any.
    deployment: Option<&'static str>,
    /// `spec.disableHealthTimeout`.
    disable_health_timeout: bool,
}

const fn m(phase: &'static str, status_age: i64) -> M {
    M {
        phase: Some(phase),
        status_age,
        created_age: 0,
        conditions: None,
        deployment: None,
        disable_health_timeout: false,
    }
}

const UNHEALTHY: Option<[bool; 5]> = Some([false, false, false, false, false]);
const HEALTHY: Option<[bool; 5]> = Some([true, false, false, false, false]);

/// The node of the target machine, if it exists.
#[derive(Clone)]
struct N {
    conditions: [bool; 5],
    update_result: Option<&'static str>,
    critical_taint: bool,
}

const fn n(conditions: [bool; 5]) -> N {
    N {
        conditions,
        update_result: None,
        critical_taint: false,
    }
}

/// What upstream returns: ShortRetry with a phase-update error (our `EndPass` with a status
/// write), or LongRetry without error (our `Continue`: the reconcile goes on and nothing was
/// written).
#[derive(Clone, Debug, PartialEq)]
enum Want {
    /// ShortRetry; a status write set this phase.
    Short(P),
    /// ShortRetry with this error text; nothing written.
    ShortErr(&'static str),
    /// LongRetry, no error, nothing written.
    Long,
}

struct Row {
    entry: &'static str,
    target: M,
    others: &'static [M],
    node: Option<N>,
    /// Another machine of the same deployment holds the failure permit.
    lock_taken: bool,
    want: Want,
}

const TARGET: &str = "machineset-1-deploy-1-0";

fn build(spec: &M, name: &str) -> Machine {
    let mut machine = machine(name).with_label(label::NODE, "node-0");
    if let Some(phase) = spec.phase {
        machine = machine.with_phase(P::from(phase), minutes_ago(spec.status_age));
    }
    machine.metadata.creation_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(minutes_ago(spec.created_age)),
    );
    if let Some(flags) = spec.conditions {
        machine =
            machine.with_conditions(conditions(flags[0], flags[1], flags[2], flags[3], flags[4]));
    }
    if let Some(deployment) = spec.deployment {
        machine = machine.with_label(label::NAME, deployment);
    }
    if spec.disable_health_timeout {
        machine.spec.configuration.disable_health_timeout = Some(true);
    }
    machine
}

fn build_node(spec: &N) -> Node {
    let [ready, read_only, network, disk, deadlock] = spec.conditions;
    let taints = if spec.critical_taint {
        vec![taint(
            taint_key::CRITICAL_COMPONENTS_NOT_READY,
            "NoSchedule",
        )]
    } else {
        Vec::new()
    };
    let mut node = node(
        "node-0",
        conditions(ready, read_only, network, disk, deadlock),
        taints,
    );
    if let Some(result) = spec.update_result {
        node.metadata.labels = Some([(label::UPDATE_RESULT.to_owned(), result.to_owned())].into());
    }
    node
}

/// Runs the health plan as the shell does: asks for the failure permit when the plan wants it.
fn replay(row: &Row) -> (Option<P>, HealthOutcome) {
    let target = build(&row.target, TARGET);
    let mut siblings = vec![Arc::new(target.clone())];
    for (index, other) in row.others.iter().enumerate() {
        siblings.push(Arc::new(build(other, &format!("machine-other-{index}"))));
    }
    // Upstream lists siblings with the selector `name=<label>` (the target included); a machine
    // without the label matches no such selector, so it has no siblings (as our shell does).
    let siblings: Vec<Arc<Machine>> = match row.target.deployment {
        None => Vec::new(),
        Some(deployment) => siblings
            .into_iter()
            .filter(|sibling| crate::vocabulary::label(sibling, label::NAME) == Some(deployment))
            .collect(),
    };
    let settings = ControllerSettings {
        // Upstream's test controller leaves the in-place timeout unset (0); the entry names
        // say 10 minutes, which the 15-minute-old rows exceed either way.
        in_place_update_timeout: Duration::from_mins(10),
        ..ControllerSettings::default()
    };
    let settings = effective_settings(&target, &settings);
    let node = row.node.as_ref().map(build_node);
    let lookup = node
        .as_ref()
        .map_or(NodeLookup::NotFound, NodeLookup::Found);
    let mut permit = FailurePermit::NotRequested;
    loop {
        let plan = plan_health(&HealthInput {
            machine: &target,
            node: lookup,
            settings: &settings,
            siblings: &siblings,
            meltdown_threshold: 0.0,
            permit,
            now: at(NOW),
        });
        if let HealthOutcome::NeedsFailurePermit { key } = &plan.outcome {
            assert_eq!(
                permit,
                FailurePermit::NotRequested,
                "{}: permit asked twice",
                row.entry
            );
            assert_eq!(
                Some(key.as_str()),
                row.target.deployment.or(Some("")),
                "{}",
                row.entry
            );
            permit = if row.lock_taken {
                FailurePermit::Busy
            } else {
                FailurePermit::Granted
            };
            continue;
        }
        let phase = plan
            .status
            .as_ref()
            .and_then(|status| status.current_status.phase.clone());
        return (phase, plan.outcome);
    }
}

fn check(rows: &[Row]) {
    for row in rows {
        let (phase, outcome) = replay(row);
        match &row.want {
            Want::Short(expected) => {
                assert_eq!(phase.as_ref(), Some(expected), "{}", row.entry);
                assert!(
                    matches!(
                        outcome,
                        HealthOutcome::EndPass {
                            retry: Retry::Short,
                            ..
                        }
                    ),
                    "{}: {outcome:?}",
                    row.entry
                );
            }
            Want::ShortErr(text) => {
                assert_eq!(phase, None, "{}", row.entry);
                let expected = text.replace("%q", &format!("{TARGET:?}"));
                assert_eq!(
                    outcome,
                    HealthOutcome::EndPass {
                        retry: Retry::Short,
                        reason: expected
                    },
                    "{}",
                    row.entry
                );
            }
            Want::Long => {
                assert_eq!(phase, None, "{}", row.entry);
                assert!(
                    matches!(outcome, HealthOutcome::Continue { .. }),
                    "{}: {outcome:?}",
                    row.entry
                );
            }
        }
    }
}

const GENERAL: &[Row] = &[
    Row {
        entry: "Pending machine is marked as Failed when creation timeout (20min) has elapsed",
        target: M {
            created_age: 25,
            ..m("Pending", 25)
        },
        others: &[],
        node: None,
        lock_taken: false,
        want: Want::Short(P::Failed),
    },
    Row {
        entry: "Pending machine stays in the Pending phase if creation timeout (20min) has not elapsed",
        target: M {
            created_age: 15,
            ..m("Pending", 15)
        },
        others: &[],
        node: None,
        lock_taken: false,
        want: Want::Long,
    },
    Row {
        entry: "Pending machine is marked as Failed when creation timeout (20min) has elapsed, even if lastUpdate time is recent",
        target: M {
            created_age: 25,
            ..m("Pending", 15)
        },
        others: &[],
        node: None,
        lock_taken: false,
        want: Want::Short(P::Failed),
    },
    Row {
        entry: "Unknown machine if Healthy should be marked Running",
        target: m("Unknown", 0),
        others: &[],
        node: Some(n([true, false, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::Running),
    },
    Row {
        entry: "Running machine if Unhealthy due to kubelet not posting status should be marked Unknown",
        target: m("Running", 0),
        others: &[],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::Unknown),
    },
    Row {
        entry: "Running machine if Unhealthy due to other relevant Node conditions, should be marked Unknown",
        target: m("Running", 0),
        others: &[],
        node: Some(n([true, true, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::Unknown),
    },
    Row {
        entry: "Running machine should be marked Unknown if node object not found",
        target: M {
            conditions: HEALTHY,
            ..m("Running", 0)
        },
        others: &[],
        node: None,
        lock_taken: false,
        want: Want::Short(P::Unknown),
    },
    Row {
        entry: "Machine in Unknown state with node obj for over 10min(healthTimeout) should be marked Failed",
        target: M {
            conditions: UNHEALTHY,
            ..m("Unknown", 15)
        },
        others: &[],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::Failed),
    },
    Row {
        entry: "Machine in Unknown state WITHOUT backing node obj for over 10min(healthTimeout) should be marked Failed",
        target: M {
            conditions: UNHEALTHY,
            ..m("Unknown", 15)
        },
        others: &[],
        node: None,
        lock_taken: false,
        want: Want::Short(P::Failed),
    },
    Row {
        // The node label names "node-0-0", which does not exist.
        entry: "simple machine WITHOUT creation Timeout(20 min) and Pending state",
        target: M {
            conditions: HEALTHY,
            ..m("Pending", 15)
        },
        others: &[],
        node: None,
        lock_taken: false,
        want: Want::Long,
    },
    Row {
        entry: "Machine in Unknown state WITHOUT backing node obj for over 10min(healthTimeout) should not be marked Failed if DisableHealthTimeout is set",
        target: M {
            conditions: UNHEALTHY,
            disable_health_timeout: true,
            ..m("Unknown", 15)
        },
        others: &[],
        node: None,
        lock_taken: false,
        want: Want::Long,
    },
    Row {
        entry: "Machine in InPlaceUpdating state for over 10min(InPlaceUpdateTimeout) should be marked InPlaceUpdateFailed",
        target: M {
            conditions: UNHEALTHY,
            ..m("InPlaceUpdating", 15)
        },
        others: &[],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::InPlaceUpdateFailed),
    },
    Row {
        entry: "Machine in InPlaceUpdating state with node label node.machine.sapcloud.io/update-result=successful should be marked InPlaceUpdateSuccessful",
        target: M {
            conditions: UNHEALTHY,
            ..m("InPlaceUpdating", 0)
        },
        others: &[],
        node: Some(N {
            update_result: Some(value::UPDATE_SUCCESSFUL),
            ..n([false, false, false, false, false])
        }),
        lock_taken: false,
        want: Want::Short(P::InPlaceUpdateSuccessful),
    },
    Row {
        entry: "Machine in InPlaceUpdating state with node label node.machine.sapcloud.io/update-result=failed should be marked InPlaceUpdateFailed",
        target: M {
            conditions: UNHEALTHY,
            ..m("InPlaceUpdating", 0)
        },
        others: &[],
        node: Some(N {
            update_result: Some(value::UPDATE_FAILED),
            ..n([false, false, false, false, false])
        }),
        lock_taken: false,
        want: Want::Short(P::InPlaceUpdateFailed),
    },
    Row {
        entry: "Machine in InPlaceUpdateFailed state for over 10min(healthTimeout) should be marked Failed",
        target: M {
            conditions: UNHEALTHY,
            ..m("InPlaceUpdateFailed", 15)
        },
        others: &[],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::Failed),
    },
    Row {
        entry: "Machine in InPlaceUpdateFailed state for over 10min(healthTimeout) should not be marked Failed if DisableHealthTimeout is set",
        target: M {
            conditions: UNHEALTHY,
            disable_health_timeout: true,
            ..m("InPlaceUpdateFailed", 15)
        },
        others: &[],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::Long,
    },
    Row {
        entry: "pending machine is healthy, but node has `critical-components-not-ready` taint, shouldn't be marked Running",
        target: M {
            conditions: HEALTHY,
            ..m("Pending", 0)
        },
        others: &[],
        node: Some(N {
            critical_taint: true,
            ..n([true, false, false, false, false])
        }),
        lock_taken: false,
        want: Want::Long,
    },
    Row {
        entry: "pending machine is healthy, and node doesn't have `critical-components-not-ready taint`, should be marked Running",
        target: M {
            conditions: HEALTHY,
            ..m("Pending", 0)
        },
        others: &[],
        node: Some(n([true, false, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::Running),
    },
    Row {
        entry: "unknown machine is healthy, and node doesn't have `critical-components-not-ready` taint, should be marked Running",
        target: M {
            conditions: HEALTHY,
            ..m("Unknown", 0)
        },
        others: &[],
        node: Some(n([true, false, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::Running),
    },
    Row {
        entry: "unknown machine is healthy, and node has `critical-components-not-ready` taint, should still be marked Running",
        target: M {
            conditions: HEALTHY,
            ..m("Unknown", 0)
        },
        others: &[],
        node: Some(N {
            critical_taint: true,
            ..n([true, false, false, false, false])
        }),
        lock_taken: false,
        want: Want::Short(P::Running),
    },
];

#[test]
fn reconcile_machine_health_general_table() {
    check(GENERAL);
}

const TIMED_OUT: M = M {
    conditions: UNHEALTHY,
    ..m("Unknown", 15)
};
const TIMED_OUT_MD1: M = M {
    deployment: Some("machinedeployment-1"),
    ..TIMED_OUT
};
const fn md1(phase: Option<&'static str>) -> M {
    M {
        phase,
        status_age: 15,
        created_age: 0,
        conditions: UNHEALTHY,
        deployment: Some("machinedeployment-1"),
        disable_health_timeout: false,
    }
}
const COULD_NOT_FAIL: &str =
    "machine %q couldn't be marked FAILED, other machines are getting replaced";

const MELTDOWN: &[Row] = &[
    Row {
        entry: "2 HealthTimedOut machines: from different machinedeployments,only 1 machine per machineDeployment present, targetMachine should be marked Failed",
        target: TIMED_OUT,
        others: &[TIMED_OUT],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::Failed),
    },
    Row {
        entry: "1 HealthTimedOut, 1 Failed machine: from different machinedeployments,only 1 machine per machineDeployment present, targetMachine should be marked Failed",
        target: TIMED_OUT,
        others: &[M {
            deployment: None,
            ..md1(Some("Failed"))
        }],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::Failed),
    },
    Row {
        entry: "2 HealthTimedOut machines: from same machinedeployment,only 2 machines for machineDeployment present, targetMachine should be marked Failed",
        target: TIMED_OUT,
        others: &[TIMED_OUT],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::Short(P::Failed),
    },
    Row {
        entry: "1 HealthTimedOut , 1 Failed machine: from same machinedeployment,only 2 machines for machineDeployment present, healthTimeoutOut one should NOT be marked Failed",
        target: TIMED_OUT_MD1,
        others: &[md1(Some("Failed"))],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::ShortErr(COULD_NOT_FAIL),
    },
    Row {
        entry: "1 HealthTimedOut , 1 Terminating machine: from same machinedeployment,only 2 machines for machineDeployment present, healthTimeoutOut one should NOT be marked Failed",
        target: TIMED_OUT_MD1,
        others: &[md1(Some("Terminating"))],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::ShortErr(COULD_NOT_FAIL),
    },
    Row {
        entry: "1 HealthTimedOut , 1 NoPhase machine: from same machinedeployment,only 2 machines for machineDeployment present, healthTimeoutOut one should NOT be marked Failed",
        target: TIMED_OUT_MD1,
        others: &[md1(None)],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::ShortErr(COULD_NOT_FAIL),
    },
    Row {
        entry: "1 HealthTimedOut , 1 Pending machine: from same machinedeployment,only 2 machines for machineDeployment present, healthTimeoutOut one should NOT be marked Failed",
        target: TIMED_OUT_MD1,
        others: &[md1(Some("Pending"))],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::ShortErr(COULD_NOT_FAIL),
    },
    Row {
        entry: "1 HealthTimedOut , 1 CrashLoopBackOff machine: from same machinedeployment,only 2 machines for machineDeployment present, healthTimeoutOut one should NOT be marked Failed",
        target: TIMED_OUT_MD1,
        others: &[md1(Some("CrashLoopBackOff"))],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::ShortErr(COULD_NOT_FAIL),
    },
    Row {
        // The sibling belongs to another MachineSet of the same deployment: the `name` label
        // (the deployment) groups them.
        entry: "1 HealthTimedOut , 1 Pending machine: from same machinedeployment,but different machineSets ,only 2 machines for machineDeployment present, healthTimeoutOut one should NOT be marked Failed",
        target: TIMED_OUT_MD1,
        others: &[md1(Some("Pending"))],
        node: Some(n([false, false, false, false, false])),
        lock_taken: false,
        want: Want::ShortErr(COULD_NOT_FAIL),
    },
    Row {
        entry: "Timeout in acquring lock should also occur",
        target: TIMED_OUT_MD1,
        others: &[],
        node: Some(n([false, false, false, false, false])),
        lock_taken: true,
        want: Want::ShortErr("timedout waiting to acquire lock for machine %q"),
    },
];

#[test]
fn reconcile_machine_health_meltdown_table() {
    check(MELTDOWN);
}
