//! MachineDeployment status and conditions (docs/behaviour.md#pause-and-progress progress/pause, docs/behaviour.md#deployment-status status).

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::keys::deployment_reason as reason;
use mcm_api::v1alpha1::{
    ConditionStatus, MachineDeployment, MachineDeploymentCondition,
    MachineDeploymentConditionType as CondType, MachineDeploymentStatus, MachineSet,
    MachineSetConditionType,
};

use super::fencepost::replicas;
use super::types::DeploymentAction;
use super::work::Work;
use crate::machine_set::semantic_equality;
use crate::vocabulary::{Retry, go_duration};

/// A condition stamped with `now` for both times.
#[must_use]
pub fn new_condition(
    type_: CondType,
    status: ConditionStatus,
    reason: &str,
    message: String,
    now: Timestamp,
) -> MachineDeploymentCondition {
    MachineDeploymentCondition {
        type_,
        status,
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
        reason: Some(reason.to_owned()),
        message: Some(message),
    }
}

/// The condition of `type_`, if any.
#[must_use]
pub fn condition<'a>(
    conditions: Option<&'a Vec<MachineDeploymentCondition>>,
    type_: &CondType,
) -> Option<&'a MachineDeploymentCondition> {
    conditions?.iter().find(|c| &c.type_ == type_)
}

/// Upstream `SetMachineDeploymentCondition`: no-op when status and reason are unchanged; keeps
/// the transition time when only the reason changes; replaces the condition of the same type.
pub fn set_condition(
    conditions: &mut Vec<MachineDeploymentCondition>,
    mut new: MachineDeploymentCondition,
) {
    if let Some(current) = conditions.iter().find(|c| c.type_ == new.type_) {
        if current.status == new.status && current.reason == new.reason {
            return;
        }
        if current.status == new.status {
            new.last_transition_time
                .clone_from(&current.last_transition_time);
        }
    }
    conditions.retain(|c| c.type_ != new.type_);
    conditions.push(new);
}

/// Removes the condition of `type_`.
pub fn remove_condition(conditions: &mut Vec<MachineDeploymentCondition>, type_: &CondType) {
    conditions.retain(|c| &c.type_ != type_);
}

fn sum(sets: &[&MachineSet], f: impl Fn(&MachineSet) -> Option<i32>) -> i32 {
    sets.iter()
        .map(|s| f(s).unwrap_or(0))
        .fold(0i32, i32::saturating_add)
}

/// `calculateDeploymentStatus` (docs/behaviour.md#deployment-status). `max_unavailable` is `MaxUnavailable(md)`.
#[must_use]
pub fn calculate_status(
    md: &MachineDeployment,
    all: &[&MachineSet],
    new: Option<&MachineSet>,
    max_unavailable: i32,
    now: Timestamp,
) -> MachineDeploymentStatus {
    let old = md.status.clone().unwrap_or_default();
    let st = |s: &MachineSet| s.status.clone().unwrap_or_default();
    let available = sum(all, |s| st(s).available_replicas);
    let preserved_failed = sum(all, |s| st(s).preserved_failed_replicas);
    let spec_total = sum(all, |s| s.spec.replicas);
    let failed: Vec<_> = all
        .iter()
        .flat_map(|s| st(s).failed_machines.unwrap_or_default())
        .collect();
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let min_required = (replicas(md) - max_unavailable - preserved_failed).max(0);
    let available_condition = if available >= min_required {
        new_condition(
            CondType::Available,
            ConditionStatus::True,
            reason::MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        new_condition(
            CondType::Available,
            ConditionStatus::False,
            reason::MINIMUM_REPLICAS_UNAVAILABLE,
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    set_condition(&mut conditions, available_condition);
    MachineDeploymentStatus {
        observed_generation: md.metadata.generation,
        replicas: Some(sum(all, |s| st(s).replicas)),
        updated_replicas: Some(new.and_then(|s| st(s).replicas).unwrap_or(0)),
        ready_replicas: Some(sum(all, |s| st(s).ready_replicas)),
        available_replicas: Some(available),
        preserved_failed_replicas: Some(preserved_failed),
        unavailable_replicas: Some((spec_total - available).max(0)),
        conditions: (!conditions.is_empty()).then_some(conditions),
        collision_count: old.collision_count,
        failed_machines: (!failed.is_empty()).then_some(failed),
    }
}

/// `MachineDeploymentComplete`: every replica updated and available, generation observed.
#[must_use]
pub fn deployment_complete(md: &MachineDeployment, status: &MachineDeploymentStatus) -> bool {
    let r = replicas(md);
    status.updated_replicas.unwrap_or(0) == r
        && status.replicas.unwrap_or(0) == r
        && status.available_replicas.unwrap_or(0) == r
        && status.observed_generation.unwrap_or(0) >= md.metadata.generation.unwrap_or(0)
}

/// `MachineDeploymentProgressing`: some counter moved the right way since the stored status.
#[must_use]
pub fn deployment_progressing(md: &MachineDeployment, new: &MachineDeploymentStatus) -> bool {
    let old = md.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_stale = n(old.replicas) - n(old.updated_replicas);
    let new_stale = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_stale < old_stale
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

/// `MachineDeploymentTimedOut`.
#[must_use]
pub fn deployment_timed_out(
    md: &MachineDeployment,
    status: &MachineDeploymentStatus,
    now: Timestamp,
) -> bool {
    let Some(deadline) = md.spec.progress_deadline_seconds else {
        return false;
    };
    let Some(cond) = condition(status.conditions.as_ref(), &CondType::Progressing) else {
        return false;
    };
    match cond.reason.as_deref() {
        Some(reason::NEW_MACHINE_SET_AVAILABLE) => false,
        Some(reason::PROGRESS_DEADLINE_EXCEEDED) => true,
        _ => cond.last_update_time.as_ref().is_some_and(|t| {
            t.0.saturating_add(SignedDuration::from_secs(i64::from(deadline)))
                .is_ok_and(|end| end < now)
        }),
    }
}

/// `statusUpdateRequired`.
#[must_use]
pub fn status_update_required(
    old: &MachineDeploymentStatus,
    new: &MachineDeploymentStatus,
) -> bool {
    let n = |v: Option<i32>| v.unwrap_or(0);
    let failed_key = |s: &MachineDeploymentStatus| {
        s.failed_machines
            .iter()
            .flatten()
            .map(|f| {
                (
                    f.name.clone(),
                    f.last_operation
                        .as_ref()
                        .and_then(|l| l.description.clone()),
                )
            })
            .collect::<Vec<_>>()
    };
    n(old.available_replicas) != n(new.available_replicas)
        || old.collision_count != new.collision_count
        || failed_key(old) != failed_key(new)
        || old.observed_generation != new.observed_generation
        || n(old.ready_replicas) != n(new.ready_replicas)
        || n(old.replicas) != n(new.replicas)
        || n(old.updated_replicas) != n(new.updated_replicas)
        || n(old.unavailable_replicas) != n(new.unavailable_replicas)
        || old.conditions.clone().unwrap_or_default() != new.conditions.clone().unwrap_or_default()
}

/// Result of [`rollout_status`].
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutStatus {
    /// The status to write.
    pub status: MachineDeploymentStatus,
    /// Whether it differs from the stored one.
    pub update_required: bool,
    /// When to come back for the progress deadline (only when nothing is written).
    pub progress_check: ProgressCheck,
}

/// When a deployment whose status is not written comes back to check its progress deadline
/// (upstream `requeueStuckMachineDeployment`'s result: -1, 0 or the time left).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressCheck {
    /// No check: no deadline, no Progressing condition, complete, or already timed out.
    NotNeeded,
    /// The deadline passes within a second or has passed: now, rate-limited.
    Now,
    /// The time left before the deadline (at least a second); the check comes a second later.
    After(SignedDuration),
}

impl ProgressCheck {
    /// The requeue it asks for. `Now` is [`Retry::Immediate`], which the shell's rate limit
    /// (its soonest requeue) spaces out as upstream's rate-limited queue does; `After` adds the
    /// second upstream adds against timer skew.
    #[must_use]
    pub fn retry(self) -> Option<Retry> {
        match self {
            ProgressCheck::NotNeeded => None,
            ProgressCheck::Now => Some(Retry::Immediate),
            ProgressCheck::After(left) => Some(Retry::After(go_duration(
                left.saturating_add(SignedDuration::from_secs(1)),
            ))),
        }
    }
}

/// `requeueStuckMachineDeployment` (docs/behaviour.md#pause-and-progress): the stored status's
/// Progressing condition and the new status decide when to look at the deadline again.
#[must_use]
pub fn progress_check(
    md: &MachineDeployment,
    new_status: &MachineDeploymentStatus,
    now: Timestamp,
) -> ProgressCheck {
    let current = condition(
        md.status.as_ref().and_then(|s| s.conditions.as_ref()),
        &CondType::Progressing,
    );
    let (Some(deadline), Some(current)) = (md.spec.progress_deadline_seconds, current) else {
        return ProgressCheck::NotNeeded;
    };
    if deployment_complete(md, new_status)
        || current.reason.as_deref() == Some(reason::PROGRESS_DEADLINE_EXCEEDED)
    {
        return ProgressCheck::NotNeeded;
    }
    // A condition without lastUpdateTime is Go's zero time, long past.
    let Some(last) = current.last_update_time.as_ref() else {
        return ProgressCheck::Now;
    };
    let left = last
        .0
        .duration_since(now)
        .saturating_add(SignedDuration::from_secs(i64::from(deadline)));
    if left < SignedDuration::from_secs(1) {
        ProgressCheck::Now
    } else {
        ProgressCheck::After(left)
    }
}

/// `syncRolloutStatus` (docs/behaviour.md#pause-and-progress): status, Progressing and ReplicaFailure conditions, deadline check.
#[must_use]
pub fn rollout_status(
    md: &MachineDeployment,
    all: &[&MachineSet],
    new: Option<&MachineSet>,
    max_unavailable: i32,
    now: Timestamp,
) -> RolloutStatus {
    let mut status = calculate_status(md, all, new, max_unavailable, now);
    let mut conditions = status.conditions.clone().unwrap_or_default();
    let current = condition(
        md.status.as_ref().and_then(|s| s.conditions.as_ref()),
        &CondType::Progressing,
    )
    .cloned();
    let settled = status.replicas == status.updated_replicas
        && current.as_ref().and_then(|c| c.reason.as_deref())
            == Some(reason::NEW_MACHINE_SET_AVAILABLE);
    if !settled {
        let md_name = md.metadata.name.clone().unwrap_or_default();
        if deployment_complete(md, &status) {
            let message = match new.and_then(|s| s.metadata.name.as_deref()) {
                Some(ms) => format!("MachineSet {ms:?} has successfully progressed."),
                None => format!("Machine Deployment {md_name:?} has successfully progressed."),
            };
            set_condition(
                &mut conditions,
                new_condition(
                    CondType::Progressing,
                    ConditionStatus::True,
                    reason::NEW_MACHINE_SET_AVAILABLE,
                    message,
                    now,
                ),
            );
        } else if deployment_progressing(md, &status) {
            let ms = new
                .and_then(|s| s.metadata.name.clone())
                .unwrap_or_default();
            let mut cond = new_condition(
                CondType::Progressing,
                ConditionStatus::True,
                reason::MACHINE_SET_UPDATED,
                format!("MachineSet {ms:?} is progressing."),
                now,
            );
            if let Some(c) = current
                .as_ref()
                .filter(|c| c.status == ConditionStatus::True)
            {
                cond.last_transition_time
                    .clone_from(&c.last_transition_time);
            }
            // Replaced (not set) so that lastUpdateTime moves: it is what the deadline measures.
            remove_condition(&mut conditions, &CondType::Progressing);
            conditions.push(cond);
        } else if deployment_timed_out(md, &status, now) {
            let ms = new
                .and_then(|s| s.metadata.name.clone())
                .unwrap_or_default();
            set_condition(
                &mut conditions,
                new_condition(
                    CondType::Progressing,
                    ConditionStatus::False,
                    reason::PROGRESS_DEADLINE_EXCEEDED,
                    format!("MachineSet {ms:?} has timed out progressing."),
                    now,
                ),
            );
        }
    }
    // ReplicaFailure mirrors the new MachineSet's, else the first MachineSet's that has one.
    let failure = |s: &MachineSet| {
        s.status
            .as_ref()
            .and_then(|st| st.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == MachineSetConditionType::ReplicaFailure)
            })
            .cloned()
    };
    let ms_failure = new
        .and_then(failure)
        .or_else(|| all.iter().find_map(|s| failure(s)));
    match ms_failure {
        Some(c) => set_condition(
            &mut conditions,
            MachineDeploymentCondition {
                type_: CondType::ReplicaFailure,
                status: c.status,
                last_update_time: c.last_transition_time.clone(),
                last_transition_time: c.last_transition_time,
                reason: c.reason,
                message: c.message,
            },
        ),
        None => remove_condition(&mut conditions, &CondType::ReplicaFailure),
    }
    status.conditions = (!conditions.is_empty()).then_some(conditions);
    let old = md.status.clone().unwrap_or_default();
    let update_required = status_update_required(&old, &status);
    let progress_check = if update_required {
        ProgressCheck::NotNeeded
    } else {
        progress_check(md, &status, now)
    };
    RolloutStatus {
        status,
        update_required,
        progress_check,
    }
}

/// `checkPausedConditions` (docs/behaviour.md#pause-and-progress): the conditions to write, if they change.
#[must_use]
pub fn paused_conditions(
    md: &MachineDeployment,
    now: Timestamp,
) -> Option<Vec<MachineDeploymentCondition>> {
    let mut conditions = md
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let progressing = condition(Some(&conditions), &CondType::Progressing).cloned();
    let reason_is = |r: &str| {
        progressing
            .as_ref()
            .is_some_and(|c| c.reason.as_deref() == Some(r))
    };
    if reason_is(reason::PROGRESS_DEADLINE_EXCEEDED) {
        return None;
    }
    let paused = md.spec.paused.unwrap_or(false);
    if paused && !reason_is(reason::DEPLOYMENT_PAUSED) {
        set_condition(
            &mut conditions,
            new_condition(
                CondType::Progressing,
                ConditionStatus::Unknown,
                reason::DEPLOYMENT_PAUSED,
                "Deployment is paused".into(),
                now,
            ),
        );
        return Some(conditions);
    }
    if !paused && reason_is(reason::DEPLOYMENT_PAUSED) {
        set_condition(
            &mut conditions,
            new_condition(
                CondType::Progressing,
                ConditionStatus::Unknown,
                reason::DEPLOYMENT_RESUMED,
                "Deployment is resumed".into(),
                now,
            ),
        );
        return Some(conditions);
    }
    None
}

impl Work<'_> {
    /// `syncMachineDeploymentStatus` (scaling path): plain status, written when different.
    pub(super) fn sync_status(&mut self) {
        let new = self.new.map(|n| self.sets[n].clone());
        let all = self.all_refs();
        let st = calculate_status(
            &self.md,
            &all,
            new.as_ref(),
            self.max_unavailable,
            self.now(),
        );
        if !semantic_equality::equal(&Some(st.clone()), &Some(self.original_status.clone())) {
            self.actions
                .push(DeploymentAction::UpdateDeploymentStatus(Box::new(st)));
        }
    }
}

#[cfg(test)]
mod tests;
