//! The planner: one drain pass ([`plan_drain`]) from its inputs ([`DrainInput`]) to the actions
//! and outcome ([`DrainPlan`], [`DrainAction`], [`DrainOutcome`]).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};

use super::config::DrainConfig;
use super::ledger::{DrainLedger, EvictionFailure};
use super::pods::{PodDisposition, classify_pod, pod_key, pod_uid};
use super::{DEFAULT_GRACE_SECONDS, EVICTION_RETRY_INTERVAL, POLL_INTERVAL, TERMINATION_SLACK};
use crate::vocabulary::add;

/// Something the shell does to a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainAction {
    /// POST an Eviction (grace period: the pod's own).
    Evict {
        /// Pod key.
        pod: String,
        /// Pod UID (precondition).
        uid: String,
        /// Volume IDs to wait for after the eviction.
        volume_ids: Vec<String>,
        /// The pod's termination grace period.
        grace_seconds: i64,
    },
    /// DELETE the pod.
    Delete {
        /// Pod key.
        pod: String,
        /// Pod UID (precondition).
        uid: String,
        /// `Some(0)` in force mode; `None` uses the pod's own grace period.
        grace_period_seconds: Option<i64>,
        /// Volume IDs to wait for.
        volume_ids: Vec<String>,
        /// The pod's termination grace period.
        grace_seconds: i64,
    },
}

/// Where the drain stands after this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainOutcome {
    /// Every pod is gone (or, forced, deleted) and volumes are detached.
    Complete,
    /// Waiting: act on the actions, come back at `next_check_at` (never after the deadline).
    InProgress {
        /// When the next pass is due.
        next_check_at: Timestamp,
        /// Pods still pending (for logs and status texts).
        pending: Vec<String>,
    },
    /// The drain failed (the deletion flow retries it, and forces it after the timeout).
    Failed {
        /// Why.
        reason: String,
    },
}

/// One pass of the drain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainPlan {
    /// Evictions and deletions to issue now.
    pub actions: Vec<DrainAction>,
    /// Where the drain stands.
    pub outcome: DrainOutcome,
}

/// Inputs of one drain pass.
pub struct DrainInput<'a> {
    /// The node being drained.
    pub node_name: &'a str,
    /// The node (for `status.volumesAttached`); `None` when it no longer exists.
    pub node: Option<&'a Node>,
    /// Pods bound to the node.
    pub pods: &'a [Pod],
    /// Volume IDs per pod key (from GetVolumeIDs, shared volumes already excluded; a pod without
    /// entry has none to wait for).
    pub volume_ids: &'a BTreeMap<String, Vec<String>>,
    /// Memory of previous passes.
    pub ledger: &'a DrainLedger,
    /// Configuration.
    pub config: &'a DrainConfig,
    /// Current time.
    pub now: Timestamp,
}

pub(super) fn grace_seconds(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_GRACE_SECONDS)
        .max(0)
}

pub(super) fn attached(node: Option<&Node>, volume_ids: &[String]) -> bool {
    let Some(node) = node else {
        return false;
    };
    let names: Vec<&str> = node
        .status
        .as_ref()
        .and_then(|status| status.volumes_attached.as_ref())
        .map(|volumes| volumes.iter().map(|volume| volume.name.as_str()).collect())
        .unwrap_or_default();
    volume_ids
        .iter()
        .any(|id| !id.is_empty() && names.iter().any(|name| name.contains(id.as_str())))
}

/// The next drain pass.
#[must_use]
pub fn plan_drain(input: &DrainInput<'_>) -> DrainPlan {
    let config = input.config;
    let now = input.now;
    let mut actions = Vec::new();
    let mut pending = Vec::new();
    let mut errors = Vec::new();
    let mut wake_ups: Vec<Timestamp> = Vec::new();
    let present: BTreeMap<String, &Pod> =
        input.pods.iter().map(|pod| (pod_key(pod), pod)).collect();

    if config.force_delete_pods {
        for pod in input.pods {
            if matches!(
                classify_pod(pod, input.node_name),
                PodDisposition::SkipMirror
                    | PodDisposition::SkipDaemonSet
                    | PodDisposition::SkipOtherNode
            ) {
                continue;
            }
            actions.push(DrainAction::Delete {
                pod: pod_key(pod),
                uid: pod_uid(pod),
                grace_period_seconds: Some(0),
                volume_ids: Vec::new(),
                grace_seconds: 0,
            });
        }
        return DrainPlan {
            actions,
            outcome: DrainOutcome::Complete,
        };
    }

    if now >= config.deadline {
        return DrainPlan {
            actions,
            outcome: DrainOutcome::Failed {
                reason: format!(
                    "drain of node {} did not finish within the drain timeout {}",
                    input.node_name, config.timeout
                ),
            },
        };
    }

    // Volume pods already evicted and gone whose volumes are still attached block the serial queue.
    let mut volume_queue_blocked = false;
    for (key, progress) in &input.ledger.pods {
        let gone = present
            .get(key)
            .is_none_or(|pod| pod_uid(pod) != progress.uid);
        if !gone || progress.volume_ids.is_empty() {
            continue;
        }
        let Some(accepted) = progress.accepted_at else {
            continue;
        };
        // Detached: wait (serially, as upstream) until a volume is attached elsewhere or the
        // re-attach timeout passes.
        if !attached(input.node, &progress.volume_ids)
            && !progress.reattach_settled
            && let Some(deadline) = progress.reattach_deadline
            && now <= deadline
        {
            volume_queue_blocked = true;
            pending.push(key.clone());
            wake_ups.push(deadline.min(now + POLL_INTERVAL));
            continue;
        }
        if attached(input.node, &progress.volume_ids) {
            let limit = add(
                accepted + SignedDuration::from_secs(progress.grace_seconds),
                config.pv_detach_timeout,
            );
            if now > limit {
                errors.push(format!(
                    "timeout while waiting for PVs to detach from node {} (pod {key})",
                    input.node_name
                ));
            } else {
                volume_queue_blocked = true;
                pending.push(key.clone());
                wake_ups.push(limit.min(now + POLL_INTERVAL));
            }
        }
    }

    let mut volume_pods: Vec<&Pod> = Vec::new();
    for pod in input.pods {
        let key = pod_key(pod);
        let disposition = classify_pod(pod, input.node_name);
        match disposition {
            PodDisposition::SkipMirror
            | PodDisposition::SkipDaemonSet
            | PodDisposition::SkipOtherNode => {}
            PodDisposition::DeleteCompleted => {
                pending.push(key.clone());
                actions.push(DrainAction::Delete {
                    pod: key,
                    uid: pod_uid(pod),
                    grace_period_seconds: None,
                    volume_ids: Vec::new(),
                    grace_seconds: grace_seconds(pod),
                });
            }
            PodDisposition::WaitTerminating => {
                pending.push(key.clone());
                let since = pod
                    .metadata
                    .deletion_timestamp
                    .as_ref()
                    .map_or(now, |at| at.0);
                let limit =
                    since + SignedDuration::from_secs(grace_seconds(pod)) + TERMINATION_SLACK;
                if now > limit {
                    errors.push(format!(
                        "timeout expired while waiting for pod {key:?} terminating scheduled on node {}",
                        input.node_name
                    ));
                } else {
                    wake_ups.push(now + POLL_INTERVAL);
                }
            }
            PodDisposition::Evict { with_volumes: true } => volume_pods.push(pod),
            PodDisposition::Evict {
                with_volumes: false,
            } => {
                pending.push(key.clone());
                step_pod(
                    input,
                    pod,
                    Vec::new(),
                    &mut actions,
                    &mut errors,
                    &mut wake_ups,
                );
            }
        }
    }

    // Pods with volumes: serial, highest priority first.
    volume_pods.sort_by(|a, b| {
        let priority = |pod: &Pod| {
            pod.spec
                .as_ref()
                .and_then(|spec| spec.priority)
                .unwrap_or(0)
        };
        priority(b)
            .cmp(&priority(a))
            .then_with(|| pod_key(a).cmp(&pod_key(b)))
    });
    for pod in &volume_pods {
        pending.push(pod_key(pod));
    }
    if !volume_queue_blocked && let Some(pod) = volume_pods.first() {
        let volume_ids = input
            .volume_ids
            .get(&pod_key(pod))
            .cloned()
            .unwrap_or_default();
        step_pod(
            input,
            pod,
            volume_ids,
            &mut actions,
            &mut errors,
            &mut wake_ups,
        );
    } else if !volume_pods.is_empty() {
        wake_ups.push(now + POLL_INTERVAL);
    }

    if !errors.is_empty() {
        return DrainPlan {
            actions,
            outcome: DrainOutcome::Failed {
                reason: errors.join("; "),
            },
        };
    }
    if pending.is_empty() {
        return DrainPlan {
            actions,
            outcome: DrainOutcome::Complete,
        };
    }
    let soonest = wake_ups
        .into_iter()
        .min()
        .unwrap_or(now + POLL_INTERVAL)
        .max(now);
    DrainPlan {
        actions,
        outcome: DrainOutcome::InProgress {
            next_check_at: soonest.min(config.deadline),
            pending,
        },
    }
}

/// Decides evict / delete / wait for one pod that still exists.
fn step_pod(
    input: &DrainInput<'_>,
    pod: &Pod,
    volume_ids: Vec<String>,
    actions: &mut Vec<DrainAction>,
    errors: &mut Vec<String>,
    wake_ups: &mut Vec<Timestamp>,
) {
    let now = input.now;
    let key = pod_key(pod);
    let uid = pod_uid(pod);
    let grace = grace_seconds(pod);
    let progress = input
        .ledger
        .pods
        .get(&key)
        .filter(|progress| progress.uid == uid);
    if let Some(progress) = progress {
        if let Some(accepted) = progress.accepted_at {
            // Evicted but still there: wait for termination.
            let limit = accepted + SignedDuration::from_secs(grace) + TERMINATION_SLACK;
            if now > limit {
                errors.push(format!(
                    "timeout expired while waiting for pod {key:?} terminating scheduled on node {}",
                    input.node_name
                ));
            } else {
                wake_ups.push(limit.min(now + POLL_INTERVAL));
            }
            return;
        }
        // A misconfigured budget failed the pass that met it ([`misconfigured_refusals`]); like
        // upstream's next `RunDrain`, the following pass asks again at once, so a budget that was
        // deleted or relaxed meanwhile lets the drain go on instead of failing it for ever.
        let misconfigured = matches!(
            progress.last_failure,
            Some(EvictionFailure::MisconfiguredPdb { .. })
        );
        if !misconfigured && let Some(last) = progress.last_attempt {
            let retry_at = last + EVICTION_RETRY_INTERVAL;
            if progress.last_failure.is_some() && now < retry_at {
                wake_ups.push(retry_at);
                return;
            }
        }
        if progress.attempts >= input.config.max_evict_retries {
            actions.push(DrainAction::Delete {
                pod: key,
                uid,
                grace_period_seconds: None,
                volume_ids,
                grace_seconds: grace,
            });
            wake_ups.push(now + POLL_INTERVAL);
            return;
        }
    }
    if input.config.max_evict_retries == 0 {
        actions.push(DrainAction::Delete {
            pod: key,
            uid,
            grace_period_seconds: None,
            volume_ids,
            grace_seconds: grace,
        });
    } else {
        actions.push(DrainAction::Evict {
            pod: key,
            uid,
            volume_ids,
            grace_seconds: grace,
        });
    }
    wake_ups.push(now + POLL_INTERVAL);
}
