//! Creating and updating objects: names, uids and resourceVersions, optimistic concurrency,
//! generation, and the wake-ups of the garbage collector and the PDB status updater.

use super::meta::{
    finalizers, meta_str, namespace_finalizer, new_uid, now_rfc3339, random_suffix, spec_part,
};
use super::{EventType, GroupResource, Store};
use crate::error::{ApiError, ApiResult, ErrTarget};
use serde_json::{Value, json};
use std::sync::Arc;

impl Store {
    /// Creates an object (already admitted and converted to the storage version).
    pub fn create(
        &self,
        gr: &GroupResource,
        mut obj: Value,
        dry_run: bool,
    ) -> ApiResult<Arc<Value>> {
        let mut st = self.write();
        let def = st
            .defs
            .get(gr)
            .cloned()
            .ok_or_else(ApiError::not_found_path)?;
        let ns = if def.namespaced {
            meta_str(&obj, "namespace").unwrap_or("default").to_string()
        } else {
            String::new()
        };
        if def.namespaced {
            let nskey = (String::new(), "namespaces".to_string());
            match st
                .tables
                .get(&nskey)
                .and_then(|t| t.objects.get(&(String::new(), ns.clone())))
            {
                None => return Err(ApiError::namespace_not_found(&ns)),
                Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError::new(
                        403,
                        "Forbidden",
                        format!(
                            "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                            def.plural,
                            meta_str(&obj, "name").unwrap_or_default()
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        let mut name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let table = st.tables.get(gr).ok_or_else(ApiError::not_found_path)?;
        if name.is_empty() {
            let prefix = crate::names::generated_name_base(
                meta_str(&obj, "generateName").unwrap_or_default(),
            )
            .to_string();
            let mut seed = st.rv;
            loop {
                let candidate = format!("{prefix}{}", random_suffix(seed));
                if !table.objects.contains_key(&(ns.clone(), candidate.clone())) {
                    name = candidate;
                    break;
                }
                seed = seed.wrapping_add(7919);
            }
        }
        if table.objects.contains_key(&(ns.clone(), name.clone())) {
            return Err(ApiError::already_exists(ErrTarget {
                group: &def.group,
                resource: &def.plural,
                name: &name,
            }));
        }
        let rv = if dry_run { st.rv } else { Self::bump(&mut st) };
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("name".into(), json!(name));
            if def.namespaced {
                m.insert("namespace".into(), json!(ns));
            } else {
                m.remove("namespace");
            }
            m.insert("uid".into(), json!(new_uid()));
            m.insert("creationTimestamp".into(), json!(now_rfc3339()));
            m.insert("resourceVersion".into(), json!(rv.to_string()));
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            if def.tracks_generation() {
                m.insert("generation".into(), json!(1));
            } else {
                m.remove("generation");
            }
        }
        if gr.0.is_empty() && gr.1 == "namespaces" {
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            obj["spec"]["finalizers"] = json!(["kubernetes"]);
            obj["status"] = json!({"phase": "Active"});
        }
        let obj = Arc::new(obj);
        if dry_run {
            return Ok(obj);
        }
        if let Some(t) = st.tables.get_mut(gr) {
            t.objects.insert((ns, name), obj.clone());
        }
        self.emit(&mut st, gr, EventType::Added, obj.clone(), None);
        if gr.0 == "apiextensions.k8s.io" && gr.1 == "customresourcedefinitions" {
            drop(st);
            return Ok(self.crd_changed(&obj).unwrap_or(obj));
        }
        let wake_gc = obj.pointer("/metadata/ownerReferences").is_some();
        drop(st);
        if wake_gc {
            self.gc_wake.notify_one();
        }
        self.after_write(gr);
        Ok(obj)
    }

    pub(super) fn after_write(&self, gr: &GroupResource) {
        if (gr.0.is_empty() && gr.1 == "pods")
            || (gr.0 == "policy" && gr.1 == "poddisruptionbudgets")
        {
            self.pdb_wake.notify_one();
        }
    }

    /// Replaces an object after preparation. `expected_rv` enforces optimistic concurrency.
    /// Removing the last finalizer of a deleting object removes it.
    pub fn update(
        &self,
        gr: &GroupResource,
        ns: &str,
        name: &str,
        mut obj: Value,
        expected_rv: Option<&str>,
        dry_run: bool,
    ) -> ApiResult<Arc<Value>> {
        let mut st = self.write();
        let def = st
            .defs
            .get(gr)
            .cloned()
            .ok_or_else(ApiError::not_found_path)?;
        let target = ErrTarget {
            group: &def.group,
            resource: &def.plural,
            name,
        };
        let key = (ns.to_string(), name.to_string());
        let old = st
            .tables
            .get(gr)
            .and_then(|t| t.objects.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(target))?;
        let old_rv = meta_str(&old, "resourceVersion").unwrap_or_default();
        if let Some(exp) = expected_rv.filter(|e| !e.is_empty())
            && exp != old_rv
        {
            return Err(ApiError::conflict(target));
        }
        // Immutable metadata comes from the stored object.
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old.pointer(&format!("/metadata/{k}")) {
                Some(v) => obj["metadata"][k] = v.clone(),
                None => {
                    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove(k);
                    }
                }
            }
        }
        obj["metadata"]["name"] = json!(name);
        if def.namespaced {
            obj["metadata"]["namespace"] = json!(ns);
        }
        if gr.0.is_empty() && gr.1 == "namespaces" {
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        }
        if *old == obj {
            // No-op updates do not change resourceVersion (as in kube-apiserver).
            return Ok(old);
        }
        let mut unchanged_except_rv = obj.clone();
        unchanged_except_rv["metadata"]["resourceVersion"] = json!(old_rv);
        if *old == unchanged_except_rv {
            return Ok(old);
        }
        if def.tracks_generation() && spec_part(&def, &old) != spec_part(&def, &obj) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            obj["metadata"]["generation"] = json!(g);
        }
        let rv = if dry_run { st.rv } else { Self::bump(&mut st) };
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
        let obj = Arc::new(obj);
        if dry_run {
            return Ok(obj);
        }
        let remove = deleting
            && finalizers(&obj).is_empty()
            && !(gr.0.is_empty() && gr.1 == "namespaces" && namespace_finalizer(&obj));
        if remove {
            if let Some(t) = st.tables.get_mut(gr) {
                t.objects.remove(&key);
            }
            self.emit(
                &mut st,
                gr,
                EventType::Deleted,
                obj.clone(),
                Some(old.clone()),
            );
        } else {
            if let Some(t) = st.tables.get_mut(gr) {
                t.objects.insert(key, obj.clone());
            }
            self.emit(
                &mut st,
                gr,
                EventType::Modified,
                obj.clone(),
                Some(old.clone()),
            );
        }
        drop(st);
        if gr.0 == "apiextensions.k8s.io" && gr.1 == "customresourcedefinitions" {
            if remove {
                self.crd_removed(&obj);
            } else if let Some(o) = self.crd_changed(&obj) {
                return Ok(o);
            }
        }
        // Only what the collector reads can change its plan: an update that leaves owners,
        // deletion and finalizers as they were (a status write of a terminating object) does not
        // wake it. Waking on every write of a deleting object kept it scanning the whole store
        // while 5,000 machines terminated (docs/performance.md).
        let gc_fields_changed = [
            "/metadata/ownerReferences",
            "/metadata/deletionTimestamp",
            "/metadata/finalizers",
            "/spec/finalizers",
        ]
        .iter()
        .any(|path| obj.pointer(path) != old.pointer(path));
        if remove || gc_fields_changed {
            self.gc_wake.notify_one();
        }
        self.after_write(gr);
        Ok(obj)
    }
}
