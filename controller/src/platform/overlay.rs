//! Objects a shell wrote, created or deleted itself, laid over its cache until the cache shows
//! them (docs/behaviour.md#stale-caches).
//!
//! An informer lags the API server by the watch's delivery time. A pass queued by the event of
//! its own earlier write can start before the informer has the pass's later writes, and would plan
//! on a version the shell has already written over: a driver call done twice, a write that fails
//! with 409, or decisions about a deployment's other MachineSets taken on stale sizes.
//! [`Overlay`] keeps the API server's last answer per object, and the objects deleted by the
//! shell, so that the next pass starts from them while the cache is older: one object
//! ([`Overlay::newest`]) or a list ([`Overlay::view`]: the cache's list with our newer writes
//! substituted, our creations added and our deletions hidden).
//!
//! An entry lives only while the watch event of its write is in flight: the cache's own change
//! handler forgets it once the cache shows the write ([`Overlay::cache_changed`]), a pass forgets
//! it once the cache it reads shows the write, and it is kept without managedFields, as the cache
//! keeps objects. Kept whole for 10 s, the answers to a 5,000-machine scale-up's writes were tens
//! of MiB (docs/performance.md#memory-per-machine).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::Resource;

use crate::platform::informer::Change;

/// How long a written object may stand in for the cache at most by default (a watch that never
/// delivers it).
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// How long an object we created is added to a list that does not show it yet. Short: if
/// someone else deleted it meanwhile, a phantom must not linger (a missed one only costs an
/// `AlreadyExists` on the next create, which the plans handle).
const CREATION_TTL: Duration = Duration::from_secs(5);

/// Whether the cached resourceVersion `cached` is at least `written`. resourceVersions are
/// etcd revisions (numbers) in kube-apiserver and the sandbox; where either does not parse,
/// only equality counts.
#[must_use]
pub fn caught_up(cached: Option<&str>, written: Option<&str>) -> bool {
    match (cached, written) {
        (Some(c), Some(w)) => match (c.parse::<u64>(), w.parse::<u64>()) {
            (Ok(c), Ok(w)) => c >= w,
            _ => c == w,
        },
        _ => true,
    }
}

/// Whether `cached` makes `ours` useless: it is a newer or the same version of the object, or
/// another object of the same name.
fn shows<K: Resource>(cached: &K, ours: &K) -> bool {
    cached.meta().uid != ours.meta().uid
        || caught_up(
            cached.meta().resource_version.as_deref(),
            ours.meta().resource_version.as_deref(),
        )
}

/// What the shell did to one object.
enum Entry<K> {
    /// The API server's answer to our write (a creation when the cache has no such object).
    Written(Arc<K>),
    /// Deleted by us (the API server answered without an object): hidden while the cache still
    /// shows the object of this uid.
    Deleted {
        /// UID of the deleted object.
        uid: String,
    },
}

/// Our own writes, creations and deletions by object name, while the cache does not show them.
pub struct Overlay<K> {
    entries: Mutex<HashMap<String, (Entry<K>, Instant)>>,
    ttl: Duration,
}

impl<K> Default for Overlay<K> {
    fn default() -> Self {
        Self::new(DEFAULT_TTL)
    }
}

impl<K> Overlay<K> {
    /// An empty overlay whose entries stand in for the cache for `ttl` at most.
    #[must_use]
    pub fn new(ttl: Duration) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Entry<K>, Instant)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Resource> Overlay<K> {
    /// Remembers `written`, the API server's answer to a write, unless `cached`, the cache's
    /// version of it, already has it (expired entries go).
    pub fn remember(&self, mut written: K, cached: Option<Arc<K>>) {
        let Some(name) = written.meta().name.clone() else {
            return;
        };
        let mut entries = self.lock();
        let ttl = self.ttl;
        entries.retain(|_, (_, at)| at.elapsed() < ttl);
        // The cache's handler may have seen the write before this pass ended: nothing to wait for.
        if cached.is_some_and(|cached| shows(&*cached, &written)) {
            entries.remove(&name);
            return;
        }
        // As the cache keeps it: no pass reads managedFields, and the answer to a status write
        // carries every manager's field sets (the larger part of a Machine).
        written.meta_mut().managed_fields = None;
        entries.insert(name, (Entry::Written(Arc::new(written)), Instant::now()));
    }

    /// Remembers that a deletion removed the object `name` of `uid` (the API server answered
    /// without an object): it is hidden while the cache still shows it.
    pub fn remember_deleted(&self, name: &str, uid: &str) {
        self.lock().insert(
            name.to_owned(),
            (
                Entry::Deleted {
                    uid: uid.to_owned(),
                },
                Instant::now(),
            ),
        );
    }

    /// Forgets our writes of the objects `which` selects (deletions stay until the cache drops
    /// the object).
    pub fn forget_where(&self, which: impl Fn(&K) -> bool) {
        self.lock().retain(|_, (entry, _)| match entry {
            Entry::Written(ours) => !which(ours),
            Entry::Deleted { .. } => true,
        });
    }

    /// Forgets the entry of the object `change` is about once the cache shows our write, a newer
    /// version, a recreated object or none: called by the cache's change handler, so an entry
    /// lives as long as the watch event of its write is in flight (milliseconds), not for a
    /// whole scale-up's worth of writes.
    pub fn cache_changed(&self, change: &Change<K>) {
        let object = change.object();
        let Some(name) = object.meta().name.as_deref() else {
            return;
        };
        let mut entries = self.lock();
        let forget = match entries.get(name) {
            None => return,
            Some(_) if matches!(change, Change::Deleted(_)) => true,
            Some((Entry::Written(ours), _)) => shows(&**object, &**ours),
            Some((Entry::Deleted { uid }, _)) => object.meta().uid.as_deref() != Some(uid.as_str()),
        };
        if forget {
            entries.remove(name);
        }
    }

    /// The object a pass over `name` starts from: our last write while the cache holds an older
    /// version of the same object, else the cache's (the entry is then forgotten). An object
    /// gone from the cache, or deleted by us while the cache still shows it, is gone.
    pub fn newest(&self, name: &str, cached: Option<Arc<K>>) -> Option<Arc<K>> {
        let mut entries = self.lock();
        let Some(cached) = cached else {
            entries.remove(name);
            return None;
        };
        if let Some((entry, at)) = entries.get(name) {
            let fresh = at.elapsed() < self.ttl;
            match entry {
                Entry::Written(ours) if fresh && !shows(&*cached, &**ours) => {
                    tracing::debug!(
                        name,
                        cached = cached.meta().resource_version.as_deref().unwrap_or(""),
                        written = ours.meta().resource_version.as_deref().unwrap_or(""),
                        "the cache is older than our last write: the pass starts from the write"
                    );
                    return Some(Arc::clone(ours));
                }
                Entry::Deleted { uid }
                    if fresh && cached.meta().uid.as_deref() == Some(uid.as_str()) =>
                {
                    return None;
                }
                _ => {}
            }
            entries.remove(name);
        }
        Some(cached)
    }

    /// The cache's list `cached` as the shell's own writes left it: our newer writes substituted,
    /// the objects we created and the cache does not show yet added, those we deleted and it
    /// still shows left out. Entries the cache has caught up with (or that expired) are dropped.
    pub fn view(&self, cached: Vec<Arc<K>>) -> Vec<Arc<K>> {
        let mut entries = self.lock();
        let ttl = self.ttl;
        entries.retain(|_, (_, at)| at.elapsed() < ttl);
        let mut out = Vec::with_capacity(cached.len());
        let mut seen = HashSet::new();
        for object in cached {
            let name = object.meta().name.clone().unwrap_or_default();
            let keep = match entries.get(&name).map(|(entry, _)| entry) {
                None => Some(object),
                Some(Entry::Written(ours)) if !shows(&*object, &**ours) => Some(Arc::clone(ours)),
                Some(Entry::Deleted { uid })
                    if object.meta().uid.as_deref() == Some(uid.as_str()) =>
                {
                    None
                }
                Some(_) => {
                    entries.remove(&name);
                    Some(object)
                }
            };
            out.extend(keep);
            seen.insert(name);
        }
        for (name, (entry, at)) in entries.iter() {
            if let Entry::Written(ours) = entry
                && !seen.contains(name)
                && ours.meta().deletion_timestamp.is_none()
                && at.elapsed() < CREATION_TTL
            {
                out.push(Arc::clone(ours));
            }
        }
        // A deletion the cache no longer shows is done.
        entries
            .retain(|name, (entry, _)| matches!(entry, Entry::Written(_)) || seen.contains(name));
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::collections::BTreeMap;

    fn object(name: &str, uid: &str, rv: &str, value: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(name.into());
        object.metadata.uid = Some(uid.into());
        object.metadata.resource_version = Some(rv.into());
        object.data = Some(BTreeMap::from([("v".to_owned(), value.to_owned())]));
        object
    }

    fn value(object: &ConfigMap) -> &str {
        object.data.as_ref().unwrap()["v"].as_str()
    }

    /// The view of `cached` as (name, value) pairs, sorted by name.
    fn view(overlay: &Overlay<ConfigMap>, cached: &[ConfigMap]) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = overlay
            .view(cached.iter().cloned().map(Arc::new).collect())
            .iter()
            .map(|o| (o.metadata.name.clone().unwrap(), value(o).to_owned()))
            .collect();
        out.sort();
        out
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn our_write_stands_in_for_an_older_cache_until_the_cache_has_it() {
        let written = Overlay::default();
        written.remember(object("a", "u", "10", "ours"), None);
        let older = Arc::new(object("a", "u", "9", "cache"));
        assert_eq!(value(&written.newest("a", Some(older)).unwrap()), "ours");
        // Still ours on a second stale read: a pass that fails does not forget the write.
        let older = Arc::new(object("a", "u", "9", "cache"));
        assert_eq!(value(&written.newest("a", Some(older)).unwrap()), "ours");
        // The cache caught up: it wins, and the entry is gone for good.
        let same = Arc::new(object("a", "u", "10", "cache"));
        assert_eq!(value(&written.newest("a", Some(same)).unwrap()), "cache");
        let older = Arc::new(object("a", "u", "9", "cache"));
        assert_eq!(value(&written.newest("a", Some(older)).unwrap()), "cache");
    }

    #[test]
    fn a_newer_write_by_someone_else_wins_over_ours() {
        let written = Overlay::default();
        written.remember(object("a", "u", "10", "ours"), None);
        let newer = Arc::new(object("a", "u", "12", "theirs"));
        assert_eq!(value(&written.newest("a", Some(newer)).unwrap()), "theirs");
    }

    #[test]
    fn a_recreated_object_and_a_gone_one_are_not_shadowed() {
        let written = Overlay::default();
        written.remember(object("a", "u1", "10", "ours"), None);
        let recreated = Arc::new(object("a", "u2", "3", "new"));
        assert_eq!(value(&written.newest("a", Some(recreated)).unwrap()), "new");
        written.remember(object("b", "u", "10", "ours"), None);
        assert!(written.newest("b", None).is_none());
        // Forgotten with the object: a cache that shows it again (older) is not shadowed.
        let older = Arc::new(object("b", "u", "9", "cache"));
        assert_eq!(value(&written.newest("b", Some(older)).unwrap()), "cache");
    }

    #[test]
    fn other_objects_pass_through() {
        let written = Overlay::default();
        written.remember(object("a", "u", "10", "ours"), None);
        let other = Arc::new(object("b", "v", "1", "cache"));
        assert_eq!(value(&written.newest("b", Some(other)).unwrap()), "cache");
        let older = Arc::new(object("a", "u", "9", "cache"));
        assert_eq!(value(&written.newest("a", Some(older)).unwrap()), "ours");
    }

    #[test]
    fn the_cache_showing_our_write_forgets_it_at_once() {
        let written = Overlay::default();
        written.remember(object("a", "u", "10", "ours"), None);
        // An older version arriving keeps the entry.
        let older = Arc::new(object("a", "u", "9", "cache"));
        written.cache_changed(&Change::Added(Arc::clone(&older)));
        assert_eq!(value(&written.newest("a", Some(older)).unwrap()), "ours");
        // Our version arriving forgets it: a later older read is not shadowed any more.
        written.cache_changed(&Change::Updated {
            old: Arc::new(object("a", "u", "9", "cache")),
            new: Arc::new(object("a", "u", "10", "cache")),
        });
        let older = Arc::new(object("a", "u", "9", "cache"));
        assert_eq!(value(&written.newest("a", Some(older)).unwrap()), "cache");
    }

    #[test]
    fn a_deleted_or_recreated_object_forgets_our_write() {
        let written = Overlay::default();
        written.remember(object("a", "u", "10", "ours"), None);
        written.remember(object("b", "u", "10", "ours"), None);
        written.cache_changed(&Change::Deleted(Arc::new(object("a", "u", "9", "cache"))));
        written.cache_changed(&Change::Added(Arc::new(object("b", "u2", "3", "new"))));
        for name in ["a", "b"] {
            let older = Arc::new(object(name, "u", "9", "cache"));
            assert_eq!(value(&written.newest(name, Some(older)).unwrap()), "cache");
        }
    }

    #[test]
    fn a_write_the_cache_already_shows_is_not_kept() {
        let written = Overlay::default();
        let cached = Arc::new(object("a", "u", "10", "cache"));
        written.remember(object("a", "u", "10", "ours"), Some(cached));
        let older = Arc::new(object("a", "u", "9", "cache"));
        assert_eq!(value(&written.newest("a", Some(older)).unwrap()), "cache");
        // A cache still older than the write: kept.
        let cached = Arc::new(object("a", "u", "9", "cache"));
        written.remember(object("a", "u", "10", "ours"), Some(Arc::clone(&cached)));
        assert_eq!(value(&written.newest("a", Some(cached)).unwrap()), "ours");
    }

    #[test]
    fn our_write_is_kept_without_managed_fields() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let written = Overlay::default();
        let mut ours = object("a", "u", "10", "ours");
        ours.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("machine-controller-manager".into()),
            ..ManagedFieldsEntry::default()
        }]);
        written.remember(ours, None);
        let older = Arc::new(object("a", "u", "9", "cache"));
        let newest = written.newest("a", Some(older)).unwrap();
        assert_eq!(value(&newest), "ours");
        assert_eq!(newest.metadata.managed_fields, None);
    }

    #[test]
    fn a_list_shows_our_newer_writes_until_the_cache_catches_up() {
        let overlay = Overlay::default();
        overlay.remember(object("a", "u", "10", "ours"), None);
        let cache = [object("a", "u", "9", "cache"), object("b", "v", "3", "b")];
        assert_eq!(view(&overlay, &cache), pairs(&[("a", "ours"), ("b", "b")]));
        // The cache caught up (and moved on): it wins, and the entry is gone for good.
        let cache = [object("a", "u", "11", "cache")];
        assert_eq!(view(&overlay, &cache), pairs(&[("a", "cache")]));
        let cache = [object("a", "u", "9", "old")];
        assert_eq!(view(&overlay, &cache), pairs(&[("a", "old")]));
    }

    #[test]
    fn a_list_shows_our_creations_before_the_cache_has_them() {
        let overlay = Overlay::default();
        overlay.remember(object("new", "n", "12", "ours"), None);
        let cache = [object("old", "o", "3", "old")];
        assert_eq!(
            view(&overlay, &cache),
            pairs(&[("new", "ours"), ("old", "old")])
        );
        // Once the cache shows it, the cache's copy, and no more entry.
        overlay.cache_changed(&Change::Added(Arc::new(object("new", "n", "12", "cache"))));
        assert_eq!(view(&overlay, &cache), pairs(&[("old", "old")]));
    }

    #[test]
    fn a_list_hides_our_deletions_while_the_cache_shows_them() {
        let overlay = Overlay::default();
        overlay.remember_deleted("a", "u1");
        let cache = [object("a", "u1", "3", "cache")];
        assert_eq!(view(&overlay, &cache), pairs(&[]));
        assert!(
            overlay
                .newest("a", Some(Arc::new(object("a", "u1", "3", "cache"))))
                .is_none()
        );
        // A recreated object of another uid is shown, and ends the entry.
        let cache = [object("a", "u2", "4", "new")];
        assert_eq!(view(&overlay, &cache), pairs(&[("a", "new")]));
        let cache = [object("a", "u1", "3", "cache")];
        assert_eq!(view(&overlay, &cache), pairs(&[("a", "cache")]));
    }

    #[test]
    fn a_deletion_ends_when_the_cache_drops_the_object() {
        let overlay = Overlay::default();
        overlay.remember_deleted("a", "u1");
        overlay.remember_deleted("b", "u1");
        // An update of the deleted object (finalizers being removed) keeps hiding it.
        overlay.cache_changed(&Change::Updated {
            old: Arc::new(object("a", "u1", "3", "cache")),
            new: Arc::new(object("a", "u1", "4", "cache")),
        });
        assert_eq!(view(&overlay, &[object("a", "u1", "4", "c")]), pairs(&[]));
        overlay.cache_changed(&Change::Deleted(Arc::new(object("a", "u1", "4", "c"))));
        // A list without it ends the other one.
        assert_eq!(view(&overlay, &[]), pairs(&[]));
        for name in ["a", "b"] {
            let cache = [object(name, "u1", "3", "stale")];
            assert_eq!(view(&overlay, &cache), pairs(&[(name, "stale")]));
        }
    }

    #[test]
    fn an_older_cache_event_does_not_resurrect_an_older_version() {
        let overlay = Overlay::default();
        overlay.remember(object("a", "u", "10", "ours"), None);
        overlay.cache_changed(&Change::Updated {
            old: Arc::new(object("a", "u", "8", "cache")),
            new: Arc::new(object("a", "u", "9", "cache")),
        });
        let cache = [object("a", "u", "9", "cache")];
        assert_eq!(view(&overlay, &cache), pairs(&[("a", "ours")]));
    }

    #[test]
    fn forgetting_selected_writes_keeps_the_others_and_the_deletions() {
        let overlay = Overlay::default();
        overlay.remember(object("a", "u", "10", "drop"), None);
        overlay.remember(object("b", "v", "10", "keep"), None);
        overlay.remember_deleted("c", "w");
        overlay.forget_where(|o| value(o) == "drop");
        let cache = [
            object("a", "u", "9", "cache"),
            object("b", "v", "9", "cache"),
            object("c", "w", "9", "cache"),
        ];
        assert_eq!(
            view(&overlay, &cache),
            pairs(&[("a", "cache"), ("b", "keep")])
        );
    }

    #[test]
    fn non_numeric_versions_compare_by_equality() {
        assert!(caught_up(Some("abc"), Some("abc")));
        assert!(!caught_up(Some("abd"), Some("abc")));
        assert!(caught_up(Some("12"), Some("9")));
        assert!(!caught_up(Some("9"), Some("12")));
        assert!(caught_up(None, Some("9")));
    }
}
