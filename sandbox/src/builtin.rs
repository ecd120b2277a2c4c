//! Defaulting and validation of built-in kinds, the small part of kube-apiserver's per-type
//! strategies that our components and the conformance suite rely on. Pure functions.

use crate::error::Cause;
use base64::Engine;
use serde_json::{Value, json};

/// Largest ConfigMap/Secret payload kube-apiserver accepts.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;

fn cause(reason: &str, field: &str, detail: &str, value: Option<String>) -> Cause {
    Cause {
        reason: reason.into(),
        field: field.into(),
        detail: detail.into(),
        value,
    }
}

/// The typed round trip of a built-in object: what kube-apiserver's decoder keeps of it. None for
/// kinds we have no type for, or when the object does not decode (other checks report that).
fn typed_round_trip(group: &str, plural: &str, obj: &Value) -> Option<Value> {
    use k8s_openapi::api::{
        apps::v1 as apps, coordination::v1 as coordination, core::v1 as core, events::v1 as events,
        policy::v1 as policy, rbac::v1 as rbac, storage::v1 as storage,
    };
    fn trip<T: serde::de::DeserializeOwned + serde::Serialize>(obj: &Value) -> Option<Value> {
        let typed: T = serde_json::from_value(obj.clone()).ok()?;
        serde_json::to_value(typed).ok()
    }
    match (group, plural) {
        ("", "namespaces") => trip::<core::Namespace>(obj),
        ("", "nodes") => trip::<core::Node>(obj),
        ("", "pods") => trip::<core::Pod>(obj),
        ("", "secrets") => trip::<core::Secret>(obj),
        ("", "configmaps") => trip::<core::ConfigMap>(obj),
        ("", "serviceaccounts") => trip::<core::ServiceAccount>(obj),
        ("", "services") => trip::<core::Service>(obj),
        ("", "endpoints") => trip::<core::Endpoints>(obj),
        ("", "events") => trip::<core::Event>(obj),
        ("", "persistentvolumes") => trip::<core::PersistentVolume>(obj),
        ("", "persistentvolumeclaims") => trip::<core::PersistentVolumeClaim>(obj),
        ("events.k8s.io", "events") => trip::<events::Event>(obj),
        ("storage.k8s.io", "volumeattachments") => trip::<storage::VolumeAttachment>(obj),
        ("storage.k8s.io", "storageclasses") => trip::<storage::StorageClass>(obj),
        ("storage.k8s.io", "csinodes") => trip::<storage::CSINode>(obj),
        ("policy", "poddisruptionbudgets") => trip::<policy::PodDisruptionBudget>(obj),
        ("coordination.k8s.io", "leases") => trip::<coordination::Lease>(obj),
        ("apps", "deployments") => trip::<apps::Deployment>(obj),
        ("apps", "replicasets") => trip::<apps::ReplicaSet>(obj),
        ("apps", "statefulsets") => trip::<apps::StatefulSet>(obj),
        ("apps", "daemonsets") => trip::<apps::DaemonSet>(obj),
        ("rbac.authorization.k8s.io", "roles") => trip::<rbac::Role>(obj),
        ("rbac.authorization.k8s.io", "rolebindings") => trip::<rbac::RoleBinding>(obj),
        ("rbac.authorization.k8s.io", "clusterroles") => trip::<rbac::ClusterRole>(obj),
        ("rbac.authorization.k8s.io", "clusterrolebindings") => {
            trip::<rbac::ClusterRoleBinding>(obj)
        }
        _ => None,
    }
}

/// Removes from `obj` every non-null field that `known` (its typed round trip) lacks, recording
/// the dotted paths.
fn drop_missing(obj: &mut Value, known: &Value, prefix: &str, out: &mut Vec<String>) {
    match (obj, known) {
        (Value::Object(o), Value::Object(k)) => {
            let mut gone = Vec::new();
            for (key, v) in o.iter_mut() {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                match k.get(key) {
                    Some(kv) => drop_missing(v, kv, &path, out),
                    None if !v.is_null() => {
                        out.push(path);
                        gone.push(key.clone());
                    }
                    None => {}
                }
            }
            for key in gone {
                o.remove(&key);
            }
        }
        (Value::Array(o), Value::Array(k)) => {
            for (i, (ov, kv)) in o.iter_mut().zip(k.iter()).enumerate() {
                drop_missing(ov, kv, &format!("{prefix}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Drops the fields of a built-in object that its type does not know, like kube-apiserver's
/// decoder, and returns their dotted paths (for fieldValidation Warn/Strict).
pub fn prune_unknown_fields(group: &str, plural: &str, obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Some(known) = typed_round_trip(group, plural, obj) {
        drop_missing(obj, &known, "", &mut unknown);
    }
    unknown
}

fn payload_size(obj: &Value, keys: &[&str]) -> usize {
    keys.iter()
        .filter_map(|k| obj.get(*k).and_then(Value::as_object))
        .flat_map(|m| m.iter())
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum()
}

fn default_pod(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
    ] {
        spec.entry(k).or_insert(v);
    }
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                let image = c
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let tag = image
                    .rsplit('/')
                    .next()
                    .and_then(|last| last.split_once(':'))
                    .map(|(_, t)| t.to_string());
                let policy = if image.contains('@') || tag.as_deref().is_some_and(|t| t != "latest")
                {
                    "IfNotPresent"
                } else {
                    "Always"
                };
                c.entry("imagePullPolicy").or_insert(json!(policy));
                c.entry("terminationMessagePolicy").or_insert(json!("File"));
                c.entry("terminationMessagePath")
                    .or_insert(json!("/dev/termination-log"));
                c.entry("resources").or_insert(json!({}));
            }
        }
    }
}

fn default_template(spec: &mut serde_json::Map<String, Value>) {
    if let Some(tpl) = spec.get_mut("template") {
        default_pod(tpl);
    }
}

/// kube's defaults for apps/v1 workloads (the fields our tests and kubectl show).
fn default_apps(plural: &str, obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    match plural {
        "deployments" => {
            spec.entry("replicas").or_insert(json!(1));
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            spec.entry("progressDeadlineSeconds").or_insert(json!(600));
            let strategy = spec.entry("strategy").or_insert(json!({}));
            if strategy.get("type").is_none() {
                strategy["type"] = json!("RollingUpdate");
            }
            if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                if strategy.get("rollingUpdate").is_none() {
                    strategy["rollingUpdate"] = json!({});
                }
                let ru = &mut strategy["rollingUpdate"];
                if ru.get("maxUnavailable").is_none() {
                    ru["maxUnavailable"] = json!("25%");
                }
                if ru.get("maxSurge").is_none() {
                    ru["maxSurge"] = json!("25%");
                }
            }
        }
        "replicasets" => {
            spec.entry("replicas").or_insert(json!(1));
        }
        "statefulsets" => {
            spec.entry("replicas").or_insert(json!(1));
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            spec.entry("podManagementPolicy")
                .or_insert(json!("OrderedReady"));
            spec.entry("updateStrategy")
                .or_insert(json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
        }
        "daemonsets" => {
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            spec.entry("updateStrategy").or_insert(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}));
        }
        _ => return,
    }
    default_template(spec);
}

fn secret_string_data(obj: &mut Value) {
    if let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|m| m.remove("stringData")) {
        for (k, v) in sd {
            let text = v.as_str().unwrap_or_default();
            obj["data"][k.as_str()] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    if obj
        .get("type")
        .is_none_or(|t| t.as_str().is_none_or(str::is_empty))
    {
        obj["type"] = json!("Opaque");
    }
}

fn validate_config_payload(kind: &str, obj: &Value) -> Vec<Cause> {
    let keys: &[&str] = if kind == "secrets" {
        &["data"]
    } else {
        &["data", "binaryData"]
    };
    let size = if kind == "secrets" {
        obj.get("data")
            .and_then(Value::as_object)
            .map(|m| {
                m.values()
                    .map(|v| v.as_str().map_or(0, |s| s.len() * 3 / 4))
                    .sum()
            })
            .unwrap_or(0)
    } else {
        payload_size(obj, keys)
    };
    if size > MAX_CONFIG_BYTES {
        return vec![cause(
            "FieldValueTooLong",
            if kind == "secrets" { "data" } else { "[]" },
            &format!("may not be more than {MAX_CONFIG_BYTES} bytes"),
            None,
        )];
    }
    Vec::new()
}

/// Applies create-time defaults and validation for built-in kinds.
pub fn prepare_create(group: &str, plural: &str, obj: &mut Value) -> Vec<Cause> {
    let mut causes = match (group, plural) {
        ("", "pods") => {
            default_pod(obj);
            obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            Vec::new()
        }
        ("", "secrets") => {
            secret_string_data(obj);
            validate_config_payload(plural, obj)
        }
        ("", "configmaps") => validate_config_payload(plural, obj),
        ("apps", _) => {
            default_apps(plural, obj);
            Vec::new()
        }
        ("events.k8s.io", "events") => new_event_create_causes(obj),
        _ => Vec::new(),
    };
    causes.extend(validate_builtin(group, plural, obj));
    causes
}

/// The fields an Event created through events.k8s.io/v1 must leave unset, with the core/v1
/// names kube-apiserver's errors use (its strict validation of that API: the deprecated fields
/// exist for Events written through core/v1 only).
const NEW_EVENT_UNSET: &[(&str, &str)] = &[
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn new_event_create_causes(obj: &Value) -> Vec<Cause> {
    NEW_EVENT_UNSET
        .iter()
        .filter(|(field, _)| {
            obj.get(*field)
                .is_some_and(|v| !v.is_null() && v != &json!(0) && v != &json!(""))
        })
        .map(|(_, core)| {
            cause(
                "FieldValueInvalid",
                core,
                "needs to be unset",
                Some("\"\"".to_owned()),
            )
        })
        .collect()
}

/// An update through events.k8s.io/v1 may change `series` but not the deprecated fields.
fn new_event_update_causes(old: &Value, obj: &Value) -> Vec<Cause> {
    NEW_EVENT_UNSET
        .iter()
        .filter(|(field, core)| {
            let before = old.get(*field).or_else(|| old.get(*core));
            let null = Value::Null;
            before.unwrap_or(&null) != obj.get(*field).unwrap_or(&null)
        })
        .map(|(_, core)| cause("FieldValueInvalid", core, "field is immutable", None))
        .collect()
}

/// CRDs of the groups Kubernetes reserves (`k8s.io`, `kubernetes.io` and their subdomains) need
/// the `api-approved.kubernetes.io` annotation, as kube-apiserver demands.
fn crd_protected_group_causes(crd: &Value) -> Vec<Cause> {
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let protected = ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|reserved| group == *reserved || group.ends_with(&format!(".{reserved}")));
    let approved = crd
        .pointer("/metadata/annotations/api-approved.kubernetes.io")
        .and_then(Value::as_str)
        .is_some_and(|a| !a.is_empty());
    if !protected || approved {
        return Vec::new();
    }
    vec![cause(
        "FieldValueRequired",
        "metadata.annotations[api-approved.kubernetes.io]",
        "protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111",
        None,
    )]
}

/// A CRD's root `metadata` schema may only constrain `name` and `generateName`: kube-apiserver
/// refuses anything else, even a description, because the API server owns object metadata.
/// Versions with one shared schema are reported as kube reports them, under `spec.validation`.
fn crd_root_metadata_causes(crd: &Value) -> Vec<Cause> {
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let schemas: Vec<Option<&Value>> = versions
        .iter()
        .map(|v| v.pointer("/schema/openAPIV3Schema"))
        .collect();
    let shared = schemas.windows(2).all(|pair| pair[0] == pair[1]);
    let allowed = |metadata: &Value| {
        metadata.as_object().is_some_and(|m| {
            m.iter().all(|(key, value)| match key.as_str() {
                "type" => value == "object",
                "properties" => value
                    .as_object()
                    .is_some_and(|p| p.keys().all(|k| k == "name" || k == "generateName")),
                _ => false,
            })
        })
    };
    let mut causes = Vec::new();
    for (i, schema) in schemas.iter().enumerate() {
        let Some(metadata) = schema.and_then(|s| s.pointer("/properties/metadata")) else {
            continue;
        };
        if allowed(metadata) {
            continue;
        }
        let field = if shared {
            "spec.validation.openAPIV3Schema.properties[metadata]".to_owned()
        } else {
            format!("spec.versions[{i}].schema.openAPIV3Schema.properties[metadata]")
        };
        causes.push(cause(
            "FieldValueForbidden",
            &field,
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
            None,
        ));
        if shared {
            break;
        }
    }
    causes
}

/// kube-apiserver's per-type validation of the fields our users get wrong most: pods need
/// named containers, taint effects are an enum, a PDB sets at most one of minAvailable and
/// maxUnavailable, workload selectors must match their template, lease durations are positive.
pub fn validate_builtin(group: &str, plural: &str, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec");
    match (group, plural) {
        ("", "pods") => {
            let containers = spec
                .and_then(|s| s.get("containers"))
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if containers.is_empty() {
                causes.push(cause(
                    "FieldValueRequired",
                    "spec.containers",
                    "Required value",
                    None,
                ));
            }
            for (i, c) in containers.iter().enumerate() {
                if c.get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push(cause(
                        "FieldValueRequired",
                        &format!("spec.containers[{i}].name"),
                        "Required value",
                        None,
                    ));
                }
            }
        }
        ("", "nodes") => {
            let taints = spec
                .and_then(|s| s.get("taints"))
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for (i, t) in taints.iter().enumerate() {
                let effect = t.get("effect").and_then(Value::as_str).unwrap_or_default();
                if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                    causes.push(cause(
                        if effect.is_empty() {
                            "FieldValueRequired"
                        } else {
                            "FieldValueNotSupported"
                        },
                        // kube's node validation reports taints under `metadata`, not `spec`.
                        &format!("metadata.taints[{i}].effect"),
                        "supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                        Some(format!("\"{effect}\"")),
                    ));
                }
                // A taint key is a qualified name, validated like a label key.
                let key = t.get("key").and_then(Value::as_str).unwrap_or_default();
                for message in crate::names::qualified_name(key) {
                    causes.push(cause(
                        "FieldValueInvalid",
                        &format!("metadata.taints[{i}].key"),
                        &message,
                        Some(Value::String(key.to_owned()).to_string()),
                    ));
                }
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            causes.extend(crd_root_metadata_causes(obj));
            causes.extend(crd_protected_group_causes(obj));
        }
        ("policy", "poddisruptionbudgets") => {
            let set = |k: &str| spec.and_then(|s| s.get(k)).is_some_and(|v| !v.is_null());
            if set("minAvailable") && set("maxUnavailable") {
                causes.push(cause(
                    "FieldValueInvalid",
                    "spec",
                    "minAvailable and maxUnavailable cannot be both set",
                    None,
                ));
            }
        }
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets") => {
            match spec
                .and_then(|s| s.get("selector"))
                .filter(|v| !v.is_null())
            {
                None => causes.push(cause(
                    "FieldValueRequired",
                    "spec.selector",
                    "Required value",
                    None,
                )),
                Some(sel) => match crate::selector::LabelSelector::from_object(sel) {
                    Err(e) => causes.push(cause("FieldValueInvalid", "spec.selector", &e, None)),
                    Ok(ls) if ls.is_empty() => causes.push(cause(
                        "FieldValueInvalid",
                        "spec.selector",
                        "empty selector is invalid for deployment",
                        None,
                    )),
                    Ok(ls) => {
                        if !ls.matches(obj.pointer("/spec/template/metadata/labels")) {
                            causes.push(cause(
                                "FieldValueInvalid",
                                "spec.template.metadata.labels",
                                "`selector` does not match template `labels`",
                                None,
                            ));
                        }
                    }
                },
            }
        }
        ("coordination.k8s.io", "leases") => {
            if let Some(d) = obj
                .pointer("/spec/leaseDurationSeconds")
                .and_then(Value::as_i64)
                .filter(|d| *d <= 0)
            {
                causes.push(cause(
                    "FieldValueInvalid",
                    "spec.leaseDurationSeconds",
                    "must be greater than 0",
                    Some(d.to_string()),
                ));
            }
        }
        _ => {}
    }
    causes
}

/// Applies update-time rules (immutability, finalizers on terminating objects, defaults).
pub fn prepare_update(group: &str, plural: &str, old: &Value, obj: &mut Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if old.pointer("/metadata/deletionTimestamp").is_some() {
        let before: Vec<&Value> = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let added: Vec<String> = obj
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter(|f| !before.contains(f))
                    .filter_map(|f| f.as_str().map(|s| format!("{s:?}")))
                    .collect()
            })
            .unwrap_or_default();
        if !added.is_empty() {
            causes.push(cause(
                "FieldValueForbidden",
                "metadata.finalizers",
                &format!("no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}", added.join(", ")),
                None,
            ));
        }
    }
    match (group, plural) {
        ("", "pods") => default_pod(obj),
        ("", "secrets") => secret_string_data(obj),
        ("apps", _) => default_apps(plural, obj),
        ("events.k8s.io", "events") => causes.extend(new_event_update_causes(old, obj)),
        _ => {}
    }
    if group.is_empty() && matches!(plural, "configmaps" | "secrets") {
        if old.get("immutable").and_then(Value::as_bool) == Some(true) {
            for f in ["data", "binaryData"] {
                if old.get(f) != obj.get(f) {
                    causes.push(cause(
                        "FieldValueForbidden",
                        f,
                        "field is immutable when `immutable` is set",
                        None,
                    ));
                }
            }
            if obj.get("immutable").and_then(Value::as_bool) != Some(true) {
                causes.push(cause(
                    "FieldValueForbidden",
                    "immutable",
                    "field is immutable when `immutable` is set",
                    None,
                ));
            }
        }
        causes.extend(validate_config_payload(plural, obj));
    }
    causes.extend(validate_builtin(group, plural, obj));
    causes
}

/// Field renames between core/v1 and events.k8s.io/v1 Events (core name, events.k8s.io name).
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

fn rename_event(obj: &Value, to_new: bool, api_version: &str) -> Value {
    let mut out = obj.clone();
    if let Some(m) = out.as_object_mut() {
        for (core, new) in EVENT_FIELDS {
            let (from, to) = if to_new { (core, new) } else { (new, core) };
            if let Some(v) = m.remove(*from) {
                m.insert(to.to_string(), v);
            }
        }
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!("Event"));
    }
    out
}

/// A stored core/v1 Event as events.k8s.io/v1.
pub fn event_core_to_new(core: &Value) -> Value {
    rename_event(core, true, "events.k8s.io/v1")
}

/// An events.k8s.io/v1 Event as core/v1 (the storage form). The time fields are always
/// present, `null` when unset, as kube-apiserver serialises them (`metav1.Time` is a struct,
/// which `omitempty` never omits): `kubectl get events --sort-by=.lastTimestamp` needs the field
/// on every item, and an Event created through events.k8s.io/v1 has no lastTimestamp.
pub fn event_new_to_core(new: &Value) -> Value {
    let mut core = rename_event(new, false, "v1");
    if let Some(fields) = core.as_object_mut() {
        for field in ["eventTime", "firstTimestamp", "lastTimestamp"] {
            fields.entry(field).or_insert(Value::Null);
        }
    }
    core
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_dropped_and_reported() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labelz": {}},
                            "data": {"a": "b"}, "datta": {"x": "y"}});
        let unknown = prune_unknown_fields("", "configmaps", &mut cm);
        assert_eq!(
            unknown,
            vec!["datta".to_string(), "metadata.labelz".to_string()]
        );
        assert_eq!(
            cm,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}})
        );
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                             "spec": {"containers": [{"name": "c", "image": "i", "imag": "typo"}]}});
        assert_eq!(
            prune_unknown_fields("", "pods", &mut pod),
            vec!["spec.containers[0].imag".to_string()]
        );
        let mut custom = json!({"anything": 1});
        assert!(prune_unknown_fields("example.com", "widgets", &mut custom).is_empty());
        assert_eq!(custom, json!({"anything": 1}));
    }

    #[test]
    fn builtin_validation_names_the_bad_field() {
        let fields = |g: &str, p: &str, o: Value| -> Vec<String> {
            validate_builtin(g, p, &o)
                .into_iter()
                .map(|c| c.field)
                .collect()
        };
        assert_eq!(
            fields("", "pods", json!({"spec": {"containers": []}})),
            vec!["spec.containers"]
        );
        assert!(
            fields(
                "",
                "pods",
                json!({"spec": {"containers": [{"name": "c", "image": "i"}]}})
            )
            .is_empty()
        );
        assert_eq!(
            fields(
                "",
                "nodes",
                json!({"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}})
            ),
            vec!["metadata.taints[0].effect"]
        );
        assert!(
            fields(
                "",
                "nodes",
                json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}})
            )
            .is_empty()
        );
        assert_eq!(
            fields(
                "policy",
                "poddisruptionbudgets",
                json!({"spec": {"minAvailable": 1, "maxUnavailable": "10%"}})
            ),
            vec!["spec"]
        );
        let deploy = |sel: &str, label: &str| {
            json!({"spec": {"selector": {"matchLabels": {"app": sel}},
                            "template": {"metadata": {"labels": {"app": label}}}}})
        };
        assert_eq!(
            fields("apps", "deployments", deploy("a", "b")),
            vec!["spec.template.metadata.labels"]
        );
        assert!(fields("apps", "deployments", deploy("a", "a")).is_empty());
        assert_eq!(
            fields(
                "coordination.k8s.io",
                "leases",
                json!({"spec": {"leaseDurationSeconds": -1}})
            ),
            vec!["spec.leaseDurationSeconds"]
        );
        assert!(
            fields(
                "coordination.k8s.io",
                "leases",
                json!({"spec": {"leaseDurationSeconds": 15}})
            )
            .is_empty()
        );
    }

    #[test]
    fn pods_get_defaults_and_pending() {
        let mut p = json!({"spec": {"containers": [{"name": "a", "image": "busybox:1.36"}, {"name": "b", "image": "nginx"}]}, "status": {"phase": "Running"}});
        assert!(prepare_create("", "pods", &mut p).is_empty());
        assert_eq!(p["spec"]["restartPolicy"], "Always");
        assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(
            p["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(p["spec"]["containers"][1]["imagePullPolicy"], "Always");
        assert_eq!(p["status"]["phase"], "Pending");
    }

    #[test]
    fn deployments_get_defaults() {
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}});
        prepare_create("apps", "deployments", &mut d);
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        let mut keep = json!({"spec": {"replicas": 0, "strategy": {"type": "Recreate"}}});
        prepare_create("apps", "deployments", &mut keep);
        assert_eq!(keep["spec"]["replicas"], 0);
        assert!(keep["spec"]["strategy"].get("rollingUpdate").is_none());
    }

    #[test]
    fn secrets_and_configmaps() {
        let mut s = json!({"stringData": {"b": "bee"}, "data": {"a": "YQ=="}});
        assert!(prepare_create("", "secrets", &mut s).is_empty());
        assert_eq!(s["data"]["b"], "YmVl");
        assert_eq!(s["type"], "Opaque");
        assert!(s.get("stringData").is_none());
        let mut big = json!({"data": {"k": "x".repeat(MAX_CONFIG_BYTES + 1)}});
        let c = prepare_create("", "configmaps", &mut big);
        assert_eq!(
            c[0].render(),
            "[]: Too long: may not be more than 1048576 bytes"
        );
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let mut new = json!({"immutable": true, "data": {"a": "2"}});
        assert_eq!(
            prepare_update("", "configmaps", &old, &mut new)[0].field,
            "data"
        );
    }

    #[test]
    fn events_convert_both_ways() {
        let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"}, "regarding": {"name": "x"}, "note": "n", "reportingController": "c", "series": {"count": 2}});
        let core = event_new_to_core(&new);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "x");
        assert_eq!(core["message"], "n");
        assert_eq!(core["reportingComponent"], "c");
        // Unset times are null in both views, as kube-apiserver serialises them.
        assert_eq!(core["lastTimestamp"], Value::Null);
        assert!(core.as_object().unwrap().contains_key("lastTimestamp"));
        let mut expected = new.clone();
        expected["eventTime"] = Value::Null;
        expected["deprecatedFirstTimestamp"] = Value::Null;
        expected["deprecatedLastTimestamp"] = Value::Null;
        assert_eq!(event_core_to_new(&core), expected);
    }

    #[test]
    fn no_new_finalizers_while_deleting() {
        let old = json!({"metadata": {"deletionTimestamp": "x", "finalizers": ["a"]}});
        let mut new = json!({"metadata": {"deletionTimestamp": "x", "finalizers": ["a", "b"]}});
        let c = prepare_update("x", "y", &old, &mut new);
        assert!(
            c[0].render()
                .contains("no new finalizers can be added if the object is being deleted")
        );
        let mut fewer = json!({"metadata": {"finalizers": []}});
        assert!(prepare_update("x", "y", &old, &mut fewer).is_empty());
    }
}
