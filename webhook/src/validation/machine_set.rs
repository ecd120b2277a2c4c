//! MachineSet rules (docs/behaviour.md#admission-rules rules 1–5, 13, 15; docs/behaviour.md#further-admission-rules).

use mcm_api::internal::MachineSet;
use serde_json::json;

use super::common;
use super::machine_deployment::{auto_preserve, template};
use super::report::Report;
use crate::field::FieldError;
use crate::request::{Context, Operation};

/// Validates a MachineSet (and, on UPDATE, the change from `old`).
#[must_use]
pub fn machine_set(new: &MachineSet, old: Option<&MachineSet>, context: &Context<'_>) -> Report {
    let mut report = Report::default();
    common::control_annotations(&mut report, new.metadata.annotations.as_ref());
    let Some(spec) = &new.spec else {
        report.error("spec-required", FieldError::required("spec", ""));
        return report;
    };
    common::non_negative(&mut report, "replicas", "spec.replicas", spec.replicas);
    let selector_usable = common::selector(&mut report, "spec.selector", spec.selector.as_ref());
    match &spec.template {
        Some(machine_template) => template(
            &mut report,
            "spec.template",
            machine_template,
            spec.selector.as_ref().filter(|_| selector_usable),
        ),
        None => report.error(
            "template-required",
            FieldError::required("spec.template", ""),
        ),
    }
    common::non_negative(
        &mut report,
        "durations",
        "spec.minReadySeconds",
        spec.min_ready_seconds,
    );
    auto_preserve(
        &mut report,
        spec.auto_preserve_failed_machine_max,
        spec.replicas,
    );
    if spec.legacy_machine_class.is_some() {
        report.warn(
            "spec.machineClass is a legacy field; the class comes from spec.template.spec.class"
                .to_owned(),
        );
    }
    if let (Operation::Update, Some(old_spec)) =
        (context.operation, old.and_then(|o| o.spec.as_ref()))
    {
        if old_spec.selector.is_some() && spec.selector != old_spec.selector {
            report.error(
                "selector-immutable",
                FieldError::invalid(
                    "spec.selector",
                    serde_json::to_value(&spec.selector).unwrap_or(json!(null)),
                    "field is immutable",
                ),
            );
        }
        let owner = new
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true) && r.kind == "MachineDeployment");
        if let Some(owner) = owner
            && spec.template != old_spec.template
        {
            report.warn(format!(
                "spec.template will be overwritten by MachineDeployment {}",
                owner.name
            ));
        }
    }
    report
}
