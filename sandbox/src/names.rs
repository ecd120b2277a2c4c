//! kube-apiserver's rules for object names, `generateName` and labels, so that what a real
//! cluster refuses is refused here too (and tests catch names and labels that only fit here).
//!
//! - `generateName`: the base is cut to 58 characters before the 5-character random suffix is
//!   added, so a generated name never exceeds 63 (kube's `SimpleNameGenerator`: 63 − 5). The
//!   prefix itself must be a valid name once its trailing `-` is ignored.
//! - Namespaces are RFC 1123 labels (≤ 63); every other name is checked by
//!   [`crate::schema::validate_name`].
//! - Label keys are qualified names (optional DNS-subdomain prefix ≤ 253 and `/`, then a name
//!   ≤ 63 of `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`); values are ≤ 63 characters of
//!   `(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?`.
//!
//! Errors are [`Cause`]s with kube's field paths (`metadata.name`, `metadata.generateName`,
//! `metadata.labels`) and wording.

use serde_json::Value;

use crate::error::Cause;

/// The longest name kube generates: an RFC 1123 label.
pub const MAX_GENERATED_NAME_LENGTH: usize = 63;
/// Length of the random suffix kube appends to `generateName`.
pub const RANDOM_SUFFIX_LENGTH: usize = 5;
/// The longest `generateName` base kept: longer ones are cut to this length.
pub const MAX_GENERATE_NAME_BASE: usize = MAX_GENERATED_NAME_LENGTH - RANDOM_SUFFIX_LENGTH;
/// Longest RFC 1123 label (and label value, and name part of a qualified name).
pub const MAX_LABEL_LENGTH: usize = 63;
/// Longest RFC 1123 subdomain.
pub const MAX_SUBDOMAIN_LENGTH: usize = 253;

const DNS1123_LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const QUALIFIED_NAME_MESSAGE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_KEY_SHAPE_MESSAGE: &str = "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// The part of `generate_name` kept before the random suffix: at most
/// [`MAX_GENERATE_NAME_BASE`] characters, as kube-apiserver's name generator cuts it (the
/// `generateName` field itself stays as written).
#[must_use]
pub fn generated_name_base(generate_name: &str) -> &str {
    match generate_name.char_indices().nth(MAX_GENERATE_NAME_BASE) {
        Some((cut, _)) => &generate_name[..cut],
        None => generate_name,
    }
}

/// The name, `generateName` and label errors of `obj` (a resource of `plural`), as
/// kube-apiserver's `ValidateObjectMeta` reports them.
#[must_use]
pub fn metadata_causes(plural: &str, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let text = |key: &str| obj.pointer(key).and_then(Value::as_str).unwrap_or_default();
    let name = text("/metadata/name");
    let generate_name = text("/metadata/generateName");
    let label_rule = plural == "namespaces";
    if !name.is_empty() && label_rule {
        for message in dns1123_label(name) {
            causes.push(invalid("metadata.name", name, message));
        }
        // kube labels every namespace `kubernetes.io/metadata.name: <name>` before it validates,
        // so a name too long for a label value is reported twice.
        for message in label_value(name) {
            causes.push(invalid("metadata.labels", name, message));
        }
    }
    if !generate_name.is_empty() {
        // Checked as kube checks a prefix: its trailing '-' is allowed.
        let masked = generate_name
            .strip_suffix('-')
            .map_or_else(|| generate_name.to_owned(), |head| format!("{head}a"));
        let messages = if label_rule {
            dns1123_label(&masked)
        } else {
            dns1123_subdomain(&masked)
        };
        for message in messages {
            causes.push(invalid("metadata.generateName", generate_name, message));
        }
    }
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        for (key, value) in labels {
            for message in qualified_name(key) {
                causes.push(invalid("metadata.labels", key, message));
            }
            let value = value.as_str().unwrap_or_default();
            for message in label_value(value) {
                causes.push(invalid("metadata.labels", value, message));
            }
        }
    }
    causes
}

fn invalid(field: &str, value: &str, detail: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        field: field.into(),
        detail,
        value: Some(Value::String(value.to_owned()).to_string()),
    }
}

fn too_long(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// Label keys' name parts and label values are counted in bytes since kube 1.35; names still in
/// characters (both are ASCII when valid, so the limit itself is the same).
fn too_many_bytes(max: usize) -> String {
    format!("must be no more than {max} bytes")
}

fn is_label_shape(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// `IsDNS1123Label`: the messages for `text`, empty when valid.
fn dns1123_label(text: &str) -> Vec<String> {
    let mut messages = Vec::new();
    if text.len() > MAX_LABEL_LENGTH {
        messages.push(too_long(MAX_LABEL_LENGTH));
    }
    if !is_label_shape(text) {
        messages.push(DNS1123_LABEL_MESSAGE.to_owned());
    }
    messages
}

/// `IsDNS1123Subdomain`: the messages for `text`, empty when valid.
fn dns1123_subdomain(text: &str) -> Vec<String> {
    let mut messages = Vec::new();
    if text.len() > MAX_SUBDOMAIN_LENGTH {
        messages.push(too_long(MAX_SUBDOMAIN_LENGTH));
    }
    if !text.split('.').all(is_label_shape) {
        messages.push(DNS1123_SUBDOMAIN_MESSAGE.to_owned());
    }
    messages
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, non-empty.
fn is_qualified_shape(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// `IsQualifiedName` (label keys): the messages for `key`, empty when valid.
pub(crate) fn qualified_name(key: &str) -> Vec<String> {
    let parts: Vec<&str> = key.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => return vec![LABEL_KEY_SHAPE_MESSAGE.to_owned()],
    };
    let mut messages = Vec::new();
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            messages.push("prefix part must be non-empty".to_owned());
        } else {
            messages.extend(
                dns1123_subdomain(prefix)
                    .into_iter()
                    .map(|message| format!("prefix part {message}")),
            );
        }
    }
    if name.is_empty() {
        messages.push("name part must be non-empty".to_owned());
    } else {
        if name.len() > MAX_LABEL_LENGTH {
            messages.push(format!("name part {}", too_many_bytes(MAX_LABEL_LENGTH)));
        }
        if !is_qualified_shape(name) {
            messages.push(QUALIFIED_NAME_MESSAGE.to_owned());
        }
    }
    messages
}

/// `IsValidLabelValue`: the messages for `value`, empty when valid.
fn label_value(value: &str) -> Vec<String> {
    let mut messages = Vec::new();
    if value.len() > MAX_LABEL_LENGTH {
        messages.push(too_many_bytes(MAX_LABEL_LENGTH));
    }
    if !value.is_empty() && !is_qualified_shape(value) {
        messages.push(LABEL_VALUE_MESSAGE.to_owned());
    }
    messages
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(causes: &[Cause]) -> Vec<(String, String)> {
        causes
            .iter()
            .map(|c| (c.field.clone(), c.message_body()))
            .collect()
    }

    #[test]
    fn generate_name_is_cut_to_leave_room_for_the_suffix() {
        assert_eq!(generated_name_base(&"a".repeat(70)), "a".repeat(58));
        assert_eq!(generated_name_base("ms-"), "ms-");
        assert_eq!(generated_name_base(&"b".repeat(58)), "b".repeat(58));
    }

    #[test]
    fn label_values_longer_than_63_or_of_bad_shape_are_refused() {
        let long = "v".repeat(64);
        let obj = json!({"metadata": {"labels": {"ok": "v".repeat(63), "node": long, "bad": "-x", "empty": ""}}});
        let found = fields(&metadata_causes("machines", &obj));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.contains(&(
            "metadata.labels".into(),
            format!("Invalid value: \"{long}\": must be no more than 63 bytes")
        )));
        assert!(found.contains(&(
            "metadata.labels".into(),
            format!("Invalid value: \"-x\": {LABEL_VALUE_MESSAGE}")
        )));
    }

    #[test]
    fn label_keys_are_qualified_names() {
        let valid = ["a", "A_b.c-9", "example.com/name", "x.y/Z"];
        for key in valid {
            assert!(qualified_name(key).is_empty(), "{key}");
        }
        assert_eq!(qualified_name("a/b/c"), vec![LABEL_KEY_SHAPE_MESSAGE]);
        assert_eq!(qualified_name("/b"), vec!["prefix part must be non-empty"]);
        assert_eq!(qualified_name("a/"), vec!["name part must be non-empty"]);
        assert_eq!(
            qualified_name(&"n".repeat(64)),
            vec!["name part must be no more than 63 bytes"]
        );
        assert_eq!(
            qualified_name("Example.com/n"),
            vec![format!("prefix part {DNS1123_SUBDOMAIN_MESSAGE}")]
        );
        assert_eq!(qualified_name("n_"), vec![QUALIFIED_NAME_MESSAGE]);
    }

    #[test]
    fn namespaces_are_rfc1123_labels_and_generate_name_a_valid_prefix() {
        let long = "n".repeat(64);
        let obj = json!({"metadata": {"name": long}});
        assert_eq!(
            fields(&metadata_causes("namespaces", &obj)),
            vec![
                (
                    "metadata.name".into(),
                    format!("Invalid value: \"{long}\": must be no more than 63 characters")
                ),
                (
                    "metadata.labels".into(),
                    format!("Invalid value: \"{long}\": must be no more than 63 bytes")
                )
            ]
        );
        assert!(metadata_causes("namespaces", &json!({"metadata": {"name": "a.b"}})).len() == 1);
        assert!(
            metadata_causes("machines", &json!({"metadata": {"generateName": "ms-"}})).is_empty()
        );
        let bad = metadata_causes("machines", &json!({"metadata": {"generateName": "Ms-"}}));
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].field, "metadata.generateName");
        assert!(dns1123_subdomain("a..b").len() == 1);
    }
}
