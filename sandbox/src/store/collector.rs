//! The store's internal controllers: the garbage collector's snapshot and actions, the retried
//! read-modify-write they use, and the PDB status refresh.

use super::meta::{finalizers, meta_str, namespace_finalizer};
use super::{DeleteOptions, GroupResource, Store};
use crate::gc::{self, GcAction, GcObject, ObjKey, Propagation};
use serde_json::Value;
use std::sync::Arc;

impl Store {
    /// Snapshot for the garbage collector.
    pub fn gc_snapshot(&self) -> Vec<GcObject> {
        let st = self.read();
        let mut out = Vec::new();
        for ((g, r), t) in &st.tables {
            for ((ns, name), o) in &t.objects {
                let owners = o
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|r| {
                                Some((
                                    r.get("uid")?.as_str()?.to_string(),
                                    r.get("blockOwnerDeletion")
                                        .and_then(Value::as_bool)
                                        .unwrap_or(false),
                                ))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(GcObject {
                    key: ObjKey {
                        group: g.clone(),
                        resource: r.clone(),
                        namespace: ns.clone(),
                        name: name.clone(),
                    },
                    uid: meta_str(o, "uid").unwrap_or_default().to_string(),
                    owners,
                    deleting: o.pointer("/metadata/deletionTimestamp").is_some(),
                    finalizers: finalizers(o),
                    namespace_finalizer: g.is_empty()
                        && r == "namespaces"
                        && namespace_finalizer(o),
                });
            }
        }
        out
    }

    /// Runs collector rounds until nothing is left to do; returns the number of actions executed.
    pub fn collect_garbage(&self) -> usize {
        let mut total = 0;
        for _ in 0..100 {
            let actions = gc::plan(&self.gc_snapshot());
            if actions.is_empty() {
                break;
            }
            total += actions.len();
            for a in actions {
                self.execute_gc(a);
            }
        }
        total
    }

    fn execute_gc(&self, action: GcAction) {
        match action {
            GcAction::Delete(k, p) => {
                let gr = (k.group.clone(), k.resource.clone());
                let opts = DeleteOptions {
                    propagation: Some(p).filter(|p| *p != Propagation::Background),
                    ..Default::default()
                };
                if let Err(e) = self.delete(&gr, &k.namespace, &k.name, &opts) {
                    tracing::debug!(error = %e, object = ?k, "garbage collector delete");
                }
            }
            GcAction::RemoveFinalizer(k, f) => {
                self.modify(&k, |o| {
                    if k.group.is_empty() && k.resource == "namespaces" && f == "kubernetes" {
                        if let Some(a) = o
                            .pointer_mut("/spec/finalizers")
                            .and_then(Value::as_array_mut)
                        {
                            a.retain(|x| x.as_str() != Some("kubernetes"));
                        }
                    } else if let Some(a) = o
                        .pointer_mut("/metadata/finalizers")
                        .and_then(Value::as_array_mut)
                    {
                        a.retain(|x| x.as_str() != Some(f.as_str()));
                    }
                });
            }
            GcAction::RemoveOwnerRef(k, uid) => {
                self.modify(&k, |o| {
                    if let Some(a) = o
                        .pointer_mut("/metadata/ownerReferences")
                        .and_then(Value::as_array_mut)
                    {
                        a.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                        if a.is_empty()
                            && let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut)
                        {
                            m.remove("ownerReferences");
                        }
                    }
                });
            }
        }
    }

    /// Read-modify-write of one object, retried on conflicts (for internal controllers).
    pub fn modify(&self, k: &ObjKey, f: impl Fn(&mut Value)) -> Option<Arc<Value>> {
        let gr = (k.group.clone(), k.resource.clone());
        for _ in 0..5 {
            let cur = self.get(&gr, &k.namespace, &k.name)?;
            let mut next = (*cur).clone();
            f(&mut next);
            let rv = meta_str(&cur, "resourceVersion").map(String::from);
            match self.update(&gr, &k.namespace, &k.name, next, rv.as_deref(), false) {
                Ok(o) => return Some(o),
                Err(e) if e.code == 409 => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// Recomputes the status of every PDB from the pods (writes only when it changed).
    pub fn refresh_pdbs(&self) {
        let pdb_gr: GroupResource = ("policy".into(), "poddisruptionbudgets".into());
        let pod_gr: GroupResource = ("".into(), "pods".into());
        let (_, pdbs) = self.list(&pdb_gr, None);
        for pdb in pdbs {
            let ns = meta_str(&pdb, "namespace").unwrap_or_default().to_string();
            let (_, pods) = self.list(&pod_gr, Some(&ns));
            let refs: Vec<&Value> = pods.iter().map(|p| p.as_ref()).collect();
            let status = crate::pdb::compute_status(&pdb, &refs);
            if pdb.get("status") != Some(&status) {
                let name = meta_str(&pdb, "name").unwrap_or_default().to_string();
                let key = ObjKey {
                    group: "policy".into(),
                    resource: "poddisruptionbudgets".into(),
                    namespace: ns,
                    name,
                };
                self.modify(&key, |o| o["status"] = status.clone());
            }
        }
    }
}
