//! A resource URL of the API (`/api/v1/...`, `/apis/{group}/{version}/...`) parsed into group,
//! version, namespace, resource, name and subresource: what the handlers route on and what the
//! request log counts per requester.

/// A parsed resource URL.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourcePath {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Namespace from the URL.
    pub namespace: Option<String>,
    /// Plural resource.
    pub resource: String,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub sub: Option<String>,
    /// Legacy `/watch/` prefix.
    pub watch: bool,
}

/// Parses `/api/v1/...` and `/apis/{g}/{v}/...` resource URLs.
pub fn parse_resource_path(path: &str) -> Option<ResourcePath> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, mut rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return None,
    };
    let mut p = ResourcePath {
        group,
        version,
        ..Default::default()
    };
    if rest.first() == Some(&"watch") {
        p.watch = true;
        rest = &rest[1..];
    }
    match rest {
        [] => return None,
        [r] => p.resource = r.to_string(),
        ["namespaces", ns] if p.group.is_empty() => {
            p.resource = "namespaces".into();
            p.name = Some(ns.to_string());
        }
        ["namespaces", ns, sub @ ("status" | "finalize")] if p.group.is_empty() => {
            p.resource = "namespaces".into();
            p.name = Some(ns.to_string());
            p.sub = Some(sub.to_string());
        }
        ["namespaces", ns, r, tail @ ..] => {
            p.namespace = Some(ns.to_string());
            p.resource = r.to_string();
            match tail {
                [] => {}
                [n] => p.name = Some(n.to_string()),
                [n, s] => {
                    p.name = Some(n.to_string());
                    p.sub = Some(s.to_string());
                }
                _ => return None,
            }
        }
        [r, n] => {
            p.resource = r.to_string();
            p.name = Some(n.to_string());
        }
        [r, n, s] => {
            p.resource = r.to_string();
            p.name = Some(n.to_string());
            p.sub = Some(s.to_string());
        }
        _ => return None,
    }
    if p.resource.is_empty() || p.name.as_deref() == Some("") {
        return None;
    }
    Some(p)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn resource_paths() {
        let p = parse_resource_path("/api/v1/namespaces/default/pods/p1/eviction").unwrap();
        assert_eq!(
            (
                p.namespace.as_deref(),
                p.resource.as_str(),
                p.name.as_deref(),
                p.sub.as_deref()
            ),
            (Some("default"), "pods", Some("p1"), Some("eviction"))
        );
        let p = parse_resource_path("/api/v1/namespaces/kube-system").unwrap();
        assert_eq!(
            (p.resource.as_str(), p.name.as_deref(), p.namespace),
            ("namespaces", Some("kube-system"), None)
        );
        let p = parse_resource_path("/api/v1/namespaces/x/finalize").unwrap();
        assert_eq!(p.sub.as_deref(), Some("finalize"));
        let p = parse_resource_path("/apis/machine.sapcloud.io/v1alpha1/namespaces/ns/machines")
            .unwrap();
        assert_eq!(
            (p.group.as_str(), p.resource.as_str(), p.name),
            ("machine.sapcloud.io", "machines", None)
        );
        let p = parse_resource_path("/apis/apps/v1/watch/namespaces/ns/deployments").unwrap();
        assert!(p.watch);
        let p = parse_resource_path("/api/v1/nodes/n1/status").unwrap();
        assert_eq!(
            (p.resource.as_str(), p.sub.as_deref()),
            ("nodes", Some("status"))
        );
        assert!(parse_resource_path("/api/v1").is_none());
        assert!(parse_resource_path("/foo/bar").is_none());
        assert!(parse_resource_path("/api/v1/namespaces/a/pods/b/c/d").is_none());
    }
}
