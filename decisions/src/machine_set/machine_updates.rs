//! Changes to the machines a MachineSet already has (upstream `syncMachinesNodeTemplates`,
//! `syncMachinesConfig`, `syncMachinesClassKind` and the auto-preservation of failed machines,
//! docs/behaviour.md#machine-set-reconcile steps 6–9, docs/behaviour.md#auto-preservation).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use mcm_api::keys::{annotation, preserve};
use mcm_api::v1alpha1::{Machine, MachinePhase, MachineSet};

use super::semantic_equality;
use super::types::{MachineUpdate, annotation_of, phase};

pub(super) fn is_active(m: &Machine) -> bool {
    !matches!(
        phase(m),
        Some(MachinePhase::Failed | MachinePhase::Terminating)
    )
}

/// Applies `u` to `m` (the shell re-applies it to a freshly read machine after a conflict).
pub fn apply_update(m: &mut Machine, u: &MachineUpdate) {
    if let Some(nt) = &u.node_template {
        m.spec.node_template.clone_from(nt);
    }
    if let Some(c) = &u.configuration {
        m.spec.configuration = c.clone();
    }
    if let Some(kind) = &u.class_kind {
        m.spec.class.get_or_insert_with(Default::default).kind = Some(kind.clone());
    }
    if !u.set_annotations.is_empty() || !u.remove_annotations.is_empty() {
        let a = m.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for k in &u.remove_annotations {
            a.remove(k);
        }
        a.extend(u.set_annotations.clone());
    }
}

/// Propagation of node template, machine configuration and class kind (docs/behaviour.md#machine-set-reconcile steps 6–8).
pub(super) fn sync_update(ms: &MachineSet, m: &Machine) -> MachineUpdate {
    let tspec = ms.spec.template.as_ref().and_then(|t| t.spec.as_ref());
    let mut u = MachineUpdate::default();
    if is_active(m) {
        let want_nt = tspec.and_then(|s| s.node_template.clone());
        if !semantic_equality::equal(&m.spec.node_template, &want_nt) {
            u.node_template = Some(want_nt);
        }
        let want_cfg = tspec.map(|s| s.configuration.clone()).unwrap_or_default();
        if !semantic_equality::equal(&m.spec.configuration, &want_cfg) {
            u.configuration = Some(want_cfg);
        }
    }
    let want_kind = tspec
        .and_then(|s| s.class.as_ref())
        .and_then(|c| c.kind.clone())
        .unwrap_or_default();
    let have_kind = m
        .spec
        .class
        .as_ref()
        .and_then(|c| c.kind.clone())
        .unwrap_or_default();
    if want_kind != have_kind {
        u.class_kind = Some(want_kind);
    }
    u
}

/// Auto-preservation of failed machines (docs/behaviour.md#auto-preservation): annotation changes per machine index.
pub(super) fn auto_preservation(
    ms: &MachineSet,
    machines: &[Arc<Machine>],
) -> Vec<(usize, MachineUpdate)> {
    let max = i64::from(ms.spec.auto_preserve_failed_machine_max.unwrap_or(0));
    let count = i64::from(
        ms.status
            .as_ref()
            .and_then(|s| s.auto_preserve_failed_machine_count)
            .unwrap_or(0),
    );
    let remaining = max - count;
    let created = |m: &Machine| m.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let mut out = Vec::new();
    match remaining.cmp(&0) {
        Ordering::Equal => {}
        Ordering::Less => {
            let mut auto: Vec<usize> = (0..machines.len())
                .filter(|&i| {
                    annotation_of(&machines[i].metadata, annotation::PRESERVE)
                        == Some(preserve::AUTO_PRESERVED)
                })
                .collect();
            auto.sort_by_key(|&i| created(&machines[i]));
            let n = usize::try_from(-remaining).unwrap_or(usize::MAX);
            for i in auto.into_iter().take(n) {
                let mut u = MachineUpdate::default();
                u.remove_annotations.insert(annotation::PRESERVE.to_owned());
                out.push((i, u));
            }
        }
        Ordering::Greater => {
            let mut failed: Vec<usize> = (0..machines.len())
                .filter(|&i| {
                    let m = &machines[i];
                    phase(m) == Some(&MachinePhase::Failed)
                        && annotation_of(&m.metadata, annotation::PRESERVE)
                            .is_none_or(|v| !preserve::ALLOWED.contains(&v))
                })
                .collect();
            // Newest first.
            failed.sort_by_key(|&i| std::cmp::Reverse(created(&machines[i])));
            let n = usize::try_from(remaining).unwrap_or(usize::MAX);
            for i in failed.into_iter().take(n) {
                let mut u = MachineUpdate::default();
                u.set_annotations.insert(
                    annotation::PRESERVE.to_owned(),
                    preserve::AUTO_PRESERVED.to_owned(),
                );
                out.push((i, u));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
