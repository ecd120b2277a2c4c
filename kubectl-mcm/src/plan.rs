//! Pure logic of `rollout plan` and `rollout history --explain`: the changed object from a file
//! or a merge patch, the verdict and report of [`mcm_decisions::rollout_preview`] (the rules the
//! controllers run), and the per-revision explanation of why machines rolled. No I/O.

use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachineSet};
use mcm_decisions::machine::hot_update::{LAST_APPLIED_PROVIDER_SPEC, changed_paths};
use mcm_decisions::rollout_preview::field_diff::template_changes;
use mcm_decisions::rollout_preview::text::{class_report, could_not_determine, deployment_report};
use mcm_decisions::rollout_preview::types::{
    ClassChange, ClassUser, DeploymentChange, FieldEffect, HotPaths, MeasuredDurations,
};
use mcm_decisions::rollout_preview::verdict::{owned_sets, preview_class, preview_deployment};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::rollout::Revision;

/// What `rollout plan` previews.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanKind {
    /// `machinedeployment/NAME`, `mcd/NAME`.
    MachineDeployment,
    /// `machineclass/NAME`, `mcc/NAME`, `mc/NAME`.
    MachineClass,
}

/// Parses the target of `rollout plan`. `mc` means MachineClass here (there is nothing to plan
/// for a Machine).
///
/// # Errors
/// Not `TYPE/NAME` of a MachineDeployment or MachineClass.
pub fn plan_target(argument: &str) -> Result<(PlanKind, String), String> {
    let usage = || {
        format!(
            "expected machinedeployment/<name> (mcd/<name>) or machineclass/<name> (mc/<name>), got {argument:?}"
        )
    };
    let (kind, name) = argument.split_once('/').ok_or_else(usage)?;
    if name.is_empty() || name.contains('/') {
        return Err(usage());
    }
    let lower = kind.to_ascii_lowercase();
    let bare = lower
        .strip_suffix(".machine.sapcloud.io")
        .unwrap_or(lower.as_str());
    let kind = match bare {
        "machinedeployment" | "machinedeployments" | "mcd" => PlanKind::MachineDeployment,
        "machineclass" | "machineclasses" | "mcc" | "mc" => PlanKind::MachineClass,
        _ => return Err(usage()),
    };
    Ok((kind, name.to_owned()))
}

/// The change `rollout plan` previews, parsed before anything is read from the server.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A whole object from `-f FILE` (YAML or JSON).
    Manifest(Value),
    /// A JSON merge patch from `--patch`.
    MergePatch(Value),
}

/// Parses `file` (the text of `-f FILE`) or `patch` (`--patch`): exactly one must be given.
///
/// # Errors
/// Neither or both given, text that does not parse, or text that is not an object.
pub fn parse_change(file: Option<&str>, patch: Option<&str>) -> Result<Change, String> {
    match (file, patch) {
        (Some(text), None) => {
            let value: Value = serde_saphyr::from_str(text)
                .map_err(|e| format!("the file is neither YAML nor JSON: {e}"))?;
            if !value.is_object() {
                return Err("the file does not hold an object".to_owned());
            }
            Ok(Change::Manifest(value))
        }
        (None, Some(text)) => {
            let patch: Value =
                serde_json::from_str(text).map_err(|e| format!("--patch is not JSON: {e}"))?;
            if !patch.is_object() {
                return Err("--patch must be a JSON object (a merge patch)".to_owned());
            }
            Ok(Change::MergePatch(patch))
        }
        _ => Err("give exactly one of -f FILE and --patch JSON".to_owned()),
    }
}

/// The object as it would be after `change`: the manifest, with the stored object's namespace
/// and uid where it leaves them out, or `current` with the merge patch applied.
#[must_use]
pub fn changed_object(current: &Value, change: &Change) -> Value {
    match change {
        Change::Manifest(manifest) => {
            let mut value = manifest.clone();
            // Fields the file leaves out that identify the stored object.
            if let (Some(meta), Some(current_meta)) = (
                value.get_mut("metadata").and_then(Value::as_object_mut),
                current.get("metadata").and_then(Value::as_object),
            ) {
                for key in ["namespace", "uid"] {
                    if !meta.contains_key(key)
                        && let Some(v) = current_meta.get(key)
                    {
                        meta.insert(key.to_owned(), v.clone());
                    }
                }
            }
            value
        }
        Change::MergePatch(patch) => {
            let mut value = current.clone();
            json_patch::merge(&mut value, patch);
            value
        }
    }
}

/// Sum and count of a duration metric over all its series, from Prometheus/OpenMetrics text:
/// the manager's duration metrics are gauges holding the latest duration per deployment, instance
/// type and zone (a histogram's `_sum` and `_count` are read as well).
fn duration_totals(text: &str, name: &str) -> Option<(f64, f64)> {
    let (mut sum, mut count) = (0.0, 0.0);
    let (mut histogram_sum, mut histogram_count) = (0.0, 0.0);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let metric = series.split('{').next().unwrap_or(series);
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        if metric == name {
            sum += value;
            count += 1.0;
        } else if metric == format!("{name}_sum") {
            histogram_sum += value;
        } else if metric == format!("{name}_count") {
            histogram_count += value;
        }
    }
    if count > 0.0 {
        Some((sum, count))
    } else {
        (histogram_count > 0.0).then_some((histogram_sum, histogram_count))
    }
}

fn seconds(value: f64) -> Option<jiff::SignedDuration> {
    (value.is_finite() && value >= 0.0).then(|| jiff::SignedDuration::from_secs_f64(value))
}

/// The creation, join and drain durations the manager measured, from its `/metrics` text
/// (`mcm_machine_{create,join,drain}_duration_seconds`, the latest per deployment, averaged).
/// The manager's join duration counts from the Machine's creation, so the creation part is taken
/// out of it. `source` says where the text came from.
#[must_use]
pub fn durations_from_metrics(text: &str, source: &str) -> MeasuredDurations {
    let average = |name: &str| duration_totals(text, name).map(|(sum, count)| (sum / count, count));
    let create = average("mcm_machine_create_duration_seconds");
    let join = average("mcm_machine_join_duration_seconds");
    let drain = average("mcm_machine_drain_duration_seconds");
    let n = |m: Option<(f64, f64)>| m.map_or(0.0, |(_, n)| n);
    let counts = format!(
        "{} creation, {} join and {} drain figures",
        n(create),
        n(join),
        n(drain)
    );
    MeasuredDurations {
        creation: create.and_then(|(avg, _)| seconds(avg)),
        join: join.and_then(|(avg, _)| seconds((avg - create.map_or(0.0, |(c, _)| c)).max(0.0))),
        drain: drain.and_then(|(avg, _)| seconds(avg)),
        source: format!("the averages of the manager's metrics in {source} ({counts})"),
    }
}

fn typed<T: DeserializeOwned>(value: &Value, what: &str) -> Result<T, String> {
    serde_json::from_value(value.clone()).map_err(|e| format!("{what}: {e}"))
}

/// The report of `rollout plan machinedeployment/NAME`.
///
/// # Errors
/// The changed object does not decode (the text says the effect could not be determined).
pub fn deployment_plan(
    old: &MachineDeployment,
    new: &Value,
    sets: &[MachineSet],
    machines: &[Machine],
    durations: &MeasuredDurations,
    now: jiff::Timestamp,
) -> Result<String, String> {
    let new: MachineDeployment =
        typed(new, "the changed machinedeployment").map_err(|e| could_not_determine(&e))?;
    let verdict = preview_deployment(&DeploymentChange {
        old,
        new: &new,
        machine_sets: sets,
        machines,
        observed: true,
        now,
    })
    .map_err(|e| could_not_determine(&e.to_string()))?;
    Ok(deployment_report(&verdict, durations))
}

/// The report of `rollout plan machineclass/NAME`.
///
/// # Errors
/// The changed object does not decode or its providerSpec is not an object.
pub fn class_plan(
    old: &MachineClass,
    new: &Value,
    deployments: &[MachineDeployment],
    sets: &[MachineSet],
    machines: &[Machine],
    hot_paths: HotPaths,
    now: jiff::Timestamp,
) -> Result<String, String> {
    let new: MachineClass =
        typed(new, "the changed machineclass").map_err(|e| could_not_determine(&e))?;
    let verdict = preview_class(&ClassChange {
        old,
        new: &new,
        deployments: deployments
            .iter()
            .map(|deployment| ClassUser {
                deployment,
                machine_sets: sets,
                machines,
            })
            .collect(),
        hot_paths,
        now,
    })
    .map_err(|e| could_not_determine(&e.to_string()))?;
    Ok(class_report(&verdict))
}

fn effect_word(effect: FieldEffect) -> &'static str {
    match effect {
        FieldEffect::Rolls => "rolled",
        FieldEffect::Propagated => "propagated in place",
        _ => "changed",
    }
}

/// The providerSpec paths in which the class differs now from what the machines of `set` last
/// applied (the first machine with a record), when the revision's class is `class`.
fn class_drift(set: &MachineSet, machines: &[Machine], class: &MachineClass) -> Vec<String> {
    let uid = set.metadata.uid.as_deref().unwrap_or("");
    machines
        .iter()
        .filter(|m| {
            m.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .find_map(|m| {
            m.metadata
                .annotations
                .as_ref()?
                .get(LAST_APPLIED_PROVIDER_SPEC)
                .and_then(|text| serde_json::from_str::<Value>(text).ok())
        })
        .map(|applied| {
            changed_paths(&applied, &class.provider_spec)
                .into_iter()
                .map(|p| {
                    if p.is_empty() {
                        "providerSpec".to_owned()
                    } else {
                        format!("providerSpec.{p}")
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `rollout history --explain`: per revision (oldest first), the template fields that differ from
/// the previous revision, and, when the class name stayed, how the class content differs from
/// what the revision's machines run.
#[must_use]
pub fn explain_history(
    name: &str,
    md: &MachineDeployment,
    revisions: &[Revision],
    sets: &[MachineSet],
    machines: &[Machine],
    classes: &[MachineClass],
) -> String {
    let mut out = format!("machinedeployment.machine.sapcloud.io/{name}\n");
    let owned = owned_sets(md, sets);
    let set_of = |r: &Revision| {
        owned
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(r.machine_set.as_str()))
            .copied()
    };
    let mut previous: Option<(&Revision, &MachineSet)> = None;
    for revision in revisions {
        let Some(set) = set_of(revision) else {
            continue;
        };
        out.push_str(&format!(
            "REVISION {} (machineset {}, class {}, {} machine(s))\n",
            revision.number, revision.machine_set, revision.machine_class, revision.machines
        ));
        match previous {
            None => out.push_str("  first revision\n"),
            Some((before, before_set)) => {
                let changes = match (&before_set.spec.template, &set.spec.template) {
                    (Some(a), Some(b)) => template_changes(a, b),
                    _ => Vec::new(),
                };
                if changes.is_empty() {
                    out.push_str(&format!(
                        "  no template field differs from revision {}\n",
                        before.number
                    ));
                }
                for change in changes {
                    out.push_str(&format!(
                        "  {}: {} (vs revision {})\n",
                        change.path,
                        effect_word(change.effect),
                        before.number
                    ));
                }
            }
        }
        if previous.is_none_or(|(before, _)| before.machine_class == revision.machine_class)
            && let Some(class) = classes
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(revision.machine_class.as_str()))
        {
            let drift = class_drift(set, machines, class);
            if !drift.is_empty() {
                out.push_str(&format!(
                    "  class {} changed since its machines applied it: {}\n",
                    revision.machine_class,
                    drift.join(", ")
                ));
            }
        }
        previous = Some((revision, set));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn targets_of_plan() {
        assert_eq!(
            plan_target("mcd/web").unwrap(),
            (PlanKind::MachineDeployment, "web".to_owned())
        );
        assert_eq!(
            plan_target("mc/small").unwrap(),
            (PlanKind::MachineClass, "small".to_owned())
        );
        assert_eq!(
            plan_target("machineclasses.machine.sapcloud.io/small")
                .unwrap()
                .0,
            PlanKind::MachineClass
        );
        assert!(plan_target("node/n1").is_err());
        assert!(plan_target("mcd/").is_err());
        assert!(plan_target("web").is_err());
    }

    #[test]
    fn changed_object_from_patch_or_file() {
        let current = json!({"metadata": {"name": "w", "namespace": "ns", "uid": "u"}, "spec": {"replicas": 2, "paused": true}});
        let patch =
            parse_change(None, Some(r#"{"spec": {"replicas": 3, "paused": null}}"#)).unwrap();
        let patched = changed_object(&current, &patch);
        assert_eq!(patched["spec"], json!({"replicas": 3}));
        let file = "metadata:\n  name: w\nspec:\n  replicas: 5\n";
        let from_file = changed_object(&current, &parse_change(Some(file), None).unwrap());
        assert_eq!(from_file["metadata"]["namespace"], "ns");
        assert_eq!(from_file["metadata"]["uid"], "u");
        assert_eq!(from_file["spec"]["replicas"], 5);
    }

    #[test]
    fn a_change_that_does_not_parse_is_refused_with_what_is_wrong() {
        let refused =
            |file: Option<&str>, patch: Option<&str>| parse_change(file, patch).unwrap_err();
        assert!(refused(None, None).contains("exactly one"));
        assert!(refused(Some("spec: {}"), Some("{}")).contains("exactly one"));
        assert!(refused(None, Some("[1]")).contains("merge patch"));
        assert!(refused(None, Some("{nope")).starts_with("--patch is not JSON"));
        assert!(refused(Some("- a\n- b\n"), None).contains("does not hold an object"));
        assert!(refused(Some("a: [\n"), None).starts_with("the file is neither YAML nor JSON"));
    }

    fn md(class: &str) -> Value {
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
            "metadata": {"name": "w", "namespace": "ns", "uid": "md-uid"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"pool": "a"}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": {"pool": "a"}}, "spec": {"class": {"kind": "MachineClass", "name": class}}}}
        })
    }

    #[test]
    fn deployment_plan_reports_fields_batches_and_no_history() {
        let old: MachineDeployment = serde_json::from_value(md("small")).unwrap();
        let new = changed_object(
            &md("small"),
            &parse_change(
                None,
                Some(r#"{"spec": {"template": {"spec": {"class": {"name": "large"}}}}}"#),
            )
            .unwrap(),
        );
        let report = deployment_plan(
            &old,
            &new,
            &[],
            &[],
            &MeasuredDurations::default(),
            jiff::Timestamp::UNIX_EPOCH,
        )
        .unwrap();
        assert!(
            report.contains("spec.template.spec.class.name  rolls (new MachineSet)"),
            "{report}"
        );
        // No sets were found: nothing runs the old template.
        assert!(report.contains("none is replaced"), "{report}");
        let bad = changed_object(
            &md("small"),
            &parse_change(None, Some(r#"{"spec": {"replicas": "x"}}"#)).unwrap(),
        );
        let error = deployment_plan(
            &old,
            &bad,
            &[],
            &[],
            &MeasuredDurations::default(),
            jiff::Timestamp::UNIX_EPOCH,
        )
        .unwrap_err();
        assert!(
            error.starts_with("could not determine the effect: the changed machinedeployment"),
            "{error}"
        );
    }

    #[test]
    fn durations_are_averaged_from_the_managers_metrics() {
        // Gauges as the manager writes them, and a histogram.
        let text = "# TYPE mcm_machine_create_duration_seconds gauge\n\
            mcm_machine_create_duration_seconds{machine_deployment=\"a\"} 5.0\n\
            mcm_machine_create_duration_seconds{machine_deployment=\"b\"} 15.0\n\
            mcm_machine_join_duration_seconds_sum{class=\"a\"} 50.0\n\
            mcm_machine_join_duration_seconds_count{class=\"a\"} 1\n\
            mcm_machine_join_duration_seconds_sum{class=\"b\"} 70.0\n\
            mcm_machine_join_duration_seconds_count{class=\"b\"} 1\n\
            mcm_machine_drain_duration_seconds_sum 0\n\
            mcm_machine_drain_duration_seconds_count 0\n";
        let d = durations_from_metrics(text, "m.txt");
        // create (5+15)/2 = 10 s; join (50+70)/2 = 60 s from creation, so 50 s after it; no drain.
        assert_eq!(d.creation, Some(jiff::SignedDuration::from_secs(10)));
        assert_eq!(d.join, Some(jiff::SignedDuration::from_secs(50)));
        assert_eq!(d.drain, None);
        assert_eq!(
            d.source,
            "the averages of the manager's metrics in m.txt (2 creation, 2 join and 0 drain figures)"
        );
        let none = durations_from_metrics("garbage\nmore garbage 1 2\n", "x");
        assert_eq!((none.creation, none.join, none.drain), (None, None, None));
    }

    #[test]
    fn history_explains_each_revision() {
        let md: MachineDeployment = serde_json::from_value(md("large")).unwrap();
        let set = |name: &str, class: &str, revision: &str| -> MachineSet {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                             "annotations": {"deployment.kubernetes.io/revision": revision},
                             "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment", "name": "w", "uid": "md-uid", "controller": true}]},
                "spec": {"replicas": 1, "template": {"metadata": {"labels": {"pool": "a", "machine-template-hash": revision}},
                                                     "spec": {"class": {"kind": "MachineClass", "name": class}}}}
            }))
            .unwrap()
        };
        let sets = vec![set("w-1", "small", "1"), set("w-2", "large", "2")];
        let machine: Machine = serde_json::from_value(json!({
            "metadata": {"name": "m", "namespace": "ns",
                         "annotations": {LAST_APPLIED_PROVIDER_SPEC: "{\"image\":\"a\"}"},
                         "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": "w-1", "uid": "uid-w-1", "controller": true}]},
            "spec": {}
        }))
        .unwrap();
        let mut small = MachineClass::new("small", json!({"image": "b"}));
        small.metadata.namespace = Some("ns".into());
        let revisions = crate::rollout::history(&md, &sets);
        let text = explain_history("w", &md, &revisions, &sets, &[machine], &[small]);
        assert_eq!(
            text,
            "machinedeployment.machine.sapcloud.io/w\n\
             REVISION 1 (machineset w-1, class small, 1 machine(s))\n  first revision\n  class small changed since its machines applied it: providerSpec.image\n\
             REVISION 2 (machineset w-2, class large, 1 machine(s))\n  spec.template.spec.class.name: rolled (vs revision 1)\n"
        );
    }
}
