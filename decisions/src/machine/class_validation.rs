//! What the MachineClass controller records after asking the driver to validate a class
//! (docs/operations.md#a-machineclass-marked-invalid): the `machine.sapcloud.io/class-validation`
//! annotation and a Warning event, decided from the driver's answer and the previous record.
//!
//! The record is an annotation because upstream's MachineClass CRD has no status and prunes
//! unknown fields (docs/upstream-conformance.md#our-own-keys). Its value is `valid`, or `invalid: `
//! followed by the field errors (`<field>: <message>`, joined by `; `). The webhook and
//! `kubectl mcm` read it back with [`recorded_invalid`].

use std::collections::BTreeMap;

use mcm_api::keys::annotation::CLASS_VALIDATION;
use mcm_provider_proto::ClassFieldError;

use crate::vocabulary::event::Event;

/// The reason of the Warning event on an invalid class.
pub const INVALID_REASON: &str = "MachineClassInvalid";
/// The record of a valid class.
pub const VALID: &str = "valid";
/// The prefix of the record of an invalid class.
pub const INVALID_PREFIX: &str = "invalid: ";
/// At most this many field errors are recorded (the rest is counted), so the annotation stays
/// small whatever a driver answers.
pub const MAX_RECORDED_ERRORS: usize = 20;

/// What the driver answered to ValidateMachineClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValidationAnswer {
    /// The call succeeded: these fields are invalid (none: the class is valid).
    Checked(Vec<ClassFieldError>),
    /// The driver does not implement the method.
    Unimplemented,
    /// The class names another provider than the driver serves: not asked; its record, if any,
    /// belongs to the manager of that provider.
    OtherProvider,
    /// The call failed (driver down, deadline, unreadable Secret...): nothing is known.
    Failed,
}

/// The annotation write one validation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordWrite {
    /// Leave the class as it is.
    Keep,
    /// Set the annotation to this value.
    Set(String),
    /// Remove the annotation.
    Remove,
}

/// What one validation pass does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationStep {
    /// The annotation write.
    pub write: RecordWrite,
    /// A Warning event to record on the class.
    pub event: Option<Event>,
    /// Whether the inputs count as validated (not asked again until they change); false after a
    /// failed call, which is retried.
    pub settled: bool,
}

/// The record of an answer that checked the class: `valid` or `invalid: <errors>`.
#[must_use]
pub fn record_of(errors: &[ClassFieldError]) -> String {
    if errors.is_empty() {
        return VALID.to_owned();
    }
    format!("{INVALID_PREFIX}{}", describe(errors))
}

/// The field errors as one line (`field: message; field: message`), at most
/// [`MAX_RECORDED_ERRORS`] of them, then how many more there are.
#[must_use]
pub fn describe(errors: &[ClassFieldError]) -> String {
    let mut parts: Vec<String> = errors
        .iter()
        .take(MAX_RECORDED_ERRORS)
        .map(ToString::to_string)
        .collect();
    if errors.len() > MAX_RECORDED_ERRORS {
        parts.push(format!("and {} more", errors.len() - MAX_RECORDED_ERRORS));
    }
    parts.join("; ")
}

/// Decides what to record after a validation, given the answer and the class's current record
/// (`None`: no annotation).
///
/// - Checked: the record becomes `valid` or `invalid: ...` (written only when it differs); a
///   newly recorded invalid verdict also gets a Warning event `MachineClassInvalid` listing the
///   field errors, and the same verdict already recorded (e.g. after a restart) none.
/// - Unimplemented: nothing is recorded; a record left from a driver that validated is stale and
///   is removed.
/// - OtherProvider: nothing changes (the record is another manager's).
/// - Failed: nothing changes and the validation is retried.
#[must_use]
pub fn plan_validation(answer: &ValidationAnswer, recorded: Option<&str>) -> ValidationStep {
    match answer {
        ValidationAnswer::Checked(errors) => {
            let record = record_of(errors);
            if recorded == Some(record.as_str()) {
                return ValidationStep {
                    write: RecordWrite::Keep,
                    event: None,
                    settled: true,
                };
            }
            let event = (!errors.is_empty()).then(|| {
                Event::warning(
                    INVALID_REASON,
                    format!("invalid providerSpec: {}", describe(errors)),
                )
            });
            ValidationStep {
                write: RecordWrite::Set(record),
                event,
                settled: true,
            }
        }
        ValidationAnswer::Unimplemented => ValidationStep {
            write: if recorded.is_some() {
                RecordWrite::Remove
            } else {
                RecordWrite::Keep
            },
            event: None,
            settled: true,
        },
        ValidationAnswer::OtherProvider => ValidationStep {
            write: RecordWrite::Keep,
            event: None,
            settled: true,
        },
        ValidationAnswer::Failed => ValidationStep {
            write: RecordWrite::Keep,
            event: None,
            settled: false,
        },
    }
}

/// Whether the driver serving `driver_provider` is asked about a class of `class_provider`: yes
/// for its own provider (compared ignoring case) and for a class without one (the driver reports
/// the missing field), no for another provider's class.
#[must_use]
pub fn serves(driver_provider: &str, class_provider: Option<&str>) -> bool {
    match class_provider.filter(|provider| !provider.is_empty()) {
        Some(provider) => provider.eq_ignore_ascii_case(driver_provider),
        None => true,
    }
}

/// The field errors of a class recorded invalid (the text after `invalid: `); `None` when the
/// class is recorded valid or has no record.
#[must_use]
pub fn recorded_invalid(annotations: Option<&BTreeMap<String, String>>) -> Option<&str> {
    annotations?
        .get(CLASS_VALIDATION)?
        .strip_prefix(INVALID_PREFIX)
}

/// The admission warning about a MachineDeployment or MachineSet whose template names a class
/// recorded invalid (docs/webhook-rules.md#invalid-class-warning).
#[must_use]
pub fn invalid_class_warning(namespace: &str, class: &str, errors: &str) -> String {
    format!(
        "machineclass {namespace}/{class} was found invalid by the provider driver, so its machines \
         will fail to be created: {errors}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(field: &str, message: &str) -> ClassFieldError {
        ClassFieldError {
            field: field.to_owned(),
            message: message.to_owned(),
        }
    }

    fn boot_delay() -> Vec<ClassFieldError> {
        vec![error("providerSpec.bootDelay", "not a duration: \"soon\"")]
    }

    #[test]
    fn a_newly_invalid_class_is_recorded_with_a_warning() {
        let step = plan_validation(&ValidationAnswer::Checked(boot_delay()), None);
        assert_eq!(
            step.write,
            RecordWrite::Set("invalid: providerSpec.bootDelay: not a duration: \"soon\"".into())
        );
        let event = step.event.expect("a warning");
        assert_eq!(event.type_, crate::vocabulary::event::EventType::Warning);
        assert_eq!(event.reason, INVALID_REASON);
        assert_eq!(
            event.message,
            "invalid providerSpec: providerSpec.bootDelay: not a duration: \"soon\""
        );
        assert!(step.settled);
    }

    #[test]
    fn a_class_turning_valid_is_recorded_without_an_event() {
        let recorded = record_of(&boot_delay());
        let step = plan_validation(&ValidationAnswer::Checked(Vec::new()), Some(&recorded));
        assert_eq!(step.write, RecordWrite::Set(VALID.into()));
        assert_eq!(step.event, None);
        let fresh = plan_validation(&ValidationAnswer::Checked(Vec::new()), None);
        assert_eq!(fresh.write, RecordWrite::Set(VALID.into()));
        assert_eq!(fresh.event, None);
    }

    #[test]
    fn the_same_verdict_already_recorded_writes_and_emits_nothing() {
        let recorded = record_of(&boot_delay());
        let step = plan_validation(&ValidationAnswer::Checked(boot_delay()), Some(&recorded));
        assert_eq!(
            step,
            ValidationStep {
                write: RecordWrite::Keep,
                event: None,
                settled: true
            }
        );
        let valid = plan_validation(&ValidationAnswer::Checked(Vec::new()), Some(VALID));
        assert_eq!(valid.write, RecordWrite::Keep);
        assert_eq!(valid.event, None);
    }

    #[test]
    fn other_field_errors_replace_the_record_and_warn_again() {
        let recorded = record_of(&boot_delay());
        let tags = vec![error(
            "providerSpec.tags",
            "must be an object of strings, got an array",
        )];
        let step = plan_validation(&ValidationAnswer::Checked(tags), Some(&recorded));
        assert_eq!(
            step.write,
            RecordWrite::Set(
                "invalid: providerSpec.tags: must be an object of strings, got an array".into()
            )
        );
        assert!(step.event.is_some());
    }

    #[test]
    fn unimplemented_records_nothing_and_removes_a_stale_record() {
        let none = plan_validation(&ValidationAnswer::Unimplemented, None);
        assert_eq!(
            none,
            ValidationStep {
                write: RecordWrite::Keep,
                event: None,
                settled: true
            }
        );
        let stale = plan_validation(&ValidationAnswer::Unimplemented, Some(VALID));
        assert_eq!(stale.write, RecordWrite::Remove);
        assert_eq!(stale.event, None);
    }

    #[test]
    fn a_class_of_another_provider_is_left_alone() {
        for recorded in [None, Some(VALID), Some("invalid: provider: x")] {
            assert_eq!(
                plan_validation(&ValidationAnswer::OtherProvider, recorded),
                ValidationStep {
                    write: RecordWrite::Keep,
                    event: None,
                    settled: true
                }
            );
        }
    }

    /// Whether a class is asked about: one whose `provider` names another driver is not (two
    /// managers of different providers sharing a namespace must not judge each other's classes).
    #[test]
    fn serves_compares_provider_names_ignoring_case() {
        assert!(serves("virtual", Some("virtual")));
        assert!(serves("Azure", Some("azure")));
        assert!(serves("virtual", None));
        assert!(serves("virtual", Some("")));
        assert!(!serves("virtual", Some("AWS")));
    }

    #[test]
    fn a_failed_call_changes_nothing_and_is_retried() {
        let recorded = record_of(&boot_delay());
        let step = plan_validation(&ValidationAnswer::Failed, Some(&recorded));
        assert_eq!(
            step,
            ValidationStep {
                write: RecordWrite::Keep,
                event: None,
                settled: false
            }
        );
    }

    #[test]
    fn many_errors_are_capped() {
        let errors: Vec<_> = (0..25)
            .map(|i| error(&format!("providerSpec.f{i}"), "unknown field"))
            .collect();
        let record = record_of(&errors);
        assert!(record.ends_with("; and 5 more"), "{record}");
        assert_eq!(record.matches("unknown field").count(), MAX_RECORDED_ERRORS);
    }

    #[test]
    fn the_record_reads_back() {
        let mut annotations = BTreeMap::new();
        assert_eq!(recorded_invalid(None), None);
        assert_eq!(recorded_invalid(Some(&annotations)), None);
        annotations.insert(CLASS_VALIDATION.to_owned(), VALID.to_owned());
        assert_eq!(recorded_invalid(Some(&annotations)), None);
        annotations.insert(CLASS_VALIDATION.to_owned(), record_of(&boot_delay()));
        assert_eq!(
            recorded_invalid(Some(&annotations)),
            Some("providerSpec.bootDelay: not a duration: \"soon\"")
        );
    }
}
