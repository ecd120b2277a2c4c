//! In-memory storage: objects as JSON per resource type, a global monotonic resourceVersion, a
//! bounded event history per type for watch replay, and a broadcast channel per type.

use crate::error::{ApiError, ApiResult, ErrTarget};
use crate::gc::{self, GcAction, GcObject, ObjKey, Propagation};
use crate::resources::{self, ResourceDef};
use crate::schema::SchemaValidator;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::sync::broadcast;

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

fn meta_str<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get("metadata")
        .and_then(|m| m.get(k))
        .and_then(Value::as_str)
}

fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Everything except metadata (and status when it has its own endpoint) — what bumps generation.
fn spec_part(def: &ResourceDef, v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if def.status {
            m.remove("status");
        }
    }
    c
}

/// Current time in kube's RFC 3339 seconds form.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn new_uid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = jiff::Timestamp::now().as_nanosecond() as u64;
    let a = t ^ n.rotate_left(32);
    let b = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ t.rotate_left(17);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        (a & 0xfff) as u16,
        ((b >> 48) as u16 & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

fn random_suffix(seed: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = seed ^ (jiff::Timestamp::now().as_nanosecond() as u64);
    (0..5)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x % ALPHABET.len() as u64) as usize] as char
        })
        .collect()
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

    fn after_write(&self, gr: &GroupResource) {
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

    /// Registers (or refreshes) the type served by a CRD and sets its Established condition.
    fn crd_changed(&self, crd: &Arc<Value>) -> Option<Arc<Value>> {
        let def = match resources::from_crd(crd) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "CRD not served");
                return None;
            }
        };
        let gr = (def.group.clone(), def.plural.clone());
        {
            let mut st = self.write();
            for (v, info) in &def.crd_versions {
                let key = (def.group.clone(), def.plural.clone(), v.clone());
                match info.schema.as_ref().map(SchemaValidator::new) {
                    Some(Ok(val)) => {
                        st.validators.insert(key, Arc::new(val));
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, version = %v, "CRD schema not usable for validation");
                        st.validators.remove(&key);
                    }
                    None => {
                        st.validators.remove(&key);
                    }
                }
            }
            st.defs.insert(gr.clone(), Arc::new(def.clone()));
            let limit = self.history_limit;
            st.tables.entry(gr).or_insert_with(|| Table::new(limit));
        }
        let established = crd
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Established")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            });
        if established {
            return None;
        }
        let now = now_rfc3339();
        let mut updated = (**crd).clone();
        updated["status"] = json!({
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now}
            ],
            "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
            "storedVersions": [def.storage_version]
        });
        let name = meta_str(crd, "name").unwrap_or_default().to_string();
        self.update(
            &(
                "apiextensions.k8s.io".into(),
                "customresourcedefinitions".into(),
            ),
            "",
            &name,
            updated,
            None,
            false,
        )
        .ok()
    }

    fn crd_removed(&self, crd: &Value) {
        if let Ok(def) = resources::from_crd(crd) {
            let mut st = self.write();
            let gr = (def.group.clone(), def.plural.clone());
            st.defs.remove(&gr);
            st.tables.remove(&gr);
            st.validators
                .retain(|(g, p, _), _| !(g == &def.group && p == &def.plural));
        }
    }

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

fn namespace_finalizer(o: &Value) -> bool {
    o.pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|f| f.as_str() == Some("kubernetes")))
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
