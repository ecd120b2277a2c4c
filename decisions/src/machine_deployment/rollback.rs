//! Rollback (upstream `deployment_rollback.go`, docs/behaviour.md#rollback): `spec.rollbackTo` copies the
//! template of an earlier revision back into the deployment.

use std::collections::BTreeMap;

use mcm_api::keys::{annotation, label};

use super::revision;
use super::types::md_name;
use super::work::Work;
use crate::vocabulary::Event;

impl Work<'_> {
    /// `rollback` (docs/behaviour.md#rollback).
    pub(super) fn rollback(&mut self) {
        self.sync_revision(true);
        let requested = self
            .md
            .spec
            .rollback_to
            .as_ref()
            .and_then(|r| r.revision)
            .unwrap_or(0);
        let md_name = md_name(&self.md);
        let to_revision = if requested == 0 {
            revision::last_revision(&self.sets)
        } else {
            requested
        };
        self.md.spec.rollback_to = None;
        self.mark_md_dirty();
        if to_revision == 0 {
            self.event(Event::warning(
                "DeploymentRollbackRevisionNotFound",
                "Unable to find last revision.",
            ));
            return;
        }
        let found = (0..self.sets.len())
            .find(|&i| revision::revision(&self.sets[i].metadata) == Some(to_revision));
        let Some(i) = found else {
            self.event(Event::warning(
                "DeploymentRollbackRevisionNotFound",
                "Unable to find the revision to rollback to.",
            ));
            return;
        };
        self.untaint_set(i);
        let template = self.sets[i].spec.template.clone().unwrap_or_default();
        if revision::equal_ignore_hash(&template, &self.md.spec.template) {
            self.event(Event::warning(
                "DeploymentRollbackTemplateUnchanged",
                format!(
                    "The rollback revision contains the same template as current deployment {md_name:?}"
                ),
            ));
            return;
        }
        let mut template = template;
        if let Some(l) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            l.remove(label::MACHINE_TEMPLATE_HASH);
        }
        self.md.spec.template = template;
        let mut a: BTreeMap<String, String> = self
            .md
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| annotation::NOT_COPIED_TO_MACHINE_SET.contains(&k.as_str()))
            .collect();
        for (k, v) in self.sets[i].metadata.annotations.iter().flatten() {
            if !annotation::NOT_COPIED_TO_MACHINE_SET.contains(&k.as_str()) {
                a.insert(k.clone(), v.clone());
            }
        }
        self.md.metadata.annotations = Some(a);
        self.event(Event::normal(
            "DeploymentRollback",
            format!("Rolled back deployment {md_name:?} to revision {to_revision}"),
        ));
    }
}

#[cfg(test)]
mod tests;
