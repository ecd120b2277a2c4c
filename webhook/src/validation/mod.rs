//! Validation rules (reference §5.1–§5.4) as pure functions over the hub types.
//!
//! Each function takes the new object, the old object on UPDATE and the request context, and
//! returns a [`Report`]: field errors (each tagged with the rule that found it, for the
//! denial metric) and warnings. Field paths are written in the hub's shape, which is the
//! `v1alpha1` shape; [`crate::paths`] translates them for `v1beta1` requests. Ratcheting
//! (§5.6) is applied afterwards by [`crate::ratchet`], on the JSON of the request.

pub mod common;
mod machine;
mod machine_class;
mod machine_deployment;
mod machine_set;

pub use machine::machine;
pub use machine_class::machine_class;
pub use machine_deployment::machine_deployment;
pub use machine_set::machine_set;

use std::collections::BTreeMap;

use crate::field::FieldError;

/// The admission operation being validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A new object.
    Create,
    /// A change to an existing object.
    Update,
}

/// What the rules may know about the request besides the objects.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// CREATE or UPDATE.
    pub operation: Operation,
    /// `request.userInfo.username`.
    pub username: &'a str,
}

/// Errors and warnings found by the rules.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Field errors with the name of the rule that found each.
    pub errors: Vec<(&'static str, FieldError)>,
    /// Warnings (short, one fact each).
    pub warnings: Vec<String>,
}

impl Report {
    /// Records a field error found by `rule`.
    pub fn error(&mut self, rule: &'static str, error: FieldError) {
        self.errors.push((rule, error));
    }

    /// Records a warning (duplicates are dropped).
    pub fn warn(&mut self, warning: String) {
        if !self.warnings.contains(&warning) {
            self.warnings.push(warning);
        }
    }

    /// Number of errors so far.
    #[must_use]
    pub fn error_count(&self) -> usize {
        self.errors.len()
    }

    /// The field errors alone.
    #[must_use]
    pub fn field_errors(&self) -> Vec<FieldError> {
        self.errors.iter().map(|(_, e)| e.clone()).collect()
    }
}

/// Checks the control annotations that are parsed at runtime (MachineDeployment, MachineSet).
fn control_annotations(report: &mut Report, annotations: Option<&BTreeMap<String, String>>) {
    use mcm_api::keys::annotation::{EFFECTIVE_CREATION_TIMEOUT, TRIGGER_DELETION_BY_MCM};
    let Some(annotations) = annotations else {
        return;
    };
    if let Some(value) = annotations.get(EFFECTIVE_CREATION_TIMEOUT)
        && value.parse::<mcm_api::duration::Duration>().is_err()
    {
        report.error(
            "control-annotations",
            FieldError::invalid(
                format!("metadata.annotations[{EFFECTIVE_CREATION_TIMEOUT}]"),
                serde_json::json!(value),
                "must be a duration such as 20m or 1h30m",
            ),
        );
    }
    if let Some(value) = annotations.get(TRIGGER_DELETION_BY_MCM)
        && value.split(',').any(|entry| entry.trim().is_empty())
    {
        report.warn(format!(
            "metadata.annotations[{TRIGGER_DELETION_BY_MCM}] has empty entries; they are ignored"
        ));
    }
}
