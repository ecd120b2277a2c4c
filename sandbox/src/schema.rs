//! CRD structural schemas: pruning, defaulting and validation (validation through the `jsonschema`
//! crate, errors worded as kube-apiserver's field errors). Pure functions.

use crate::error::Cause;
use serde_json::{Map, Value};

fn is_true(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Removes fields the schema does not declare (except under `x-kubernetes-preserve-unknown-fields`)
/// and null values of non-nullable fields. `root` keeps apiVersion, kind and metadata.
pub fn prune(value: &mut Value, schema: &Value, root: bool) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let preserve = is_true(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = root || is_true(schema, "x-kubernetes-embedded-resource");
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let sub = props.and_then(|p| p.get(&k)).or(additional);
                match sub {
                    Some(sub) => {
                        let nullable = is_true(sub, "nullable");
                        if let Some(v) = map.get_mut(&k) {
                            if v.is_null() && !nullable {
                                map.remove(&k);
                            } else {
                                prune(v, sub, false);
                            }
                        }
                    }
                    None if preserve
                        || (props.is_none()
                            && additional.is_none()
                            && schema.get("additionalProperties") == Some(&Value::Bool(true))) => {}
                    None => {
                        map.remove(&k);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for it in items.iter_mut() {
                    prune(it, item_schema, false);
                }
            }
        }
        _ => {}
    }
}

/// Applies `default` values of absent properties, recursively.
pub fn apply_defaults(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, sub) in props {
                    if !map.contains_key(k)
                        && let Some(d) = sub.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                    if let Some(v) = map.get_mut(k) {
                        apply_defaults(v, sub);
                    }
                }
            }
            if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for v in map.values_mut() {
                    apply_defaults(v, add);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for it in items.iter_mut() {
                    apply_defaults(it, item_schema);
                }
            }
        }
        _ => {}
    }
}

/// Converts an OpenAPI v3 structural schema to a draft-4 JSON schema for the validator.
pub fn to_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                match k.as_str() {
                    "nullable" | "default" | "example" | "externalDocs" | "description" => {}
                    k if k.starts_with("x-") => {}
                    "properties" | "patternProperties" | "definitions" => {
                        if let Value::Object(props) = v {
                            out.insert(
                                k.to_string(),
                                Value::Object(
                                    props
                                        .iter()
                                        .map(|(pk, pv)| (pk.clone(), to_json_schema(pv)))
                                        .collect(),
                                ),
                            );
                        }
                    }
                    "format" => {
                        // kube validates a few formats; the validator knows date-time. Others pass.
                        if v.as_str() == Some("date-time") {
                            out.insert(k.to_string(), v.clone());
                        }
                    }
                    _ => {
                        out.insert(k.to_string(), to_json_schema(v));
                    }
                }
            }
            if is_true(schema, "x-kubernetes-int-or-string") {
                out.remove("type");
                if !out.contains_key("anyOf") && !out.contains_key("oneOf") {
                    out.insert(
                        "anyOf".into(),
                        serde_json::json!([{"type": "integer"}, {"type": "string"}]),
                    );
                }
            }
            if is_true(schema, "nullable")
                && let Some(Value::String(t)) = out.get("type").cloned()
            {
                out.insert("type".into(), serde_json::json!([t, "null"]));
            }
            if is_true(schema, "x-kubernetes-preserve-unknown-fields")
                && !out.contains_key("type")
                && !out.contains_key("anyOf")
            {
                // Anything goes.
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(to_json_schema).collect()),
        other => other.clone(),
    }
}

/// A compiled validator for one CRD version.
pub struct SchemaValidator {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for SchemaValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SchemaValidator")
    }
}

/// Converts a JSON pointer (`/spec/items/0/name`) to a kube field path (`spec.items[0].name`).
pub fn pointer_to_field(ptr: &str) -> String {
    let mut out = String::new();
    for seg in ptr.split('/').filter(|s| !s.is_empty()) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if seg.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&seg);
        }
    }
    out
}

fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short_value(v: &Value) -> String {
    match v {
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

impl SchemaValidator {
    /// Compiles an `openAPIV3Schema`.
    pub fn new(schema: &Value) -> Result<Self, String> {
        let js = to_json_schema(schema);
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .should_validate_formats(true)
            .build(&js)
            .map_err(|e| e.to_string())?;
        Ok(SchemaValidator { validator })
    }

    /// Validates an object, returning kube-style causes (empty when valid).
    pub fn validate(&self, obj: &Value) -> Vec<Cause> {
        use jsonschema::error::ValidationErrorKind as K;
        let mut causes = Vec::new();
        for err in self.validator.iter_errors(obj) {
            let field = pointer_to_field(err.instance_path().as_str());
            let inst = err.instance();
            let (reason, field, detail, value) = match err.kind() {
                K::Required { property } => {
                    let p = property.as_str().unwrap_or_default();
                    let f = if field.is_empty() {
                        p.to_string()
                    } else {
                        format!("{field}.{p}")
                    };
                    ("FieldValueRequired", f, String::new(), None)
                }
                K::Type { kind } => {
                    let wanted = format!("{kind:?}")
                        .to_lowercase()
                        .replace("single(", "")
                        .replace(')', "");
                    let actual = json_type_name(inst);
                    (
                        "FieldValueTypeInvalid",
                        field.clone(),
                        format!("{field} in body must be of type {wanted}: \"{actual}\""),
                        Some(format!("\"{actual}\"")),
                    )
                }
                K::Enum { options } => {
                    let opts = options
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|o| o.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        })
                        .unwrap_or_default();
                    (
                        "FieldValueNotSupported",
                        field.clone(),
                        format!("supported values: {opts}"),
                        Some(short_value(inst)),
                    )
                }
                K::Minimum { limit } => (
                    "FieldValueInvalid",
                    field.clone(),
                    format!("{field} in body should be greater than or equal to {limit}"),
                    Some(short_value(inst)),
                ),
                K::Maximum { limit } => (
                    "FieldValueInvalid",
                    field.clone(),
                    format!("{field} in body should be less than or equal to {limit}"),
                    Some(short_value(inst)),
                ),
                K::Pattern { pattern } => (
                    "FieldValueInvalid",
                    field.clone(),
                    format!("{field} in body should match '{pattern}'"),
                    Some(short_value(inst)),
                ),
                K::MaxLength { limit } => (
                    "FieldValueTooLong",
                    field.clone(),
                    format!("may not be more than {limit} bytes"),
                    Some(short_value(inst)),
                ),
                K::MinLength { limit } => (
                    "FieldValueInvalid",
                    field.clone(),
                    format!("{field} in body should be at least {limit} chars long"),
                    Some(short_value(inst)),
                ),
                K::MaxItems { limit } => (
                    "FieldValueTooMany",
                    field.clone(),
                    format!("must have at most {limit} items"),
                    None,
                ),
                K::MinItems { limit } => (
                    "FieldValueInvalid",
                    field.clone(),
                    format!("{field} in body should have at least {limit} items"),
                    Some(short_value(inst)),
                ),
                _ => (
                    "FieldValueInvalid",
                    field.clone(),
                    err.to_string(),
                    Some(short_value(inst)),
                ),
            };
            causes.push(Cause {
                reason: reason.to_string(),
                field: if field.is_empty() {
                    "<root>".into()
                } else {
                    field
                },
                detail,
                value,
            });
        }
        causes
    }
}

/// Checks an object name as kube-apiserver does for most resources (DNS-1123 subdomain).
pub fn validate_name(name: &str, allow_colon: bool) -> Result<(), String> {
    if name.is_empty() {
        return Err("name or generateName is required".into());
    }
    if name.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    if allow_colon {
        if name == "." || name == ".." || name.contains('/') || name.contains('%') {
            return Err(format!(
                "may not contain '/' or '%' and may not be '.' or '..': {name:?}"
            ));
        }
        return Ok(());
    }
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ends_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if !ok_chars || !ends_ok {
        return Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["class"], "properties": {
                "replicas": {"type": "integer", "minimum": 0, "default": 1},
                "class": {"type": "object", "properties": {"name": {"type": "string"}}},
                "strategy": {"type": "string", "enum": ["A", "B"], "default": "A"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "maxSurge": {"x-kubernetes-int-or-string": true},
                "opt": {"type": "string", "nullable": true}
            }},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
        }})
    }

    #[test]
    fn prunes_unknown_fields_and_keeps_preserved() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"}, "junk": 1,
            "spec": {"class": {"name": "c", "extra": true}, "free": {"any": {"thing": 1}}, "labels": {"a": "b"}, "replicas": null}});
        prune(&mut obj, &schema(), true);
        assert_eq!(
            obj,
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
            "spec": {"class": {"name": "c"}, "free": {"any": {"thing": 1}}, "labels": {"a": "b"}}})
        );
    }

    #[test]
    fn defaults_absent_fields() {
        let mut obj = json!({"spec": {"class": {}}});
        apply_defaults(&mut obj, &schema());
        assert_eq!(obj["spec"]["replicas"], 1);
        assert_eq!(obj["spec"]["strategy"], "A");
        let mut obj = json!({"spec": {"replicas": 3, "class": {}}});
        apply_defaults(&mut obj, &schema());
        assert_eq!(obj["spec"]["replicas"], 3);
    }

    #[test]
    fn validation_errors_in_kube_form() {
        let v = SchemaValidator::new(&schema()).unwrap();
        assert!(
            v.validate(
                &json!({"spec": {"class": {}, "replicas": 2, "maxSurge": "25%", "opt": null}})
            )
            .is_empty()
        );
        assert!(
            v.validate(&json!({"spec": {"class": {}, "maxSurge": 1}}))
                .is_empty()
        );
        let c = v.validate(&json!({"spec": {"class": {}, "replicas": "x"}}));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].field, "spec.replicas");
        assert_eq!(
            c[0].render(),
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        );
        let c = v.validate(&json!({"spec": {}}));
        assert_eq!(c[0].render(), "spec.class: Required value");
        let c = v.validate(&json!({"spec": {"class": {}, "strategy": "C"}}));
        assert_eq!(c[0].reason, "FieldValueNotSupported");
        assert_eq!(
            c[0].render(),
            "spec.strategy: Unsupported value: \"C\": supported values: \"A\", \"B\""
        );
        let c = v.validate(&json!({"spec": {"class": {}, "replicas": -1}}));
        assert_eq!(
            c[0].render(),
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        );
    }

    #[test]
    fn pointers_and_names() {
        assert_eq!(pointer_to_field("/spec/items/0/name"), "spec.items[0].name");
        assert!(validate_name("abc-1.x", false).is_ok());
        assert!(validate_name("Abc", false).is_err());
        assert!(validate_name("-a", false).is_err());
        assert!(validate_name("system:node", true).is_ok());
        assert!(validate_name("a/b", true).is_err());
    }
}
