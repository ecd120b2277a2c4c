//! The RBAC authorizer, evaluated against the Roles, ClusterRoles and bindings in the store on
//! every request (no cache, so a binding written a moment ago applies to the next request, as
//! kube-apiserver's informer-fed authorizer does within milliseconds).

use crate::authn::User;
use crate::selector::LabelSelector;
use crate::store::{GroupResource, Store};
use serde_json::{Value, json};
use std::sync::Arc;

const RBAC: &str = "rbac.authorization.k8s.io";

/// What a request asks to do, as kube's `authorizer.Attributes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// Verb (`get`, `list`, `watch`, `create`, ... for resources; lower-case HTTP method otherwise).
    pub verb: String,
    /// Whether this is a resource request (else a non-resource path).
    pub resource_request: bool,
    /// API group (`""` for core).
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource (`status`, `scale`, ...), empty for none.
    pub subresource: String,
    /// Object name, empty for collections.
    pub name: String,
    /// Namespace, empty for cluster scope.
    pub namespace: String,
    /// URL path for non-resource requests.
    pub path: String,
}

impl Attributes {
    /// kube-apiserver's 403 message (`responsewriters.forbiddenMessage` plus `NewForbidden`).
    pub fn forbidden_message(&self, user: &str) -> String {
        if !self.resource_request {
            return format!(
                "forbidden: User {user:?} cannot {} path {:?}",
                self.verb, self.path
            );
        }
        let mut resource = self.resource.clone();
        if !self.subresource.is_empty() {
            resource = format!("{resource}/{}", self.subresource);
        }
        let scope = if self.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {:?}", self.namespace)
        };
        let reason = format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}",
            self.verb, self.group
        );
        // The qualified resource of the object part has no subresource (kube's GroupResource).
        let qualified = if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        if self.name.is_empty() {
            format!("{qualified} is forbidden: {reason}")
        } else {
            format!("{qualified} {:?} is forbidden: {reason}", self.name)
        }
    }

    /// The Status details kube attaches to a 403.
    pub fn forbidden_details(&self) -> Value {
        if !self.resource_request {
            return json!({});
        }
        let mut d = json!({"group": self.group, "kind": self.resource});
        if !self.name.is_empty() {
            d["name"] = json!(self.name);
        }
        d
    }
}

fn strs(v: Option<&Value>) -> impl Iterator<Item = &str> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn has(v: Option<&Value>, want: &str) -> bool {
    strs(v).any(|s| s == want || s == "*")
}

/// Whether one PolicyRule allows the request (kube's `RuleAllows`).
pub fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    if !has(rule.get("verbs"), &a.verb) {
        return false;
    }
    if !a.resource_request {
        return strs(rule.get("nonResourceURLs")).any(|u| {
            u == "*"
                || u == a.path
                || u.strip_suffix('*')
                    .is_some_and(|prefix| a.path.starts_with(prefix))
        });
    }
    if !has(rule.get("apiGroups"), &a.group) {
        return false;
    }
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource_ok = strs(rule.get("resources")).any(|r| {
        r == "*"
            || r == combined
            || (!a.subresource.is_empty() && r.strip_prefix("*/") == Some(&a.subresource))
            || (r.strip_suffix("/*") == Some(&a.resource) && !a.subresource.is_empty())
    });
    if !resource_ok {
        return false;
    }
    let mut names = strs(rule.get("resourceNames")).peekable();
    names.peek().is_none() || (!a.name.is_empty() && names.any(|n| n == a.name))
}

fn subject_matches(s: &Value, user: &User, binding_ns: &str) -> bool {
    let name = s.get("name").and_then(Value::as_str).unwrap_or_default();
    match s.get("kind").and_then(Value::as_str) {
        Some("User") => name == user.name,
        Some("Group") => user.groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let ns = s
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

fn gr(resource: &str) -> GroupResource {
    (RBAC.to_string(), resource.to_string())
}

/// The rules of a ClusterRole, with its aggregationRule's selected ClusterRoles folded in
/// (evaluated on read rather than by a controller writing them back; one level deep).
fn cluster_role_rules(store: &Store, name: &str) -> Vec<Value> {
    let Some(role) = store.get(&gr("clusterroles"), "", name) else {
        return Vec::new();
    };
    let mut rules: Vec<Value> = role
        .get("rules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let selectors: Vec<LabelSelector> = role
        .pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| LabelSelector::from_object(s).ok())
        .collect();
    if !selectors.is_empty() {
        let (_, all) = store.list(&gr("clusterroles"), None);
        for other in all {
            let labels = other.pointer("/metadata/labels");
            if selectors.iter().any(|s| !s.is_empty() && s.matches(labels)) {
                rules.extend(
                    other
                        .get("rules")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                );
            }
        }
    }
    rules
}

fn binding_allows(store: &Store, b: &Arc<Value>, user: &User, a: &Attributes) -> bool {
    let ns = b
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let bound = b
        .get("subjects")
        .and_then(Value::as_array)
        .is_some_and(|ss| ss.iter().any(|s| subject_matches(s, user, ns)));
    if !bound {
        return false;
    }
    let kind = b.pointer("/roleRef/kind").and_then(Value::as_str);
    let name = b
        .pointer("/roleRef/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let rules = match kind {
        Some("ClusterRole") => cluster_role_rules(store, name),
        Some("Role") if !ns.is_empty() => store
            .get(&gr("roles"), ns, name)
            .and_then(|r| r.get("rules").and_then(Value::as_array).cloned())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    rules.iter().any(|r| rule_allows(r, a))
}

/// Whether RBAC allows `user` to do `a`.
pub fn allowed(store: &Store, user: &User, a: &Attributes) -> bool {
    if user.is_master() {
        return true;
    }
    let (_, crbs) = store.list(&gr("clusterrolebindings"), None);
    if crbs.iter().any(|b| binding_allows(store, b, user, a)) {
        return true;
    }
    if a.resource_request && !a.namespace.is_empty() {
        let (_, rbs) = store.list(&gr("rolebindings"), Some(&a.namespace));
        return rbs.iter().any(|b| binding_allows(store, b, user, a));
    }
    false
}

/// kube-apiserver's bootstrap policy that every cluster has and our components rely on:
/// discovery and health for everyone authenticated, access reviews of oneself, and
/// `cluster-admin`. Returned as (resource, object) pairs to create.
pub fn bootstrap_policy() -> Vec<(&'static str, Value)> {
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
               "rules": rules})
    };
    let binding = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": RBAC, "kind": "Group", "name": g}))
            .collect();
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
               "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
               "subjects": subjects})
    };
    vec![
        (
            "clusterroles",
            role(
                "cluster-admin",
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                       {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:discovery",
                json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz",
                        "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"],
                        "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:basic-user",
                json!([{"apiGroups": ["authorization.k8s.io"],
                        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                        "verbs": ["create"]},
                       {"apiGroups": ["authentication.k8s.io"],
                        "resources": ["selfsubjectreviews"], "verbs": ["create"]}]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:public-info-viewer",
                json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                        "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterrolebindings",
            binding("system:discovery", &["system:authenticated"]),
        ),
        (
            "clusterrolebindings",
            binding("system:basic-user", &["system:authenticated"]),
        ),
        (
            "clusterrolebindings",
            binding(
                "system:public-info-viewer",
                &["system:authenticated", "system:unauthenticated"],
            ),
        ),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn attrs(verb: &str, group: &str, res: &str, sub: &str, name: &str, ns: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            group: group.into(),
            resource: res.into(),
            subresource: sub.into(),
            name: name.into(),
            namespace: ns.into(),
            path: String::new(),
        }
    }

    #[test]
    fn messages_match_kube_apiserver() {
        let a = attrs("get", "machine.sapcloud.io", "machines", "", "m1", "ns");
        assert_eq!(
            a.forbidden_message("system:serviceaccount:ns:mcm"),
            "machines.machine.sapcloud.io \"m1\" is forbidden: User \"system:serviceaccount:ns:mcm\" cannot get resource \"machines\" in API group \"machine.sapcloud.io\" in the namespace \"ns\""
        );
        let a = attrs("list", "", "secrets", "", "", "");
        assert_eq!(
            a.forbidden_message("u"),
            "secrets is forbidden: User \"u\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"
        );
        let a = attrs(
            "update",
            "machine.sapcloud.io",
            "machines",
            "status",
            "m",
            "n",
        );
        assert!(a.forbidden_message("u").starts_with(
            "machines.machine.sapcloud.io \"m\" is forbidden: User \"u\" cannot update resource \"machines/status\""
        ));
        let a = Attributes {
            verb: "get".into(),
            path: "/metrics".into(),
            ..Default::default()
        };
        assert_eq!(
            a.forbidden_message("u"),
            "forbidden: User \"u\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn rules_match_verbs_resources_subresources_and_names() {
        let rule = json!({"apiGroups": ["machine.sapcloud.io"], "resources": ["machines", "machines/status"],
                          "verbs": ["get", "update"], "resourceNames": ["m1"]});
        let g = "machine.sapcloud.io";
        assert!(rule_allows(
            &rule,
            &attrs("get", g, "machines", "", "m1", "n")
        ));
        assert!(rule_allows(
            &rule,
            &attrs("update", g, "machines", "status", "m1", "n")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("get", g, "machines", "", "m2", "n")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("list", g, "machines", "", "", "n")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("get", g, "machines", "scale", "m1", "n")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("get", "", "machines", "", "m1", "n")
        ));
        let star = json!({"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["*"]});
        assert!(rule_allows(
            &star,
            &attrs("patch", g, "machinesets", "scale", "x", "n")
        ));
        assert!(!rule_allows(
            &star,
            &attrs("patch", g, "machinesets", "", "x", "n")
        ));
        let nr = json!({"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]});
        let path = |p: &str| Attributes {
            verb: "get".into(),
            path: p.into(),
            ..Default::default()
        };
        assert!(rule_allows(&nr, &path("/metrics")));
        assert!(rule_allows(&nr, &path("/debug/pprof")));
        assert!(!rule_allows(&nr, &path("/healthz")));
    }

    #[test]
    fn bindings_grant_by_user_group_and_service_account() {
        let store = Store::new(100);
        let sa = User::service_account("ns", "mcm");
        let a = attrs("get", "", "secrets", "", "s", "ns");
        assert!(!allowed(&store, &sa, &a));
        assert!(allowed(&store, &User::admin(), &a));
        store
            .create(
                &(String::new(), "namespaces".to_string()),
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}),
                false,
            )
            .unwrap();
        store
            .create(
                &gr("roles"),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                       "metadata": {"name": "r", "namespace": "ns"},
                       "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
                false,
            )
            .unwrap();
        store
            .create(
                &gr("rolebindings"),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                       "metadata": {"name": "b", "namespace": "ns"},
                       "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "r"},
                       "subjects": [{"kind": "ServiceAccount", "name": "mcm", "namespace": "ns"}]}),
                false,
            )
            .unwrap();
        assert!(allowed(&store, &sa, &a));
        let other_ns = attrs("get", "", "secrets", "", "s", "other");
        assert!(!allowed(&store, &sa, &other_ns));
        assert!(!allowed(&store, &User::service_account("ns", "x"), &a));
    }

    #[test]
    fn aggregated_cluster_roles_collect_labelled_rules() {
        let store = Store::new(100);
        let create = |resource: &str, obj: Value| store.create(&gr(resource), obj, false).unwrap();
        create(
            "clusterroles",
            json!({"metadata": {"name": "agg"}, "rules": [],
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]}}),
        );
        create(
            "clusterroles",
            json!({"metadata": {"name": "part", "labels": {"agg": "yes"}},
                   "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]}),
        );
        create(
            "clusterrolebindings",
            json!({"metadata": {"name": "b"},
                   "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "agg"},
                   "subjects": [{"kind": "Group", "name": "ops"}]}),
        );
        let ops = User::new("u", ["ops".to_string()]);
        assert!(allowed(
            &store,
            &ops,
            &attrs("list", "", "nodes", "", "", "")
        ));
        assert!(!allowed(
            &store,
            &ops,
            &attrs("get", "", "nodes", "", "n", "")
        ));
        assert!(!allowed(
            &store,
            &User::new("v", []),
            &attrs("list", "", "nodes", "", "", "")
        ));
    }
}
