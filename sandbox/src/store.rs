//! In-memory storage: objects as JSON per resource type, a global monotonic resourceVersion, a
//! bounded event history per type for watch replay, and a broadcast channel per type.

mod collector;
mod crd;
mod delete;
mod meta;
mod write;

use crate::error::{ApiError, ApiResult};
use crate::gc::Propagation;
use crate::resources::{self, ResourceDef};
use crate::schema::SchemaValidator;
use meta::meta_str;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::sync::broadcast;

pub use meta::now_rfc3339;

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// ADDED
    Added,
    /// MODIFIED
    Modified,
    /// DELETED
    Deleted,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// A stored change.
#[derive(Debug)]
pub struct Event {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Type.
    pub kind: EventType,
    /// Object after the change (for deletes: the last state).
    pub obj: Arc<Value>,
    /// Object before the change (modifications), for selector transitions.
    pub old: Option<Arc<Value>>,
}

/// Approximate serialized size of a JSON value in bytes, without serializing it: what one history
/// entry costs, so the history can be bounded by bytes. Escapes are not counted (an estimate).
pub fn json_size(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|i| json_size(i) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + json_size(v))
                .sum::<usize>()
        }
    }
}

/// Live events buffered per type for watchers that are momentarily busy.
const BROADCAST_CAPACITY: usize = 1024;

/// Default bound of the watch history per type in estimated JSON bytes ([`json_size`]).
pub const DEFAULT_HISTORY_BYTES: usize = 16 << 20;

/// (group, plural).
pub type GroupResource = (String, String);

struct Table {
    objects: BTreeMap<(String, String), Arc<Value>>,
    /// Each event with its estimated size ([`json_size`]).
    history: VecDeque<(Arc<Event>, usize)>,
    /// Sum of the sizes in `history`.
    history_bytes: usize,
    compacted_rv: u64,
    tx: broadcast::Sender<Arc<Event>>,
}

impl Table {
    fn new(cap: usize) -> Self {
        // The channel keeps every slot's event alive until it is overwritten, whatever the history
        // bound says, so it stays small: a watcher that falls this far behind is closed and
        // resumes from the (byte-bounded) history, as kube-apiserver closes slow watchers.
        let (tx, _) = broadcast::channel(cap.clamp(64, BROADCAST_CAPACITY));
        Table {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_bytes: 0,
            compacted_rv: 0,
            tx,
        }
    }
}

struct State {
    rv: u64,
    defs: HashMap<GroupResource, Arc<ResourceDef>>,
    validators: HashMap<(String, String, String), Arc<SchemaValidator>>,
    tables: HashMap<GroupResource, Table>,
}

/// The object store of one sandbox.
pub struct Store {
    state: RwLock<State>,
    history_limit: usize,
    history_bytes_limit: usize,
    /// Wakes the garbage collector.
    pub gc_wake: tokio::sync::Notify,
    /// Wakes the PDB status updater.
    pub pdb_wake: tokio::sync::Notify,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

/// What a watch starts with.
pub struct WatchStart {
    /// Events to send first.
    pub replay: Vec<Arc<Event>>,
    /// Live events.
    pub rx: broadcast::Receiver<Arc<Event>>,
}

/// Result of a delete.
#[derive(Debug)]
pub enum Deleted {
    /// Removed; the last state.
    Gone(Arc<Value>),
    /// Marked with deletionTimestamp (finalizers or graceful pod deletion).
    Marked(Arc<Value>),
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// propagationPolicy (None = Background).
    pub propagation: Option<Propagation>,
    /// gracePeriodSeconds.
    pub grace: Option<i64>,
    /// preconditions.uid.
    pub uid: Option<String>,
    /// preconditions.resourceVersion.
    pub rv: Option<String>,
    /// dryRun=All.
    pub dry_run: bool,
}

impl Store {
    /// A store serving the built-in resources, keeping at most `history_limit` events per type
    /// and [`DEFAULT_HISTORY_BYTES`] of them.
    pub fn new(history_limit: usize) -> Self {
        Self::with_history_bounds(history_limit, DEFAULT_HISTORY_BYTES)
    }

    /// A store serving the built-in resources whose watch history per type is bounded both by
    /// event count and by estimated JSON bytes (the newest event is always kept).
    pub fn with_history_bounds(history_limit: usize, history_bytes: usize) -> Self {
        let mut defs = HashMap::new();
        let mut tables = HashMap::new();
        for d in resources::builtins() {
            let gr = (d.group.clone(), d.plural.clone());
            if d.storage_key() == gr {
                tables.insert(gr.clone(), Table::new(history_limit));
            }
            defs.insert(gr, Arc::new(d));
        }
        let store = Store {
            state: RwLock::new(State {
                rv: 1,
                defs,
                validators: HashMap::new(),
                tables,
            }),
            history_limit: history_limit.max(1),
            history_bytes_limit: history_bytes,
            gc_wake: tokio::sync::Notify::new(),
            pdb_wake: tokio::sync::Notify::new(),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
            // Built-in namespaces at startup cannot collide.
            let _ = store.create(&("".into(), "namespaces".into()), obj, false);
        }
        store
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.read().rv
    }

    /// All served resource types.
    pub fn defs(&self) -> Vec<Arc<ResourceDef>> {
        let mut v: Vec<Arc<ResourceDef>> = self.read().defs.values().cloned().collect();
        v.sort_by(|a, b| (&a.group, &a.plural).cmp(&(&b.group, &b.plural)));
        v
    }

    /// Finds the type served at group/version/plural.
    pub fn def(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        let st = self.read();
        let d = st.defs.get(&(group.to_string(), plural.to_string()))?;
        d.versions.iter().any(|v| v == version).then(|| d.clone())
    }

    /// The compiled schema validator for a CRD version.
    pub fn validator(
        &self,
        group: &str,
        plural: &str,
        version: &str,
    ) -> Option<Arc<SchemaValidator>> {
        self.read()
            .validators
            .get(&(group.to_string(), plural.to_string(), version.to_string()))
            .cloned()
    }

    /// Gets an object.
    pub fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.read()
            .tables
            .get(gr)?
            .objects
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Whether a namespace exists; `Some(true)` when it is terminating.
    pub fn namespace_state(&self, ns: &str) -> Option<bool> {
        self.get(&("".into(), "namespaces".into()), "", ns)
            .map(|n| n.pointer("/metadata/deletionTimestamp").is_some())
    }

    /// Lists objects (all namespaces when `ns` is None), sorted by namespace/name, after `start_after`.
    pub fn list(&self, gr: &GroupResource, ns: Option<&str>) -> (u64, Vec<Arc<Value>>) {
        let st = self.read();
        let Some(t) = st.tables.get(gr) else {
            return (st.rv, Vec::new());
        };
        let items = match ns {
            Some(ns) => t
                .objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => t.objects.values().cloned().collect(),
        };
        (st.rv, items)
    }

    /// Lists objects as they were at resourceVersion `at_rv`, like kube's etcd reads at a
    /// revision: the current state with every newer change of the type's history undone.
    /// 410 Expired when the history no longer reaches back to `at_rv`; 504 when `at_rv` is in
    /// the future.
    pub fn list_at(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
        at_rv: u64,
    ) -> ApiResult<Vec<Arc<Value>>> {
        let st = self.read();
        if at_rv > st.rv {
            return Err(ApiError::new(
                504,
                "Timeout",
                format!("Too large resource version: {at_rv}, current: {}", st.rv),
            ));
        }
        let Some(t) = st.tables.get(gr) else {
            return Ok(Vec::new());
        };
        if at_rv < t.compacted_rv {
            return Err(ApiError::new(
                410,
                "Expired",
                format!("too old resource version: {at_rv} ({})", t.compacted_rv + 1),
            ));
        }
        let in_scope =
            |o: &Value| ns.is_none_or(|want| meta_str(o, "namespace").unwrap_or("") == want);
        let key_of = |o: &Value| {
            (
                meta_str(o, "namespace").unwrap_or_default().to_string(),
                meta_str(o, "name").unwrap_or_default().to_string(),
            )
        };
        let mut objects: BTreeMap<(String, String), Arc<Value>> = t
            .objects
            .iter()
            .filter(|((n, _), _)| ns.is_none_or(|want| want == n))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (ev, _) in t.history.iter().rev().take_while(|(e, _)| e.rv > at_rv) {
            if !in_scope(&ev.obj) {
                continue;
            }
            let key = key_of(&ev.obj);
            match (ev.kind, &ev.old) {
                (EventType::Added, _) => {
                    objects.remove(&key);
                }
                (EventType::Modified | EventType::Deleted, Some(old)) => {
                    objects.insert(key, old.clone());
                }
                (EventType::Deleted, None) => {
                    objects.insert(key, ev.obj.clone());
                }
                // A modification without its previous state cannot be undone; the newer
                // state is the best available.
                (EventType::Modified, None) => {}
            }
        }
        Ok(objects.into_values().collect())
    }

    /// Number of stored objects of a type.
    pub fn count(&self, gr: &GroupResource) -> usize {
        self.read().tables.get(gr).map_or(0, |t| t.objects.len())
    }

    fn emit(
        &self,
        st: &mut State,
        gr: &GroupResource,
        kind: EventType,
        obj: Arc<Value>,
        old: Option<Arc<Value>>,
    ) {
        let rv = st.rv;
        let limit = self.history_limit;
        let bytes_limit = self.history_bytes_limit;
        if let Some(t) = st.tables.get_mut(gr) {
            let size = json_size(&obj);
            let ev = Arc::new(Event { rv, kind, obj, old });
            t.history.push_back((ev.clone(), size));
            t.history_bytes += size;
            while t.history.len() > limit || (t.history_bytes > bytes_limit && t.history.len() > 1)
            {
                if let Some((e, size)) = t.history.pop_front() {
                    t.compacted_rv = e.rv;
                    t.history_bytes -= size;
                }
            }
            // No receivers is fine.
            let _ = t.tx.send(ev);
        }
    }

    /// Starts a watch: replays events after `from_rv` (or the current state as ADDED when None).
    pub fn watch(&self, gr: &GroupResource, from_rv: Option<u64>) -> ApiResult<WatchStart> {
        let st = self.read();
        let t = st.tables.get(gr).ok_or_else(ApiError::not_found_path)?;
        let rx = t.tx.subscribe();
        let replay = match from_rv {
            None => t
                .objects
                .values()
                .map(|o| {
                    let rv = meta_str(o, "resourceVersion")
                        .and_then(|r| r.parse().ok())
                        .unwrap_or(0);
                    Arc::new(Event {
                        rv,
                        kind: EventType::Added,
                        obj: o.clone(),
                        old: None,
                    })
                })
                .collect(),
            Some(rv) => {
                if rv < t.compacted_rv {
                    return Err(ApiError::new(
                        410,
                        "Expired",
                        format!("too old resource version: {rv} ({})", t.compacted_rv + 1),
                    ));
                }
                t.history
                    .iter()
                    .filter(|(e, _)| e.rv > rv)
                    .map(|(e, _)| e.clone())
                    .collect()
            }
        };
        Ok(WatchStart { replay, rx })
    }

    fn bump(st: &mut State) -> u64 {
        st.rv += 1;
        st.rv
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cm_gr() -> GroupResource {
        ("".into(), "configmaps".into())
    }

    #[test]
    fn create_update_conflict_and_rv() {
        let s = Store::new(100);
        let o = s.create(&cm_gr(), json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v"}}), false).unwrap();
        let rv1: u64 = meta_str(&o, "resourceVersion").unwrap().parse().unwrap();
        assert!(meta_str(&o, "uid").is_some());
        let e = s
            .create(
                &cm_gr(),
                json!({"metadata": {"name": "a", "namespace": "default"}}),
                false,
            )
            .unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
        let e = s
            .create(
                &cm_gr(),
                json!({"metadata": {"name": "a", "namespace": "nope"}}),
                false,
            )
            .unwrap_err();
        assert_eq!(e.code, 404);
        let mut next = (*o).clone();
        next["data"]["k"] = json!("w");
        let o2 = s
            .update(
                &cm_gr(),
                "default",
                "a",
                next.clone(),
                Some(&rv1.to_string()),
                false,
            )
            .unwrap();
        let rv2: u64 = meta_str(&o2, "resourceVersion").unwrap().parse().unwrap();
        assert!(rv2 > rv1);
        next["data"]["k"] = json!("x");
        let e = s
            .update(
                &cm_gr(),
                "default",
                "a",
                next,
                Some(&rv1.to_string()),
                false,
            )
            .unwrap_err();
        assert_eq!(e.code, 409);
        assert_eq!(e.reason, "Conflict");
    }

    #[test]
    fn finalizers_hold_deletion_until_removed() {
        let s = Store::new(100);
        let o = s
            .create(
                &cm_gr(),
                json!({"metadata": {"name": "a", "namespace": "default", "finalizers": ["x/y"]}}),
                false,
            )
            .unwrap();
        let d = s
            .delete(&cm_gr(), "default", "a", &DeleteOptions::default())
            .unwrap();
        let Deleted::Marked(m) = d else {
            panic!("expected marked")
        };
        assert!(m.pointer("/metadata/deletionTimestamp").is_some());
        let mut next = (*m).clone();
        next["metadata"]["finalizers"] = json!([]);
        s.update(&cm_gr(), "default", "a", next, None, false)
            .unwrap();
        assert!(s.get(&cm_gr(), "default", "a").is_none());
        assert!(meta_str(&o, "uid").is_some());
    }

    #[test]
    fn list_at_reconstructs_past_states_until_compacted() {
        let s = Store::new(4);
        let a = s
            .create(
                &cm_gr(),
                json!({"metadata": {"name": "a", "namespace": "default"}, "data": {"k": "1"}}),
                false,
            )
            .unwrap();
        let rv_a: u64 = meta_str(&a, "resourceVersion").unwrap().parse().unwrap();
        s.create(
            &cm_gr(),
            json!({"metadata": {"name": "b", "namespace": "default"}}),
            false,
        )
        .unwrap();
        let mut next = (*a).clone();
        next["data"]["k"] = json!("2");
        s.update(&cm_gr(), "default", "a", next, None, false)
            .unwrap();
        s.delete(&cm_gr(), "default", "b", &DeleteOptions::default())
            .unwrap();
        let past = s.list_at(&cm_gr(), Some("default"), rv_a).unwrap();
        assert_eq!(past.len(), 1, "b did not exist yet: {past:?}");
        assert_eq!(
            past[0]["data"]["k"],
            json!("1"),
            "a's later update is undone"
        );
        let before_delete = s.list_at(&cm_gr(), None, s.current_rv() - 1).unwrap();
        assert_eq!(before_delete.len(), 2, "b is back before its deletion");
        assert!(s.list_at(&cm_gr(), None, s.current_rv() + 1).is_err());
        for i in 0..4 {
            s.create(
                &cm_gr(),
                json!({"metadata": {"name": format!("c{i}"), "namespace": "default"}}),
                false,
            )
            .unwrap();
        }
        let e = s.list_at(&cm_gr(), None, rv_a).unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
    }

    #[test]
    fn watch_history_expires() {
        let s = Store::new(3);
        for i in 0..6 {
            s.create(
                &cm_gr(),
                json!({"metadata": {"name": format!("c{i}"), "namespace": "default"}}),
                false,
            )
            .unwrap();
        }
        let e = s.watch(&cm_gr(), Some(1)).err().unwrap();
        assert_eq!(e.code, 410);
        let cur = s.current_rv();
        let w = s.watch(&cm_gr(), Some(cur - 2)).unwrap();
        assert_eq!(w.replay.len(), 2);
        let w = s.watch(&cm_gr(), None).unwrap();
        assert_eq!(w.replay.len(), 6);
    }

    #[test]
    fn watch_history_is_bounded_by_bytes_too() {
        let payload = "x".repeat(1000);
        // Room for about three of these objects, far fewer than the event limit.
        let s = Store::with_history_bounds(1000, 4000);
        for i in 0..10 {
            s.create(
                &cm_gr(),
                json!({"metadata": {"name": format!("c{i}"), "namespace": "default"}, "data": {"v": payload}}),
                false,
            )
            .unwrap();
        }
        let cur = s.current_rv();
        let e = s.watch(&cm_gr(), Some(cur - 5)).err().unwrap();
        assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
        let w = s.watch(&cm_gr(), Some(cur - 3)).unwrap();
        assert_eq!(w.replay.len(), 3);
        // One object larger than the whole budget is still kept: a watcher can resume after it.
        let s = Store::with_history_bounds(1000, 10);
        s.create(
            &cm_gr(),
            json!({"metadata": {"name": "big", "namespace": "default"}, "data": {"v": payload}}),
            false,
        )
        .unwrap();
        let cur = s.current_rv();
        assert_eq!(s.watch(&cm_gr(), Some(cur - 1)).unwrap().replay.len(), 1);
    }

    #[test]
    fn json_size_is_close_to_the_serialized_length() {
        let v = json!({"metadata": {"name": "n", "labels": {"a": "b"}}, "spec": {"replicas": 3, "list": [1, "two", null, true]}});
        let real = serde_json::to_vec(&v).unwrap().len();
        let estimate = json_size(&v);
        assert!(
            estimate >= real && estimate <= real * 2,
            "{estimate} vs {real}"
        );
    }

    #[test]
    fn gc_collects_dependents_and_namespaces() {
        let s = Store::new(100);
        let owner = s
            .create(
                &cm_gr(),
                json!({"metadata": {"name": "owner", "namespace": "default"}}),
                false,
            )
            .unwrap();
        let uid = meta_str(&owner, "uid").unwrap();
        s.create(&cm_gr(), json!({"metadata": {"name": "dep", "namespace": "default", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}}), false).unwrap();
        s.delete(&cm_gr(), "default", "owner", &DeleteOptions::default())
            .unwrap();
        s.collect_garbage();
        assert!(s.get(&cm_gr(), "default", "dep").is_none());

        let ns_gr: GroupResource = ("".into(), "namespaces".into());
        s.create(&ns_gr, json!({"metadata": {"name": "tmp"}}), false)
            .unwrap();
        s.create(
            &cm_gr(),
            json!({"metadata": {"name": "c", "namespace": "tmp"}}),
            false,
        )
        .unwrap();
        s.delete(&ns_gr, "", "tmp", &DeleteOptions::default())
            .unwrap();
        assert!(s.get(&ns_gr, "", "tmp").is_some());
        s.collect_garbage();
        assert!(s.get(&cm_gr(), "tmp", "c").is_none());
        assert!(s.get(&ns_gr, "", "tmp").is_none());
    }

    #[test]
    fn bound_pods_are_marked_unbound_removed() {
        let s = Store::new(100);
        let pods: GroupResource = ("".into(), "pods".into());
        s.create(
            &pods,
            json!({"metadata": {"name": "a", "namespace": "default"}, "spec": {"nodeName": "n1"}}),
            false,
        )
        .unwrap();
        s.create(
            &pods,
            json!({"metadata": {"name": "b", "namespace": "default"}, "spec": {}}),
            false,
        )
        .unwrap();
        assert!(matches!(
            s.delete(&pods, "default", "a", &DeleteOptions::default())
                .unwrap(),
            Deleted::Marked(_)
        ));
        assert!(matches!(
            s.delete(&pods, "default", "b", &DeleteOptions::default())
                .unwrap(),
            Deleted::Gone(_)
        ));
        assert!(matches!(
            s.delete(
                &pods,
                "default",
                "a",
                &DeleteOptions {
                    grace: Some(0),
                    ..Default::default()
                }
            )
            .unwrap(),
            Deleted::Gone(_)
        ));
    }
}
