//! The outcome of running the rules on one object: field errors tagged with their rule, and
//! warnings.

use crate::field::FieldError;

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
