//! The cluster-autoscaler's `trigger-deletion-by-mcm` annotation (docs/behaviour.md#autoscaler-deletion, quirk docs/behaviour.md#q26).
//!
//! The autoscaler names the machines it wants gone in `name~time` entries on the deployment; the
//! controller stamps them with the scaler time, marks those machines priority `1` with a
//! `marked-for-deletion-time`, and drops entries whose machine is gone, failed or deleting. The
//! MachineSet then deletes marked machines first (docs/behaviour.md#manage-replicas, docs/behaviour.md#deletion-order).

use std::collections::BTreeMap;

use jiff::Timestamp;
use mcm_api::keys::{annotation, value};
use mcm_api::v1alpha1::{Machine, MachineDeployment, MachinePhase};

/// RFC 3339 with second precision, as Go's `time.RFC3339`.
#[must_use]
pub fn rfc3339(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

fn annotations(md: &MachineDeployment) -> BTreeMap<String, String> {
    md.metadata.annotations.clone().unwrap_or_default()
}

/// `adjustingMachineDeploymentDeletionAnnotations`: the deployment annotations to write when an
/// entry lacks its time (the scaler time annotation is added if missing), else `None`.
#[must_use]
pub fn stamp_trigger_entries(
    md: &MachineDeployment,
    now: Timestamp,
) -> Option<BTreeMap<String, String>> {
    let mut a = annotations(md);
    let trigger = a
        .get(annotation::TRIGGER_DELETION_BY_MCM)
        .filter(|v| !v.is_empty())?
        .clone();
    let time = a
        .entry(annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME.to_owned())
        .or_insert_with(|| rfc3339(now))
        .clone();
    let rewritten: Vec<String> = trigger
        .split(',')
        .filter_map(
            |entry| match entry.matches(value::TRIGGER_DELETION_SEPARATOR).count() {
                0 => Some(format!(
                    "{entry}{}{time}",
                    value::TRIGGER_DELETION_SEPARATOR
                )),
                1 => Some(entry.to_owned()),
                _ => None,
            },
        )
        .collect();
    let rewritten = rewritten.join(",");
    if rewritten == trigger {
        return None;
    }
    a.insert(annotation::TRIGGER_DELETION_BY_MCM.to_owned(), rewritten);
    Some(a)
}

/// Outcome of [`apply_trigger_entries`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TriggerOutcome {
    /// New deployment annotations when the trigger entry list changed.
    pub deployment_annotations: Option<BTreeMap<String, String>>,
    /// Per machine name: annotations to set (priority `1`, marked-for-deletion time).
    pub machine_annotations: Vec<(String, BTreeMap<String, String>)>,
}

/// `updateMachineAndMachineDeploymentDeletionAnnotations`.
#[must_use]
pub fn apply_trigger_entries<M: std::borrow::Borrow<Machine>>(
    md: &MachineDeployment,
    machines: &[M],
) -> TriggerOutcome {
    let machines: Vec<&Machine> = machines.iter().map(std::borrow::Borrow::borrow).collect();
    let mut out = TriggerOutcome::default();
    let mut a = annotations(md);
    let Some(trigger) = a
        .get(annotation::TRIGGER_DELETION_BY_MCM)
        .filter(|v| !v.is_empty())
        .cloned()
    else {
        return out;
    };
    let by_name: BTreeMap<&str, &Machine> = machines
        .iter()
        .filter(|m| m.metadata.namespace == md.metadata.namespace)
        .filter_map(|m| Some((m.metadata.name.as_deref()?, *m)))
        .collect();
    let mut kept = Vec::new();
    for entry in trigger.split(',') {
        let mut parts = entry.split(value::TRIGGER_DELETION_SEPARATOR);
        let (Some(name), Some(time), None) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if time.parse::<Timestamp>().is_err() {
            continue;
        }
        let Some(machine) = by_name.get(name) else {
            continue;
        };
        if machine.metadata.deletion_timestamp.is_some()
            || machine.phase() == Some(&MachinePhase::Failed)
        {
            continue;
        }
        kept.push(entry.to_owned());
        let ma = machine.metadata.annotations.clone().unwrap_or_default();
        let has_priority = ma.get(annotation::MACHINE_PRIORITY).map(String::as_str)
            == Some(value::MACHINE_PRIORITY_TRIGGERED_FOR_DELETION);
        let has_time = ma
            .get(annotation::MARKED_FOR_DELETION_TIME)
            .is_some_and(|t| !t.is_empty());
        if !(has_priority && has_time) {
            let mut set = BTreeMap::from([(
                annotation::MACHINE_PRIORITY.to_owned(),
                value::MACHINE_PRIORITY_TRIGGERED_FOR_DELETION.to_owned(),
            )]);
            if !has_time {
                set.insert(
                    annotation::MARKED_FOR_DELETION_TIME.to_owned(),
                    time.to_owned(),
                );
            }
            out.machine_annotations.push((name.to_owned(), set));
        }
    }
    let joined = kept.join(",");
    if joined != trigger {
        if joined.is_empty() {
            a.remove(annotation::TRIGGER_DELETION_BY_MCM);
        } else {
            a.insert(annotation::TRIGGER_DELETION_BY_MCM.to_owned(), joined);
        }
        out.deployment_annotations = Some(a);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcm_api::v1alpha1::{CurrentStatus, MachineDeploymentSpec, MachineSpec, MachineStatus};

    fn md(trigger: &str, scaler_time: Option<&str>) -> MachineDeployment {
        let mut md = MachineDeployment::new("md", MachineDeploymentSpec::default());
        let mut a = BTreeMap::from([(
            annotation::TRIGGER_DELETION_BY_MCM.to_owned(),
            trigger.to_owned(),
        )]);
        if let Some(t) = scaler_time {
            a.insert(
                annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME.to_owned(),
                t.to_owned(),
            );
        }
        md.metadata.annotations = Some(a);
        md
    }

    fn machine(name: &str, phase: MachinePhase) -> Machine {
        let mut m = Machine::new(name, MachineSpec::default());
        m.status = Some(MachineStatus {
            current_status: Some(CurrentStatus {
                phase: Some(phase),
                ..CurrentStatus::default()
            }),
            ..MachineStatus::default()
        });
        m
    }

    #[test]
    fn entries_without_time_get_the_scaler_time() {
        let now: Timestamp = "2024-05-01T10:00:00.5Z".parse().unwrap();
        let a =
            stamp_trigger_entries(&md("m1,m2~2024-01-01T00:00:00Z,bad~x~y", None), now).unwrap();
        assert_eq!(
            a[annotation::TRIGGER_DELETION_BY_MCM],
            "m1~2024-05-01T10:00:00Z,m2~2024-01-01T00:00:00Z"
        );
        assert_eq!(
            a[annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME],
            "2024-05-01T10:00:00Z"
        );
        assert!(stamp_trigger_entries(&md("m2~2024-01-01T00:00:00Z", None), now).is_none());
        assert!(stamp_trigger_entries(&md("", None), now).is_none());
    }

    #[test]
    fn marks_live_machines_and_drops_gone_failed_or_malformed_entries() {
        let d = md(
            "ok~2024-01-01T00:00:00Z,gone~2024-01-01T00:00:00Z,failed~2024-01-01T00:00:00Z,badtime~yesterday,done~2024-01-01T00:00:00Z",
            None,
        );
        let mut done = machine("done", MachinePhase::Running);
        done.metadata.annotations = Some(BTreeMap::from([
            (annotation::MACHINE_PRIORITY.to_owned(), "1".to_owned()),
            (
                annotation::MARKED_FOR_DELETION_TIME.to_owned(),
                "2024-01-01T00:00:00Z".to_owned(),
            ),
        ]));
        let machines = vec![
            machine("ok", MachinePhase::Running),
            machine("failed", MachinePhase::Failed),
            machine("badtime", MachinePhase::Running),
            done,
        ];
        let out = apply_trigger_entries(&d, &machines);
        assert_eq!(
            out.deployment_annotations.unwrap()[annotation::TRIGGER_DELETION_BY_MCM],
            "ok~2024-01-01T00:00:00Z,done~2024-01-01T00:00:00Z"
        );
        assert_eq!(out.machine_annotations.len(), 1);
        assert_eq!(out.machine_annotations[0].0, "ok");
        assert_eq!(
            out.machine_annotations[0].1[annotation::MACHINE_PRIORITY],
            "1"
        );
        assert_eq!(
            out.machine_annotations[0].1[annotation::MARKED_FOR_DELETION_TIME],
            "2024-01-01T00:00:00Z"
        );
        // All entries gone: the annotation is removed.
        let out = apply_trigger_entries::<Machine>(&md("gone~2024-01-01T00:00:00Z", None), &[]);
        assert!(
            !out.deployment_annotations
                .unwrap()
                .contains_key(annotation::TRIGGER_DELETION_BY_MCM)
        );
    }
}
