//! Deleting objects: preconditions, propagation finalizers, graceful pod deletion and the
//! namespace finalizer mark an object; otherwise it is removed.

use super::meta::{finalizers, meta_str, namespace_finalizer};
use super::{DeleteOptions, Deleted, EventType, GroupResource, Store};
use crate::error::{ApiError, ApiResult, ErrTarget};
use crate::gc::{self, Propagation};
use serde_json::{Value, json};
use std::sync::Arc;

impl Store {
    /// Deletes an object: marks it when finalizers (or a propagation finalizer, or a graceful pod
    /// deletion on a node) hold it, removes it otherwise.
    pub fn delete(
        &self,
        gr: &GroupResource,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
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
        if let Some(uid) = &opts.uid
            && meta_str(&old, "uid") != Some(uid.as_str())
        {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    def.plural,
                    meta_str(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.rv
            && meta_str(&old, "resourceVersion") != Some(rv.as_str())
        {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    def.plural,
                    meta_str(&old, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        let is_namespace = gr.0.is_empty() && gr.1 == "namespaces";
        let is_pod = gr.0.is_empty() && gr.1 == "pods";
        let mut fins = finalizers(&old);
        match opts.propagation {
            Some(Propagation::Foreground) if !fins.iter().any(|f| f == gc::FOREGROUND) => {
                fins.push(gc::FOREGROUND.into())
            }
            Some(Propagation::Orphan) if !fins.iter().any(|f| f == gc::ORPHAN) => {
                fins.push(gc::ORPHAN.into())
            }
            _ => {}
        }
        let pod_grace = if is_pod
            && old
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
        {
            let g = opts.grace.unwrap_or_else(|| {
                old.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(30)
            });
            let terminal = matches!(
                old.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            );
            (g > 0 && !terminal).then_some(g)
        } else {
            None
        };
        let already_deleting = old.pointer("/metadata/deletionTimestamp").is_some();
        let mark =
            !fins.is_empty() || pod_grace.is_some() || (is_namespace && namespace_finalizer(&old));
        if mark {
            let mut obj = (*old).clone();
            if !fins.is_empty() {
                obj["metadata"]["finalizers"] = json!(fins);
            }
            if !already_deleting {
                let grace = pod_grace.unwrap_or(0);
                let ts = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(grace);
                obj["metadata"]["deletionTimestamp"] =
                    json!(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                if def.tracks_generation() {
                    let g = old
                        .pointer("/metadata/generation")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                        + 1;
                    obj["metadata"]["generation"] = json!(g);
                }
            } else if let Some(g) = pod_grace {
                // A shorter grace period on a second delete shortens the deadline.
                let cur = old
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(g);
                if g < cur {
                    obj["metadata"]["deletionGracePeriodSeconds"] = json!(g);
                }
            }
            if is_namespace {
                obj["status"]["phase"] = json!("Terminating");
            }
            if obj == *old {
                return Ok(Deleted::Marked(old));
            }
            if opts.dry_run {
                return Ok(Deleted::Marked(Arc::new(obj)));
            }
            let rv = Self::bump(&mut st);
            obj["metadata"]["resourceVersion"] = json!(rv.to_string());
            let obj = Arc::new(obj);
            if let Some(t) = st.tables.get_mut(gr) {
                t.objects.insert(key, obj.clone());
            }
            self.emit(&mut st, gr, EventType::Modified, obj.clone(), Some(old));
            drop(st);
            self.gc_wake.notify_one();
            self.after_write(gr);
            return Ok(Deleted::Marked(obj));
        }
        if opts.dry_run {
            return Ok(Deleted::Gone(old));
        }
        let rv = Self::bump(&mut st);
        let mut last = (*old).clone();
        last["metadata"]["resourceVersion"] = json!(rv.to_string());
        let last = Arc::new(last);
        if let Some(t) = st.tables.get_mut(gr) {
            t.objects.remove(&key);
        }
        self.emit(&mut st, gr, EventType::Deleted, last.clone(), Some(old));
        drop(st);
        if gr.0 == "apiextensions.k8s.io" && gr.1 == "customresourcedefinitions" {
            self.crd_removed(&last);
        }
        self.gc_wake.notify_one();
        self.after_write(gr);
        Ok(Deleted::Gone(last))
    }
}
