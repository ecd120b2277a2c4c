//! Legacy discovery documents (`/api`, `/apis`, `/apis/{g}`, `/apis/{g}/{v}`). Clients that ask
//! for aggregated discovery get these plain JSON documents and fall back, as kubectl does.

use crate::resources::{ALL_VERBS, ResourceDef, version_priority};
use crate::store::Store;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// `/api`.
pub fn api_versions(url: &str) -> Value {
    let addr = url.split("://").nth(1).unwrap_or(url);
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

fn groups(store: &Store) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in store.defs() {
        if d.group.is_empty() {
            continue;
        }
        let e = m.entry(d.group.clone()).or_default();
        for v in &d.versions {
            if !e.contains(v) {
                e.push(v.clone());
            }
        }
    }
    for v in m.values_mut() {
        v.sort_by_key(|b| std::cmp::Reverse(version_priority(b)));
    }
    m
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(json!({}))})
}

/// `/apis`.
pub fn group_list(store: &Store) -> Value {
    let gs: Vec<Value> = groups(store)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

/// `/apis/{group}`.
pub fn group(store: &Store, name: &str) -> Option<Value> {
    let gs = groups(store);
    let vs = gs.get(name)?;
    let mut g = group_json(name, vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

fn resource_entries(d: &ResourceDef) -> Vec<Value> {
    let mut out = vec![json!({
        "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced, "kind": d.kind,
        "verbs": ALL_VERBS, "shortNames": d.short_names, "categories": d.categories,
    })];
    if d.status {
        out.push(json!({"name": format!("{}/status", d.plural), "singularName": "", "namespaced": d.namespaced, "kind": d.kind, "verbs": ["get", "patch", "update"]}));
    }
    if d.scale.is_some() {
        out.push(json!({"name": format!("{}/scale", d.plural), "singularName": "", "namespaced": d.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
    }
    for (sub, verbs) in &d.extra_subresources {
        let (group, version, kind) = match sub.as_str() {
            "eviction" => ("policy", "v1", "Eviction"),
            "binding" => ("", "v1", "Binding"),
            "token" => ("authentication.k8s.io", "v1", "TokenRequest"),
            _ => ("", "v1", d.kind.as_str()),
        };
        let mut e = json!({"name": format!("{}/{sub}", d.plural), "singularName": "", "namespaced": d.namespaced, "kind": kind, "verbs": verbs});
        if !group.is_empty() {
            e["group"] = json!(group);
            e["version"] = json!(version);
        }
        out.push(e);
    }
    out
}

/// `/api/v1` or `/apis/{group}/{version}`.
pub fn resource_list(store: &Store, group: &str, version: &str) -> Option<Value> {
    let defs: Vec<_> = store
        .defs()
        .into_iter()
        .filter(|d| d.group == group && d.versions.iter().any(|v| v == version))
        .collect();
    if defs.is_empty() {
        return None;
    }
    let resources: Vec<Value> = defs.iter().flat_map(|d| resource_entries(d)).collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn aggregated_resource(d: &ResourceDef, version: &str) -> Value {
    let gvk = |group: &str, version: &str, kind: &str| json!({"group": group, "version": version, "kind": kind});
    let mut subs = Vec::new();
    if d.status {
        subs.push(json!({"subresource": "status", "responseKind": gvk(&d.group, version, &d.kind), "verbs": ["get", "patch", "update"]}));
    }
    if d.scale.is_some() {
        subs.push(json!({"subresource": "scale", "responseKind": gvk("autoscaling", "v1", "Scale"), "verbs": ["get", "patch", "update"]}));
    }
    for (sub, verbs) in &d.extra_subresources {
        let kind = match sub.as_str() {
            "eviction" => gvk("policy", "v1", "Eviction"),
            "binding" => gvk("", "v1", "Binding"),
            "token" => gvk("authentication.k8s.io", "v1", "TokenRequest"),
            _ => gvk(&d.group, version, &d.kind),
        };
        subs.push(json!({"subresource": sub, "responseKind": kind, "verbs": verbs}));
    }
    let mut r = json!({
        "resource": d.plural, "responseKind": gvk(&d.group, version, &d.kind),
        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": d.singular, "verbs": ALL_VERBS, "subresources": subs,
    });
    if !d.short_names.is_empty() {
        r["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        r["categories"] = json!(d.categories);
    }
    r
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`) for `/api` (core) or
/// `/apis` (all other groups).
pub fn aggregated(store: &Store, core: bool) -> Value {
    let defs = store.defs();
    let mut names: Vec<String> = Vec::new();
    for d in &defs {
        if d.group.is_empty() == core && !names.contains(&d.group) {
            names.push(d.group.clone());
        }
    }
    let groups = groups(store);
    let items: Vec<Value> = names
        .iter()
        .map(|g| {
            let versions = if g.is_empty() {
                vec!["v1".to_string()]
            } else {
                groups.get(g).cloned().unwrap_or_default()
            };
            let vs: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = defs
                        .iter()
                        .filter(|d| &d.group == g && d.versions.contains(v))
                        .map(|d| aggregated_resource(d, v))
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g}, "versions": vs})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// Content type of aggregated discovery answers.
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn discovery_lists_builtins_with_subresources() {
        let s = Store::new(10);
        let core = resource_list(&s, "", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(
            names.contains(&"pods")
                && names.contains(&"pods/eviction")
                && names.contains(&"nodes/status")
        );
        let pods = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods")
            .unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["namespaced"], true);
        let apps = resource_list(&s, "apps", "v1").unwrap();
        assert!(
            apps["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "deployments/scale" && r["kind"] == "Scale")
        );
        assert!(resource_list(&s, "nope", "v1").is_none());
        let gl = group_list(&s);
        assert!(
            gl["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "policy")
        );
        assert_eq!(
            group(&s, "apps").unwrap()["preferredVersion"]["groupVersion"],
            "apps/v1"
        );
        let core = aggregated(&s, true);
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert_eq!(core["items"][0]["metadata"]["name"], "");
        let pods = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .unwrap();
        assert_eq!(pods["scope"], "Namespaced");
        assert!(
            pods["subresources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["subresource"] == "eviction" && s["responseKind"]["group"] == "policy")
        );
        let apis = aggregated(&s, false);
        assert!(
            apis["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["metadata"]["name"] == "apps")
        );
    }
}
