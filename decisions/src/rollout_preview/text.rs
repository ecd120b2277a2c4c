//! The verdicts in words: one-line warnings (the webhook's, printed by kubectl) and the detailed
//! report of `kubectl mcm rollout plan`.

use std::fmt::Write as _;

use super::batches::{estimate, human};
use super::types::{
    ClassVerdict, DeploymentEffect, DeploymentVerdict, Estimate, FieldChange, FieldEffect,
    MeasuredDurations, Roll, RollbackPlan,
};

/// Most machine names listed in the deletion order of a report.
pub const ORDER_SHOWN: usize = 20;

/// The warning when the effect cannot be told.
#[must_use]
pub fn could_not_determine(reason: &str) -> String {
    format!("could not determine the effect: {reason}")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// `a, b and c is/are`.
fn paths_of(changes: &[&FieldChange]) -> String {
    let names: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
    joined(&names)
}

/// `a, b and c`.
fn joined(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

fn is_are(changes: &[&FieldChange]) -> &'static str {
    if changes.len() == 1 { "is" } else { "are" }
}

fn with_effect(changes: &[FieldChange], effect: FieldEffect) -> Vec<&FieldChange> {
    changes.iter().filter(|c| c.effect == effect).collect()
}

/// What starts the roll, as the subject of the sentence.
fn roll_subject(v: &DeploymentVerdict) -> String {
    match (&v.rollback, v.resumes_pending) {
        (Some(RollbackPlan::To { revision }), _) => {
            format!("this rollback (spec.rollbackTo) to revision {revision}")
        }
        (_, true) => "resuming rolls out the template changed while it was paused and".to_owned(),
        _ => "this change".to_owned(),
    }
}

/// The sentence of a rollback that changes nothing.
fn rollback_sentence(v: &DeploymentVerdict) -> Option<String> {
    let md = &v.deployment;
    match v.rollback.as_ref()? {
        RollbackPlan::To { .. } => None,
        RollbackPlan::NotFound { requested: 0 } => Some(format!(
            "spec.rollbackTo asks for the previous revision, but machinedeployment {md} has none: the controller clears it (event DeploymentRollbackRevisionNotFound) and no machine is replaced"
        )),
        RollbackPlan::NotFound { requested } => Some(format!(
            "spec.rollbackTo names revision {requested}, which no MachineSet of machinedeployment {md} carries: the controller clears it (event DeploymentRollbackRevisionNotFound) and no machine is replaced"
        )),
        RollbackPlan::SameTemplate { revision } => Some(format!(
            "spec.rollbackTo names revision {revision}, whose template machinedeployment {md} already has: the controller clears it (event DeploymentRollbackTemplateUnchanged) and no machine is replaced"
        )),
    }
}

/// The sentence of a deployment effect, `None` when no machine is touched.
fn effect_sentence(v: &DeploymentVerdict) -> Option<String> {
    let md = &v.deployment;
    let subject = roll_subject(v);
    match &v.effect {
        DeploymentEffect::Nothing => rollback_sentence(v),
        DeploymentEffect::Undetermined(reason) => Some(could_not_determine(reason)),
        DeploymentEffect::Roll {
            machines: 0, kept, ..
        } => Some(format!(
            "{subject} rolls machinedeployment {md} to a new template, but no machine runs an older one: none is replaced{}",
            if *kept > 0 {
                format!(
                    " ({} already on it)",
                    plural(*kept, "machine is", "machines are")
                )
            } else {
                String::new()
            }
        )),
        DeploymentEffect::Roll {
            roll,
            machines,
            kept,
            per_batch,
            batches,
        } => {
            let n = plural(*machines, "machine", "machines");
            let mut s = match roll {
                Roll::Rolling {
                    max_surge,
                    max_unavailable,
                } => format!(
                    "{subject} replaces {n} of machinedeployment {md} by a rolling update (maxSurge {max_surge}, maxUnavailable {max_unavailable}: about {})",
                    plural(*batches, "batch", "batches")
                ),
                Roll::Recreate => format!(
                    "{subject} replaces {n} of machinedeployment {md} by recreating them (all are deleted first, then the new ones are created: 1 batch)"
                ),
                Roll::InPlace { manual: true, .. } => format!(
                    "{}in-place update (manual orchestration): {n} of machinedeployment {md} are updated as their nodes are selected for update by hand; none is replaced",
                    in_place_lead(v)
                ),
                Roll::InPlace {
                    max_surge,
                    max_unavailable,
                    ..
                } => {
                    let surge = if *max_surge > 0 {
                        format!("maxSurge {max_surge}, ")
                    } else {
                        String::new()
                    };
                    format!(
                        "{}in-place update: {n} of machinedeployment {md}, {per_batch} at a time ({surge}maxUnavailable {max_unavailable}: about {}); none is replaced",
                        in_place_lead(v),
                        plural(*batches, "batch", "batches")
                    )
                }
            };
            if *kept > 0 {
                let _ = write!(
                    s,
                    "; {} already on the new template stay",
                    plural(*kept, "machine", "machines")
                );
            }
            Some(s)
        }
        DeploymentEffect::Propagate { machines } => {
            let fields = with_effect(&v.changes, FieldEffect::Propagated);
            Some(format!(
                "{} {} propagated in place to the {} of machinedeployment {md}: none is replaced",
                paths_of(&fields),
                is_are(&fields),
                plural(*machines, "machine", "machines"),
            ))
        }
    }
}

/// What starts an in-place roll other than a template edit, before the sentence.
fn in_place_lead(v: &DeploymentVerdict) -> String {
    match (&v.rollback, v.resumes_pending) {
        (Some(RollbackPlan::To { revision }), _) => {
            format!("rollback (spec.rollbackTo) to revision {revision} by ")
        }
        (_, true) => "resuming rolls out the template changed while it was paused by ".to_owned(),
        _ => String::new(),
    }
}

/// The warnings of a deployment verdict (empty when no machine is touched).
#[must_use]
pub fn deployment_warnings(v: &DeploymentVerdict) -> Vec<String> {
    let md = &v.deployment;
    let mut lines = Vec::new();
    if let Some(sentence) = effect_sentence(v) {
        lines.push(sentence);
    }
    if let Some((from, to)) = v.scale {
        lines.push(format!(
            "this change scales machinedeployment {md} from {from} to {to} machines"
        ));
    }
    if v.estimated && !lines.is_empty() && !matches!(v.effect, DeploymentEffect::Undetermined(_)) {
        lines.push(format!(
            "the machine counts of machinedeployment {md} are estimated from spec.replicas (its machines could not be read)"
        ));
    }
    if v.paused && !lines.is_empty() {
        lines = lines
            .into_iter()
            .map(|l| {
                format!("machinedeployment {md} is paused, nothing happens until it is resumed; then {l}")
            })
            .collect();
    }
    lines
}

/// The warning when the class a deployment's new template names does not exist: the machines
/// the roll creates stay without a phase (`MachineClassNotFound`, retried) until it does, and the
/// strategy takes no old machine away meanwhile (docs/behaviour.md#missing-class).
#[must_use]
pub fn missing_class_warning(v: &DeploymentVerdict, class: &str) -> String {
    let md = &v.deployment;
    let namespace = md.split_once('/').map_or("default", |(ns, _)| ns);
    let old_machines = match &v.effect {
        DeploymentEffect::Roll {
            roll: Roll::Recreate,
            machines,
            ..
        } if *machines > 0 => format!(
            "Recreate keeps the {} until the class exists",
            plural(*machines, "old machine", "old machines")
        ),
        DeploymentEffect::Roll { machines, .. } if *machines > 0 => format!(
            "no old machine goes meanwhile (the {} stay until the class exists; only surge machines are created)",
            plural(*machines, "old machine", "old machines")
        ),
        _ => "no old machine goes (the rollout waits)".to_owned(),
    };
    format!(
        "machineclass {namespace}/{class} does not exist: new machines of machinedeployment {md} cannot be created until it does (they stay without a phase, event MachineClassNotFound); {old_machines}; reverting the template deletes the new machines at once"
    )
}

/// The warnings of a class verdict: one line per deployment that uses the class.
#[must_use]
pub fn class_warnings(v: &ClassVerdict) -> Vec<String> {
    let hot = with_effect(&v.changes, FieldEffect::HotUpdate);
    let cold = with_effect(&v.changes, FieldEffect::NewMachinesOnly);
    if hot.is_empty() && cold.is_empty() {
        return Vec::new();
    }
    if v.users.is_empty() {
        return vec![format!(
            "no MachineDeployment uses machineclass {}: no machine is touched",
            v.class
        )];
    }
    let mut lines = Vec::new();
    for user in &v.users {
        let md = &user.deployment;
        let mut line = if user.hot_updated > 0 {
            // The paths the updates change: what the machines run against the new class, which
            // is more than this change when an earlier one is still pending, and never empty.
            let updated: Vec<&str> = user.updated_paths.iter().map(String::as_str).collect();
            let (subject, verb) = if updated.is_empty() {
                (paths_of(&hot), is_are(&hot))
            } else {
                (
                    joined(&updated),
                    if updated.len() == 1 { "is" } else { "are" },
                )
            };
            format!(
                "{subject} {verb} hot-updatable: {} of machinedeployment {md} {} updated in place through UpdateMachine, none is replaced",
                plural(user.hot_updated, "machine", "machines"),
                if user.hot_updated == 1 { "is" } else { "are" },
            )
        } else if !cold.is_empty() {
            let provider_cold: Vec<&FieldChange> = cold
                .iter()
                .copied()
                .filter(|c| c.path.starts_with("providerSpec"))
                .collect();
            let named = if provider_cold.is_empty() {
                &cold
            } else {
                &provider_cold
            };
            format!(
                "{} {} not hot-updatable: the {} of machinedeployment {md} {} neither updated nor replaced; only new machines get the change (reference a new class to roll them)",
                paths_of(named),
                is_are(named),
                plural(user.machines, "machine", "machines"),
                if user.machines == 1 { "is" } else { "are" },
            )
        } else if user.blocked > 0 {
            let blocked: Vec<&str> = user.blocked_by.iter().map(String::as_str).collect();
            format!(
                "{} {} hot-updatable, but {} of machinedeployment {md} {} not updated: {} providerSpec also differs from the class at {}, which {} not hot-updatable (an earlier change); only new machines get either change (reference a new class to roll them)",
                paths_of(&hot),
                is_are(&hot),
                plural(user.blocked, "machine", "machines"),
                if user.blocked == 1 { "is" } else { "are" },
                if user.blocked == 1 { "its" } else { "their" },
                joined(&blocked),
                if blocked.len() == 1 { "is" } else { "are" },
            )
        } else {
            format!(
                "{} {} hot-updatable, but none of the {} of machinedeployment {md} needs an update",
                paths_of(&hot),
                is_are(&hot),
                plural(user.machines, "machine", "machines"),
            )
        };
        if user.hot_updated > 0 && user.left_unchanged > 0 {
            let _ = write!(
                line,
                "; {} not updated (not running, or already up to date)",
                plural(user.left_unchanged, "machine is", "machines are")
            );
        }
        if user.adopted > 0 {
            let _ = write!(
                line,
                "; {} without a last-applied providerSpec adopt{} the new one without a driver call",
                plural(user.adopted, "machine", "machines"),
                if user.adopted == 1 { "s" } else { "" }
            );
        }
        lines.push(line);
    }
    lines
}

fn effect_word(effect: FieldEffect, in_place: bool) -> &'static str {
    match effect {
        FieldEffect::Rolls if in_place => "updates in place (node agent)",
        FieldEffect::Rolls => "rolls (new MachineSet)",
        FieldEffect::Propagated => "propagated in place",
        FieldEffect::HotUpdate => "hot-updates (UpdateMachine)",
        FieldEffect::NewMachinesOnly => "new machines only",
        FieldEffect::Scales => "scales",
        FieldEffect::NoMachineEffect => "no machine touched",
    }
}

fn fields_table(out: &mut String, changes: &[FieldChange], in_place: bool) {
    if changes.is_empty() {
        out.push_str("Changed fields: none\n");
        return;
    }
    out.push_str("Changed fields:\n");
    let width = changes.iter().map(|c| c.path.len()).max().unwrap_or(0);
    for c in changes {
        let _ = writeln!(
            out,
            "  {:<width$}  {}",
            c.path,
            effect_word(c.effect, in_place)
        );
    }
}

/// The detailed report of a deployment verdict (`kubectl mcm rollout plan`).
#[must_use]
pub fn deployment_report(v: &DeploymentVerdict, durations: &MeasuredDurations) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "MachineDeployment {}", v.deployment);
    let in_place = matches!(
        v.effect,
        DeploymentEffect::Roll {
            roll: Roll::InPlace { .. },
            ..
        }
    );
    fields_table(&mut out, &v.changes, in_place);
    let warnings = deployment_warnings(v);
    if warnings.is_empty() {
        out.push_str("Verdict: no machine is replaced or updated\n");
    } else {
        out.push_str("Verdict:\n");
        for w in &warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    if let DeploymentEffect::Roll {
        roll,
        machines,
        per_batch,
        batches,
        ..
    } = &v.effect
        && *machines > 0
    {
        let _ = writeln!(
            out,
            "Batches: {batches} of up to {per_batch} machine(s) ({machines} in all)"
        );
        if !v.order.is_empty() && !matches!(roll, Roll::InPlace { .. }) {
            let shown: Vec<&str> = v
                .order
                .iter()
                .take(ORDER_SHOWN)
                .map(String::as_str)
                .collect();
            let more = v.order.len().saturating_sub(ORDER_SHOWN);
            let _ = writeln!(
                out,
                "Deletion order (first first): {}{}",
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
        }
        match estimate(roll, *batches, durations) {
            // A range only where it shows in whole seconds.
            Some(Estimate {
                typical,
                slow: Some(slow),
                why,
            }) if human(slow) != human(typical) => {
                let _ = writeln!(
                    out,
                    "Estimate: {} to {} ({why})",
                    human(typical),
                    human(slow)
                );
            }
            Some(Estimate { typical, why, .. }) => {
                let _ = writeln!(out, "Estimate: about {} ({why})", human(typical));
            }
            // Say what was missing: with no figures given, nobody asked the manager, who may well
            // have measured every step.
            None if durations.source.is_empty() => out.push_str(
                "Estimate: no history given (pass the manager's /metrics text with --metrics-file \
                 to estimate from the creation, join and drain durations it measured)\n",
            ),
            None => {
                let _ = writeln!(
                    out,
                    "Estimate: no history (a creation, join or drain duration is missing: {})",
                    durations.source
                );
            }
        }
    }
    out
}

/// The detailed report of a class verdict (`kubectl mcm rollout plan mc/NAME`).
#[must_use]
pub fn class_report(v: &ClassVerdict) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "MachineClass {}", v.class);
    fields_table(&mut out, &v.changes, false);
    let _ = writeln!(out, "Hot-updatable paths from {}", v.hot_paths_source);
    let warnings = class_warnings(v);
    if warnings.is_empty() {
        out.push_str("Verdict: no machine is replaced or updated\n");
    } else {
        out.push_str("Verdict:\n");
        for w in &warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    out
}
