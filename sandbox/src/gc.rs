//! Garbage collection decisions (owner references, propagation policies, namespace cascade),
//! computed from a snapshot of object summaries. Pure: the store executes the actions.

use std::collections::{HashMap, HashSet};

/// Identifies a stored object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    /// API group.
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// What GC needs to know about one object.
#[derive(Debug, Clone)]
pub struct GcObject {
    /// Where it is stored.
    pub key: ObjKey,
    /// metadata.uid.
    pub uid: String,
    /// Owner uids and whether each blocks owner deletion.
    pub owners: Vec<(String, bool)>,
    /// Has a deletionTimestamp.
    pub deleting: bool,
    /// metadata.finalizers.
    pub finalizers: Vec<String>,
    /// For namespaces: spec.finalizers still contains "kubernetes".
    pub namespace_finalizer: bool,
}

/// Deletion propagation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Delete now, dependents collected afterwards.
    Background,
    /// Delete dependents first (owner waits with the `foregroundDeletion` finalizer).
    Foreground,
    /// Keep dependents, remove their owner references (`orphan` finalizer).
    Orphan,
}

impl Propagation {
    /// Parses `propagationPolicy`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Background" => Some(Propagation::Background),
            "Foreground" => Some(Propagation::Foreground),
            "Orphan" => Some(Propagation::Orphan),
            _ => None,
        }
    }
}

/// An action the store performs for the collector.
#[derive(Debug, Clone, PartialEq)]
pub enum GcAction {
    /// Delete the object with this propagation (finalizers still respected).
    Delete(ObjKey, Propagation),
    /// Remove a metadata finalizer (for namespaces `kubernetes` means spec.finalizers).
    RemoveFinalizer(ObjKey, String),
    /// Remove owner references to this uid.
    RemoveOwnerRef(ObjKey, String),
}

/// Finalizer the collector uses for foreground deletion.
pub const FOREGROUND: &str = "foregroundDeletion";
/// Finalizer the collector uses for orphaning.
pub const ORPHAN: &str = "orphan";

/// Computes the next round of collector actions.
pub fn plan(objects: &[GcObject]) -> Vec<GcAction> {
    let by_uid: HashMap<&str, &GcObject> = objects.iter().map(|o| (o.uid.as_str(), o)).collect();
    let mut dependents: HashMap<&str, Vec<(&GcObject, bool)>> = HashMap::new();
    for o in objects {
        for (owner, block) in &o.owners {
            dependents
                .entry(owner.as_str())
                .or_default()
                .push((o, *block));
        }
    }
    let mut actions = Vec::new();
    let mut deleting_now: HashSet<&ObjKey> = HashSet::new();
    for o in objects {
        if o.owners.is_empty() || o.deleting {
            continue;
        }
        let existing: Vec<&GcObject> = o
            .owners
            .iter()
            .filter_map(|(u, _)| by_uid.get(u.as_str()).copied())
            .collect();
        if existing.is_empty() {
            actions.push(GcAction::Delete(o.key.clone(), Propagation::Background));
            deleting_now.insert(&o.key);
        } else if existing
            .iter()
            .any(|ow| ow.deleting && ow.finalizers.iter().any(|f| f == FOREGROUND))
        {
            actions.push(GcAction::Delete(o.key.clone(), Propagation::Foreground));
            deleting_now.insert(&o.key);
        }
    }
    for o in objects.iter().filter(|o| o.deleting) {
        let deps = dependents
            .get(o.uid.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        if o.finalizers.iter().any(|f| f == ORPHAN) {
            for (d, _) in deps {
                actions.push(GcAction::RemoveOwnerRef(d.key.clone(), o.uid.clone()));
            }
            actions.push(GcAction::RemoveFinalizer(o.key.clone(), ORPHAN.to_string()));
        } else if o.finalizers.iter().any(|f| f == FOREGROUND)
            && !deps.iter().any(|(_, block)| *block)
        {
            actions.push(GcAction::RemoveFinalizer(
                o.key.clone(),
                FOREGROUND.to_string(),
            ));
        } else if o.finalizers.iter().any(|f| f == FOREGROUND) {
            // Non-blocking dependents do not hold the owner back.
        }
        if o.key.group.is_empty() && o.key.resource == "namespaces" {
            let members: Vec<&GcObject> = objects
                .iter()
                .filter(|m| m.key.namespace == o.key.name)
                .collect();
            for m in &members {
                if !m.deleting && !deleting_now.contains(&m.key) {
                    actions.push(GcAction::Delete(m.key.clone(), Propagation::Background));
                }
            }
            if members.is_empty() && o.namespace_finalizer {
                actions.push(GcAction::RemoveFinalizer(
                    o.key.clone(),
                    "kubernetes".into(),
                ));
            }
        }
    }
    actions
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn obj(res: &str, ns: &str, name: &str, uid: &str, owners: &[(&str, bool)]) -> GcObject {
        GcObject {
            key: ObjKey {
                group: String::new(),
                resource: res.into(),
                namespace: ns.into(),
                name: name.into(),
            },
            uid: uid.into(),
            owners: owners.iter().map(|(u, b)| (u.to_string(), *b)).collect(),
            deleting: false,
            finalizers: vec![],
            namespace_finalizer: false,
        }
    }

    #[test]
    fn orphaned_dependents_are_deleted() {
        let objs = vec![
            obj("pods", "a", "p", "u2", &[("gone", true)]),
            obj("pods", "a", "q", "u3", &[("u4", false)]),
            obj("configmaps", "a", "c", "u4", &[]),
        ];
        let acts = plan(&objs);
        assert_eq!(
            acts,
            vec![GcAction::Delete(
                objs[0].key.clone(),
                Propagation::Background
            )]
        );
    }

    #[test]
    fn foreground_waits_for_blocking_dependents() {
        let mut owner = obj("replicasets", "a", "rs", "o", &[]);
        owner.deleting = true;
        owner.finalizers = vec![FOREGROUND.into()];
        let dep = obj("pods", "a", "p", "d", &[("o", true)]);
        let acts = plan(&[owner.clone(), dep.clone()]);
        assert_eq!(
            acts,
            vec![GcAction::Delete(dep.key.clone(), Propagation::Foreground)]
        );
        let acts = plan(&[owner.clone()]);
        assert_eq!(
            acts,
            vec![GcAction::RemoveFinalizer(
                owner.key.clone(),
                FOREGROUND.into()
            )]
        );
    }

    #[test]
    fn orphan_removes_owner_refs() {
        let mut owner = obj("replicasets", "a", "rs", "o", &[]);
        owner.deleting = true;
        owner.finalizers = vec![ORPHAN.into()];
        let dep = obj("pods", "a", "p", "d", &[("o", true)]);
        let acts = plan(&[owner.clone(), dep.clone()]);
        assert_eq!(
            acts,
            vec![
                GcAction::RemoveOwnerRef(dep.key.clone(), "o".into()),
                GcAction::RemoveFinalizer(owner.key.clone(), ORPHAN.into())
            ]
        );
    }

    #[test]
    fn namespace_cascade() {
        let mut ns = obj("namespaces", "", "a", "n", &[]);
        ns.deleting = true;
        ns.namespace_finalizer = true;
        let cm = obj("configmaps", "a", "c", "c", &[]);
        let other = obj("configmaps", "b", "c", "c2", &[]);
        let acts = plan(&[ns.clone(), cm.clone(), other]);
        assert_eq!(
            acts,
            vec![GcAction::Delete(cm.key.clone(), Propagation::Background)]
        );
        let acts = plan(&[ns.clone()]);
        assert_eq!(
            acts,
            vec![GcAction::RemoveFinalizer(
                ns.key.clone(),
                "kubernetes".into()
            )]
        );
    }
}
