//! A secondary index over an informer's cache: the names of the cached objects by a key derived
//! from each object (for example machines by the node they run on), kept current by a
//! subscription.
//!
//! A lookup by scanning the cache costs one comparison per cached object. Handlers that looked up
//! the machine of a node that way on every Node event made a scale-up of N machines cost O(N²)
//! (at 5,000 machines most of the manager's CPU, docs/performance.md); the index answers in
//! O(1).

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};

use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::informer::{Change, Informer};

/// Object names by key. The lock is a leaf: it is taken under an informer's lock (by the
/// subscription) and never held while taking another one.
#[derive(Clone, Default)]
pub struct Index {
    names: Arc<Mutex<HashMap<String, Vec<String>>>>,
}

impl Index {
    /// An index of `informer`'s objects by `key` (objects without a key are not indexed),
    /// filled with the cached objects at once and kept current from then on.
    pub fn subscribe<K>(informer: &Informer<K>, key: fn(&K) -> Option<&str>) -> Self
    where
        K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    {
        let index = Self::default();
        let names = index.clone();
        informer.subscribe(move |change| names.apply(change, key));
        index
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<String>>> {
        self.names
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn apply<K: Resource>(&self, change: &Change<K>, key: fn(&K) -> Option<&str>) {
        let mut names = self.lock();
        match change {
            Change::Added(object) => insert(&mut names, &**object, key),
            // Most updates keep the key (a status write): nothing to do.
            Change::Updated { old, new } if key(old) == key(new) => {}
            Change::Updated { old, new } => {
                remove(&mut names, &**old, key);
                insert(&mut names, &**new, key);
            }
            Change::Deleted(object) => remove(&mut names, &**object, key),
        }
    }

    /// Whether some object has the key `key`.
    pub fn contains(&self, key: &str) -> bool {
        self.lock().contains_key(key)
    }

    /// The names of the objects whose key is `key`, sorted.
    pub fn names(&self, key: &str) -> Vec<String> {
        self.lock().get(key).cloned().unwrap_or_default()
    }
}

fn remove<K: Resource>(
    names: &mut HashMap<String, Vec<String>>,
    object: &K,
    key: fn(&K) -> Option<&str>,
) {
    if let Some(key) = key(object)
        && let Some(set) = names.get_mut(key)
    {
        let name = object.meta().name.as_deref().unwrap_or_default();
        if let Ok(at) = set.binary_search_by(|held| held.as_str().cmp(name)) {
            set.remove(at);
        }
        if set.is_empty() {
            names.remove(key);
        }
    }
}

fn insert<K: Resource>(
    names: &mut HashMap<String, Vec<String>>,
    object: &K,
    key: fn(&K) -> Option<&str>,
) {
    if let Some(key) = key(object) {
        let name = object.name_any();
        // A sorted Vec, not a set: nearly every key has one name, and a one-element BTreeSet
        // allocates a whole node (several hundred bytes per cached Node at 5,000 machines).
        let set = names.entry(key.to_owned()).or_default();
        if let Err(at) = set.binary_search(&name) {
            set.insert(at, name);
        }
    }
}

/// The objects of `informer` whose key is `key` according to `index`, checked again against the
/// cached object (the index and the cache are updated one after the other).
pub fn lookup<K>(
    index: &Index,
    informer: &Informer<K>,
    key: &str,
    key_of: fn(&K) -> Option<&str>,
) -> Vec<Arc<K>>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    index
        .names(key)
        .iter()
        .filter_map(|name| informer.get(name))
        .filter(|object| key_of(object) == Some(key))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn object(name: &str, key: Option<&str>, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(version.into()),
                labels: key.map(|key| [("node".to_owned(), key.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn node_of(object: &ConfigMap) -> Option<&str> {
        object.labels().get("node").map(String::as_str)
    }

    #[test]
    fn follows_adds_key_changes_and_deletes() {
        let informer = Informer::<ConfigMap>::new("configmaps");
        informer.apply(object("a", Some("n1"), "1"));
        let index = Index::subscribe(&informer, node_of);
        assert_eq!(index.names("n1"), vec!["a".to_owned()]);

        informer.apply(object("b", Some("n1"), "2"));
        informer.apply(object("c", None, "3"));
        assert_eq!(index.names("n1"), vec!["a".to_owned(), "b".to_owned()]);

        // The key moves with the object.
        informer.apply(object("a", Some("n2"), "4"));
        assert_eq!(index.names("n1"), vec!["b".to_owned()]);
        assert_eq!(index.names("n2"), vec!["a".to_owned()]);
        // An object that gains a key is indexed, one that loses it is not any more.
        informer.apply(object("c", Some("n2"), "5"));
        informer.apply(object("b", None, "6"));
        assert!(index.names("n1").is_empty());
        assert_eq!(index.names("n2"), vec!["a".to_owned(), "c".to_owned()]);

        informer.delete(object("a", Some("n2"), "7"));
        assert_eq!(index.names("n2"), vec!["c".to_owned()]);
        assert!(index.contains("n2"));
        assert!(!index.contains("n1"));
        let found = lookup(&index, &informer, "n2", node_of);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name_any(), "c");
        assert!(lookup(&index, &informer, "n9", node_of).is_empty());
    }

    #[test]
    fn a_relist_that_moved_an_object_leaves_no_stale_entry() {
        let informer = Informer::<ConfigMap>::new("configmaps");
        let index = Index::subscribe(&informer, node_of);
        informer.replace(vec![object("a", Some("n1"), "1")]);
        informer.replace(vec![object("a", Some("n2"), "2")]);
        assert!(index.names("n1").is_empty());
        assert_eq!(index.names("n2"), vec!["a".to_owned()]);
        informer.replace(Vec::new());
        assert!(index.names("n2").is_empty());
    }
}
