#![allow(clippy::unwrap_used)]

use super::*;
use crate::test_support::*;
use crate::vocabulary::{ControllerSettings, effective_settings};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    AttachedVolume, Node, NodeStatus, PersistentVolumeClaimVolumeSource, Pod, PodSpec, PodStatus,
    Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use mcm_api::duration::Duration;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("n1".into()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        }),
    }
}

fn daemon_set_pod(name: &str) -> Pod {
    let mut p = pod(name);
    p.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        name: "ds".into(),
        uid: "u".into(),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    p
}

fn mirror_pod(name: &str) -> Pod {
    let mut p = pod(name);
    p.metadata.annotations = Some([(MIRROR_POD_ANNOTATION.to_owned(), "x".to_owned())].into());
    p
}

fn volume_pod(name: &str, priority: i32) -> Pod {
    let mut p = pod(name);
    let spec = p.spec.as_mut().unwrap();
    spec.priority = Some(priority);
    spec.volumes = Some(vec![Volume {
        name: "data".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: format!("claim-{name}"),
            ..PersistentVolumeClaimVolumeSource::default()
        }),
        ..Volume::default()
    }]);
    p
}

fn config(now: Timestamp) -> DrainConfig {
    let m = machine("m").deleting_since(now);
    let settings = effective_settings(&m, &ControllerSettings::default());
    deletion_drain_config(&m, &settings, Duration::from_mins(2), now)
}

fn node_with_volumes(names: &[&str]) -> Node {
    let mut n = node("n1", vec![], vec![]);
    n.status = Some(NodeStatus {
        volumes_attached: Some(
            names
                .iter()
                .map(|name| AttachedVolume {
                    name: (*name).into(),
                    device_path: String::new(),
                })
                .collect(),
        ),
        ..NodeStatus::default()
    });
    n
}

fn run(
    pods: &[Pod],
    node: Option<&Node>,
    volume_ids: &BTreeMap<String, Vec<String>>,
    ledger: &DrainLedger,
    config: &DrainConfig,
    now: Timestamp,
) -> DrainPlan {
    plan_drain(&DrainInput {
        node_name: "n1",
        node,
        pods,
        volume_ids,
        ledger,
        config,
        now,
    })
}

#[test]
fn drain_config_rules() {
    let flags = ControllerSettings::default();
    let m = machine("m").deleting_since(at(0));
    let settings = effective_settings(&m, &flags);
    let c = deletion_drain_config(&m, &settings, Duration::from_mins(2), at(10));
    assert_eq!(c.timeout, Duration::from_hours(2));
    assert_eq!(c.max_evict_retries, 360);
    assert!(!c.force_delete_pods && !c.force_delete_machine);
    assert_eq!(c.deadline, at(7200));

    // maxEvictRetries is capped at drainTimeout / 20s.
    let mut short = m.clone();
    short.spec.configuration.drain_timeout = Some(Duration::from_mins(1));
    short.spec.configuration.max_evict_retries = Some(100);
    let c = deletion_drain_config(
        &short,
        &effective_settings(&short, &flags),
        Duration::ZERO,
        at(10),
    );
    assert_eq!(c.max_evict_retries, 3);

    // The force-deletion label parses like Go's ParseBool.
    for (text, forced) in [
        ("True", true),
        ("1", true),
        ("t", true),
        ("false", false),
        ("yes", false),
    ] {
        let labelled = m.clone().with_label("force-deletion", text);
        let c = deletion_drain_config(&labelled, &settings, Duration::ZERO, at(10));
        assert_eq!(c.force_delete_pods, forced, "{text}");
        if forced {
            assert_eq!(c.timeout, Duration::from_mins(1));
            assert_eq!(c.max_evict_retries, 1);
        }
        assert_eq!(c.warnings.len(), usize::from(text == "yes"));
    }

    // Past the drain timeout since deletion: forced.
    let c = deletion_drain_config(&m, &settings, Duration::ZERO, at(7201));
    assert!(c.force_delete_pods && c.force_delete_machine);

    // NotReady for more than 5 minutes: force pod deletion, keep the timeout.
    let not_ready = m
        .clone()
        .with_conditions(vec![condition("Ready", "False", at(0))]);
    let c = deletion_drain_config(&not_ready, &settings, Duration::ZERO, at(301));
    assert!(c.force_delete_pods);
    assert_eq!(c.timeout, Duration::from_hours(2));
    let c = deletion_drain_config(&not_ready, &settings, Duration::ZERO, at(299));
    assert!(!c.force_delete_pods);
    let read_only = m.with_conditions(vec![condition("ReadonlyFilesystem", "True", at(0))]);
    assert!(
        deletion_drain_config(&read_only, &settings, Duration::ZERO, at(301)).force_delete_pods
    );
}

#[test]
fn classification() {
    assert_eq!(
        classify_pod(&pod("a"), "n1"),
        PodDisposition::Evict {
            with_volumes: false
        }
    );
    assert_eq!(classify_pod(&pod("a"), "n2"), PodDisposition::SkipOtherNode);
    assert_eq!(
        classify_pod(&daemon_set_pod("d"), "n1"),
        PodDisposition::SkipDaemonSet
    );
    assert_eq!(
        classify_pod(&mirror_pod("m"), "n1"),
        PodDisposition::SkipMirror
    );
    assert_eq!(
        classify_pod(&volume_pod("v", 0), "n1"),
        PodDisposition::Evict { with_volumes: true }
    );
    let mut done = pod("c");
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    assert_eq!(classify_pod(&done, "n1"), PodDisposition::DeleteCompleted);
    let mut leaving = pod("t");
    leaving.metadata.deletion_timestamp = Some(Time(at(0)));
    assert_eq!(
        classify_pod(&leaving, "n1"),
        PodDisposition::WaitTerminating
    );
    // A DaemonSet owner that is not the controller does not protect the pod.
    let mut not_controller = daemon_set_pod("x");
    not_controller.metadata.owner_references.as_mut().unwrap()[0].controller = None;
    assert_eq!(
        classify_pod(&not_controller, "n1"),
        PodDisposition::Evict {
            with_volumes: false
        }
    );
}

#[test]
fn force_mode_deletes_everything_but_daemon_set_and_mirror_pods() {
    let mut c = config(at(0));
    c.force_delete_pods = true;
    let pods = [
        pod("a"),
        daemon_set_pod("d"),
        mirror_pod("m"),
        volume_pod("v", 1),
    ];
    let plan = run(
        &pods,
        None,
        &BTreeMap::new(),
        &DrainLedger::default(),
        &c,
        at(5),
    );
    assert_eq!(plan.outcome, DrainOutcome::Complete);
    let deleted: Vec<_> = plan
        .actions
        .iter()
        .map(|action| match action {
            DrainAction::Delete {
                pod,
                grace_period_seconds,
                ..
            } => {
                assert_eq!(*grace_period_seconds, Some(0));
                pod.clone()
            }
            DrainAction::Evict { .. } => panic!("force mode never evicts"),
        })
        .collect();
    assert_eq!(
        deleted,
        vec!["default/a".to_owned(), "default/v".to_owned()]
    );
}

#[test]
fn eviction_retries_then_deletion() {
    let mut c = config(at(0));
    c.max_evict_retries = 2;
    let pods = [pod("a"), daemon_set_pod("d")];
    let mut ledger = DrainLedger::default();
    let plan = run(&pods, None, &BTreeMap::new(), &ledger, &c, at(1));
    assert_eq!(plan.actions.len(), 1);
    assert!(matches!(&plan.actions[0], DrainAction::Evict { pod, .. } if pod == "default/a"));
    assert!(
        matches!(plan.outcome, DrainOutcome::InProgress { next_check_at, .. } if next_check_at == at(6))
    );

    // 429: wait the retry interval.
    ledger.record(
        &plan.actions[0],
        &EvictionResult::Failed(EvictionFailure::TooManyRequests),
        at(1),
    );
    let plan = run(&pods, None, &BTreeMap::new(), &ledger, &c, at(5));
    assert!(plan.actions.is_empty());
    assert!(
        matches!(plan.outcome, DrainOutcome::InProgress { next_check_at, .. } if next_check_at == at(21))
    );
    let plan = run(&pods, None, &BTreeMap::new(), &ledger, &c, at(21));
    assert!(matches!(&plan.actions[0], DrainAction::Evict { .. }));
    ledger.record(
        &plan.actions[0],
        &EvictionResult::Failed(EvictionFailure::TooManyRequests),
        at(21),
    );
    assert_eq!(ledger.pods["default/a"].attempts, 2);
    // Budget spent: delete.
    let plan = run(&pods, None, &BTreeMap::new(), &ledger, &c, at(41));
    assert!(matches!(
        &plan.actions[0],
        DrainAction::Delete {
            grace_period_seconds: None,
            ..
        }
    ));
    ledger.record(&plan.actions[0], &EvictionResult::Accepted, at(41));
    // Pod still terminating: wait, no new action.
    let plan = run(&pods, None, &BTreeMap::new(), &ledger, &c, at(42));
    assert!(plan.actions.is_empty());
    // Pod gone: complete (the DaemonSet pod stays).
    let plan = run(&pods[1..], None, &BTreeMap::new(), &ledger, &c, at(50));
    assert_eq!(plan.outcome, DrainOutcome::Complete);
}

#[test]
fn misconfigured_pdb_fails_the_drain() {
    let c = config(at(0));
    let pods = [pod("a")];
    let mut ledger = DrainLedger::default();
    let plan = run(&pods, None, &BTreeMap::new(), &ledger, &c, at(1));
    let refused = [EvictionResult::Failed(EvictionFailure::MisconfiguredPdb {
        pdb: "default/pdb".into(),
    })];
    let reason = misconfigured_refusals(&plan.actions, &refused).unwrap();
    assert!(
        reason.contains(
            "pod disruption budget default/pdb is misconfigured and requires zero voluntary evictions"
        ),
        "{reason}"
    );
    assert!(reason.contains("default/a"), "{reason}");
    assert_eq!(
        misconfigured_refusals(&plan.actions, &[EvictionResult::Accepted]),
        None
    );
    assert_eq!(
        misconfigured_refusals(
            &plan.actions,
            &[EvictionResult::Failed(EvictionFailure::TooManyRequests)]
        ),
        None
    );
    ledger.record(&plan.actions[0], &refused[0], at(1));
    assert_eq!(ledger.pods["default/a"].attempts, 0);
}

#[test]
fn misconfigured_pdb_is_asked_again_in_the_next_pass() {
    // Upstream runs a fresh drain after each failure; a budget deleted meanwhile must not keep
    // failing the drain from the ledger.
    let c = config(at(0));
    let pods = [pod("a")];
    let mut ledger = DrainLedger::default();
    let refused = EvictionResult::Failed(EvictionFailure::MisconfiguredPdb {
        pdb: "default/pdb".into(),
    });
    for second in 1..400 {
        let plan = run(&pods, None, &BTreeMap::new(), &ledger, &c, at(second * 5));
        assert!(
            matches!(plan.outcome, DrainOutcome::InProgress { .. }),
            "{:?}",
            plan.outcome
        );
        // Always an eviction, never the fallback deletion that would bypass the budget.
        assert!(
            matches!(plan.actions.as_slice(), [DrainAction::Evict { pod, .. }] if pod == "default/a"),
            "{:?}",
            plan.actions
        );
        ledger.record(&plan.actions[0], &refused, at(second * 5));
    }
    // The budget is gone: the eviction is accepted and the drain waits for the pod, then ends.
    let plan = run(&pods, None, &BTreeMap::new(), &ledger, &c, at(2001));
    ledger.record(&plan.actions[0], &EvictionResult::Accepted, at(2001));
    let plan = run(&pods, None, &BTreeMap::new(), &ledger, &c, at(2002));
    assert!(plan.actions.is_empty());
    assert!(matches!(plan.outcome, DrainOutcome::InProgress { .. }));
    let plan = run(&[], None, &BTreeMap::new(), &ledger, &c, at(2003));
    assert_eq!(plan.outcome, DrainOutcome::Complete);
}

#[test]
fn stuck_terminating_pod_fails_after_grace_and_slack() {
    let c = config(at(0));
    let mut leaving = pod("t");
    leaving.metadata.deletion_timestamp = Some(Time(at(0)));
    let pods = [leaving];
    let plan = run(
        &pods,
        None,
        &BTreeMap::new(),
        &DrainLedger::default(),
        &c,
        at(59),
    );
    assert!(plan.actions.is_empty());
    assert!(matches!(plan.outcome, DrainOutcome::InProgress { .. }));
    let plan = run(
        &pods,
        None,
        &BTreeMap::new(),
        &DrainLedger::default(),
        &c,
        at(61),
    );
    assert!(
        matches!(plan.outcome, DrainOutcome::Failed { ref reason } if reason.contains("timeout expired while waiting for pod"))
    );
}

/// A drain config and two pods with one volume each: `low` (priority 1) and `high` (100).
fn two_volume_pods() -> (DrainConfig, Pod, Pod, BTreeMap<String, Vec<String>>) {
    let ids = BTreeMap::from([
        ("default/low".to_owned(), vec!["vol-low".to_owned()]),
        ("default/high".to_owned(), vec!["vol-high".to_owned()]),
    ]);
    (
        config(at(0)),
        volume_pod("low", 1),
        volume_pod("high", 100),
        ids,
    )
}

#[test]
fn volume_pods_are_drained_one_by_one_waiting_for_detach() {
    let (c, low, high, ids) = two_volume_pods();
    let attached_node = node_with_volumes(&[
        "kubernetes.io/csi/ebs^vol-high",
        "kubernetes.io/csi/ebs^vol-low",
    ]);
    let mut ledger = DrainLedger::default();
    let pods = vec![low.clone(), high.clone()];
    let plan = run(&pods, Some(&attached_node), &ids, &ledger, &c, at(1));
    assert_eq!(plan.actions.len(), 1, "only one volume pod at a time");
    assert!(
        matches!(&plan.actions[0], DrainAction::Evict { pod, volume_ids, .. } if pod == "default/high" && volume_ids == &vec!["vol-high".to_owned()])
    );
    ledger.record(&plan.actions[0], &EvictionResult::Accepted, at(1));

    // High is gone but its volume is still attached: low waits.
    let plan = run(
        std::slice::from_ref(&low),
        Some(&attached_node),
        &ids,
        &ledger,
        &c,
        at(10),
    );
    assert!(plan.actions.is_empty());
    assert!(matches!(plan.outcome, DrainOutcome::InProgress { .. }));

    // Detached: low is evicted.
    let detached = node_with_volumes(&["kubernetes.io/csi/ebs^vol-low"]);
    let plan = run(
        std::slice::from_ref(&low),
        Some(&detached),
        &ids,
        &ledger,
        &c,
        at(20),
    );
    assert!(matches!(&plan.actions[0], DrainAction::Evict { pod, .. } if pod == "default/low"));

    // Never detached: fails after grace (30s) + detach timeout (2m).
    let plan = run(
        &[low],
        Some(&attached_node),
        &ids,
        &ledger,
        &c,
        at(1 + 30 + 121),
    );
    assert!(
        matches!(plan.outcome, DrainOutcome::Failed { ref reason } if reason.contains("timeout while waiting for PVs to detach"))
    );
}

/// Upstream's `waitForReattach`: after the detach, the serial volume queue waits
/// for the volume to be attached elsewhere, or for `--machine-pv-reattach-timeout`.
#[test]
fn detached_volumes_are_awaited_on_another_node_until_the_reattach_timeout() {
    let (c, low, high, ids) = two_volume_pods();
    let reattach = Duration::from_secs(90);
    let attached_node = node_with_volumes(&[
        "kubernetes.io/csi/ebs^vol-high",
        "kubernetes.io/csi/ebs^vol-low",
    ]);
    let detached = node_with_volumes(&["kubernetes.io/csi/ebs^vol-low"]);
    let mut ledger = DrainLedger::default();
    let pods = vec![low.clone(), high];
    let plan = run(&pods, Some(&attached_node), &ids, &ledger, &c, at(1));
    ledger.record(&plan.actions[0], &EvictionResult::Accepted, at(1));
    let rest = std::slice::from_ref(&low);
    let high = || "default/high".to_owned();
    let progress = |node: &Node, ledger: &DrainLedger, now, timeout, elsewhere: &[&str]| {
        let elsewhere = elsewhere.iter().map(|key| (*key).to_owned()).collect();
        volume_progress(
            &DrainInput {
                node_name: "n1",
                node: Some(node),
                pods: rest,
                volume_ids: &ids,
                ledger,
                config: &c,
                now,
            },
            timeout,
            &elsewhere,
        )
    };
    // Still attached to the drained node: no re-attach step yet.
    assert!(progress(&attached_node, &ledger, at(5), reattach, &[]).is_empty());
    // Detached: the wait starts, and low is not evicted meanwhile.
    let events = progress(&detached, &ledger, at(10), reattach, &[]);
    assert_eq!(events, [VolumeEvent::Detached { pod: high() }]);
    let mut waiting = ledger.clone();
    waiting.record_volume_event(&events[0], reattach, at(10));
    let plan = run(rest, Some(&detached), &ids, &waiting, &c, at(20));
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    assert!(
        matches!(&plan.outcome, DrainOutcome::InProgress { pending, .. } if pending.contains(&"default/high".to_owned()))
    );
    // Attached elsewhere: the wait ends and low is evicted.
    let events = progress(&detached, &waiting, at(30), reattach, &["default/high"]);
    assert_eq!(events, [VolumeEvent::Reattached { pod: high() }]);
    let mut reattached = waiting.clone();
    reattached.record_volume_event(&events[0], reattach, at(30));
    let plan = run(rest, Some(&detached), &ids, &reattached, &c, at(30));
    assert!(matches!(&plan.actions[0], DrainAction::Evict { pod, .. } if pod == "default/low"));
    // Never attached elsewhere: the timeout ends the wait (logged, not a failure).
    assert!(progress(&detached, &waiting, at(100), reattach, &[]).is_empty());
    let events = progress(&detached, &waiting, at(101), reattach, &[]);
    assert_eq!(events, [VolumeEvent::ReattachTimedOut { pod: high() }]);
    let plan = run(rest, Some(&detached), &ids, &waiting, &c, at(101));
    assert!(matches!(&plan.actions[0], DrainAction::Evict { pod, .. } if pod == "default/low"));
    // A zero timeout skips the wait.
    assert_eq!(
        progress(&detached, &ledger, at(10), Duration::ZERO, &[]),
        [VolumeEvent::ReattachTimedOut { pod: high() }]
    );
}

#[test]
fn deadline_fails_normal_drain() {
    let c = config(at(0));
    let plan = run(
        &[pod("a")],
        None,
        &BTreeMap::new(),
        &DrainLedger::default(),
        &c,
        at(7200),
    );
    assert!(matches!(plan.outcome, DrainOutcome::Failed { .. }));
    assert!(plan.actions.is_empty());
}

#[test]
fn shared_volumes_are_excluded() {
    let input = BTreeMap::from([
        ("a".to_owned(), vec!["pv1".to_owned(), "pv2".to_owned()]),
        ("b".to_owned(), vec!["pv2".to_owned(), "pv3".to_owned()]),
    ]);
    let out = exclude_shared_volumes(&input);
    assert_eq!(out["a"], vec!["pv1".to_owned()]);
    assert_eq!(out["b"], vec!["pv3".to_owned()]);
}

#[derive(Clone, Debug)]
enum Kind {
    Plain,
    DaemonSet,
    Mirror,
    Volume(i32),
    Completed,
    Terminating,
}

fn make(kind: &Kind, index: usize) -> Pod {
    let name = format!("p{index}");
    match kind {
        Kind::Plain => pod(&name),
        Kind::DaemonSet => daemon_set_pod(&name),
        Kind::Mirror => mirror_pod(&name),
        Kind::Volume(priority) => volume_pod(&name, *priority),
        Kind::Completed => {
            let mut p = pod(&name);
            p.status.as_mut().unwrap().phase = Some("Failed".into());
            p
        }
        Kind::Terminating => {
            let mut p = pod(&name);
            p.metadata.deletion_timestamp = Some(Time(at(0)));
            p
        }
    }
}

fn arb_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Plain),
        Just(Kind::DaemonSet),
        Just(Kind::Mirror),
        (0i32..5).prop_map(Kind::Volume),
        Just(Kind::Completed),
        Just(Kind::Terminating),
    ]
}

proptest! {
    /// No pass ever evicts or deletes a DaemonSet or mirror pod, and the next check is never after
    /// the deadline.
    #[test]
    fn prop_never_touches_daemon_set_or_mirror_pods(
        kinds in proptest::collection::vec(arb_kind(), 0..10),
        force in any::<bool>(),
        elapsed in 0i64..8000,
        failures in proptest::collection::vec(any::<bool>(), 10),
    ) {
        let mut c = config(at(0));
        c.force_delete_pods = force;
        c.max_evict_retries = 2;
        let pods: Vec<Pod> = kinds.iter().enumerate().map(|(i, k)| make(k, i)).collect();
        let mut ledger = DrainLedger::default();
        let mut now = at(1);
        for round in 0..6 {
            let plan = run(&pods, None, &BTreeMap::new(), &ledger, &c, now);
            for action in &plan.actions {
                let key = match action { DrainAction::Evict { pod, .. } | DrainAction::Delete { pod, .. } => pod };
                let index: usize = key.trim_start_matches("default/p").parse().unwrap();
                prop_assert!(!matches!(kinds[index], Kind::DaemonSet | Kind::Mirror));
                let result = if failures[(index + round) % 10] { EvictionResult::Failed(EvictionFailure::TooManyRequests) } else { EvictionResult::Accepted };
                ledger.record(action, &result, now);
            }
            if let DrainOutcome::InProgress { next_check_at, .. } = plan.outcome {
                prop_assert!(next_check_at <= c.deadline);
                prop_assert!(next_check_at >= now);
                now = next_check_at;
            }
        }
        let late = at(elapsed);
        if let DrainOutcome::InProgress { next_check_at, .. } = run(&pods, None, &BTreeMap::new(), &ledger, &c, late).outcome {
            prop_assert!(next_check_at <= c.deadline);
        }
    }
}
