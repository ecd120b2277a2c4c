//! The new MachineSet (upstream `getAllMachineSetsAndSyncRevision`, `getNewMachineSet`,
//! `NewISNewReplicas`): find it and sync its revision, or create it under a name no other
//! MachineSet holds, and what to do when that creation fails.

use jiff::Timestamp;
use mcm_api::keys::{annotation, deployment_reason};
use mcm_api::v1alpha1::{
    ConditionStatus, MachineDeployment, MachineDeploymentConditionType as CondType,
    MachineDeploymentStatus, MachineDeploymentStrategyType as Strategy, MachineSet,
};

use super::fencepost::{self, replicas};
use super::revision;
use super::status;
use super::types::{DeploymentAction, ann, md_name};
use super::work::Work;
use crate::machine_set::claim;
use crate::vocabulary::Event;

/// Progressing reason when the controller created the new MachineSet (not in `mcm_api::keys`).
pub const REASON_NEW_MACHINE_SET_CREATED: &str = "NewMachineSetCreated";

/// What to do when creating the new MachineSet failed with `AlreadyExists`.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateConflict {
    /// The existing MachineSet is ours and equal: use it (nothing to do, next pass finds it).
    UseExisting,
    /// A foreign or different MachineSet holds the name: write this status (collision count + 1).
    BumpCollisionCount(Box<MachineDeploymentStatus>),
}

/// Decision on `AlreadyExists` for the new MachineSet (docs/behaviour.md#revisions step 4).
#[must_use]
pub fn create_conflict(md: &MachineDeployment, existing: &MachineSet) -> CreateConflict {
    let ours = claim::controller_ref(&existing.metadata)
        .is_some_and(|r| Some(&r.uid) == md.metadata.uid.as_ref());
    let equal = existing
        .spec
        .template
        .as_ref()
        .is_some_and(|t| revision::equal_ignore_hash(t, &md.spec.template));
    if ours && equal {
        return CreateConflict::UseExisting;
    }
    let mut st = md.status.clone().unwrap_or_default();
    st.collision_count = Some(st.collision_count.unwrap_or(0).saturating_add(1));
    CreateConflict::BumpCollisionCount(Box::new(st))
}

/// Progressing reason when creating the new MachineSet failed (not in `mcm_api::keys`).
pub const REASON_MACHINE_SET_CREATE_ERROR: &str = "MachineSetCreateError";

/// Status and Warning event to write when creating the new MachineSet failed with an error other
/// than `AlreadyExists` or a terminating namespace (docs/behaviour.md#revisions step 4).
#[must_use]
pub fn create_failure(
    md: &MachineDeployment,
    machine_set: &str,
    error: &str,
    now: Timestamp,
) -> (MachineDeploymentStatus, Event) {
    let message = format!("Failed to create new machine set {machine_set:?}: {error}");
    let mut st = md.status.clone().unwrap_or_default();
    status::set_condition(
        st.conditions.get_or_insert_with(Vec::new),
        status::new_condition(
            CondType::Progressing,
            ConditionStatus::False,
            REASON_MACHINE_SET_CREATE_ERROR,
            message.clone(),
            now,
        ),
    );
    (st, Event::warning(REASON_MACHINE_SET_CREATE_ERROR, message))
}

/// `NewISNewReplicas` (docs/behaviour.md#revisions): target size of the new MachineSet. RollingUpdate (and automatic
/// InPlaceUpdate, with its own maxSurge) grows it up to `replicas + maxSurge` counting
/// `existing_total`: every machine of every set that exists or is about to (upstream counts
/// `status.replicas`; we take per set the larger of spec, status and the machines seen), never
/// beyond `replicas`; manual InPlaceUpdate gives 0 (its new set only grows by machines handed
/// over after their update, upstream returns 0 whatever the set holds); Recreate uses `replicas`.
#[must_use]
pub fn new_machine_set_replicas(
    md: &MachineDeployment,
    existing_total: i32,
    new_spec: i32,
    max_surge: i32,
) -> i32 {
    match md.spec.strategy.as_ref().and_then(|s| s.type_.as_ref()) {
        Some(Strategy::InPlaceUpdate)
            if md
                .spec
                .strategy
                .as_ref()
                .and_then(|s| s.in_place_update.as_ref())
                .and_then(|i| i.orchestration_type.as_ref())
                == Some(&mcm_api::v1alpha1::OrchestrationType::Manual) =>
        {
            0
        }
        Some(Strategy::RollingUpdate | Strategy::InPlaceUpdate) => {
            let max_total = replicas(md) + max_surge;
            if existing_total >= max_total {
                return new_spec;
            }
            new_spec + (max_total - existing_total).min(replicas(md) - new_spec)
        }
        _ => replicas(md),
    }
}

impl Work<'_> {
    /// `getAllMachineSetsAndSyncRevision` (docs/behaviour.md#revisions).
    pub(super) fn sync_revision(&mut self, create: bool) {
        let olds_max = {
            let olds: Vec<&MachineSet> = self
                .sets
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != self.new)
                .map(|(_, s)| s)
                .collect();
            revision::max_revision(olds)
        };
        let new_revision = olds_max + 1;
        if let Some(i) = self.new {
            if let Some(updated) =
                revision::sync_new_machine_set(&self.md, &self.sets[i], new_revision)
            {
                self.sets[i] = updated;
                self.mark_dirty(i);
                return;
            }
            let ms_revision = ann(&self.sets[i].metadata, annotation::REVISION)
                .unwrap_or("")
                .to_owned();
            let mut a = self.md.metadata.annotations.clone().unwrap_or_default();
            if a.get(annotation::REVISION) != Some(&ms_revision) {
                a.insert(annotation::REVISION.to_owned(), ms_revision);
                self.set_md_annotations(a);
            }
            let has_progressing = status::condition(
                self.md.status.as_ref().and_then(|s| s.conditions.as_ref()),
                &CondType::Progressing,
            )
            .is_some();
            if !has_progressing {
                let name = self.set_name(i);
                let now = self.now();
                status::set_condition(
                    self.conditions_mut(),
                    status::new_condition(
                        CondType::Progressing,
                        ConditionStatus::True,
                        deployment_reason::FOUND_NEW_MACHINE_SET,
                        format!("Found new machine set {name:?}"),
                        now,
                    ),
                );
            }
            return;
        }
        if !create {
            return;
        }
        // Pick a name not used by another MachineSet of the namespace, bumping the collision
        // count as upstream does one pass at a time.
        let mut collision = self.md.status.as_ref().and_then(|s| s.collision_count);
        let md_name = md_name(&self.md);
        let namespace = self.md.metadata.namespace.clone();
        let mut hash = revision::template_hash(&self.md.spec.template, collision);
        for _ in 0..100 {
            let name = revision::machine_set_name(&md_name, &hash);
            let taken = self.input.machine_sets.iter().any(|s| {
                s.metadata.namespace == namespace && s.metadata.name.as_deref() == Some(&name)
            });
            if !taken {
                break;
            }
            collision = Some(collision.unwrap_or(0).saturating_add(1));
            hash = revision::template_hash(&self.md.spec.template, collision);
        }
        if collision != self.md.status.as_ref().and_then(|s| s.collision_count) {
            self.md
                .status
                .get_or_insert_with(Default::default)
                .collision_count = collision;
        }
        let surge = if self
            .md
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.type_.as_ref())
            == Some(&Strategy::InPlaceUpdate)
        {
            fencepost::in_place_surge(&self.md)
        } else {
            self.max_surge
        };
        let size = new_machine_set_replicas(&self.md, self.existing_total(), 0, surge);
        let mut ms = revision::new_machine_set(&self.md, &hash, new_revision, size, self.max_surge);
        ms.metadata.creation_timestamp = None;
        let name = ms.metadata.name.clone().unwrap_or_default();
        self.sets.push(ms);
        let i = self.sets.len() - 1;
        self.created = Some(i);
        self.new = Some(i);
        self.actions
            .push(DeploymentAction::CreateMachineSet(Box::new(
                self.sets[i].clone(),
            )));
        if size > 0 {
            self.event(Event::normal(
                "ScalingMachineSet",
                format!("Scaled up machine set {name} to {size}"),
            ));
        }
        let mut a = self.md.metadata.annotations.clone().unwrap_or_default();
        if a.get(annotation::REVISION) != Some(&new_revision.to_string()) {
            a.insert(annotation::REVISION.to_owned(), new_revision.to_string());
            self.set_md_annotations(a);
        }
        let now = self.now();
        status::set_condition(
            self.conditions_mut(),
            status::new_condition(
                CondType::Progressing,
                ConditionStatus::True,
                REASON_NEW_MACHINE_SET_CREATED,
                format!("Created new machine set {name:?}"),
                now,
            ),
        );
    }
}

#[cfg(test)]
mod tests;
