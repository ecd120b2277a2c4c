//! The generated CRDs against the upstream ones in `api/tests/upstream-crds` (see its README).
//!
//! Compared: names, scope, versions, subresources, printer columns, and for every schema node
//! (by property path) its type, format, pattern, required list, `anyOf` alternatives and every
//! `x-kubernetes-*` extension. Descriptions are not compared. Every accepted difference is listed
//! in [`ALLOWED`] with its reason; an allow-list entry that no longer matches a difference fails
//! the test too, so the list stays exact.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::{Value, json};

/// Accepted differences: (CRD file, schema path, fact, reason).
const ALLOWED: &[(&str, &str, &str, &str)] = &[
    (
        "machine.sapcloud.io_machines.yaml",
        "",
        "required",
        "kube-derive's root type needs `spec` to decode; requiring it keeps objects that the \
         controllers could not decode (and that would break a whole list/watch) out of the API",
    ),
    (
        "machine.sapcloud.io_machinesets.yaml",
        "",
        "required",
        "kube-derive's root type needs `spec` to decode (see machines)",
    ),
    (
        "machine.sapcloud.io_machinedeployments.yaml",
        "",
        "required",
        "kube-derive's root type needs `spec` to decode (see machines)",
    ),
];

fn upstream_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/upstream-crds")
}

/// Flattens a schema into `path -> fact -> value`.
fn facts(schema: &Value, path: &str, out: &mut BTreeMap<String, BTreeMap<String, Value>>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    let mut entry = BTreeMap::new();
    let mut children = Vec::new();
    for (key, value) in object {
        match key.as_str() {
            "type" | "format" | "pattern" | "enum" | "default" | "nullable" | "minimum"
            | "maximum" | "minLength" | "maxLength" | "minItems" | "maxItems" => {
                entry.insert(key.clone(), value.clone());
            }
            "required" => {
                let mut names: Vec<Value> = value.as_array().cloned().unwrap_or_default();
                names.sort_by_key(ToString::to_string);
                entry.insert(key.clone(), Value::Array(names));
            }
            "anyOf" | "oneOf" | "allOf" => {
                entry.insert(key.clone(), value.clone());
            }
            k if k.starts_with("x-kubernetes-") => {
                entry.insert(key.clone(), value.clone());
            }
            "properties" => {
                if let Some(properties) = value.as_object() {
                    for (name, child) in properties {
                        children.push((format!("{path}.{name}"), child));
                    }
                }
            }
            "items" => children.push((format!("{path}[]"), value)),
            "additionalProperties" => {
                if value.is_object() {
                    children.push((format!("{path}{{}}"), value));
                } else {
                    entry.insert(key.clone(), value.clone());
                }
            }
            "description" | "title" | "example" | "externalDocs" => {}
            other => {
                // Unknown keywords are compared verbatim so nothing slips through.
                entry.insert(other.to_owned(), value.clone());
            }
        }
    }
    out.insert(path.to_owned(), entry);
    for (child_path, child) in children {
        facts(child, &child_path, out);
    }
}

fn compare(
    diffs: &mut Vec<(String, String, String)>,
    path: &str,
    fact: &str,
    a: &Value,
    b: &Value,
) {
    if a != b {
        diffs.push((
            path.to_owned(),
            fact.to_owned(),
            format!("upstream {a} / ours {b}"),
        ));
    }
}

fn strip_descriptions(value: &Value) -> Value {
    match value {
        Value::Object(object) => Value::Object(
            object
                .iter()
                .filter(|(k, _)| k.as_str() != "description")
                .map(|(k, v)| (k.clone(), strip_descriptions(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Differences between an upstream and a generated CRD as `(path, fact, detail)`.
fn differences(upstream: &Value, ours: &Value) -> Vec<(String, String, String)> {
    let mut diffs = Vec::new();
    for pointer in [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/spec/group",
        "/spec/names",
        "/spec/scope",
        "/spec/conversion",
    ] {
        compare(
            &mut diffs,
            "",
            pointer,
            upstream.pointer(pointer).unwrap_or(&Value::Null),
            ours.pointer(pointer).unwrap_or(&Value::Null),
        );
    }
    let empty = Vec::new();
    let up_versions = upstream
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let our_versions = ours
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    compare(
        &mut diffs,
        "",
        "versions",
        &json!(up_versions.iter().map(|v| &v["name"]).collect::<Vec<_>>()),
        &json!(our_versions.iter().map(|v| &v["name"]).collect::<Vec<_>>()),
    );
    for (up, our) in up_versions.iter().zip(our_versions) {
        for key in [
            "served",
            "storage",
            "deprecated",
            "subresources",
            "selectableFields",
        ] {
            compare(&mut diffs, "", key, &up[key], &our[key]);
        }
        // Printer column descriptions are compared as well: kubectl shows them.
        compare(
            &mut diffs,
            "",
            "additionalPrinterColumns",
            &up["additionalPrinterColumns"],
            &our["additionalPrinterColumns"],
        );
        let mut up_facts = BTreeMap::new();
        let mut our_facts = BTreeMap::new();
        facts(&up["schema"]["openAPIV3Schema"], "", &mut up_facts);
        facts(&our["schema"]["openAPIV3Schema"], "", &mut our_facts);
        let paths: BTreeSet<&String> = up_facts.keys().chain(our_facts.keys()).collect();
        for path in paths {
            match (up_facts.get(path), our_facts.get(path)) {
                (Some(_), None) => {
                    diffs.push((path.clone(), "path".into(), "only upstream".into()))
                }
                (None, Some(_)) => diffs.push((path.clone(), "path".into(), "only ours".into())),
                (Some(a), Some(b)) => {
                    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                    for key in keys {
                        let av = a.get(key).map(strip_descriptions).unwrap_or(Value::Null);
                        let bv = b.get(key).map(strip_descriptions).unwrap_or(Value::Null);
                        compare(&mut diffs, path, key, &av, &bv);
                    }
                }
                (None, None) => {}
            }
        }
    }
    diffs
}

#[test]
fn generated_crds_match_upstream() {
    let dir = upstream_dir();
    if !dir.is_dir() {
        println!("SKIPPED: upstream reference not found at {}", dir.display());
        return;
    }
    let ours = mcm_api::crd::all().expect("CRDs generate");
    let mut unexpected = Vec::new();
    let mut used = BTreeSet::new();
    let mut compared = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let upstream: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let Some(crd) = ours.get(&file) else {
            unexpected.push(format!("{file}: no generated CRD with this file name"));
            continue;
        };
        compared += 1;
        let generated = serde_json::to_value(crd).unwrap();
        for (schema_path, fact, detail) in differences(&upstream, &generated) {
            let allowed = ALLOWED
                .iter()
                .position(|(f, p, k, _)| *f == file && *p == schema_path && *k == fact);
            match allowed {
                Some(index) => {
                    used.insert(index);
                }
                None => unexpected.push(format!("{file}: {schema_path} {fact}: {detail}")),
            }
        }
    }
    assert_eq!(
        compared,
        ours.len(),
        "every generated CRD has an upstream counterpart"
    );
    for (index, (file, path, fact, _)) in ALLOWED.iter().enumerate() {
        if !used.contains(&index) {
            unexpected.push(format!("stale allow-list entry: {file} {path} {fact}"));
        }
    }
    assert!(
        unexpected.is_empty(),
        "schema differences from upstream:\n{}",
        unexpected.join("\n")
    );
}

#[test]
fn the_comparison_detects_differences() {
    // The comparison itself must be able to fail: a removed property, a changed type and a
    // missing extension are each reported.
    let upstream = json!({
        "spec": { "versions": [{ "name": "v1alpha1", "schema": { "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "a": { "type": "string" },
                "b": { "type": "integer", "format": "int32" },
                "c": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
            },
        }}}]},
    });
    let ours = json!({
        "spec": { "versions": [{ "name": "v1alpha1", "schema": { "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "b": { "type": "string" },
                "c": { "type": "object" },
            },
        }}}]},
    });
    let diffs: BTreeSet<(String, String)> = differences(&upstream, &ours)
        .into_iter()
        .map(|(p, f, _)| (p, f))
        .collect();
    assert!(diffs.contains(&(".a".into(), "path".into())));
    assert!(diffs.contains(&(".b".into(), "type".into())));
    assert!(diffs.contains(&(".b".into(), "format".into())));
    assert!(diffs.contains(&(".c".into(), "x-kubernetes-preserve-unknown-fields".into())));
}

#[test]
fn committed_chart_crds_are_up_to_date() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/machine-controller-manager/files/crds/v1alpha1");
    for (file, crd) in mcm_api::crd::all().unwrap() {
        let committed = std::fs::read_to_string(dir.join(&file))
            .unwrap_or_else(|e| panic!("{file} missing in the chart ({e}); run `make crds`"));
        assert_eq!(
            committed,
            mcm_api::crd::to_yaml(&crd).unwrap(),
            "{file} is stale; run `make crds`"
        );
    }
}

#[test]
fn generated_yaml_parses_back_to_the_same_crd() {
    for (file, crd) in mcm_api::crd::all().unwrap() {
        let yaml = mcm_api::crd::to_yaml(&crd).unwrap();
        let parsed: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(parsed, crd, "{file}");
        assert_eq!(
            mcm_api::crd::to_yaml(&parsed).unwrap(),
            yaml,
            "{file}: output is deterministic"
        );
    }
}
