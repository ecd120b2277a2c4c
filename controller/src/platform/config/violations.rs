//! Validation errors ([`FieldError`]), their collector and the syntax checks the rules share.

use mcm_api::duration::Duration;

/// One violated rule: the flag, the value given and why it was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--{flag}={value}: {reason}")]
pub struct FieldError {
    /// Flag name without the leading dashes.
    pub flag: &'static str,
    /// The value as given (or as parsed, for durations and numbers).
    pub value: String,
    /// Why it was refused.
    pub reason: String,
}

impl FieldError {
    fn new(flag: &'static str, value: impl ToString, reason: impl Into<String>) -> Self {
        Self {
            flag,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// Collects violations so [`validate`](super::validate()) can report all of them together.
#[derive(Default)]
pub(super) struct Violations(pub(super) Vec<FieldError>);

impl Violations {
    pub(super) fn push(
        &mut self,
        flag: &'static str,
        value: impl ToString,
        reason: impl Into<String>,
    ) {
        self.0.push(FieldError::new(flag, value, reason));
    }

    pub(super) fn non_negative_duration(&mut self, flag: &'static str, value: Duration) {
        if value.is_negative() {
            self.push(flag, value, "must not be negative");
        }
    }

    /// A positive duration, converted for runtime use (`None` when refused).
    pub(super) fn positive_std_duration(
        &mut self,
        flag: &'static str,
        value: Duration,
    ) -> Option<std::time::Duration> {
        match value.to_std() {
            Some(duration) if !duration.is_zero() => Some(duration),
            _ => {
                self.push(flag, value, "must be greater than zero");
                None
            }
        }
    }

    pub(super) fn non_negative_int(&mut self, flag: &'static str, value: i32) -> u32 {
        u32::try_from(value).unwrap_or_else(|_| {
            self.push(flag, value, "must not be negative");
            0
        })
    }
}

/// Whether `text` parses as a media type (`type/subtype` with optional `; key=value` parameters),
/// the check upstream performs with Go's `mime.ParseMediaType`.
pub(super) fn is_media_type(text: &str) -> bool {
    fn is_token(text: &str) -> bool {
        !text.is_empty()
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
    }
    let mut parts = text.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    if !is_token(kind) || !is_token(subtype) {
        return false;
    }
    parts.all(|parameter| {
        let parameter = parameter.trim();
        // Go tolerates a trailing `;` but not empty parameters in the middle; accepting both is harmless.
        if parameter.is_empty() {
            return true;
        }
        match parameter.split_once('=') {
            Some((key, value)) => {
                let quoted = value.len() >= 2 && value.starts_with('"') && value.ends_with('"');
                is_token(key.trim()) && (quoted || is_token(value.trim()))
            }
            None => false,
        }
    })
}

/// Whether `name` is a DNS-1123 label, the form Kubernetes requires of namespace names.
pub(super) fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// Whether `name` is a DNS-1123 subdomain, the form Kubernetes requires of most object names.
pub(super) fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}
