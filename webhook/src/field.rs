//! Field errors in the vocabulary of Kubernetes' `field.Error` (apimachinery
//! `pkg/util/validation/field`): the reason each error type carries in a `StatusCause` and the
//! message body kubectl prints after the field path.

use serde_json::Value;

/// The kind of a field error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// A mandatory field is missing.
    Required,
    /// A value is malformed or conflicts with another field.
    Invalid(Value),
    /// The field may not be set (or changed) here.
    Forbidden,
    /// An enumeration value outside the supported set.
    NotSupported {
        /// The given value.
        value: String,
        /// The supported values.
        supported: Vec<String>,
    },
    /// A value appears twice where it must be unique.
    Duplicate(Value),
    /// A value is longer than allowed.
    TooLong,
}

/// One problem with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted field path with `[i]` list indices and `[key]` map keys.
    pub field: String,
    /// The kind of problem.
    pub error_type: ErrorType,
    /// Explanation; may be empty.
    pub detail: String,
}

impl FieldError {
    /// A missing mandatory field.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::Required,
            detail: detail.into(),
        }
    }

    /// A bad value.
    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::Invalid(value.into()),
            detail: detail.into(),
        }
    }

    /// A field that may not be set or changed.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::Forbidden,
            detail: detail.into(),
        }
    }

    /// An unsupported enumeration value.
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::NotSupported {
                value: value.to_owned(),
                supported: supported.iter().map(|s| (*s).to_owned()).collect(),
            },
            detail: String::new(),
        }
    }

    /// A duplicated value.
    pub fn duplicate(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::Duplicate(value.into()),
            detail: String::new(),
        }
    }

    /// A value that is too long.
    pub fn too_long(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::TooLong,
            detail: detail.into(),
        }
    }

    /// `StatusCause.reason` of this error.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self.error_type {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid(_) => "FieldValueInvalid",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::NotSupported { .. } => "FieldValueNotSupported",
            ErrorType::Duplicate(_) => "FieldValueDuplicate",
            ErrorType::TooLong => "FieldValueTooLong",
        }
    }

    /// The message body (`ErrorBody` in Go): what kubectl prints after `<field>: `.
    #[must_use]
    pub fn body(&self) -> String {
        let with_detail = |head: String| {
            if self.detail.is_empty() {
                head
            } else {
                format!("{head}: {}", self.detail)
            }
        };
        match &self.error_type {
            ErrorType::Required => with_detail("Required value".to_owned()),
            ErrorType::Invalid(value) => with_detail(format!("Invalid value: {value}")),
            ErrorType::Forbidden => with_detail("Forbidden".to_owned()),
            ErrorType::NotSupported { value, supported } => {
                let list = supported
                    .iter()
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("Unsupported value: {value:?}: supported values: {list}")
            }
            ErrorType::Duplicate(value) => format!("Duplicate value: {value}"),
            ErrorType::TooLong => with_detail("Too long".to_owned()),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The aggregated message of a 422 `Invalid` status, as the API server writes it:
/// `<Kind>.<group> "<name>" is invalid: <err>` or `... is invalid: [<err>, <err>]`.
#[must_use]
pub fn invalid_message(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> String {
    let joined = match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!("{kind}.{group} {name:?} is invalid: {joined}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_follow_the_apimachinery_wording() {
        assert_eq!(FieldError::required("a", "").body(), "Required value");
        assert_eq!(
            FieldError::invalid("a", json!(0), "may not be 0 when `maxSurge` is 0").body(),
            "Invalid value: 0: may not be 0 when `maxSurge` is 0"
        );
        assert_eq!(
            FieldError::invalid("a", json!("x"), "bad").body(),
            "Invalid value: \"x\": bad"
        );
        assert_eq!(
            FieldError::not_supported("a", "Foo", &["A", "B"]).body(),
            "Unsupported value: \"Foo\": supported values: \"A\", \"B\""
        );
        assert_eq!(
            FieldError::forbidden("a", "field is immutable").body(),
            "Forbidden: field is immutable"
        );
        assert_eq!(
            FieldError::duplicate("a", json!("k")).reason(),
            "FieldValueDuplicate"
        );
    }

    #[test]
    fn aggregated_message_uses_brackets_only_for_several_errors() {
        let one = [FieldError::required("spec.selector", "")];
        assert_eq!(
            invalid_message("MachineSet", "machine.sapcloud.io", "ms", &one),
            "MachineSet.machine.sapcloud.io \"ms\" is invalid: spec.selector: Required value"
        );
        let two = [
            FieldError::required("a", ""),
            FieldError::forbidden("b", "no"),
        ];
        assert_eq!(
            invalid_message("MachineSet", "machine.sapcloud.io", "ms", &two),
            "MachineSet.machine.sapcloud.io \"ms\" is invalid: [a: Required value, b: Forbidden: no]"
        );
    }
}
