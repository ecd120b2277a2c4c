//! Resource types the sandbox serves: the built-in table and definitions derived from CRDs.

use serde_json::Value;
use std::collections::BTreeMap;

/// Scale subresource paths (CRD `subresources.scale`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleSpec {
    /// JSON path of desired replicas, e.g. `.spec.replicas`.
    pub spec_replicas: String,
    /// JSON path of observed replicas, e.g. `.status.replicas`.
    pub status_replicas: String,
    /// Optional JSON path of the label selector string.
    pub label_selector: Option<String>,
}

/// How non-storage versions of a CRD are produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Conversion {
    /// Rewrite apiVersion only.
    None,
    /// Call the conversion webhook (`spec.conversion.webhook.clientConfig`).
    Webhook(Value),
}

/// Per-version details of a CRD.
#[derive(Debug, Clone, Default)]
pub struct VersionInfo {
    /// `openAPIV3Schema` of this version.
    pub schema: Option<Value>,
    /// `additionalPrinterColumns`.
    pub printer_columns: Vec<Value>,
    /// Whether the version is served.
    pub served: bool,
}

/// A served resource type.
#[derive(Debug, Clone)]
pub struct ResourceDef {
    /// API group ("" = core).
    pub group: String,
    /// Served versions, preferred first.
    pub versions: Vec<String>,
    /// The version objects are stored in.
    pub storage_version: String,
    /// Plural name.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// kubectl short names.
    pub short_names: Vec<String>,
    /// Categories (`all`, ...).
    pub categories: Vec<String>,
    /// Has a `status` subresource.
    pub status: bool,
    /// Has a `scale` subresource.
    pub scale: Option<ScaleSpec>,
    /// Extra subresources with their verbs (`eviction` -> create, `finalize`).
    pub extra_subresources: Vec<(String, Vec<String>)>,
    /// Per-version CRD details; empty for built-ins.
    pub crd_versions: BTreeMap<String, VersionInfo>,
    /// Whether this type comes from a CRD.
    pub is_crd: bool,
    /// Conversion strategy (CRDs).
    pub conversion: Conversion,
}

/// Verbs of a main resource.
pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl ResourceDef {
    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        short: &[&str],
    ) -> Self {
        ResourceDef {
            group: group.to_string(),
            versions: vec![version.to_string()],
            storage_version: version.to_string(),
            plural: plural.to_string(),
            singular: kind.to_lowercase(),
            kind: kind.to_string(),
            namespaced,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            categories: Vec::new(),
            status: false,
            scale: None,
            extra_subresources: Vec::new(),
            crd_versions: BTreeMap::new(),
            is_crd: false,
            conversion: Conversion::None,
        }
    }
    fn with_status(mut self) -> Self {
        self.status = true;
        self
    }
    fn with_scale(mut self) -> Self {
        self.scale = Some(ScaleSpec {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: None,
        });
        self
    }
    fn in_all(mut self) -> Self {
        self.categories = vec!["all".into()];
        self
    }
    fn sub(mut self, name: &str, verbs: &[&str]) -> Self {
        self.extra_subresources.push((
            name.to_string(),
            verbs.iter().map(|s| s.to_string()).collect(),
        ));
        self
    }

    /// `group/version` or `version` for core.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// Whether main-resource writes must keep the stored status (status has its own endpoint).
    pub fn status_separate(&self) -> bool {
        self.status
    }

    /// Whether `generation` is maintained (everything with a spec-like body).
    pub fn tracks_generation(&self) -> bool {
        self.is_crd
            || self.status
            || matches!(
                self.plural.as_str(),
                "customresourcedefinitions" | "poddisruptionbudgets"
            )
    }

    /// Where objects of this type are stored: events.k8s.io Events share core/v1 Event storage.
    pub fn storage_key(&self) -> (String, String) {
        if self.group == "events.k8s.io" && self.plural == "events" {
            (String::new(), "events".into())
        } else {
            (self.group.clone(), self.plural.clone())
        }
    }

    /// The schema of one version, if any.
    pub fn schema(&self, version: &str) -> Option<&Value> {
        self.crd_versions
            .get(version)
            .and_then(|v| v.schema.as_ref())
    }
}

/// The built-in resource table (no controllers run for these; objects are stored as JSON).
pub fn builtins() -> Vec<ResourceDef> {
    use ResourceDef as R;
    vec![
        R::builtin("", "v1", "namespaces", "Namespace", false, &["ns"])
            .with_status()
            .sub("finalize", &["update"]),
        R::builtin("", "v1", "nodes", "Node", false, &["no"]).with_status(),
        R::builtin("", "v1", "pods", "Pod", true, &["po"])
            .with_status()
            .in_all()
            .sub("eviction", &["create"])
            .sub("binding", &["create"]),
        R::builtin("", "v1", "secrets", "Secret", true, &[]),
        R::builtin("", "v1", "configmaps", "ConfigMap", true, &["cm"]),
        R::builtin("", "v1", "serviceaccounts", "ServiceAccount", true, &["sa"])
            .sub("token", &["create"]),
        R::builtin("", "v1", "services", "Service", true, &["svc"])
            .with_status()
            .in_all(),
        R::builtin("", "v1", "endpoints", "Endpoints", true, &["ep"]),
        R::builtin("", "v1", "events", "Event", true, &["ev"]),
        R::builtin(
            "",
            "v1",
            "persistentvolumes",
            "PersistentVolume",
            false,
            &["pv"],
        )
        .with_status(),
        R::builtin(
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
        )
        .with_status(),
        R::builtin("events.k8s.io", "v1", "events", "Event", true, &["ev"]),
        R::builtin(
            "storage.k8s.io",
            "v1",
            "volumeattachments",
            "VolumeAttachment",
            false,
            &[],
        )
        .with_status(),
        R::builtin(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "StorageClass",
            false,
            &["sc"],
        ),
        R::builtin("storage.k8s.io", "v1", "csinodes", "CSINode", false, &[]),
        R::builtin(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &["pdb"],
        )
        .with_status(),
        R::builtin("coordination.k8s.io", "v1", "leases", "Lease", true, &[]),
        R::builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
        )
        .with_status(),
        R::builtin(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
            &[],
        ),
        R::builtin(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
            &[],
        ),
        R::builtin("apps", "v1", "deployments", "Deployment", true, &["deploy"])
            .with_status()
            .with_scale()
            .in_all(),
        R::builtin("apps", "v1", "replicasets", "ReplicaSet", true, &["rs"])
            .with_status()
            .with_scale()
            .in_all(),
        R::builtin("apps", "v1", "statefulsets", "StatefulSet", true, &["sts"])
            .with_status()
            .with_scale()
            .in_all(),
        R::builtin("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"])
            .with_status()
            .in_all(),
        R::builtin(
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
            &[],
        ),
        R::builtin(
            "authorization.k8s.io",
            "v1",
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
            &[],
        ),
        R::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "roles",
            "Role",
            true,
            &[],
        ),
        R::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
        ),
        R::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
        ),
        R::builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
        ),
    ]
}

fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Derives the served resource from a CRD object; `Err` explains what is missing.
pub fn from_crd(crd: &Value) -> Result<ResourceDef, String> {
    let spec = crd.get("spec").ok_or("spec is required")?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .ok_or("spec.group is required")?;
    let names = spec.get("names").ok_or("spec.names is required")?;
    let plural = names
        .get("plural")
        .and_then(Value::as_str)
        .ok_or("spec.names.plural is required")?;
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .ok_or("spec.names.kind is required")?;
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| kind.to_lowercase());
    let scope = spec
        .get("scope")
        .and_then(Value::as_str)
        .ok_or("spec.scope is required")?;
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("spec.versions is required")?;
    if versions.is_empty() {
        return Err("spec.versions must have at least one version".into());
    }
    let mut served = Vec::new();
    let mut storage = None;
    let mut crd_versions = BTreeMap::new();
    let mut status = false;
    let mut scale = None;
    for v in versions {
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or("spec.versions[].name is required")?;
        let is_served = v.get("served").and_then(Value::as_bool).unwrap_or(false);
        if is_served {
            served.push(name.to_string());
        }
        if v.get("storage").and_then(Value::as_bool).unwrap_or(false) {
            if storage.is_some() {
                return Err(
                    "spec.versions: must have exactly one version marked as storage version".into(),
                );
            }
            storage = Some(name.to_string());
        }
        let subs = v.get("subresources");
        if subs.and_then(|s| s.get("status")).is_some() {
            status = true;
        }
        if let Some(sc) = subs.and_then(|s| s.get("scale")) {
            scale = Some(ScaleSpec {
                spec_replicas: sc
                    .get("specReplicasPath")
                    .and_then(Value::as_str)
                    .unwrap_or(".spec.replicas")
                    .to_string(),
                status_replicas: sc
                    .get("statusReplicasPath")
                    .and_then(Value::as_str)
                    .unwrap_or(".status.replicas")
                    .to_string(),
                label_selector: sc
                    .get("labelSelectorPath")
                    .and_then(Value::as_str)
                    .map(String::from),
            });
        }
        let printer_columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_else(|| vec![serde_json::json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})]);
        crd_versions.insert(
            name.to_string(),
            VersionInfo {
                schema: v
                    .get("schema")
                    .and_then(|s| s.get("openAPIV3Schema"))
                    .cloned(),
                printer_columns,
                served: is_served,
            },
        );
    }
    let storage =
        storage.ok_or("spec.versions: must have exactly one version marked as storage version")?;
    // Discovery lists versions by kube's version priority; good enough: as written, storage first when tied.
    served.sort_by_key(|b| std::cmp::Reverse(version_priority(b)));
    let conversion = match spec
        .get("conversion")
        .and_then(|c| c.get("strategy"))
        .and_then(Value::as_str)
    {
        Some("Webhook") => Conversion::Webhook(
            spec.get("conversion")
                .and_then(|c| c.get("webhook"))
                .and_then(|w| w.get("clientConfig"))
                .cloned()
                .ok_or("spec.conversion.webhook.clientConfig is required for strategy Webhook")?,
        ),
        _ => Conversion::None,
    };
    Ok(ResourceDef {
        group: group.to_string(),
        versions: served,
        storage_version: storage,
        plural: plural.to_string(),
        singular,
        kind: kind.to_string(),
        namespaced: scope == "Namespaced",
        short_names: str_list(names.get("shortNames")),
        categories: str_list(names.get("categories")),
        status,
        scale,
        extra_subresources: Vec::new(),
        crd_versions,
        is_crd: true,
        conversion,
    })
}

/// Kubernetes version ordering: GA > beta > alpha, higher numbers first (`v1` > `v1beta2` > `v1alpha1`).
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u32>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    match num.parse::<u32>() {
        Ok(n) => (level, major, n),
        Err(_) => (0, 0, 0),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn version_order() {
        let mut v = vec!["v1alpha1", "v1", "v1beta1", "v2beta1", "v1beta2"];
        v.sort_by_key(|b| std::cmp::Reverse(version_priority(b)));
        assert_eq!(v, vec!["v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1"]);
    }

    #[test]
    fn crd_parsing() {
        let crd = json!({"spec": {"group": "machine.sapcloud.io", "scope": "Namespaced",
            "names": {"plural": "machinesets", "kind": "MachineSet", "shortNames": ["mcs"]},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}}]}});
        let d = from_crd(&crd).unwrap();
        assert_eq!(d.plural, "machinesets");
        assert!(d.status && d.scale.is_some() && d.namespaced);
        assert_eq!(d.short_names, vec!["mcs"]);
        assert_eq!(d.crd_versions["v1alpha1"].printer_columns[0]["name"], "Age");
        let bad = json!({"spec": {"group": "g", "scope": "Namespaced", "names": {"plural": "a", "kind": "A"},
            "versions": [{"name": "v1", "served": true}]}});
        assert!(from_crd(&bad).is_err());
    }
}
