//! Lenient decoding of a request's object: every field that does not fit its type becomes its own
//! [`FieldError`] with a kubectl-style path, and the rest of the object is still decoded so the
//! rules can judge it.
//!
//! serde stops at the first bad field, so decoding is repeated on a copy with each bad field
//! taken out, until the copy decodes (at most [`MAX_FIELD_ERRORS`] rounds). serde's own messages
//! are rewritten into the API server's wording (`must be an integer between ...`), except for
//! duration errors, which already use Go's (`time: invalid duration "soon"`).
//!
//! A flattened struct (the machine configuration inlined into a machine spec) reports its errors
//! at the enclosing object; the culprit is then found by taking the members of that object out
//! one at a time until the error changes.

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;

use crate::field::FieldError;

/// Most field errors collected for one object; a request with more bad fields gets these.
pub const MAX_FIELD_ERRORS: usize = 32;

/// Most decoding rounds for one object (each takes one field or one consequence out).
const MAX_ROUNDS: usize = 4 * MAX_FIELD_ERRORS;

/// Most members tried when looking for the culprit inside an object. Each try decodes a copy of
/// the whole object, so a crafted object with thousands of members must not cost thousands of
/// decodes; past this many, the enclosing object is blamed instead.
const MAX_PROBES: usize = 16;

/// Most decodes of copies for one object, whatever its shape: bounds the work a crafted request
/// can cause. When spent, the errors found so far are answered.
const MAX_DECODES: usize = 128;

/// The object as far as it decodes, and one error per field that does not.
#[derive(Debug)]
pub struct Lenient<T> {
    /// The decoded object without the bad fields; `None` when a required member is missing, so
    /// nothing can be judged beyond the errors.
    pub value: Option<T>,
    /// One error per bad field, paths in the shape of the decoded version.
    pub errors: Vec<FieldError>,
}

/// One step of a path into a JSON document.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Where and why one decoding attempt failed.
struct Failure {
    path: Vec<Step>,
    message: String,
}

/// Decodes `object` as `T`, collecting one error per field that does not fit.
///
/// # Errors
///
/// The decoder's message when the object as a whole cannot be decoded (not a JSON object, or
/// an error no field can be blamed for): that is a malformed request, not an invalid field.
pub fn lenient<T: DeserializeOwned>(object: &Value) -> Result<Lenient<T>, String> {
    // The common case pays for one plain decode only.
    let first = match T::deserialize(object) {
        Ok(value) => {
            return Ok(Lenient {
                value: Some(value),
                errors: Vec::new(),
            });
        }
        Err(error) => error,
    };
    if !object.is_object() {
        // No field to blame: serde would read a list as a struct's members in order.
        return Err(format!("cannot decode the object: {first}"));
    }
    let mut copy = object.clone();
    let mut errors: Vec<FieldError> = Vec::new();
    // Every path taken out of `copy` so far; failures under them are consequences, not news.
    let mut taken: Vec<Vec<Step>> = Vec::new();
    let mut budget = MAX_DECODES;
    for _ in 0..MAX_ROUNDS {
        if errors.len() >= MAX_FIELD_ERRORS {
            break;
        }
        let Some(outcome) = attempt::<T>(&copy, &mut budget) else {
            break;
        };
        let failure = match outcome {
            Ok(value) => {
                return Ok(Lenient {
                    value: Some(value),
                    errors,
                });
            }
            Err(failure) => failure,
        };
        let consequence = |path: &[Step]| taken.iter().any(|t| path.starts_with(t));
        if let Some(field) = missing_field(&failure.message) {
            let mut member = failure.path.clone();
            member.push(Step::Key(field.to_owned()));
            if !consequence(&member) {
                errors.push(FieldError::required(render(&member), ""));
            }
        } else if !consequence(&failure.path) {
            let path = culprit::<T>(&copy, failure.path.clone(), &failure.message, &mut budget);
            if path.is_empty() {
                break;
            }
            let value = shown(lookup(&copy, &path));
            errors.push(FieldError::invalid(
                render(&path),
                value,
                describe(&failure.message),
            ));
            remove(&mut copy, &path);
            taken.push(path);
            continue;
        }
        // The object holding the failure goes; if it already went (a list item left as null),
        // its parent goes.
        let mut out = failure.path;
        if taken.contains(&out) {
            out.pop();
        }
        if out.is_empty() {
            break;
        }
        remove(&mut copy, &out);
        taken.push(out);
    }
    if errors.is_empty() {
        return Err(format!("cannot decode the object: {first}"));
    }
    Ok(Lenient {
        value: None,
        errors,
    })
}

/// One decoding attempt with the path of the first bad field; `None` once `budget` is spent.
fn attempt<T: DeserializeOwned>(object: &Value, budget: &mut usize) -> Option<Result<T, Failure>> {
    *budget = budget.checked_sub(1)?;
    let outcome = serde_path_to_error::deserialize::<_, T>(object).map_err(|error| {
        let path = error
            .path()
            .iter()
            .map_while(|segment| match segment {
                Segment::Map { key } => Some(Step::Key(key.clone())),
                Segment::Seq { index } => Some(Step::Index(*index)),
                Segment::Enum { .. } | Segment::Unknown => None,
            })
            .collect();
        Failure {
            path,
            message: error.into_inner().to_string(),
        }
    });
    Some(outcome)
}

/// The field to blame for an error reported at `path`. An error reported at an object that is
/// present and an object came from a member decoded out of sight (a flattened struct): the first
/// member whose removal changes the error is the culprit (among the first [`MAX_PROBES`]; else
/// the object itself is blamed).
fn culprit<T: DeserializeOwned>(
    object: &Value,
    path: Vec<Step>,
    message: &str,
    budget: &mut usize,
) -> Vec<Step> {
    let Some(Value::Object(members)) = lookup(object, &path) else {
        return path;
    };
    if message.starts_with("invalid type: map") {
        // The object itself is where something else was expected.
        return path;
    }
    for key in members.keys().take(MAX_PROBES) {
        let mut member = path.clone();
        member.push(Step::Key(key.clone()));
        let mut probe = object.clone();
        remove(&mut probe, &member);
        let Some(outcome) = attempt::<T>(&probe, budget) else {
            return path;
        };
        match outcome {
            Ok(_) => return member,
            // Taking out a required member only trades the error for "missing field".
            Err(failure) if missing_field(&failure.message) == Some(key.as_str()) => {}
            Err(failure) if failure.path != path || failure.message != message => return member,
            Err(_) => {}
        }
    }
    path
}

/// Longest value (as JSON) quoted in an error; longer ones are named by their type, so blaming
/// a large object does not echo it back.
const MAX_SHOWN_VALUE: usize = 64;

/// The value to quote in the error for a bad field.
fn shown(value: Option<&Value>) -> Value {
    let Some(value) = value else {
        return Value::Null;
    };
    let long = || value.to_string().len() > MAX_SHOWN_VALUE;
    match value {
        Value::Object(_) if long() => Value::String("object".to_owned()),
        Value::Array(_) if long() => Value::String("list".to_owned()),
        Value::String(text) if long() => {
            let cut: String = text.chars().take(MAX_SHOWN_VALUE).collect();
            Value::String(format!("{cut}..."))
        }
        other => other.clone(),
    }
}

/// The member named by serde's `missing field `x`` message.
fn missing_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
}

/// The API server's wording for serde's type errors; other messages are kept.
fn describe(message: &str) -> String {
    let expected = message
        .rsplit_once(", expected ")
        .map(|(_, expected)| expected);
    let integer = |bits: &str, signed: bool| match (bits, signed) {
        ("32", true) => "must be an integer between -2147483648 and 2147483647".to_owned(),
        ("64", true) => {
            "must be an integer between -9223372036854775808 and 9223372036854775807".to_owned()
        }
        (_, false) => "must be a non-negative integer".to_owned(),
        _ => "must be an integer".to_owned(),
    };
    match expected {
        Some(expected) if expected.starts_with('i') && expected[1..].parse::<u8>().is_ok() => {
            integer(&expected[1..], true)
        }
        Some(expected) if expected.starts_with('u') && expected[1..].parse::<u8>().is_ok() => {
            integer(&expected[1..], false)
        }
        Some("a boolean") => "must be a boolean".to_owned(),
        Some("a string") => "must be a string".to_owned(),
        Some(expected) if expected.starts_with("a sequence") => "must be a list".to_owned(),
        Some(expected) if expected.starts_with("struct ") || expected.starts_with("a map") => {
            "must be an object".to_owned()
        }
        // k8s-openapi's own types name themselves (`expected ObjectMeta`).
        Some(expected) if expected.starts_with(|c: char| c.is_ascii_uppercase()) => {
            "must be an object".to_owned()
        }
        Some(expected) if message.starts_with("invalid type") => format!("must be {expected}"),
        _ => message.to_owned(),
    }
}

/// kubectl-style path: dotted member names, `[i]` for list items and `[key]` for keys that are
/// not plain names (label keys with dots or slashes).
fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key)
                if !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Step::Key(key) => {
                out.push('[');
                out.push_str(key);
                out.push(']');
            }
            Step::Index(index) => {
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
        }
    }
    out
}

fn lookup<'a>(value: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter()
        .try_fold(value, |value, step| match (value, step) {
            (Value::Object(map), Step::Key(key)) => map.get(key),
            (Value::Array(items), Step::Index(index)) => items.get(*index),
            _ => None,
        })
}

/// Takes the value at `path` out of `value`: an object member is removed; a list item becomes
/// `null` so the indices of the items after it (and their errors) stay as the user wrote them.
fn remove(value: &mut Value, path: &[Step]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let parent = parent
        .iter()
        .try_fold(value, |value, step| match (value, step) {
            (Value::Object(map), Step::Key(key)) => map.get_mut(key),
            (Value::Array(items), Step::Index(index)) => items.get_mut(*index),
            _ => None,
        });
    match (parent, last) {
        (Some(Value::Object(map)), Step::Key(key)) => {
            map.remove(key);
        }
        (Some(Value::Array(items)), Step::Index(index)) => {
            if let Some(item) = items.get_mut(*index) {
                *item = Value::Null;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcm_api::v1alpha1;
    use serde_json::json;

    fn deployment(spec: Value) -> Value {
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineDeployment",
            "metadata": { "name": "md" },
            "spec": spec,
        })
    }

    fn fields(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn every_bad_field_gets_its_own_error_and_the_rest_decodes() {
        let object = deployment(json!({
            "replicas": 2147483648_u64,
            "minReadySeconds": "soon",
            "template": { "spec": { "healthTimeout": "soon", "drainTimeout": "5m",
                "class": { "name": "c" } } },
        }));
        let decoded = lenient::<v1alpha1::MachineDeployment>(&object).unwrap();
        let mut got = fields(&decoded.errors);
        got.sort();
        assert_eq!(
            got,
            [
                "spec.minReadySeconds: Invalid value: \"soon\": must be an integer between -2147483648 and 2147483647",
                "spec.replicas: Invalid value: 2147483648: must be an integer between -2147483648 and 2147483647",
                "spec.template.spec.healthTimeout: Invalid value: \"soon\": time: invalid duration \"soon\"",
            ]
        );
        let value = decoded.value.unwrap();
        assert_eq!(value.spec.replicas, None);
        let template = value.spec.template.spec.unwrap();
        assert_eq!(
            template.configuration.drain_timeout.map(|d| d.to_string()),
            Some("5m0s".to_owned())
        );
        assert_eq!(template.class.unwrap().name.as_deref(), Some("c"));
    }

    #[test]
    fn keys_that_are_not_plain_names_are_bracketed_and_list_items_indexed() {
        let object = json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "Machine",
            "metadata": { "name": "m", "labels": { "app.kubernetes.io/name": 5 } },
            "spec": { "nodeTemplate": { "spec": { "taints": [
                { "key": "a", "effect": "NoSchedule" },
                { "key": true, "effect": "NoSchedule" },
            ] } } },
        });
        let decoded = lenient::<v1alpha1::Machine>(&object).unwrap();
        let mut got: Vec<&str> = decoded.errors.iter().map(|e| e.field.as_str()).collect();
        got.sort_unstable();
        assert_eq!(
            got,
            [
                "metadata.labels[app.kubernetes.io/name]",
                "spec.nodeTemplate.spec.taints[1].key",
            ]
        );
        assert!(decoded.value.is_some());
    }

    #[test]
    fn a_valid_object_has_no_errors() {
        let object = deployment(json!({ "replicas": 2, "template": {} }));
        let decoded = lenient::<v1alpha1::MachineDeployment>(&object).unwrap();
        assert!(decoded.errors.is_empty());
        assert_eq!(decoded.value.unwrap().spec.replicas, Some(2));
    }

    #[test]
    fn an_object_that_is_not_an_object_is_a_malformed_request() {
        let error = lenient::<v1alpha1::MachineDeployment>(&json!([1, 2])).unwrap_err();
        assert!(error.starts_with("cannot decode the object: "), "{error}");
    }

    #[test]
    fn a_culprit_hidden_among_many_members_blames_the_enclosing_object() {
        // Unknown members sort before the bad one, more than the probes look at.
        let mut spec = serde_json::Map::new();
        for i in 0..(4 * MAX_PROBES) {
            spec.insert(format!("a{i:04}"), json!("filler"));
        }
        spec.insert("healthTimeout".to_owned(), json!("soon"));
        let object = deployment(json!({ "template": { "spec": spec } }));
        let decoded = lenient::<v1alpha1::MachineDeployment>(&object).unwrap();
        assert_eq!(
            fields(&decoded.errors),
            ["spec.template.spec: Invalid value: \"object\": time: invalid duration \"soon\""]
        );
        assert!(decoded.value.is_some());
    }

    #[test]
    fn large_values_are_named_not_echoed() {
        let big = json!({ "spec": { "replicas": "x".repeat(200) } });
        assert_eq!(shown(big.pointer("/spec")), json!("object"));
        assert_eq!(shown(Some(&json!({ "a": 1 }))), json!({ "a": 1 }));
        let text = shown(big.pointer("/spec/replicas"));
        assert!(text.as_str().unwrap().ends_with("...") && text.as_str().unwrap().len() < 80);
    }

    #[test]
    fn serde_wording_is_rewritten() {
        assert_eq!(
            describe("invalid type: string \"x\", expected a boolean"),
            "must be a boolean"
        );
        assert_eq!(
            describe("invalid type: string \"x\", expected struct MachineSpec"),
            "must be an object"
        );
        assert_eq!(
            describe("invalid value: integer `-1`, expected u32"),
            "must be a non-negative integer"
        );
        assert_eq!(
            describe("time: invalid duration \"x\""),
            "time: invalid duration \"x\""
        );
    }
}
