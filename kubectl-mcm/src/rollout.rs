//! Pure rollout logic: the verdict of `rollout status` for one observed MachineDeployment, the
//! progress line and bar, the revision history table, and the plans of `undo`, `restart`,
//! `pause` and `resume` (which merge patch to send, or why not). No I/O; time is a parameter.

use std::collections::BTreeMap;

use mcm_api::keys::{annotation, deployment_reason, label, value};
use mcm_api::v1alpha1::{
    ConditionStatus, MachineDeployment, MachineDeploymentConditionType, MachineSet,
};
use serde_json::{Value, json};

use crate::keys::{CHANGE_CAUSE, RESTARTED_AT};

/// What `rollout status` needs from a MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Object name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// `spec.replicas`.
    pub desired: i32,
    /// `status.replicas`: every machine of every MachineSet.
    pub replicas: i32,
    /// `status.updatedReplicas`: machines of the new MachineSet.
    pub updated: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// `spec.paused`.
    pub paused: bool,
    /// Label `freeze=True` or a `Frozen=True` condition.
    pub frozen: bool,
    /// The `Progressing` condition's reason and message, when it says the deadline passed.
    pub deadline_exceeded: Option<String>,
}

impl Progress {
    /// Reads the fields from a MachineDeployment (absent numbers are 0, as upstream).
    #[must_use]
    pub fn of(md: &MachineDeployment) -> Self {
        let status = md.status.clone().unwrap_or_default();
        let conditions = status.conditions.clone().unwrap_or_default();
        let frozen_label = md
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label::FREEZE))
            .is_some_and(|v| v == value::TRUE_CAPITALISED);
        let frozen_condition = conditions.iter().any(|c| {
            c.type_ == MachineDeploymentConditionType::Frozen && c.status == ConditionStatus::True
        });
        let deadline_exceeded = conditions
            .iter()
            .find(|c| {
                c.type_ == MachineDeploymentConditionType::Progressing
                    && c.reason.as_deref() == Some(deployment_reason::PROGRESS_DEADLINE_EXCEEDED)
            })
            .map(|c| c.message.clone().unwrap_or_default());
        Self {
            name: md.metadata.name.clone().unwrap_or_default(),
            generation: md.metadata.generation.unwrap_or(0),
            observed_generation: status.observed_generation.unwrap_or(0),
            desired: md.desired_replicas(),
            replicas: status.replicas.unwrap_or(0),
            updated: status.updated_replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            paused: md.spec.paused.unwrap_or(false),
            frozen: frozen_label || frozen_condition,
            deadline_exceeded,
        }
    }

    /// Machines of old MachineSets still present.
    #[must_use]
    pub fn old_left(&self) -> i32 {
        (self.replicas - self.updated).max(0)
    }

    /// One plain line: `updated 1/2, ready 2/2, available 2/2, old machines left 1`. A count
    /// above the desired one (surge machines during a rollout, machines still draining after a
    /// scale-down) is shown as `2/2 (+1 extra)`, never as `3/2`.
    #[must_use]
    pub fn line(&self) -> String {
        let d = self.desired;
        let of = |n: i32| {
            if n > d {
                format!("{d}/{d} (+{} extra)", n - d)
            } else {
                format!("{n}/{d}")
            }
        };
        format!(
            "updated {}, ready {}, available {}, old machines left {}",
            of(self.updated),
            of(self.ready),
            of(self.available),
            self.old_left()
        )
    }

    /// A bar of `width` cells: `#` for available updated machines, `+` for updated machines not
    /// available yet, `.` for the rest of the desired count.
    #[must_use]
    pub fn bar(&self, width: usize) -> String {
        let desired = self.desired.max(0) as usize;
        if desired == 0 {
            return format!("[{}]", "#".repeat(width));
        }
        let updated = (self.updated.clamp(0, self.desired) as usize) * width / desired;
        let done =
            (self.available.min(self.updated).clamp(0, self.desired) as usize) * width / desired;
        format!(
            "[{}{}{}]",
            "#".repeat(done),
            "+".repeat(updated - done),
            ".".repeat(width - updated)
        )
    }
}

/// The verdict of one look at a MachineDeployment, as `kubectl rollout status` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Rolled out: exit 0 with this message.
    Complete(String),
    /// Not yet: print this and look again.
    Waiting(String),
    /// The progress deadline passed: exit 3 with this message.
    DeadlineExceeded(String),
    /// Frozen by the safety controller: exit 4 with this message.
    Frozen(String),
}

/// Decides what a rollout looks like now (kubectl's Deployment status viewer, in machine words,
/// plus MCM's freeze).
#[must_use]
pub fn verdict(p: &Progress) -> Verdict {
    let name = &p.name;
    if p.frozen {
        return Verdict::Frozen(format!(
            "machinedeployment {name:?} is frozen by the safety controller (label freeze=True): \
             it will not progress until it is unfrozen"
        ));
    }
    if p.observed_generation < p.generation {
        return Verdict::Waiting(
            "Waiting for machinedeployment spec update to be observed...".to_owned(),
        );
    }
    if let Some(message) = &p.deadline_exceeded {
        return Verdict::DeadlineExceeded(format!(
            "machinedeployment {name:?} exceeded its progress deadline ({})",
            if message.is_empty() {
                deployment_reason::PROGRESS_DEADLINE_EXCEEDED
            } else {
                message
            }
        ));
    }
    let paused = if p.paused {
        " (the machinedeployment is paused: resume it with `kubectl mcm rollout resume`)"
    } else {
        ""
    };
    if p.updated < p.desired {
        return Verdict::Waiting(format!(
            "Waiting for machinedeployment {name:?} rollout to finish: {} out of {} new machines have been updated...{paused}",
            p.updated, p.desired
        ));
    }
    if p.replicas > p.updated {
        return Verdict::Waiting(format!(
            "Waiting for machinedeployment {name:?} rollout to finish: {} old machines are pending termination...{paused}",
            p.replicas - p.updated
        ));
    }
    if p.available < p.updated {
        return Verdict::Waiting(format!(
            "Waiting for machinedeployment {name:?} rollout to finish: {} of {} updated machines are available...{paused}",
            p.available, p.updated
        ));
    }
    Verdict::Complete(format!(
        "machinedeployment {name:?} successfully rolled out"
    ))
}

/// One revision of a MachineDeployment: one of its MachineSets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revision {
    /// `deployment.kubernetes.io/revision` of the MachineSet (unparsable or absent: 0).
    pub number: i64,
    /// The MachineSet.
    pub machine_set: String,
    /// `spec.template.spec.class.name`.
    pub machine_class: String,
    /// `spec.replicas` of the MachineSet.
    pub machines: i32,
    /// `kubernetes.io/change-cause`, if recorded.
    pub change_cause: Option<String>,
}

/// Whether `set` is controlled by `md` (controller owner reference with its UID).
#[must_use]
pub fn owned_by(set: &MachineSet, md: &MachineDeployment) -> bool {
    let Some(uid) = md.metadata.uid.as_deref() else {
        return false;
    };
    set.metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The revisions of `md` from all MachineSets of its namespace, oldest first.
#[must_use]
pub fn history(md: &MachineDeployment, sets: &[MachineSet]) -> Vec<Revision> {
    let mut revisions: Vec<Revision> = sets
        .iter()
        .filter(|s| owned_by(s, md))
        .map(|s| {
            let annotations = s.metadata.annotations.clone().unwrap_or_default();
            Revision {
                number: annotations
                    .get(annotation::REVISION)
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0),
                machine_set: s.metadata.name.clone().unwrap_or_default(),
                machine_class: s
                    .spec
                    .template
                    .as_ref()
                    .and_then(|t| t.spec.as_ref())
                    .and_then(|spec| spec.class.as_ref())
                    .and_then(|class| class.name.clone())
                    .unwrap_or_default(),
                machines: s.spec.replicas.unwrap_or(0),
                change_cause: annotations.get(CHANGE_CAUSE).cloned(),
            }
        })
        .collect();
    revisions.sort_by(|a, b| {
        a.number
            .cmp(&b.number)
            .then(a.machine_set.cmp(&b.machine_set))
    });
    revisions
}

/// The `rollout history` table.
#[must_use]
pub fn render_history(name: &str, revisions: &[Revision]) -> String {
    let rows: Vec<Vec<String>> = revisions
        .iter()
        .map(|r| {
            vec![
                r.number.to_string(),
                r.machine_set.clone(),
                r.machine_class.clone(),
                r.machines.to_string(),
                r.change_cause
                    .clone()
                    .unwrap_or_else(|| "<none>".to_owned()),
            ]
        })
        .collect();
    format!(
        "machinedeployment.machine.sapcloud.io/{name}\n{}",
        crate::table::render(
            &[
                "REVISION",
                "MACHINESET",
                "MACHINECLASS",
                "MACHINES",
                "CHANGE-CAUSE"
            ],
            &rows
        )
    )
}

/// What `rollout undo` does.
#[derive(Clone, Debug, PartialEq)]
pub enum UndoPlan {
    /// Send this merge patch (sets `spec.rollbackTo.revision`, which the MachineDeployment
    /// controller executes and clears) and report the target revision.
    Patch {
        /// The revision rolled back to.
        revision: i64,
        /// The merge patch.
        patch: Value,
    },
    /// Nothing to do, with kubectl's message.
    Skip(String),
}

/// Plans `rollout undo [--to-revision N]`: N = 0 or absent means the revision before the current
/// one. Refuses paused deployments (the controller ignores `rollbackTo` while paused) and unknown
/// revisions.
///
/// # Errors
/// A message for the user when the rollback cannot be done.
pub fn plan_undo(
    md: &MachineDeployment,
    revisions: &[Revision],
    to_revision: Option<i64>,
) -> Result<UndoPlan, String> {
    let name = md.metadata.name.as_deref().unwrap_or_default();
    if md.spec.paused.unwrap_or(false) {
        return Err(format!(
            "you cannot rollback a paused machinedeployment; resume it first with \
             'kubectl mcm rollout resume machinedeployment/{name}' and try again"
        ));
    }
    let current = revisions.iter().map(|r| r.number).max().unwrap_or(0);
    let target = match to_revision {
        Some(n) if n < 0 => return Err(format!("revision must be 0 or more, got {n}")),
        Some(n) if n > 0 => {
            if !revisions.iter().any(|r| r.number == n) {
                return Err(format!("unable to find specified revision {n} in history"));
            }
            n
        }
        _ => revisions
            .iter()
            .map(|r| r.number)
            .filter(|n| *n > 0 && *n < current)
            .max()
            .ok_or_else(|| format!("no rollout history found for machinedeployment {name:?}"))?,
    };
    if target == current {
        return Ok(UndoPlan::Skip(format!(
            "skipped rollback (current template already matches revision {target})"
        )));
    }
    Ok(UndoPlan::Patch {
        revision: target,
        patch: json!({"spec": {"rollbackTo": {"revision": target}}}),
    })
}

/// Plans `rollout restart`: a template annotation with the time, which makes a new revision.
///
/// # Errors
/// When the deployment is paused (the restart would not roll).
pub fn plan_restart(md: &MachineDeployment, now: jiff::Timestamp) -> Result<Value, String> {
    if md.spec.paused.unwrap_or(false) {
        let name = md.metadata.name.as_deref().unwrap_or_default();
        return Err(format!(
            "can't restart paused machinedeployment (run 'kubectl mcm rollout resume machinedeployment/{name}' first)"
        ));
    }
    let mut annotations = BTreeMap::new();
    annotations.insert(RESTARTED_AT, now.to_string());
    Ok(json!({"spec": {"template": {"metadata": {"annotations": annotations}}}}))
}

/// Plans `rollout pause` (`pause = true`) or `resume`.
///
/// # Errors
/// When the deployment is already in the requested state (kubectl's wording).
pub fn plan_pause(md: &MachineDeployment, pause: bool) -> Result<Value, String> {
    let paused = md.spec.paused.unwrap_or(false);
    if paused == pause {
        let name = md.metadata.name.as_deref().unwrap_or_default();
        let state = if pause { "paused" } else { "not paused" };
        return Err(format!(
            "machinedeployments.machine.sapcloud.io {name:?} is {}",
            if pause { "already paused" } else { state }
        ));
    }
    Ok(json!({"spec": {"paused": pause}}))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use mcm_api::v1alpha1::MachineDeploymentCondition;
    use proptest::prelude::*;

    fn progress(desired: i32, replicas: i32, updated: i32, available: i32) -> Progress {
        Progress {
            name: "web".to_owned(),
            generation: 2,
            observed_generation: 2,
            desired,
            replicas,
            updated,
            ready: available,
            available,
            ..Progress::default()
        }
    }

    fn md(name: &str, paused: bool) -> MachineDeployment {
        let mut md = MachineDeployment::new(name, Default::default());
        md.metadata.uid = Some(format!("uid-{name}"));
        md.spec.paused = Some(paused);
        md
    }

    fn set(name: &str, owner: &MachineDeployment, revision: &str, class: &str) -> MachineSet {
        let mut set: MachineSet = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": name, "annotations": {annotation::REVISION: revision}},
            "spec": {"replicas": 1, "template": {"spec": {"class": {"kind": "MachineClass", "name": class}}}}
        }))
        .unwrap();
        set.metadata.owner_references = Some(vec![OwnerReference {
            controller: Some(true),
            uid: owner.metadata.uid.clone().unwrap(),
            name: owner.metadata.name.clone().unwrap(),
            kind: "MachineDeployment".to_owned(),
            api_version: "machine.sapcloud.io/v1alpha1".to_owned(),
            ..Default::default()
        }]);
        set
    }

    #[test]
    fn waits_for_the_spec_to_be_observed_first() {
        let mut p = progress(2, 2, 2, 2);
        p.observed_generation = 1;
        assert!(
            matches!(verdict(&p), Verdict::Waiting(m) if m.contains("spec update to be observed"))
        );
    }

    #[test]
    fn each_rollout_stage_has_its_waiting_message() {
        let cases = [
            (
                progress(3, 3, 1, 1),
                "1 out of 3 new machines have been updated",
            ),
            (
                progress(3, 4, 3, 3),
                "1 old machines are pending termination",
            ),
            (
                progress(3, 3, 3, 2),
                "2 of 3 updated machines are available",
            ),
        ];
        for (p, expected) in cases {
            match verdict(&p) {
                Verdict::Waiting(m) => assert!(m.contains(expected), "{m}"),
                other => panic!("{p:?}: {other:?}"),
            }
        }
        assert_eq!(
            verdict(&progress(3, 3, 3, 3)),
            Verdict::Complete("machinedeployment \"web\" successfully rolled out".to_owned())
        );
    }

    #[test]
    fn deadline_and_freeze_fail_with_their_reason() {
        let mut p = progress(3, 3, 1, 1);
        p.deadline_exceeded = Some("MachineSet \"web-x\" has timed out progressing.".to_owned());
        assert!(
            matches!(verdict(&p), Verdict::DeadlineExceeded(m) if m.contains("timed out progressing"))
        );
        p.frozen = true;
        assert!(matches!(verdict(&p), Verdict::Frozen(m) if m.contains("frozen")));
    }

    #[test]
    fn progress_reads_conditions_and_freeze_label() {
        let mut md = md("web", false);
        md.metadata.generation = Some(4);
        md.metadata.labels =
            Some([(label::FREEZE.to_owned(), value::TRUE_CAPITALISED.to_owned())].into());
        md.spec.replicas = Some(2);
        md.status = Some(mcm_api::v1alpha1::MachineDeploymentStatus {
            observed_generation: Some(4),
            updated_replicas: Some(1),
            conditions: Some(vec![MachineDeploymentCondition {
                type_: MachineDeploymentConditionType::Progressing,
                status: ConditionStatus::False,
                reason: Some(deployment_reason::PROGRESS_DEADLINE_EXCEEDED.to_owned()),
                message: Some("timed out".to_owned()),
                last_update_time: None,
                last_transition_time: None,
            }]),
            ..Default::default()
        });
        let p = Progress::of(&md);
        assert!(p.frozen);
        assert_eq!(p.deadline_exceeded.as_deref(), Some("timed out"));
        assert_eq!((p.desired, p.updated, p.generation), (2, 1, 4));
        md.metadata.labels = None;
        assert!(matches!(
            verdict(&Progress::of(&md)),
            Verdict::DeadlineExceeded(_)
        ));
    }

    #[test]
    fn progress_line_counts_old_machines() {
        assert_eq!(
            progress(2, 3, 1, 1).line(),
            "updated 1/2, ready 1/2, available 1/2, old machines left 2"
        );
        // A surge machine ready during a rollout of 5: never "ready 6/5".
        assert_eq!(
            progress(5, 6, 1, 6).line(),
            "updated 1/5, ready 5/5 (+1 extra), available 5/5 (+1 extra), old machines left 5"
        );
    }

    proptest! {
        #[test]
        fn bar_has_fixed_width_and_is_full_only_when_complete(
            desired in 0i32..50, updated in 0i32..60, available in 0i32..60, width in 1usize..40
        ) {
            let p = progress(desired, updated, updated, available);
            let bar = p.bar(width);
            prop_assert_eq!(bar.chars().count(), width + 2);
            let full = bar.chars().filter(|c| *c == '#').count() == width;
            if desired > 0 {
                prop_assert_eq!(full, available.min(updated) >= desired);
            }
        }

        #[test]
        fn complete_only_when_every_count_is_reached(
            desired in 0i32..10, replicas in 0i32..12, updated in 0i32..12, available in 0i32..12
        ) {
            let p = progress(desired, replicas, updated, available);
            let complete = matches!(verdict(&p), Verdict::Complete(_));
            prop_assert_eq!(complete, updated >= desired && replicas <= updated && available >= updated);
        }
    }

    #[test]
    fn history_lists_only_owned_sets_by_revision() {
        let web = md("web", false);
        let other = md("other", false);
        let sets = vec![
            set("web-b", &web, "2", "class-b"),
            set("web-a", &web, "1", "class-a"),
            set("other-a", &other, "1", "class-a"),
        ];
        let revisions = history(&web, &sets);
        let names: Vec<&str> = revisions.iter().map(|r| r.machine_set.as_str()).collect();
        assert_eq!(names, ["web-a", "web-b"]);
        assert_eq!(revisions[1].machine_class, "class-b");
        let table = render_history("web", &revisions);
        assert!(table.starts_with("machinedeployment.machine.sapcloud.io/web\nREVISION"));
        assert!(table.contains("<none>"));
    }

    #[test]
    fn undo_goes_to_the_previous_revision_or_the_named_one() {
        let web = md("web", false);
        let sets = vec![
            set("web-a", &web, "1", "a"),
            set("web-b", &web, "2", "b"),
            set("web-c", &web, "3", "c"),
        ];
        let revisions = history(&web, &sets);
        let previous = plan_undo(&web, &revisions, None).unwrap();
        assert_eq!(
            previous,
            UndoPlan::Patch {
                revision: 2,
                patch: json!({"spec": {"rollbackTo": {"revision": 2}}})
            }
        );
        assert!(matches!(
            plan_undo(&web, &revisions, Some(1)).unwrap(),
            UndoPlan::Patch { revision: 1, .. }
        ));
        assert!(
            matches!(plan_undo(&web, &revisions, Some(3)).unwrap(), UndoPlan::Skip(m) if m.contains("revision 3"))
        );
        assert!(
            plan_undo(&web, &revisions, Some(7))
                .unwrap_err()
                .contains("unable to find specified revision 7")
        );
        assert!(plan_undo(&web, &revisions, Some(-1)).is_err());
        assert!(
            plan_undo(&web, &revisions[..1], None)
                .unwrap_err()
                .contains("no rollout history")
        );
        assert!(
            plan_undo(&md("web", true), &revisions, None)
                .unwrap_err()
                .contains("paused")
        );
    }

    #[test]
    fn restart_writes_the_time_into_the_template() {
        let now: jiff::Timestamp = "2026-11-25T10:00:00Z".parse().unwrap();
        let patch = plan_restart(&md("web", false), now).unwrap();
        assert_eq!(
            patch["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT],
            "2026-11-25T10:00:00Z"
        );
        assert!(plan_restart(&md("web", true), now).is_err());
    }

    #[test]
    fn pause_and_resume_refuse_no_ops() {
        assert_eq!(
            plan_pause(&md("web", false), true).unwrap(),
            json!({"spec": {"paused": true}})
        );
        assert_eq!(
            plan_pause(&md("web", true), false).unwrap(),
            json!({"spec": {"paused": false}})
        );
        assert!(
            plan_pause(&md("web", true), true)
                .unwrap_err()
                .contains("already paused")
        );
        assert!(
            plan_pause(&md("web", false), false)
                .unwrap_err()
                .contains("not paused")
        );
    }
}
