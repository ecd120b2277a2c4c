//! Objects a shell wrote itself, kept until its informer shows them (docs/behaviour.md#stale-caches).
//!
//! An informer lags the API server by the watch's delivery time. A pass queued by the event of
//! its own earlier write can start before the informer has the pass's later writes, and would plan
//! on a version the shell has already written over: a driver call done twice, and a write that
//! fails with 409. [`LatestWrites`] keeps the API server's last answer per object so that the next
//! pass starts from it while the cache is older.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::Resource;

/// How long a written object may stand in for the cache at most (a watch that never delivers
/// it, or an object no pass asks for again).
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

    /// Remembers `written`, the API server's answer to a write (expired entries go).
    pub fn remember(&self, written: K) {
        let Some(name) = written.meta().name.clone() else {
            return;
        };
        let mut entries = self.lock();
        entries.retain(|_, (_, at)| at.elapsed() < TTL);
        entries.insert(name, (Arc::new(written), Instant::now()));
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
            let stale = at.elapsed() < TTL
                && ours.meta().uid == cached.meta().uid
                && !caught_up(
                    cached.meta().resource_version.as_deref(),
                    ours.meta().resource_version.as_deref(),
                );
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
        written.remember(object("a", "u", "10", "ours"));
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
        written.remember(object("a", "u", "10", "ours"));
        let newer = Arc::new(object("a", "u", "12", "theirs"));
        assert_eq!(value(&written.newest("a", Some(newer)).unwrap()), "theirs");
    }

    #[test]
    fn a_recreated_object_and_a_gone_one_are_not_shadowed() {
        let written = LatestWrites::default();
        written.remember(object("a", "u1", "10", "ours"));
        let recreated = Arc::new(object("a", "u2", "3", "new"));
        assert_eq!(value(&written.newest("a", Some(recreated)).unwrap()), "new");
        written.remember(object("b", "u", "10", "ours"));
        assert!(written.newest("b", None).is_none());
        // Forgotten with the object: a cache that shows it again (older) is not shadowed.
        let older = Arc::new(object("b", "u", "9", "cache"));
        assert_eq!(value(&written.newest("b", Some(older)).unwrap()), "cache");
    }

    #[test]
    fn other_objects_pass_through() {
        let written = LatestWrites::default();
        written.remember(object("a", "u", "10", "ours"));
        let other = Arc::new(object("b", "v", "1", "cache"));
        assert_eq!(value(&written.newest("b", Some(other)).unwrap()), "cache");
        let older = Arc::new(object("a", "u", "9", "cache"));
        assert_eq!(value(&written.newest("a", Some(older)).unwrap()), "ours");
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
