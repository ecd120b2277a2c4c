//! Pure logic of `rollout plan` and `rollout history --explain`: the changed object from a file
//! or a merge patch, the verdict and report of [`mcm_decisions::rollout_preview`] (the rules the
//! controllers run), and the per-revision explanation of why machines rolled. No I/O.

use std::collections::BTreeMap;

use mcm_api::keys::annotation;
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachineSet};
use mcm_decisions::machine::hot_update::{LAST_APPLIED_PROVIDER_SPEC, changed_paths};
use mcm_decisions::rollout_preview::field_diff::template_changes;
use mcm_decisions::rollout_preview::text::{class_report, could_not_determine, deployment_report};
use mcm_decisions::rollout_preview::types::{
    ClassChange, ClassUser, DeploymentChange, FieldEffect, HotPaths, MeasuredDurations,
    SlowDurations,
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

/// The labels of a sample line (`name{a="x",b="y"} value`), unescaped enough for names and
/// numbers (no label value the manager writes contains a quote).
fn labels_of(series: &str) -> Vec<(&str, &str)> {
    let Some(inner) = series
        .split_once('{')
        .and_then(|(_, rest)| rest.strip_suffix('}'))
    else {
        return Vec::new();
    };
    inner
        .split("\",")
        .filter_map(|pair| {
            let (key, value) = pair.split_once("=\"")?;
            Some((key.trim_start_matches(','), value.trim_end_matches('"')))
        })
        .collect()
}

/// The cumulative buckets (upper bound, count) of histogram `name`, summed over the series of
/// `deployment` (label `machine_deployment`), or over every series when none is of it.
fn histogram_buckets(text: &str, name: &str, deployment: &str) -> Vec<(f64, f64)> {
    let bucket = format!("{name}_bucket");
    let mut mine: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    let mut all: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if series.split('{').next() != Some(bucket.as_str()) {
            continue;
        }
        let Ok(count) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = labels_of(series);
        let Some(le) = labels.iter().find(|(k, _)| *k == "le").and_then(|(_, v)| {
            if *v == "+Inf" {
                Some(f64::INFINITY)
            } else {
                v.parse::<f64>().ok()
            }
        }) else {
            continue;
        };
        // f64 bounds ordered through their bits (all bounds are positive).
        let slot = |m: &mut BTreeMap<u64, (f64, f64)>| {
            m.entry(le.to_bits()).or_insert((le, 0.0)).1 += count
        };
        slot(&mut all);
        if labels.contains(&("machine_deployment", deployment)) {
            slot(&mut mine);
        }
    }
    let chosen = if mine.is_empty() { all } else { mine };
    chosen.into_values().collect()
}

/// The `q` quantile of cumulative buckets, interpolated linearly inside the bucket that holds it
/// (as Prometheus's `histogram_quantile`); the highest finite bound when it falls in `+Inf`.
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return Some(lower);
            }
            let width = count - below;
            return Some(if width > 0.0 {
                lower + (bound - lower) * (rank - below) / width
            } else {
                bound
            });
        }
        (lower, below) = (bound, count);
    }
    Some(lower)
}

/// The creation, join and drain durations the manager measured, from its `/metrics` text. Its
/// distributions (`mcm_rollout_{create,join,drain}_seconds`, of `deployment` when it has
/// figures, else of all deployments) give a median and a 90th percentile per step; without them
/// (an older manager, upstream's) the gauges `mcm_machine_{create,join,drain}_duration_seconds`
/// (the latest per deployment) are averaged into one figure. The manager's join duration counts
/// from the Machine's creation, so the creation part is taken out of it. `source` says where the
/// text came from.
#[must_use]
pub fn durations_from_metrics(text: &str, source: &str, deployment: &str) -> MeasuredDurations {
    let distribution = |name: &str| {
        let buckets = histogram_buckets(text, name, deployment);
        let count = buckets.last().map_or(0.0, |b| b.1);
        Some((quantile(&buckets, 0.5)?, quantile(&buckets, 0.9)?, count))
    };
    let (create, join, drain) = (
        distribution("mcm_rollout_create_seconds"),
        distribution("mcm_rollout_join_seconds"),
        distribution("mcm_rollout_drain_seconds"),
    );
    if create.is_some() || join.is_some() || drain.is_some() {
        let n = |m: Option<(f64, f64, f64)>| m.map_or(0.0, |(_, _, n)| n);
        let after_creation = |j: f64, c: f64| seconds((j - c).max(0.0));
        let slow = match (create, join, drain) {
            (Some(c), Some(j), Some(d)) => Some(SlowDurations {
                creation: seconds(c.1).unwrap_or_default(),
                join: after_creation(j.1, c.1).unwrap_or_default(),
                drain: seconds(d.1).unwrap_or_default(),
            }),
            _ => None,
        };
        return MeasuredDurations {
            creation: create.and_then(|c| seconds(c.0)),
            join: join.and_then(|j| after_creation(j.0, create.map_or(0.0, |c| c.0))),
            drain: drain.and_then(|d| seconds(d.0)),
            slow,
            source: format!(
                "the manager's distributions in {source} ({} creation, {} join and {} drain figures)",
                n(create),
                n(join),
                n(drain)
            ),
        };
    }
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
        slow: None,
        source: format!("the averages of the latest figures in {source} ({counts})"),
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

/// The revisions a MachineSet held before its current one
/// (`deployment.kubernetes.io/revision-history`, kept when a rollback reuses the set).
fn earlier_revisions(set: &MachineSet) -> Vec<i64> {
    set.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotation::REVISION_HISTORY))
        .map(|history| {
            history
                .split(',')
                .filter_map(|r| r.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `rollout history --explain`: per revision (oldest first), the template fields that differ from
/// the revision it actually replaced (the nearest lower number any MachineSet held, its current
/// revision or one in its revision history), rollbacks named as such (a set that held earlier
/// revisions was reused), and, when the class name stayed, how the class content differs from
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
    let set_named = |name: &str| {
        owned
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .copied()
    };
    // Every revision number any owned set held, with the set that held it.
    let mut held: Vec<(i64, &MachineSet)> = Vec::new();
    for set in &owned {
        held.extend(earlier_revisions(set).into_iter().map(|n| (n, *set)));
    }
    for revision in revisions {
        if let Some(set) = set_named(&revision.machine_set) {
            held.push((revision.number, set));
        }
    }
    held.sort_by_key(|(n, _)| *n);
    for revision in revisions {
        let Some(set) = set_named(&revision.machine_set) else {
            continue;
        };
        out.push_str(&format!(
            "REVISION {} (machineset {}, class {}, {} machine(s))\n",
            revision.number, revision.machine_set, revision.machine_class, revision.machines
        ));
        let mut earlier = earlier_revisions(set);
        earlier.sort_unstable();
        if !earlier.is_empty() {
            let list: Vec<String> = earlier.iter().map(ToString::to_string).collect();
            out.push_str(&format!(
                "  rollback: the template of revision {} again (machineset {} reused)\n",
                list.join(", "),
                revision.machine_set
            ));
        }
        let replaced = held
            .iter()
            .rev()
            .find(|(n, _)| *n < revision.number)
            .copied();
        match replaced {
            None => out.push_str("  first revision\n"),
            Some((before, before_set)) => {
                let changes = match (&before_set.spec.template, &set.spec.template) {
                    (Some(a), Some(b)) => template_changes(a, b),
                    _ => Vec::new(),
                };
                if changes.is_empty() {
                    out.push_str(&format!(
                        "  no template field differs from revision {before}\n"
                    ));
                }
                for change in changes {
                    out.push_str(&format!(
                        "  {}: {} (vs revision {before})\n",
                        change.path,
                        effect_word(change.effect),
                    ));
                }
            }
        }
        let before_class = replaced.map(|(_, before_set)| class_name(before_set));
        if before_class.is_none_or(|c| c == revision.machine_class)
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
    }
    out
}

/// `spec.template.spec.class.name` of a MachineSet ("" without one).
fn class_name(set: &MachineSet) -> &str {
    set.spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|spec| spec.class.as_ref())
        .and_then(|class| class.name.as_deref())
        .unwrap_or("")
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
        let d = durations_from_metrics(text, "m.txt", "a");
        // create (5+15)/2 = 10 s; join (50+70)/2 = 60 s from creation, so 50 s after it; no drain.
        assert_eq!(d.creation, Some(jiff::SignedDuration::from_secs(10)));
        assert_eq!(d.join, Some(jiff::SignedDuration::from_secs(50)));
        assert_eq!(d.drain, None);
        assert_eq!(
            d.source,
            "the averages of the latest figures in m.txt (2 creation, 2 join and 0 drain figures)"
        );
        let none = durations_from_metrics("garbage\nmore garbage 1 2\n", "x", "a");
        assert_eq!((none.creation, none.join, none.drain), (None, None, None));
    }

    /// The manager's distributions, two deployments: deployment `a` took 3 to 9 s to create
    /// (buckets 5 and 13), `b` far longer. The plan of `a` reads only `a`'s series, interpolated
    /// as Prometheus's histogram_quantile does; a deployment without figures reads them all.
    #[test]
    fn durations_are_read_from_the_managers_distributions() {
        let series = |name: &str, md: &str, buckets: &[(&str, u32)]| -> String {
            buckets
                .iter()
                .map(|(le, n)| {
                    format!("{name}_bucket{{le=\"{le}\",namespace=\"ns\",machine_deployment=\"{md}\"}} {n}\n")
                })
                .collect()
        };
        let mut text = String::from("# TYPE mcm_rollout_create_seconds histogram\n");
        // a: 10 creations, 5 at most 5 s, the other 5 up to 13 s.
        text += &series(
            "mcm_rollout_create_seconds",
            "a",
            &[("5.0", 5), ("13.0", 10), ("+Inf", 10)],
        );
        text += &series(
            "mcm_rollout_create_seconds",
            "b",
            &[("5.0", 0), ("13.0", 0), ("+Inf", 4)],
        );
        // a: joins (from creation) between 13 and 20 s.
        text += &series(
            "mcm_rollout_join_seconds",
            "a",
            &[("13.0", 0), ("20.0", 10), ("+Inf", 10)],
        );
        text += &series(
            "mcm_rollout_drain_seconds",
            "a",
            &[("1.0", 0), ("2.0", 10), ("+Inf", 10)],
        );
        // The gauges are there too and are not used.
        text += "mcm_machine_create_duration_seconds{machine_deployment=\"a\"} 99.0\n";
        let d = durations_from_metrics(&text, "m.txt", "a");
        let s = jiff::SignedDuration::from_secs_f64;
        // Median of a's creations: rank 5 is the top of the 5 s bucket; 90th: 5 + 8 × 4/5 = 11.4.
        assert_eq!(d.creation, Some(s(5.0)));
        // Join median 13 + 7 × 5/10 = 16.5, less the creation's 5; 90th 19.3 less 11.4.
        assert_eq!(d.join, Some(s(11.5)));
        assert_eq!(d.drain, Some(s(1.5)));
        let slow = d.slow.unwrap();
        assert_eq!(slow.creation, s(11.4));
        assert!((slow.join.as_secs_f64() - 7.9).abs() < 1e-9, "{slow:?}");
        assert!((slow.drain.as_secs_f64() - 1.9).abs() < 1e-9, "{slow:?}");
        assert_eq!(
            d.source,
            "the manager's distributions in m.txt (10 creation, 10 join and 10 drain figures)"
        );
        // A deployment the manager has no figures of: every series (14 creations, 4 in +Inf:
        // the 90th percentile is the highest finite bound).
        let other = durations_from_metrics(&text, "m.txt", "c");
        assert_eq!(other.slow.unwrap().creation, s(13.0));
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

    /// small (1) → large (2) → tier label (3) → undo to 2 → revert to small: the set of
    /// revision 2 is reused as 4 and the set of revision 1 as 5. Each revision is compared with the
    /// one it replaced (4 with 3, 5 with 4), never with the set listed before it, and both reuses
    /// are named rollbacks. (Before: revision 4 and 5 were compared with 3 and 4 as listed, so a
    /// class-only revision showed the tier label, and a set whose earlier numbers were missing
    /// was called "first revision".)
    #[test]
    fn history_after_undo_and_revert_names_rollbacks_and_compares_with_what_was_replaced() {
        let md: MachineDeployment = serde_json::from_value(md("small")).unwrap();
        let set = |name: &str,
                   class: &str,
                   tier: &str,
                   revision: &str,
                   history: &str|
         -> MachineSet {
            let mut annotations = json!({"deployment.kubernetes.io/revision": revision});
            if !history.is_empty() {
                annotations["deployment.kubernetes.io/revision-history"] = json!(history);
            }
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                             "annotations": annotations,
                             "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment", "name": "w", "uid": "md-uid", "controller": true}]},
                "spec": {"replicas": 1, "template": {"metadata": {"labels": {"pool": "a", "tier": tier, "machine-template-hash": name}},
                                                     "spec": {"class": {"kind": "MachineClass", "name": class}}}}
            }))
            .unwrap()
        };
        let sets = vec![
            set("w-a", "small", "x", "5", "1"),
            set("w-b", "large", "x", "4", "2"),
            set("w-c", "large", "y", "3", ""),
        ];
        let revisions = crate::rollout::history(&md, &sets);
        let text = explain_history("w", &md, &revisions, &sets, &[], &[]);
        assert_eq!(
            text,
            "machinedeployment.machine.sapcloud.io/w\n\
             REVISION 3 (machineset w-c, class large, 1 machine(s))\n  spec.template.metadata.labels.tier: rolled (vs revision 2)\n\
             REVISION 4 (machineset w-b, class large, 1 machine(s))\n  rollback: the template of revision 2 again (machineset w-b reused)\n  spec.template.metadata.labels.tier: rolled (vs revision 3)\n\
             REVISION 5 (machineset w-a, class small, 1 machine(s))\n  rollback: the template of revision 1 again (machineset w-a reused)\n  spec.template.spec.class.name: rolled (vs revision 4)\n"
        );
    }
}
