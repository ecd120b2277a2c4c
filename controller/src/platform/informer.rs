//! A shared cache of one kind with change notifications (old and new object), fed by one watch.
//!
//! kube-runtime's reflector keeps a store but tells consumers neither the previous version of an
//! updated object nor which objects vanished across a relist; the event routing of the plans
//! (`mcm_decisions::machine::routing`, `mcm_decisions::machine_set::routing`) needs both. One [`Informer`] per kind is
//! shared by every controller, so each kind is watched once.
//!
//! Objects are keyed by name: control-cluster informers watch the single control namespace and
//! target-cluster informers watch cluster-scoped kinds.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt as _;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt as _};
use mcm_decisions::vocabulary::{CacheView, rewatch_pause};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// The signal that the API server answers again (a Lease renewal or a list succeeded after
/// failures): every informer waiting to re-establish a broken watch tries at once instead of
/// sleeping out its pause. Clone freely; every clone is the same signal.
#[derive(Clone, Debug, Default)]
pub struct Rewatch(Arc<tokio::sync::Notify>);

impl Rewatch {
    /// A signal nobody waits for yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes every informer that waits to re-establish its watch.
    pub fn kick(&self) {
        self.0.notify_waiters();
    }

    async fn kicked(&self) {
        self.0.notified().await;
    }
}

/// One change seen by an informer.
#[derive(Debug)]
pub enum Change<K> {
    /// The object appeared (first list, watch ADDED, or found by a relist).
    Added(Arc<K>),
    /// The object changed (its resourceVersion differs).
    Updated {
        /// The version the cache held before.
        old: Arc<K>,
        /// The version the cache holds now.
        new: Arc<K>,
    },
    /// The object is gone (watch DELETED, or missing from a relist).
    Deleted(Arc<K>),
}

impl<K> Change<K> {
    /// The object as it is now (the last known version for a deletion).
    pub fn object(&self) -> &Arc<K> {
        match self {
            Change::Added(object) | Change::Deleted(object) => object,
            Change::Updated { new, .. } => new,
        }
    }
}

/// A subscriber's callback. It runs under the informer's lock, so it must be cheap: enqueue keys,
/// never block or await.
pub type Handler<K> = Box<dyn Fn(&Change<K>) + Send + Sync>;

struct State<K> {
    objects: HashMap<String, Arc<K>>,
    handlers: Vec<Handler<K>>,
    synced: bool,
    /// Since when the watch is broken and no list has completed (docs/behaviour.md#stale-caches).
    stale_since: Option<jiff::Timestamp>,
}

/// A shared, name-keyed cache of one kind. Clone freely.
pub struct Informer<K> {
    kind: &'static str,
    state: Arc<Mutex<State<K>>>,
    synced: tokio::sync::watch::Sender<bool>,
    /// Bumped whenever the cache goes stale or catches up (see [`Informer::view`]).
    freshness: tokio::sync::watch::Sender<u64>,
    /// Leaves out of each object what no controller reads, before it is cached.
    prune: fn(&mut K),
}

impl<K> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Self {
            kind: self.kind,
            state: Arc::clone(&self.state),
            synced: self.synced.clone(),
            freshness: self.freshness.clone(),
            prune: self.prune,
        }
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    /// An empty informer for `kind` (used in logs). Feed it with [`Informer::run`] or, in tests,
    /// with [`Informer::apply`] / [`Informer::delete`]. Cached objects are kept without their
    /// managedFields.
    pub fn new(kind: &'static str) -> Self {
        Self::pruning(kind, drop_managed_fields)
    }

    /// An empty informer for `kind` whose cache keeps each object as `prune` leaves it. `prune`
    /// must keep every field a controller reads, and every field a write built from a cached
    /// object would otherwise erase (see `platform::node_cache`).
    pub fn pruning(kind: &'static str, prune: fn(&mut K)) -> Self {
        let (synced, _) = tokio::sync::watch::channel(false);
        let (freshness, _) = tokio::sync::watch::channel(0);
        Self {
            kind,
            state: Arc::new(Mutex::new(State {
                objects: HashMap::new(),
                handlers: Vec::new(),
                synced: false,
                stale_since: None,
            })),
            synced,
            freshness,
            prune,
        }
    }

    /// `object` as the cache keeps it.
    fn cached(&self, mut object: K) -> Arc<K> {
        (self.prune)(&mut object);
        Arc::new(object)
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // A panicking handler must not take every controller down with a poisoned lock.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The kind this informer caches.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The cached object called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.lock().objects.get(name).cloned()
    }

    /// Every cached object (no particular order).
    pub fn list(&self) -> Vec<Arc<K>> {
        self.lock().objects.values().cloned().collect()
    }

    /// Cached objects for which `keep` is true.
    pub fn filter(&self, keep: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        self.lock()
            .objects
            .values()
            .filter(|object| keep(object))
            .cloned()
            .collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.lock().objects.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once the first list has been applied.
    pub fn is_synced(&self) -> bool {
        self.lock().synced
    }

    /// Whether the cache is synced and caught up with the API server, for
    /// [`mcm_decisions::vocabulary::may_act`].
    pub fn view(&self) -> CacheView<'static> {
        let state = self.lock();
        CacheView {
            kind: self.kind,
            synced: state.synced,
            stale_since: state.stale_since,
        }
    }

    /// A receiver that changes whenever the cache goes stale or catches up.
    pub fn freshness_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.freshness.subscribe()
    }

    /// Records that the watch broke at `now`: the cache may miss what is written from now on
    /// until a list completes. Returns whether it was caught up before.
    pub fn mark_stale(&self, now: jiff::Timestamp) -> bool {
        let mut state = self.lock();
        if state.stale_since.is_some() || !state.synced {
            return false;
        }
        state.stale_since = Some(now);
        drop(state);
        tracing::warn!(
            kind = self.kind,
            stale_since = %now,
            "watch broke: cache stale since {now}; controllers reading it wait until it has caught up"
        );
        self.freshness.send_modify(|generation| *generation += 1);
        true
    }

    /// Waits until the first list has been applied.
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.subscribe();
        // An error means the sender is gone, which cannot happen while `self` holds it.
        let _ = synced.wait_for(|synced| *synced).await;
    }

    /// Registers `handler` and, atomically with that, replays every cached object to it as
    /// [`Change::Added`], so a subscriber never misses an object whatever the timing.
    pub fn subscribe(&self, handler: impl Fn(&Change<K>) + Send + Sync + 'static) {
        let mut state = self.lock();
        for object in state.objects.values() {
            handler(&Change::Added(Arc::clone(object)));
        }
        state.handlers.push(Box::new(handler));
    }

    /// How many handlers are subscribed (see [`Informer::truncate_handlers`]).
    pub fn handler_count(&self) -> usize {
        self.lock().handlers.len()
    }

    /// Drops the handlers subscribed after the first `count`: those of controllers that stopped
    /// (a leadership term that ended) while the cache lives on for the next term.
    pub fn truncate_handlers(&self, count: usize) {
        self.lock().handlers.truncate(count);
    }

    /// Puts `object` into the cache and notifies subscribers (a watch ADDED/MODIFIED).
    pub fn apply(&self, object: K) {
        let object = self.cached(object);
        let mut state = self.lock();
        let change = upsert(&mut state.objects, object);
        if let Some(change) = change {
            notify(&state.handlers, &change);
        }
    }

    /// Removes `object` from the cache and notifies subscribers (a watch DELETED).
    pub fn delete(&self, object: K) {
        let mut state = self.lock();
        let name = object.name_any();
        let last = state
            .objects
            .remove(&name)
            .unwrap_or_else(|| Arc::new(object));
        notify(&state.handlers, &Change::Deleted(last));
    }

    /// Replaces the whole cache with a fresh list, telling subscribers what was added, changed
    /// and removed, and marks the informer synced.
    pub fn replace(&self, objects: Vec<K>) {
        let objects = objects
            .into_iter()
            .map(|object| self.cached(object))
            .collect();
        self.replace_cached(objects);
    }

    /// [`Informer::replace`] with objects already as the cache keeps them.
    fn replace_cached(&self, objects: Vec<Arc<K>>) {
        let mut state = self.lock();
        let mut seen = std::collections::HashSet::with_capacity(objects.len());
        for object in objects {
            seen.insert(object.name_any());
            if let Some(change) = upsert(&mut state.objects, object) {
                notify(&state.handlers, &change);
            }
        }
        let gone: Vec<String> = state
            .objects
            .keys()
            .filter(|name| !seen.contains(*name))
            .cloned()
            .collect();
        for name in gone {
            if let Some(last) = state.objects.remove(&name) {
                notify(&state.handlers, &Change::Deleted(last));
            }
        }
        if !state.synced {
            state.synced = true;
            tracing::debug!(
                kind = self.kind,
                objects = state.objects.len(),
                "cache synced"
            );
        }
        let caught_up = state.stale_since.take();
        let objects = state.objects.len();
        drop(state);
        self.synced.send_replace(true);
        if let Some(since) = caught_up {
            let stale_for = jiff::Timestamp::now().duration_since(since);
            tracing::info!(
                kind = self.kind,
                stale_since = %since,
                stale_seconds = stale_for.as_secs_f64(),
                objects,
                "cache caught up (stale since {since}, {:.1}s)",
                stale_for.as_secs_f64()
            );
            self.freshness.send_modify(|generation| *generation += 1);
        }
    }

    /// Watches `api` with `config` and keeps the cache current until `shutdown`.
    ///
    /// A watch that ends normally is resumed from its last resourceVersion by the watcher (the
    /// API server replays what happened meanwhile). A failure (the API server unreachable, a
    /// watch that cannot be resumed) marks the cache stale, and the watch starts over with a
    /// list after [`rewatch_pause`] (at most a second) or at once when `rewatch` is kicked; the
    /// completed list is the moment the cache has caught up again, and kicks the others.
    pub async fn run(
        self,
        api: Api<K>,
        config: watcher::Config,
        shutdown: CancellationToken,
        rewatch: Rewatch,
    ) {
        let mut failures: u32 = 0;
        loop {
            let broke = {
                let stream = watcher(api.clone(), config.clone());
                futures::pin_mut!(stream);
                let mut relist: Option<Vec<Arc<K>>> = None;
                loop {
                    let event = tokio::select! {
                        () = shutdown.cancelled() => return,
                        event = stream.next() => event,
                    };
                    match event {
                        None => return,
                        Some(Ok(watcher::Event::Init)) => relist = Some(Vec::new()),
                        Some(Ok(watcher::Event::InitApply(object))) => match relist.as_mut() {
                            // The whole list is held until it is complete, as the cache keeps it
                            // and where it will stay: a buffer of whole objects (about 1.5 KiB
                            // each before their strings and maps) was a copy of 5,000 Nodes or
                            // Machines on top of the cache after a restart.
                            Some(buffer) => buffer.push(self.cached(object)),
                            None => self.apply(object),
                        },
                        Some(Ok(watcher::Event::InitDone)) => {
                            let was_stale = self.view().stale_since.is_some();
                            self.replace_cached(relist.take().unwrap_or_default());
                            failures = 0;
                            if was_stale {
                                rewatch.kick();
                            }
                        }
                        Some(Ok(watcher::Event::Apply(object))) => self.apply(object),
                        Some(Ok(watcher::Event::Delete(object))) => self.delete(object),
                        Some(Err(error)) => break error,
                    }
                }
            };
            self.mark_stale(jiff::Timestamp::now());
            let pause = rewatch_pause(failures);
            failures = failures.saturating_add(1);
            if failures == 1 {
                tracing::warn!(kind = self.kind, error = %broke, retry_in = ?pause, "watch failed; starting over with a list");
            } else {
                tracing::debug!(kind = self.kind, error = %broke, retry_in = ?pause, "watch failed again; starting over with a list");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
                () = rewatch.kicked() => {}
            }
        }
    }
}

/// The default pruning: no controller reads managedFields, and they are often the largest part
/// of an object. An update built from a cached object omits them, which the API server answers
/// by keeping the stored ones.
fn drop_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

fn upsert<K: Resource>(objects: &mut HashMap<String, Arc<K>>, new: Arc<K>) -> Option<Change<K>> {
    let name = new.name_any();
    match objects.insert(name, Arc::clone(&new)) {
        None => Some(Change::Added(new)),
        Some(old) if old.meta().resource_version == new.meta().resource_version => None,
        Some(old) => Some(Change::Updated { old, new }),
    }
}

fn notify<K>(handlers: &[Handler<K>], change: &Change<K>) {
    for handler in handlers {
        handler(change);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn config_map(name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn recorder(informer: &Informer<ConfigMap>) -> Arc<Mutex<Vec<String>>> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        informer.subscribe(move |change| {
            let text = match change {
                Change::Added(o) => format!("add {}", o.name_any()),
                Change::Updated { old, new } => format!(
                    "update {} {}->{}",
                    new.name_any(),
                    old.resource_version().unwrap_or_default(),
                    new.resource_version().unwrap_or_default()
                ),
                Change::Deleted(o) => format!("delete {}", o.name_any()),
            };
            sink.lock().unwrap().push(text);
        });
        seen
    }

    #[test]
    fn subscribe_replays_the_cache_then_follows_changes() {
        let informer = Informer::new("configmaps");
        informer.apply(config_map("a", "1"));
        let seen = recorder(&informer);
        informer.apply(config_map("a", "1"));
        informer.apply(config_map("a", "2"));
        informer.apply(config_map("b", "3"));
        informer.delete(config_map("a", "4"));
        assert_eq!(
            *seen.lock().unwrap(),
            vec!["add a", "update a 1->2", "add b", "delete a"]
        );
        assert_eq!(informer.len(), 1);
        assert!(informer.get("b").is_some());
    }

    #[test]
    fn a_pruning_informer_caches_what_its_prune_leaves_from_watches_and_relists() {
        fn drop_data(object: &mut ConfigMap) {
            object.data = None;
        }
        let with_data = |name: &str, version: &str| ConfigMap {
            data: Some([("key".to_owned(), "value".to_owned())].into()),
            ..config_map(name, version)
        };
        let informer = Informer::pruning("configmaps", drop_data);
        informer.replace(vec![with_data("a", "1")]);
        informer.apply(with_data("b", "2"));
        for name in ["a", "b"] {
            let cached = informer.get(name).unwrap();
            assert_eq!(cached.data, None, "{name} was cached with the pruned field");
            assert_eq!(cached.metadata.name.as_deref(), Some(name));
        }
    }

    #[test]
    fn relist_reports_additions_changes_and_disappearances() {
        let informer = Informer::new("configmaps");
        informer.replace(vec![config_map("a", "1"), config_map("b", "2")]);
        assert!(informer.is_synced());
        let seen = recorder(&informer);
        seen.lock().unwrap().clear();
        informer.replace(vec![config_map("b", "5"), config_map("c", "6")]);
        let mut changes = seen.lock().unwrap().clone();
        changes.sort();
        assert_eq!(changes, vec!["add c", "delete a", "update b 2->5"]);
    }
}
