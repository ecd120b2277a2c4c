//! Label and field selectors: parsing and matching (pure functions).

use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelReq {
    /// `k=v`, `k==v`, `k in (a,b)`.
    In(String, Vec<String>),
    /// `k!=v`, `k notin (a,b)` (also matches objects without the label).
    NotIn(String, Vec<String>),
    /// `k`.
    Exists(String),
    /// `!k`.
    NotExists(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(pub Vec<LabelReq>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for ch in s.chars() {
        match ch {
            '(' => {
                depth += 1;
                cur.push(ch)
            }
            ')' => {
                depth -= 1;
                cur.push(ch)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(ch),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set of values, found {rest:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let req = if let Some(k) = part.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotIn(k.trim().to_string(), vec![v.trim().to_string()])
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::In(k.trim().to_string(), vec![v.trim().to_string()])
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::In(k.trim().to_string(), vec![v.trim().to_string()])
            } else if let Some(idx) = part.find(" notin ") {
                LabelReq::NotIn(part[..idx].trim().to_string(), parse_set(&part[idx + 7..])?)
            } else if let Some(idx) = part.find(" in ") {
                LabelReq::In(part[..idx].trim().to_string(), parse_set(&part[idx + 4..])?)
            } else {
                LabelReq::Exists(part.trim().to_string())
            };
            let key = match &req {
                LabelReq::In(k, _)
                | LabelReq::NotIn(k, _)
                | LabelReq::Exists(k)
                | LabelReq::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(format!(
                    "unable to parse requirement: invalid label key {key:?}"
                ));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Builds a selector from a `metav1.LabelSelector` object (matchLabels + matchExpressions).
    pub fn from_object(sel: &Value) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(LabelReq::In(
                    k.clone(),
                    vec![v.as_str().unwrap_or_default().to_string()],
                ));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let op = e
                    .get("operator")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                reqs.push(match op {
                    "In" => LabelReq::In(key, values),
                    "NotIn" => LabelReq::NotIn(key, values),
                    "Exists" => LabelReq::Exists(key),
                    "DoesNotExist" => LabelReq::NotExists(key),
                    other => {
                        return Err(format!("{other:?} is not a valid label selector operator"));
                    }
                });
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the selector selects nothing-in-particular (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Matches a labels map (`metadata.labels`, possibly absent).
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|v| !vs.iter().any(|x| x == v)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// One field requirement: path, wanted value, equality or inequality.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldReq {
    /// Dotted path such as `spec.nodeName`.
    pub path: String,
    /// Compared value.
    pub value: String,
    /// true for `!=`.
    pub negated: bool,
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(pub Vec<FieldReq>);

/// kube-apiserver's refusal of a field selector on a field the resource does not index: kinds
/// with field conversions of their own keep the old wording, every other kind (custom resources
/// included) names the fields it supports.
fn unknown_field_message(group: &str, resource: &str, path: &str) -> String {
    let own_conversion = group.is_empty()
        && matches!(
            resource,
            "pods"
                | "secrets"
                | "nodes"
                | "events"
                | "services"
                | "namespaces"
                | "replicationcontrollers"
        );
    if own_conversion {
        format!("field label not supported: {path}")
    } else {
        format!(
            "\"{path}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        )
    }
}

/// Field paths kube-apiserver supports for a resource beyond `metadata.name` and `metadata.namespace`.
pub fn supported_fields(group: &str, resource: &str) -> &'static [&'static str] {
    match (group, resource) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "namespaces") => &["status.phase"],
        ("", "replicationcontrollers") => &["status.replicas"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses `a=b,c!=d` and checks each field is supported for the resource.
    pub fn parse(s: &str, group: &str, resource: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, value, negated) = if let Some((k, v)) = part.split_once("!=") {
                (k, v, true)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, v, false)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, v, false)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let path = path.trim();
            if path != "metadata.name"
                && path != "metadata.namespace"
                && !supported_fields(group, resource).contains(&path)
            {
                return Err(unknown_field_message(group, resource, path));
            }
            reqs.push(FieldReq {
                path: path.to_string(),
                value: value.trim().to_string(),
                negated,
            });
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Matches an object; a missing field compares as the empty string (as kube-apiserver does).
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let mut cur = Some(obj);
            for seg in r.path.split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let actual = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Object(o)) if r.path == "source" => o
                    .get("component")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                _ => String::new(),
            };
            (actual == r.value) != r.negated
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_operators() {
        let l = json!({"app": "web", "tier": "fe"});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&l));
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db)"));
        assert!(!m("app notin (web,db)"));
        assert!(m("tier"));
        assert!(!m("!tier"));
        assert!(m("!missing"));
        assert!(m("missing!=x"));
        assert!(!m("missing in (x)"));
        assert!(m("app=web,tier in (fe)"));
        assert!(!m("app=web,tier in (be)"));
        assert!(LabelSelector::parse("").unwrap().matches(None));
        assert!(!LabelSelector::parse("app").unwrap().matches(None));
    }

    #[test]
    fn label_selector_rejects_garbage() {
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("sp ace=x").is_err());
    }

    #[test]
    fn label_selector_from_object() {
        let s = LabelSelector::from_object(&json!({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["2"]}]})).unwrap();
        assert!(s.matches(Some(&json!({"a": "1"}))));
        assert!(!s.matches(Some(&json!({"a": "1", "b": "2"}))));
        assert!(
            LabelSelector::from_object(
                &json!({"matchExpressions": [{"key": "b", "operator": "Foo"}]})
            )
            .is_err()
        );
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let f = FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed", "", "pods").unwrap();
        assert!(f.matches(&pod));
        let f = FieldSelector::parse("spec.nodeName=", "", "pods").unwrap();
        assert!(!f.matches(&pod));
        assert!(f.matches(&json!({"spec": {}})));
        assert!(FieldSelector::parse("spec.nodeName=x", "", "configmaps").is_err());
        assert!(FieldSelector::parse("metadata.name", "", "configmaps").is_err());
        let ev = json!({"involvedObject": {"kind": "Machine", "name": "m"}});
        assert!(
            FieldSelector::parse(
                "involvedObject.kind=Machine,involvedObject.name=m",
                "",
                "events"
            )
            .unwrap()
            .matches(&ev)
        );
    }
}
