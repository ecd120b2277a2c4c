//! Objects a shell wrote itself, kept until its informer shows them (docs/behaviour.md#stale-caches).
//!
//! An informer lags the API server by the watch's delivery time. A pass queued by the event of
//! its own earlier write can start before the informer has the pass's later writes, and would plan
//! on a version the shell has already written over: a driver call done twice, and a write that
//! fails with 409. [`LatestWrites`] keeps the API server's last answer per object so that the next
//! pass starts from it while the cache is older.
//!
//! An entry lives only while the watch event of its write is in flight: the cache's own change
//! handler forgets it once the cache shows the write ([`LatestWrites::cache_changed`]), and it is
//! kept without managedFields, as the cache keeps objects. Kept whole for 10 s, the answers to a
//! 5,000-machine scale-up's writes were tens of MiB (docs/performance.md#memory-per-machine).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::Resource;

use crate::platform::informer::Change;

/// How long a written object may stand in for the cache at most (a watch that never delivers
/// it).
const TTL: Duration = Duration::from_secs(10);

/// Whether the cached resourceVersion `cached` is at least `written`. resourceVersions are
/// etcd revisions (numbers) in kube-apiserver and the sandbox; where either does not parse,
/// only equality counts.
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

/// The API server's last answer to this shell's writes, by object name.
pub struct LatestWrites<K> {
    entries: Mutex<HashMap<String, (Arc<K>, Instant)>>,
}

impl<K> Default for LatestWrites<K> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Resource> LatestWrites<K> {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Arc<K>, Instant)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers `written`, the API server's answer to a write, unless `cached`, the cache's
    /// version of it, already has it (expired entries go).
    pub fn remember(&self, mut written: K, cached: Option<Arc<K>>) {
        let Some(name) = written.meta().name.clone() else {
            return;
        };
        let mut entries = self.lock();
        entries.retain(|_, (_, at)| at.elapsed() < TTL);
        // The cache's handler may have seen the write before this pass ended: nothing to wait for.
        if cached.is_some_and(|cached| shows(&*cached, &written)) {
            entries.remove(&name);
            return;
        }
        // As the cache keeps it: no pass reads managedFields, and the answer to a status write
        // carries every manager's field sets (the larger part of a Machine).
        written.meta_mut().managed_fields = None;
        entries.insert(name, (Arc::new(written), Instant::now()));
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
            Some((ours, _)) => shows(&**object, &**ours),
        };
        if forget {
            entries.remove(name);
        }
    }

    /// The object a pass over `name` starts from: our last write while the cache holds an older
    /// version of the same object, else the cache's (the entry is then forgotten). An object
    /// gone from the cache is gone.
    pub fn newest(&self, name: &str, cached: Option<Arc<K>>) -> Option<Arc<K>> {
        let mut entries = self.lock();
        let Some(cached) = cached else {
            entries.remove(name);
            return None;
        };
        if let Some((ours, at)) = entries.get(name) {
            let stale = at.elapsed() < TTL && !shows(&*cached, &**ours);
            if stale {
                tracing::debug!(
                    name,
                    cached = cached.meta().resource_version.as_deref().unwrap_or(""),
                    written = ours.meta().resource_version.as_deref().unwrap_or(""),
                    "the cache is older than our last write: the pass starts from the write"
                );
                return Some(Arc::clone(ours));
            }
            entries.remove(name);
        }
        Some(cached)
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

    #[test]
    fn our_write_stands_in_for_an_older_cache_until_the_cache_has_it() {
        let written = LatestWrites::default();
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
        let written = LatestWrites::default();
        written.remember(object("a", "u", "10", "ours"), None);
        let newer = Arc::new(object("a", "u", "12", "theirs"));
        assert_eq!(value(&written.newest("a", Some(newer)).unwrap()), "theirs");
    }

    #[test]
    fn a_recreated_object_and_a_gone_one_are_not_shadowed() {
        let written = LatestWrites::default();
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
        let written = LatestWrites::default();
        written.remember(object("a", "u", "10", "ours"), None);
        let other = Arc::new(object("b", "v", "1", "cache"));
        assert_eq!(value(&written.newest("b", Some(other)).unwrap()), "cache");
        let older = Arc::new(object("a", "u", "9", "cache"));
        assert_eq!(value(&written.newest("a", Some(older)).unwrap()), "ours");
    }

    #[test]
    fn the_cache_showing_our_write_forgets_it_at_once() {
        let written = LatestWrites::default();
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
        let written = LatestWrites::default();
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
        let written = LatestWrites::default();
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
        let written = LatestWrites::default();
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
    fn non_numeric_versions_compare_by_equality() {
        assert!(caught_up(Some("abc"), Some("abc")));
        assert!(!caught_up(Some("abd"), Some("abc")));
        assert!(caught_up(Some("12"), Some("9")));
        assert!(!caught_up(Some("9"), Some("12")));
        assert!(caught_up(None, Some("9")));
    }
}
