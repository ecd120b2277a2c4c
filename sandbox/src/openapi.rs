//! OpenAPI documents for kubectl: v3 per group-version (CRD schemas in full, an honest permissive
//! schema for built-ins) and a v2 document. Operations advertise the `fieldValidation` parameter so
//! kubectl uses server-side field validation.

use crate::resources::ResourceDef;
use crate::store::Store;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

fn gv_key(d: &ResourceDef, v: &str) -> String {
    if d.group.is_empty() {
        format!("api/{v}")
    } else {
        format!("apis/{}/{v}", d.group)
    }
}

fn by_group_version(store: &Store) -> BTreeMap<String, Vec<(std::sync::Arc<ResourceDef>, String)>> {
    let mut m: BTreeMap<String, Vec<(std::sync::Arc<ResourceDef>, String)>> = BTreeMap::new();
    for d in store.defs() {
        for v in &d.versions {
            m.entry(gv_key(&d, v))
                .or_default()
                .push((d.clone(), v.clone()));
        }
    }
    m
}

fn schema_name(d: &ResourceDef, v: &str) -> String {
    let g = if d.group.is_empty() {
        "core".to_string()
    } else {
        d.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{g}.{v}.{}", d.kind)
}

fn object_schema(d: &ResourceDef, v: &str) -> Value {
    let gvk = json!([{"group": d.group, "kind": d.kind, "version": v}]);
    let mut s = match d.schema(v) {
        Some(s) => s.clone(),
        None => json!({
            "type": "object",
            "description": format!("{} (the sandbox serves built-in types without a detailed schema)", d.kind),
            "x-kubernetes-preserve-unknown-fields": true,
        }),
    };
    if !s.is_object() {
        s = json!({"type": "object"});
    }
    let props = s
        .as_object_mut()
        .map(|m| m.entry("properties").or_insert_with(|| json!({})));
    if let Some(Value::Object(p)) = props {
        p.entry("apiVersion").or_insert_with(|| json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
        p.entry("kind").or_insert_with(|| json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
        p.entry("metadata").or_insert_with(|| json!({"type": "object", "description": "Standard object's metadata.", "x-kubernetes-preserve-unknown-fields": true}));
    }
    s["x-kubernetes-group-version-kind"] = gvk;
    s
}

fn operation(d: &ResourceDef, v: &str, action: &str, schema_ref: &str) -> Value {
    json!({
        "operationId": format!("{action}{}", d.kind),
        "parameters": [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}}
        ],
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": d.group, "kind": d.kind, "version": v}
    })
}

/// `/openapi/v3/{api/v1 | apis/g/v}`: None when the group-version is not served.
pub fn v3_group_version(store: &Store, path: &str) -> Option<Value> {
    let key = path.split('?').next().unwrap_or(path).trim_matches('/');
    let all = by_group_version(store);
    let defs = all.get(key)?;
    let mut schemas = Map::new();
    let mut paths = Map::new();
    for (d, v) in defs {
        let name = schema_name(d, v);
        let sref = format!("#/components/schemas/{name}");
        schemas.insert(name, object_schema(d, v));
        let prefix = format!("/{key}");
        let (coll, item) = if d.namespaced {
            (
                format!("{prefix}/namespaces/{{namespace}}/{}", d.plural),
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", d.plural),
            )
        } else {
            (
                format!("{prefix}/{}", d.plural),
                format!("{prefix}/{}/{{name}}", d.plural),
            )
        };
        paths.insert(
            coll,
            json!({"get": operation(d, v, "list", &sref), "post": operation(d, v, "post", &sref)}),
        );
        paths.insert(item, json!({"get": operation(d, v, "get", &sref), "put": operation(d, v, "put", &sref), "patch": operation(d, v, "patch", &sref), "delete": operation(d, v, "delete", &sref)}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (mcm-sandbox)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas}
    }))
}

fn hash(v: &Value) -> String {
    // FNV-1a over the serialized document: changes whenever a CRD schema changes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in v.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016X}")
}

/// `/openapi/v3`: the index of group-version documents.
pub fn v3_index(store: &Store) -> Value {
    let mut paths = Map::new();
    for key in by_group_version(store).keys() {
        let h = v3_group_version(store, key)
            .map(|d| hash(&d))
            .unwrap_or_default();
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={h}")}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v2`: all definitions in one swagger document.
pub fn v2(store: &Store) -> Value {
    let mut defs = Map::new();
    for d in store.defs() {
        for v in &d.versions {
            defs.insert(schema_name(&d, v), object_schema(&d, v));
        }
    }
    json!({"swagger": "2.0", "info": {"title": "Kubernetes (mcm-sandbox)", "version": "v1.33.0"}, "paths": {}, "definitions": defs})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn documents_cover_builtins() {
        let s = Store::new(10);
        let idx = v3_index(&s);
        let url = idx["paths"]["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="));
        let doc = v3_group_version(&s, "apis/apps/v1").unwrap();
        let dep = &doc["components"]["schemas"]["apps.v1.Deployment"];
        assert_eq!(
            dep["x-kubernetes-group-version-kind"][0]["kind"],
            "Deployment"
        );
        let p = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(p["parameters"][0]["name"], "fieldValidation");
        assert!(v3_group_version(&s, "apis/none/v1").is_none());
        assert!(v2(&s)["definitions"]["core.v1.Pod"].is_object());
    }
}
