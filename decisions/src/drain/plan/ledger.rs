//! The drain's memory between passes ([`DrainLedger`], [`PodProgress`]): eviction results, the
//! volume re-attach wait ([`volume_progress`], [`VolumeEvent`]) and the misconfigured-budget
//! failure ([`misconfigured_refusals`]).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use mcm_api::duration::Duration;

use super::planner::{DrainAction, DrainInput, attached};
use super::pods::{pod_key, pod_uid};
use crate::vocabulary::add;

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
