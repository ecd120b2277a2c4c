//! In-place update tables: `machine_test.go` `addedInPlaceUpdateLabels`, `machine_util_test.go`
//! `#updateNodeConditionBasedOnLabel`, `#inPlaceUpdate` and `#drainNodeForInPlace`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use mcm_api::duration::Duration;
use mcm_api::keys::{annotation, condition as reason, label};
use mcm_api::v1alpha1::{Machine, MachinePhase};

use crate::drain::plan::DrainOutcome;
use crate::machine::in_place::{InPlaceStep, plan_in_place_node_condition, plan_in_place_update};
use crate::machine::routing::{NodeRoute, route_node_update};
use crate::test_support::*;
use crate::vocabulary::{ControllerSettings, Retry, effective_settings};

const NOW: i64 = 10_000;

fn in_place(reason: &str, message: &str) -> NodeCondition {
    let mut condition = condition(reason::IN_PLACE_UPDATE, "True", at(NOW - 60));
    condition.reason = Some(reason.to_owned());
    condition.message = Some(message.to_owned());
    condition
}

fn labelled_node(labels: &[(&str, &str)], in_place_reason: Option<(&str, &str)>) -> Node {
    let mut conditions = healthy_conditions();
    if let Some((reason, message)) = in_place_reason {
        conditions.push(in_place(reason, message));
    }
    let mut node = node("node-0", conditions, Vec::new());
    node.metadata.labels = Some(
        labels
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect::<BTreeMap<_, _>>(),
    );
    node
}

// ---------------------------------------------------------------------------------------------
// machine_test.go: addedInPlaceUpdateLabels / ##table (inPlaceUpdateLabelsChanged)
// ---------------------------------------------------------------------------------------------

/// `(entry, old node labels, new node labels, machine reconcile triggered?)`. Upstream's three
/// nil-node entries have no counterpart (Rust references are never nil; see the doc).
#[allow(clippy::type_complexity)]
const LABELS_CHANGED: &[(&str, &[(&str, &str)], &[(&str, &str)], bool)] = &[
    (
        "no labels added or changed",
        &[("someLabel", "someValue")],
        &[("someLabel", "someValue")],
        false,
    ),
    (
        "LabelKeyNodeCandidateForUpdate added",
        &[],
        &[(label::CANDIDATE_FOR_UPDATE, "true")],
        true,
    ),
    (
        "LabelKeyNodeSelectedForUpdate added",
        &[],
        &[(label::SELECTED_FOR_UPDATE, "true")],
        true,
    ),
    (
        "LabelKeyNodeUpdateResult added",
        &[],
        &[(label::UPDATE_RESULT, "success")],
        true,
    ),
    (
        "LabelKeyNodeUpdateResult changed",
        &[(label::UPDATE_RESULT, "failure")],
        &[(label::UPDATE_RESULT, "success")],
        true,
    ),
    (
        "LabelKeyNodeUpdateResult unchanged",
        &[(label::UPDATE_RESULT, "success")],
        &[(label::UPDATE_RESULT, "success")],
        false,
    ),
];

#[test]
fn added_in_place_update_labels_table() {
    let owner = machine("machine-0").with_label(label::NODE, "node-0");
    for (entry, old, new, expected) in LABELS_CHANGED {
        let mut old = labelled_node(old, None);
        let mut new = labelled_node(new, None);
        // Same conditions on both sides and on the machine: only the labels differ.
        old.status = None;
        new.status = None;
        let routes = route_node_update(&old, &new, std::slice::from_ref(&owner));
        assert_eq!(
            routes.contains(&NodeRoute::EnqueueMachine("machine-0".to_owned())),
            *expected,
            "{entry}: {routes:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// machine_util_test.go: #updateNodeConditionBasedOnLabel / ##table
// ---------------------------------------------------------------------------------------------

const CANDIDATE: (&str, &str) = (label::CANDIDATE_FOR_UPDATE, "true");
const SELECTED: (&str, &str) = (label::SELECTED_FOR_UPDATE, "true");
const CANDIDATE_MSG: &str = "Node is a candidate for in-place update";
const SELECTED_MSG: &str = "Node is selected for in-place update";

struct ConditionRow {
    entry: &'static str,
    labels: &'static [(&'static str, &'static str)],
    failed_reason: Option<&'static str>,
    existing: Option<(&'static str, &'static str)>,
    /// The InPlaceUpdate condition after the step `(reason, message)`; `None` = no write.
    written: Option<(&'static str, &'static str)>,
}

const CONDITION_ROWS: &[ConditionRow] = &[
    ConditionRow {
        entry: "when node has LabelKeyNodeCandidateForUpdate",
        labels: &[CANDIDATE],
        failed_reason: None,
        existing: None,
        written: Some((reason::CANDIDATE_FOR_UPDATE, CANDIDATE_MSG)),
    },
    ConditionRow {
        entry: "when node has LabelKeyNodeCandidateForUpdate but still not selected for update",
        labels: &[CANDIDATE],
        failed_reason: None,
        existing: Some((reason::CANDIDATE_FOR_UPDATE, CANDIDATE_MSG)),
        written: None,
    },
    ConditionRow {
        entry: "when node has LabelKeyNodeCandidateForUpdate also the in-place update reason is UpdateSuccessful",
        labels: &[CANDIDATE],
        failed_reason: None,
        existing: Some((reason::UPDATE_SUCCESSFUL, "Node in-place update successful")),
        written: Some((reason::CANDIDATE_FOR_UPDATE, CANDIDATE_MSG)),
    },
    ConditionRow {
        entry: "when node has LabelKeyNodeSelectedForUpdate",
        labels: &[CANDIDATE, SELECTED],
        failed_reason: None,
        existing: Some((reason::CANDIDATE_FOR_UPDATE, CANDIDATE_MSG)),
        written: Some((reason::SELECTED_FOR_UPDATE, SELECTED_MSG)),
    },
    ConditionRow {
        // Upstream returns MediumRetry without error; its caller ignores the period then.
        entry: "when node has LabelKeyNodeSelectedForUpdate but drain is not successful yet",
        labels: &[CANDIDATE, SELECTED],
        failed_reason: None,
        existing: Some((reason::SELECTED_FOR_UPDATE, SELECTED_MSG)),
        written: None,
    },
    ConditionRow {
        entry: "when node update is successful",
        labels: &[CANDIDATE, SELECTED, (label::UPDATE_RESULT, "successful")],
        failed_reason: None,
        existing: Some((
            reason::READY_FOR_UPDATE,
            "Node is ready for in-place update",
        )),
        written: Some((reason::UPDATE_SUCCESSFUL, "Node in-place update successful")),
    },
    ConditionRow {
        entry: "when node update has failed",
        labels: &[CANDIDATE, SELECTED, (label::UPDATE_RESULT, "failed")],
        failed_reason: Some("OS image not found"),
        existing: Some((reason::DRAIN_SUCCESSFUL, "Node draining successful")),
        written: Some((
            reason::UPDATE_FAILED,
            "Node in-place update failed: OS image not found",
        )),
    },
];

#[test]
fn update_node_condition_based_on_label_table() {
    for row in CONDITION_ROWS {
        let mut node = labelled_node(row.labels, row.existing);
        if let Some(why) = row.failed_reason {
            node.metadata.annotations =
                Some([(annotation::UPDATE_FAILED_REASON.to_owned(), why.to_owned())].into());
        }
        let written = plan_in_place_node_condition(&node, at(NOW));
        let written = written
            .as_ref()
            .map(|c| (c.reason.as_deref().unwrap(), c.message.as_deref().unwrap()));
        assert_eq!(written, row.written, "{}", row.entry);
        if let Some(condition) = plan_in_place_node_condition(&node, at(NOW)) {
            assert_eq!(condition.type_, reason::IN_PLACE_UPDATE, "{}", row.entry);
            assert_eq!(condition.status, "True", "{}", row.entry);
        }
    }
}

#[test]
fn update_node_condition_repeated_failure_is_not_rewritten() {
    // Upstream: an UpdateFailed condition is left alone (LongRetry, no write) even when the
    // failure-reason annotation changed since.
    let mut node = labelled_node(
        &[CANDIDATE, (label::UPDATE_RESULT, "failed")],
        Some((
            reason::UPDATE_FAILED,
            "Node in-place update failed: old reason",
        )),
    );
    node.metadata.annotations = Some(
        [(
            annotation::UPDATE_FAILED_REASON.to_owned(),
            "new reason".to_owned(),
        )]
        .into(),
    );
    assert_eq!(plan_in_place_node_condition(&node, at(NOW)), None);
}

// ---------------------------------------------------------------------------------------------
// machine_util_test.go: #inPlaceUpdate / ##table and #drainNodeForInPlace / ##table
// ---------------------------------------------------------------------------------------------

fn selected_machine() -> Machine {
    machine("machineset-1-deploy-1-0")
        .with_label(label::NODE, "node-0")
        .with_label(label::SELECTED_FOR_UPDATE, "true")
}

fn run(machine: &Machine, node: &Node, drain: Option<&DrainOutcome>) -> InPlaceStep {
    let settings = effective_settings(
        machine,
        &ControllerSettings {
            drain_timeout: Duration::from_mins(5),
            ..ControllerSettings::default()
        },
    );
    plan_in_place_update(machine, node, &settings, Duration::ZERO, drain, at(NOW))
}

#[test]
fn in_place_update_table() {
    let m = selected_machine();
    // "when node condition is nil": LongRetry without error, the reconcile goes on.
    let bare = labelled_node(&[], None);
    assert_eq!(
        run(&m, &bare, None),
        InPlaceStep::Continue,
        "when node condition is nil"
    );

    // "when node condition reason is ReadyForUpdate": MediumRetry with the error
    // "node node-0 is ready for in-place update", nothing written.
    let ready = labelled_node(
        &[],
        Some((
            reason::READY_FOR_UPDATE,
            "Node is ready for in-place update",
        )),
    );
    let InPlaceStep::Finish(finish) = run(&m, &ready, None) else {
        panic!("when node condition reason is ReadyForUpdate")
    };
    assert_eq!(finish.retry, Retry::Medium);
    assert_eq!(finish.reason, "node node-0 is ready for in-place update");
    assert_eq!(
        (finish.status.as_ref(), finish.node_condition.as_ref()),
        (None, None)
    );

    // "when node condition reason is DrainSuccessful": ReadyForUpdate written, MediumRetry,
    // same error text.
    let drained = labelled_node(
        &[],
        Some((reason::DRAIN_SUCCESSFUL, "Node draining successful")),
    );
    let InPlaceStep::Finish(finish) = run(&m, &drained, None) else {
        panic!("when node condition reason is DrainSuccessful")
    };
    assert_eq!(finish.retry, Retry::Medium);
    assert_eq!(finish.reason, "node node-0 is ready for in-place update");
    let written = finish.node_condition.unwrap();
    assert_eq!(
        (
            written.reason.as_deref(),
            written.message.as_deref(),
            written.status.as_str()
        ),
        (
            Some(reason::READY_FOR_UPDATE),
            Some("Node is ready for in-place update"),
            "True"
        )
    );

    // "when node condition reason is SelectedForUpdate": the node is drained; upstream then
    // re-reads the condition (DrainSuccessful) and writes ReadyForUpdate in the same call. Ours
    // writes DrainSuccessful and the machine phase InPlaceUpdating, ends the pass (Short), and
    // the next pass writes ReadyForUpdate (the DrainSuccessful row above) — documented deviation.
    let selected = labelled_node(&[], Some((reason::SELECTED_FOR_UPDATE, SELECTED_MSG)));
    assert!(matches!(run(&m, &selected, None), InPlaceStep::Drain(_)));
    let InPlaceStep::Finish(finish) = run(&m, &selected, Some(&DrainOutcome::Complete)) else {
        panic!("when node condition reason is SelectedForUpdate")
    };
    assert_eq!(finish.retry, Retry::Short);
    assert_eq!(
        finish.node_condition.unwrap().reason.as_deref(),
        Some(reason::DRAIN_SUCCESSFUL)
    );
    assert_eq!(
        finish.status.unwrap().current_status.phase,
        Some(MachinePhase::InPlaceUpdating)
    );
}

/// `(entry, machine conditions (type, status, minutes since transition), force-drain label,
/// pods force-deleted?)`. Every row ends with the DrainSuccessful condition and ShortRetry.
#[allow(clippy::type_complexity)]
const DRAIN_FOR_IN_PLACE: &[(&str, &[(&str, &str, i64)], bool, bool)] = &[
    (
        "when node is not ready for over 5 minutes",
        &[("Ready", "False", 10)],
        false,
        true,
    ),
    (
        "when node is in ReadonlyFilesystem for over 5 minutes",
        &[("ReadonlyFilesystem", "True", 10)],
        false,
        true,
    ),
    ("when force drain is triggered", &[], true, true),
    ("when normal drain is triggered", &[], false, false),
];

#[test]
fn drain_node_for_in_place_table() {
    let selected = labelled_node(&[], Some((reason::SELECTED_FOR_UPDATE, SELECTED_MSG)));
    for (entry, conditions, force_label, forced) in DRAIN_FOR_IN_PLACE {
        let mut m = machine("machineset-1-deploy-1-0").with_label(label::NODE, "node-0");
        if *force_label {
            m = m.with_label(label::FORCE_DRAIN, "True");
        }
        if !conditions.is_empty() {
            m = m.with_conditions(
                conditions
                    .iter()
                    .map(|(type_, status, minutes)| {
                        condition(type_, status, at(NOW - minutes * 60))
                    })
                    .collect(),
            );
        }
        let InPlaceStep::Drain(config) = run(&m, &selected, None) else {
            panic!("{entry}: no drain")
        };
        assert_eq!(config.force_delete_pods, *forced, "{entry}");
        if *force_label {
            assert_eq!(config.timeout, Duration::from_mins(1), "{entry}");
            assert_eq!(config.max_evict_retries, 1, "{entry}");
        }
        let InPlaceStep::Finish(finish) = run(&m, &selected, Some(&DrainOutcome::Complete)) else {
            panic!("{entry}: no finish")
        };
        assert_eq!(finish.retry, Retry::Short, "{entry}");
        let written = finish.node_condition.unwrap();
        assert_eq!(
            (written.reason.as_deref(), written.message.as_deref()),
            (
                Some(reason::DRAIN_SUCCESSFUL),
                Some("Node draining successful")
            ),
            "{entry}"
        );
    }
}
