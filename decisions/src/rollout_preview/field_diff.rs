//! Which fields a change touches and what each one does to the machines.
//!
//! Fields are compared in their normalised JSON (nulls and empty containers dropped, as the
//! controllers compare them), so a field that is `null` on one side and absent on the other is no
//! change. A template field rolls exactly when it is part of the template identity the
//! deployment controller hashes ([`revision::hashable_template`]).

use std::collections::BTreeSet;

use mcm_api::keys::label;
use mcm_api::v1alpha1::{MachineClass, MachineDeployment};
use serde_json::Value;

use super::types::{FieldChange, FieldEffect, PreviewError};
use crate::machine::hot_update::{changed_paths, is_hot_updatable};
use crate::machine_deployment::revision;
use crate::machine_set::semantic_equality::normalized;

/// Dotted paths that differ between two normalised values, each prefixed with `prefix` (a change
/// of the whole value is reported as `prefix` itself).
fn prefixed_changes(prefix: &str, old: &Value, new: &Value) -> Vec<String> {
    changed_paths(old, new)
        .into_iter()
        .map(|path| {
            if path.is_empty() {
                prefix.to_owned()
            } else {
                format!("{prefix}.{path}")
            }
        })
        .collect()
}

fn without(mut value: Value, keys: &[&str]) -> Value {
    if let Value::Object(map) = &mut value {
        for key in keys {
            map.remove(*key);
        }
    }
    value
}

/// The path of the `machine-template-hash` label inside the template, which the controller
/// writes and ignores.
fn is_hash_label(path: &str) -> bool {
    path == format!("metadata.labels.{}", label::MACHINE_TEMPLATE_HASH)
}

/// The fields of a MachineDeployment update, with their effect. Template fields of the identity
/// roll, the other template fields propagate, `spec.replicas` scales, the rest of the spec touches
/// no machine. Metadata and status are not compared.
#[must_use]
pub fn deployment_changes(old: &MachineDeployment, new: &MachineDeployment) -> Vec<FieldChange> {
    let whole_old = normalized(&old.spec.template);
    let whole_new = normalized(&new.spec.template);
    let identity: BTreeSet<String> = changed_paths(
        &normalized(&revision::hashable_template(&old.spec.template)),
        &normalized(&revision::hashable_template(&new.spec.template)),
    )
    .into_iter()
    .collect();
    let mut changes: Vec<FieldChange> = changed_paths(&whole_old, &whole_new)
        .into_iter()
        .filter(|path| !is_hash_label(path))
        .map(|path| {
            // A path of the identity, or inside one that changed as a whole (a map added).
            let rolls = identity
                .iter()
                .any(|id| &path == id || path.starts_with(&format!("{id}.")));
            FieldChange {
                path: format!("spec.template.{path}"),
                effect: if rolls {
                    FieldEffect::Rolls
                } else {
                    FieldEffect::Propagated
                },
            }
        })
        .collect();
    // An identity path the whole-template diff reported differently (a map replaced by a leaf).
    for id in &identity {
        let path = format!("spec.template.{id}");
        if !changes
            .iter()
            .any(|c| c.path == path || c.path.starts_with(&format!("{path}.")))
        {
            changes.push(FieldChange {
                path,
                effect: FieldEffect::Rolls,
            });
        }
    }
    let rest_old = without(normalized(&old.spec), &["template"]);
    let rest_new = without(normalized(&new.spec), &["template"]);
    for path in prefixed_changes("spec", &rest_old, &rest_new) {
        let effect = if path == "spec.replicas" {
            FieldEffect::Scales
        } else {
            FieldEffect::NoMachineEffect
        };
        changes.push(FieldChange { path, effect });
    }
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}

/// A short name of a JSON value's type, for messages.
#[must_use]
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The fields of a MachineClass update, with their effect: providerSpec paths are hot-updates
/// when within `hot_paths` ([`is_hot_updatable`], the machine controller's test), else they
/// reach new machines only; the other class fields reach new machines (and later driver calls).
///
/// # Errors
/// A providerSpec that is not a JSON object (or absent).
pub fn class_changes(
    old: &MachineClass,
    new: &MachineClass,
    hot_paths: &[String],
) -> Result<Vec<FieldChange>, PreviewError> {
    for spec in [&old.provider_spec, &new.provider_spec] {
        if !matches!(spec, Value::Object(_) | Value::Null) {
            return Err(PreviewError::ProviderSpec(json_type(spec)));
        }
    }
    let mut changes: Vec<FieldChange> = changed_paths(&old.provider_spec, &new.provider_spec)
        .into_iter()
        .map(|path| {
            let effect = if is_hot_updatable(&path, hot_paths) {
                FieldEffect::HotUpdate
            } else {
                FieldEffect::NewMachinesOnly
            };
            let path = if path.is_empty() {
                "providerSpec".to_owned()
            } else {
                format!("providerSpec.{path}")
            };
            FieldChange { path, effect }
        })
        .collect();
    let skip = ["apiVersion", "kind", "metadata", "providerSpec"];
    let rest_old = without(normalized(old), &skip);
    let rest_new = without(normalized(new), &skip);
    for path in changed_paths(&rest_old, &rest_new) {
        changes.push(FieldChange {
            path,
            effect: FieldEffect::NewMachinesOnly,
        });
    }
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(changes)
}

/// Template fields that differ between two revisions' templates (for `rollout history
/// --explain`), ignoring the hash label; each with its effect.
#[must_use]
pub fn template_changes(
    old: &mcm_api::v1alpha1::MachineTemplateSpec,
    new: &mcm_api::v1alpha1::MachineTemplateSpec,
) -> Vec<FieldChange> {
    let mut before = MachineDeployment::new("", Default::default());
    before.spec.template = old.clone();
    let mut after = before.clone();
    after.spec.template = new.clone();
    deployment_changes(&before, &after)
}
