//! `drain_test.go` `RunDrain` (see `docs/upstream-conformance.md`). Upstream runs the whole drain
//! against a fake clientset whose eviction/deletion reactors delete the pod and detach its
//! exclusive volumes; here the same world is simulated around our pure drain: pass after pass of
//! [`plan_drain`] (with [`volume_progress`] before it, as the shell does), the simulated cluster
//! answering each action the way upstream's reactors do, until the drain completes or fails.
//!
//! Each row keeps upstream's setup (pods without volumes, with exclusive, shared, or exclusive and
//! shared volumes; eviction supported or not; forced; eviction error) and its expectations (every
//! pod gone, no drain error, the number of evictions), and the simulation also checks the order
//! upstream's drain promises: pods with volumes go one at a time, the next only after the previous
//! one's exclusive volumes have detached.
//!
//! Restatements: upstream's "without support for eviction" (a server without the Eviction API) is
//! our delete-only mode, `max_evict_retries = 0` (pods are deleted with their own grace period);
//! upstream's wall-clock durations become simulated time.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{
    AttachedVolume, Node, NodeStatus, PersistentVolumeClaimVolumeSource, Pod, PodSpec, PodStatus,
    Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::duration::Duration;

use crate::drain::plan::{
    DrainAction, DrainConfig, DrainInput, DrainLedger, DrainOutcome, EvictionFailure,
    EvictionResult, exclude_shared_volumes, plan_drain, pod_key, pvc_claims, volume_progress,
};

/// Upstream's entry setup and expectations.
struct Row {
    entry: &'static str,
    without_pv: usize,
    only_exclusive: usize,
    only_shared: usize,
    exclusive_and_shared: usize,
    pvs_per_exclusive_pod: usize,
    /// The server supports the Eviction API.
    eviction: bool,
    /// The eviction/deletion handler detaches the pod's exclusive volumes from the node.
    detach: bool,
    /// Detached volumes are attached to the new node (VolumeAttachments supported).
    reattach: bool,
    /// `pvReattachTimeout` (upstream's default in the test: 1 ms).
    reattach_timeout_secs: i64,
    force: bool,
    /// Every eviction is refused with 429.
    evict_error: bool,
    grace_secs: i64,
    /// Expected number of evictions.
    evictions: usize,
}

const BASE: Row = Row {
    entry: "",
    without_pv: 0,
    only_exclusive: 0,
    only_shared: 0,
    exclusive_and_shared: 0,
    pvs_per_exclusive_pod: 1,
    eviction: false,
    detach: false,
    reattach: false,
    reattach_timeout_secs: 0,
    force: false,
    evict_error: false,
    grace_secs: 5,
    evictions: 0,
};

const ROWS: &[Row] = &[
    Row {
        entry: "Successful drain without support for eviction pods without volume",
        without_pv: 10,
        ..BASE
    },
    Row {
        entry: "Successful drain with support for eviction of pods without volume",
        without_pv: 10,
        eviction: true,
        evictions: 10,
        ..BASE
    },
    Row {
        entry: "Successful drain without support for eviction of pods with exclusive volumes",
        only_exclusive: 2,
        detach: true,
        ..BASE
    },
    Row {
        entry: "Successful drain with support for eviction of pods with exclusive volumes",
        only_exclusive: 2,
        eviction: true,
        detach: true,
        evictions: 2,
        ..BASE
    },
    Row {
        entry: "Successful drain with support for eviction of pods with exclusive volumes with volume attachments",
        only_exclusive: 2,
        eviction: true,
        detach: true,
        reattach: true,
        reattach_timeout_secs: 30,
        evictions: 2,
        ..BASE
    },
    Row {
        entry: "Successful drain with support for eviction of pods with 2 exclusive volumes with volume attachments",
        only_exclusive: 1,
        pvs_per_exclusive_pod: 2,
        eviction: true,
        detach: true,
        reattach: true,
        reattach_timeout_secs: 30,
        evictions: 1,
        ..BASE
    },
    Row {
        entry: "Successful drain without support for eviction of pods with shared volumes",
        only_shared: 2,
        ..BASE
    },
    Row {
        entry: "Successful drain with support for eviction of pods with shared volumes",
        only_shared: 2,
        eviction: true,
        evictions: 2,
        ..BASE
    },
    Row {
        entry: "Successful drain without support for eviction of pods with exclusive and shared volumes",
        exclusive_and_shared: 2,
        detach: true,
        ..BASE
    },
    Row {
        entry: "Successful drain with support for eviction of pods with exclusive and shared volumes",
        exclusive_and_shared: 2,
        eviction: true,
        detach: true,
        evictions: 2,
        ..BASE
    },
    Row {
        entry: "Successful drain without support for eviction of pods with and without volume",
        without_pv: 10,
        only_exclusive: 2,
        detach: true,
        ..BASE
    },
    Row {
        entry: "Successful drain with support for eviction of pods with and without volume",
        without_pv: 10,
        only_exclusive: 2,
        eviction: true,
        detach: true,
        evictions: 12,
        ..BASE
    },
    Row {
        entry: "Successful forced drain without support for eviction of pods with and without volume",
        without_pv: 10,
        only_exclusive: 2,
        force: true,
        ..BASE
    },
    Row {
        entry: "Successful forced drain with support for eviction of pods with and without volume",
        without_pv: 10,
        only_exclusive: 2,
        eviction: true,
        force: true,
        ..BASE
    },
    Row {
        entry: "Successful forced drain with support for eviction of pods with and without volume when eviction fails",
        without_pv: 10,
        only_exclusive: 2,
        eviction: true,
        force: true,
        evict_error: true,
        ..BASE
    },
    Row {
        entry: "Successful drain for pods with long termination grace period",
        without_pv: 10,
        only_exclusive: 2,
        eviction: true,
        detach: true,
        grace_secs: 120,
        evictions: 12,
        ..BASE
    },
];

const NODE: &str = "old-node";

/// A pod of the drained node with these claims.
fn pod(name: &str, claims: &[String], grace: i64) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("test".to_owned()),
            uid: Some(format!("uid-{name}")),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(NODE.to_owned()),
            termination_grace_period_seconds: Some(grace),
            volumes: (!claims.is_empty()).then(|| {
                claims
                    .iter()
                    .map(|claim| Volume {
                        name: claim.clone(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: claim.clone(),
                            ..PersistentVolumeClaimVolumeSource::default()
                        }),
                        ..Volume::default()
                    })
                    .collect()
            }),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".to_owned()),
            ..PodStatus::default()
        }),
    }
}

/// Upstream's pods: `prefix-i`; exclusive claims `prefix-i-j`, shared claims one per two pods
/// (`getPodsWithPV(n, n, n/2, …)`). Claim name = PV name = volume ID here.
fn pods_of(row: &Row) -> Vec<Pod> {
    let mut pods = Vec::new();
    for i in 0..row.without_pv {
        pods.push(pod(&format!("nopv-{i}"), &[], row.grace_secs));
    }
    let mut with_pv = |count: usize, exclusive: bool, shared: bool, prefix: &str| {
        for i in 0..count {
            let mut claims = Vec::new();
            if exclusive {
                for j in 0..row.pvs_per_exclusive_pod {
                    claims.push(format!("{prefix}ex-{i}-{j}"));
                }
            }
            if shared {
                claims.push(format!("{prefix}sh-{}", i % (count / 2).max(1)));
            }
            pods.push(pod(&format!("{prefix}{i}"), &claims, row.grace_secs));
        }
    };
    with_pv(row.only_exclusive, true, false, "expv-");
    with_pv(row.only_shared, false, true, "shpv-");
    with_pv(row.exclusive_and_shared, true, true, "exshpv-");
    pods
}

fn node_with(volumes: &BTreeSet<String>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(NODE.to_owned()),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(NodeStatus {
            volumes_attached: Some(
                volumes
                    .iter()
                    .map(|id| AttachedVolume {
                        name: format!("kubernetes.io/csi/driver^{id}"),
                        device_path: String::new(),
                    })
                    .collect(),
            ),
            ..NodeStatus::default()
        }),
    }
}

/// What the simulated drain did.
struct Run {
    outcome: DrainOutcome,
    evictions: usize,
    pods_left: usize,
    /// Volume pods in the order their eviction/deletion was accepted.
    volume_pod_order: Vec<String>,
}

fn simulate(row: &Row) -> Run {
    let t0 = Timestamp::from_second(1_000_000).unwrap();
    let reattach_timeout = Duration::from_secs(row.reattach_timeout_secs);
    let config = DrainConfig {
        timeout: Duration::from_mins(2),
        // Upstream's test: maxEvictRetries 3 unless set; "without support for eviction" deletes.
        max_evict_retries: if row.eviction { 3 } else { 0 },
        force_delete_pods: row.force,
        force_delete_machine: false,
        deadline: t0 + SignedDuration::from_mins(2),
        pv_detach_timeout: Duration::from_secs(30),
        warnings: Vec::new(),
    };
    let mut pods = pods_of(row);
    let claims_by_pod: BTreeMap<String, Vec<String>> = pods
        .iter()
        .map(|pod| (pod_key(pod), pvc_claims(pod)))
        .collect();
    // The shell resolves PVC -> PV -> GetVolumeIDs and drops shared volumes.
    let volume_ids = exclude_shared_volumes(&claims_by_pod);
    let exclusive: BTreeSet<String> = volume_ids.values().flatten().cloned().collect();
    let mut attached: BTreeSet<String> = claims_by_pod.values().flatten().cloned().collect();
    let mut attached_elsewhere: BTreeSet<String> = BTreeSet::new();
    let mut ledger = DrainLedger::default();
    let mut evictions = 0;
    let mut volume_pod_order = Vec::new();
    let mut now = t0;
    for _ in 0..10_000 {
        let node = node_with(&attached);
        if !config.force_delete_pods {
            let events = volume_progress(
                &DrainInput {
                    node_name: NODE,
                    node: Some(&node),
                    pods: &pods,
                    volume_ids: &volume_ids,
                    ledger: &ledger,
                    config: &config,
                    now,
                },
                reattach_timeout,
                &attached_elsewhere,
            );
            for event in events {
                ledger.record_volume_event(&event, reattach_timeout, now);
            }
        }
        let input = DrainInput {
            node_name: NODE,
            node: Some(&node),
            pods: &pods,
            volume_ids: &volume_ids,
            ledger: &ledger,
            config: &config,
            now,
        };
        let plan = plan_drain(&input);
        // Upstream drains pods with volumes one at a time.
        let volume_actions: Vec<&str> = plan
            .actions
            .iter()
            .map(|action| match action {
                DrainAction::Evict { pod, .. } | DrainAction::Delete { pod, .. } => pod.as_str(),
            })
            .filter(|pod| !claims_by_pod[*pod].is_empty())
            .collect();
        if !config.force_delete_pods {
            assert!(
                volume_actions.len() <= 1,
                "{}: pods with volumes drained together: {volume_actions:?}",
                row.entry
            );
        }
        for action in &plan.actions {
            let (key, evict) = match action {
                DrainAction::Evict { pod, .. } => (pod.clone(), true),
                DrainAction::Delete { pod, .. } => (pod.clone(), false),
            };
            let result = if evict && row.evict_error {
                EvictionResult::Failed(EvictionFailure::TooManyRequests)
            } else {
                if evict {
                    evictions += 1;
                }
                // Upstream's handlers: delete the pod, then detach its exclusive volumes (and
                // attach them to the new node where VolumeAttachments are supported).
                pods.retain(|pod| pod_key(pod) != key);
                if !claims_by_pod[&key].is_empty() {
                    volume_pod_order.push(key.clone());
                }
                if row.detach || config.force_delete_pods {
                    for volume in &claims_by_pod[&key] {
                        if exclusive.contains(volume) {
                            attached.remove(volume);
                            if row.reattach {
                                attached_elsewhere.insert(key.clone());
                            }
                        }
                    }
                }
                EvictionResult::Accepted
            };
            ledger.record(action, &result, now);
        }
        match plan.outcome {
            DrainOutcome::InProgress { next_check_at, .. } => {
                assert!(next_check_at >= now, "{}: time goes back", row.entry);
                now = next_check_at.max(now + SignedDuration::from_millis(1));
            }
            outcome => {
                return Run {
                    outcome,
                    evictions,
                    pods_left: pods.len(),
                    volume_pod_order,
                };
            }
        }
    }
    panic!("{}: the drain never ended", row.entry);
}

#[test]
fn run_drain_table() {
    for row in ROWS {
        let run = simulate(row);
        assert_eq!(run.outcome, DrainOutcome::Complete, "{}", row.entry);
        assert_eq!(run.pods_left, 0, "{}: pods left", row.entry);
        assert_eq!(run.evictions, row.evictions, "{}: evictions", row.entry);
        let volume_pods = row.only_exclusive + row.only_shared + row.exclusive_and_shared;
        assert_eq!(
            run.volume_pod_order.len(),
            volume_pods,
            "{}: volume pods drained",
            row.entry
        );
    }
}

/// Extra: a pod whose exclusive volume never detaches fails the drain after its grace period and
/// the PV detach timeout (upstream `waitForDetach` times out), while the pods without volumes are
/// drained.
#[test]
fn run_drain_volume_that_never_detaches_fails_the_drain() {
    let row = Row {
        entry: "exclusive volume never detaches",
        without_pv: 2,
        only_exclusive: 1,
        eviction: true,
        evictions: 3,
        ..BASE
    };
    let run = simulate(&row);
    match &run.outcome {
        DrainOutcome::Failed { reason } => {
            assert!(
                reason.contains("timeout while waiting for PVs to detach"),
                "{reason}"
            );
        }
        other => panic!("expected a failed drain, got {other:?}"),
    }
    assert_eq!(run.evictions, 3);
    assert_eq!(run.pods_left, 0);
}
