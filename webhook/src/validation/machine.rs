//! Machine rules (docs/behaviour.md#machine-admission-rules).

use super::common;
use super::report::Report;
use crate::field::FieldError;
use crate::request::{Context, Operation};
use mcm_api::internal::Machine;

/// Validates a Machine (and, on UPDATE, the change from `old`).
#[must_use]
pub fn machine(new: &Machine, old: Option<&Machine>, context: &Context<'_>) -> Report {
    let mut report = Report::default();
    let Some(spec) = &new.spec else {
        report.error("spec-required", FieldError::required("spec", ""));
        return report;
    };
    common::class_reference(&mut report, "spec.class", spec.class.as_ref());
    common::node_template(
        &mut report,
        "spec.nodeTemplate",
        spec.node_template.as_ref(),
    );
    common::configuration(&mut report, "spec", &spec.configuration);
    let owned_by_set = new
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.kind == "MachineSet");
    match (context.operation, old.and_then(|o| o.spec.as_ref())) {
        (Operation::Create, _) => {
            if !owned_by_set {
                report.warn("this Machine is not managed by any MachineSet".to_owned());
            }
        }
        (Operation::Update, Some(old_spec)) => {
            let old_id = old_spec.provider_id.as_deref().unwrap_or_default();
            let new_id = spec.provider_id.as_deref().unwrap_or_default();
            if !old_id.is_empty() && old_id != new_id {
                report.error(
                    "provider-id-immutable",
                    FieldError::forbidden(
                        "spec.providerID",
                        format!("may not change providerID except from \"\" to a value (was {old_id:?}, now {new_id:?})"),
                    ),
                );
            }
            if owned_by_set
                && old_spec != spec
                && !context.username.starts_with("system:serviceaccount:")
            {
                report.warn("spec of a Machine owned by a MachineSet changed; edit the MachineDeployment instead".to_owned());
            }
        }
        (Operation::Update, None) => {}
    }
    report
}
