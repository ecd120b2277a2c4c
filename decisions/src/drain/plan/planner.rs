//! The planner: one drain pass ([`plan_drain`]) from its inputs ([`DrainInput`]) to the actions
//! and outcome ([`DrainPlan`], [`DrainAction`], [`DrainOutcome`]), and the drain's memory between
//! passes that it reads and the shell records into ([`DrainLedger`], [`PodProgress`]): eviction
//! results, the volume re-attach wait ([`volume_progress`], [`VolumeEvent`]) and the
//! misconfigured-budget failure ([`misconfigured_refusals`]). One file because each needs the
//! other's types.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use mcm_api::duration::Duration;

use super::config::DrainConfig;
use super::pods::{PodDisposition, classify_pod, pod_key, pod_uid};
use super::timing::{
    DEFAULT_GRACE_SECONDS, EVICTION_RETRY_INTERVAL, POLL_INTERVAL, TERMINATION_SLACK,
};
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

/// Why an eviction did not go through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionFailure {
    /// 429: a PodDisruptionBudget does not allow it now.
    TooManyRequests,
    /// 429 from the named PodDisruptionBudget (`namespace/name`), which allows no disruption now;
    /// retried like [`EvictionFailure::TooManyRequests`], the name is for the machine's
    /// "why is it stuck" condition.
    BlockedByPdb {
        /// `namespace/name` of the PDB.
        pdb: String,
    },
    /// 429 with a misconfigured PDB (requires zero voluntary evictions): fails the drain.
    MisconfiguredPdb {
        /// `namespace/name` of the PDB.
        pdb: String,
    },
    /// Any other error.
    Other(String),
}

/// Result of an eviction or deletion the shell executed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionResult {
    /// Accepted (the pod is terminating).
    Accepted,
    /// The pod no longer exists.
    NotFound,
    /// Refused.
    Failed(EvictionFailure),
}

/// What the drain remembers about one pod between passes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodProgress {
    /// UID of the pod the entry is about (a recreated pod with the same name starts afresh).
    pub uid: String,
    /// Eviction attempts so far.
    pub attempts: u32,
    /// Time of the last attempt.
    pub last_attempt: Option<Timestamp>,
    /// When the eviction/deletion was accepted.
    pub accepted_at: Option<Timestamp>,
    /// Last refusal.
    pub last_failure: Option<EvictionFailure>,
    /// Volume IDs to wait for (pods with volumes).
    pub volume_ids: Vec<String>,
    /// Termination grace period of the pod (seconds).
    pub grace_seconds: i64,
    /// Until when the drain waits for the detached volumes to be attached to another node
    /// (`--machine-pv-reattach-timeout` after the detach was seen).
    pub reattach_deadline: Option<Timestamp>,
    /// The re-attach wait is over (attached elsewhere, or timed out).
    pub reattach_settled: bool,
}

/// Per-node drain memory, kept by the shell between passes (in memory: after a restart the
/// accounting restarts, which only adds retries).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainLedger {
    /// By pod key.
    pub pods: BTreeMap<String, PodProgress>,
}

impl DrainLedger {
    /// Records the result of an action on a pod.
    pub fn record(&mut self, action: &DrainAction, result: &EvictionResult, now: Timestamp) {
        let (key, uid, volume_ids, grace_seconds, counts) = match action {
            DrainAction::Evict {
                pod,
                uid,
                volume_ids,
                grace_seconds,
            } => (pod, uid, volume_ids, *grace_seconds, true),
            DrainAction::Delete {
                pod,
                uid,
                volume_ids,
                grace_seconds,
                ..
            } => (pod, uid, volume_ids, *grace_seconds, false),
        };
        let entry = self.pods.entry(key.clone()).or_default();
        if entry.uid != *uid {
            *entry = PodProgress {
                uid: uid.clone(),
                ..PodProgress::default()
            };
        }
        if counts {
            entry.attempts += 1;
        }
        entry.last_attempt = Some(now);
        entry.volume_ids.clone_from(volume_ids);
        entry.grace_seconds = grace_seconds;
        match result {
            EvictionResult::Accepted | EvictionResult::NotFound => {
                entry.accepted_at = Some(now);
                entry.last_failure = None;
            }
            EvictionResult::Failed(failure) => {
                // Upstream fails the whole drain at a misconfigured budget and starts counting
                // afresh in the next one: such refusals never use up the evictions before the
                // fallback to deletion (which would bypass the budget).
                if matches!(failure, EvictionFailure::MisconfiguredPdb { .. }) {
                    entry.attempts = 0;
                }
                entry.last_failure = Some(failure.clone());
            }
        }
    }
}

/// A step of the wait for an evicted pod's volumes (upstream `waitForDetach` then
/// `waitForReattach`), decided by [`volume_progress`] and recorded by
/// [`DrainLedger::record_volume_event`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeEvent {
    /// The pod's volumes were seen detached from the drained node: the re-attach wait starts.
    Detached {
        /// Pod key.
        pod: String,
    },
    /// A volume of the pod is attached to another node: the wait is over.
    Reattached {
        /// Pod key.
        pod: String,
    },
    /// `--machine-pv-reattach-timeout` passed without a re-attach: upstream only logs it and the
    /// drain goes on.
    ReattachTimedOut {
        /// Pod key.
        pod: String,
    },
}

/// The re-attach wait's events for this pass. `attached_elsewhere` holds the keys of evicted pods
/// one of whose persistent volumes has a VolumeAttachment with `status.attached` on another node;
/// a zero `reattach_timeout` skips the wait.
#[must_use]
pub fn volume_progress(
    input: &DrainInput<'_>,
    reattach_timeout: Duration,
    attached_elsewhere: &BTreeSet<String>,
) -> Vec<VolumeEvent> {
    let present: BTreeMap<String, &Pod> =
        input.pods.iter().map(|pod| (pod_key(pod), pod)).collect();
    let mut events = Vec::new();
    for (key, progress) in &input.ledger.pods {
        if progress.volume_ids.is_empty()
            || progress.accepted_at.is_none()
            || progress.reattach_settled
        {
            continue;
        }
        let gone = present
            .get(key)
            .is_none_or(|pod| pod_uid(pod) != progress.uid);
        if !gone || attached(input.node, &progress.volume_ids) {
            continue;
        }
        let pod = key.clone();
        match progress.reattach_deadline {
            None if reattach_timeout.as_nanos() <= 0 => {
                events.push(VolumeEvent::ReattachTimedOut { pod });
            }
            None => events.push(VolumeEvent::Detached { pod }),
            Some(_) if attached_elsewhere.contains(key) => {
                events.push(VolumeEvent::Reattached { pod });
            }
            Some(deadline) if input.now > deadline => {
                events.push(VolumeEvent::ReattachTimedOut { pod });
            }
            Some(_) => {}
        }
    }
    events
}

impl DrainLedger {
    /// Records a step of the re-attach wait decided by [`volume_progress`].
    pub fn record_volume_event(
        &mut self,
        event: &VolumeEvent,
        reattach_timeout: Duration,
        now: Timestamp,
    ) {
        let (VolumeEvent::Detached { pod }
        | VolumeEvent::Reattached { pod }
        | VolumeEvent::ReattachTimedOut { pod }) = event;
        let Some(entry) = self.pods.get_mut(pod) else {
            return;
        };
        match event {
            VolumeEvent::Detached { .. } => {
                entry.reattach_deadline = Some(add(now, reattach_timeout));
            }
            VolumeEvent::Reattached { .. } | VolumeEvent::ReattachTimedOut { .. } => {
                entry.reattach_settled = true;
            }
        }
    }
}

/// The drain failure of a pass whose evictions met a misconfigured budget (upstream fails
/// `RunDrain` at once: «pod disruption budget … is misconfigured and requires zero voluntary
/// evictions»); `None` when no eviction of this pass was refused that way.
#[must_use]
pub fn misconfigured_refusals(
    actions: &[DrainAction],
    results: &[EvictionResult],
) -> Option<String> {
    let errors: Vec<String> = actions
        .iter()
        .zip(results)
        .filter_map(|(action, result)| match (action, result) {
            (
                DrainAction::Evict { pod, .. },
                EvictionResult::Failed(EvictionFailure::MisconfiguredPdb { pdb }),
            ) => Some(format!(
                "error while evicting pod {pod:?}: pod disruption budget {pdb} is misconfigured and requires zero voluntary evictions"
            )),
            _ => None,
        })
        .collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}
