//! MachineSets this shell wrote recently, kept until the informer shows them.
//!
//! The informer lags the API server. Without this overlay a pass right after a write would plan
//! on the previous sizes of a MachineSet (its writes then fail with 409, but decisions about the
//! *other* sets of the deployment would be taken on stale numbers).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcm_api::v1alpha1::MachineSet;

use mcm_decisions::machine_set::claim::controller_ref;

use crate::platform::written::caught_up;

/// How long a written object may shadow the cache at most (a watch that never delivers it).
const TTL: Duration = Duration::from_secs(30);
/// How long a set we created may be added to a snapshot that does not list it yet.
const UNSEEN_TTL: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
enum Entry {
    /// The API server's answer to our write.
    Written(Arc<MachineSet>),
    /// Deleted by us (the API server answered without an object): hide it while still cached.
    Deleted {
        /// UID of the deleted object.
        uid: String,
    },
}

/// Recent writes by MachineSet name.
#[derive(Debug, Default)]
pub(crate) struct RecentWrites {
    entries: Mutex<HashMap<String, (Entry, Instant)>>,
}

impl RecentWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Entry, Instant)>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Remembers the API server's answer to a write.
    pub(crate) fn written(&self, ms: MachineSet) {
        if let Some(name) = ms.metadata.name.clone() {
            self.lock()
                .insert(name, (Entry::Written(Arc::new(ms)), Instant::now()));
        }
    }

    /// Remembers a deletion that removed the object.
    pub(crate) fn deleted(&self, name: &str, uid: &str) {
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

    /// Forgets entries of MachineSets controlled by a deployment that is gone.
    pub(crate) fn forget_deployment(&self, deployment: &str) {
        self.lock().retain(|_, (entry, _)| match entry {
            Entry::Written(ms) => controller_ref(&ms.metadata).is_none_or(|r| r.name != deployment),
            Entry::Deleted { .. } => true,
        });
    }

    /// The cached MachineSets with our newer writes laid over them; entries the cache has caught
    /// up with (or that expired) are dropped.
    pub(crate) fn merge(&self, cached: Vec<Arc<MachineSet>>) -> Vec<MachineSet> {
        let mut entries = self.lock();
        entries.retain(|_, (_, at)| at.elapsed() < TTL);
        let mut out = Vec::with_capacity(cached.len());
        let mut seen = std::collections::HashSet::new();
        for ms in cached {
            let name = ms.metadata.name.clone().unwrap_or_default();
            seen.insert(name.clone());
            match entries.get(&name).map(|(e, _)| e.clone()) {
                Some(Entry::Written(ours)) => {
                    let same_object = ours.metadata.uid == ms.metadata.uid;
                    if !same_object
                        || caught_up(
                            ms.metadata.resource_version.as_deref(),
                            ours.metadata.resource_version.as_deref(),
                        )
                    {
                        entries.remove(&name);
                        out.push((*ms).clone());
                    } else {
                        out.push((*ours).clone());
                    }
                }
                Some(Entry::Deleted { uid }) => {
                    if ms.metadata.uid.as_deref() != Some(uid.as_str()) {
                        entries.remove(&name);
                        out.push((*ms).clone());
                    }
                }
                None => out.push((*ms).clone()),
            }
        }
        // Created by us and not in the cache yet. Only for a short while: if someone else
        // deleted it meanwhile, a phantom set must not linger (a missed one only costs an
        // `AlreadyExists` on the next create, which the plan handles).
        for (name, (entry, at)) in entries.iter() {
            if let Entry::Written(ours) = entry
                && !seen.contains(name)
                && ours.metadata.deletion_timestamp.is_none()
                && at.elapsed() < UNSEEN_TTL
            {
                out.push((**ours).clone());
            }
        }
        entries
            .retain(|name, (entry, _)| matches!(entry, Entry::Written(_)) || seen.contains(name));
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcm_api::v1alpha1::MachineSetSpec;

    fn ms(name: &str, uid: &str, rv: &str, replicas: i32) -> MachineSet {
        let mut s = MachineSet::new(
            name,
            MachineSetSpec {
                replicas: Some(replicas),
                ..MachineSetSpec::default()
            },
        );
        s.metadata.uid = Some(uid.into());
        s.metadata.resource_version = Some(rv.into());
        s
    }

    fn replicas_of(sets: &[MachineSet], name: &str) -> Option<i32> {
        sets.iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .and_then(|s| s.spec.replicas)
    }

    #[test]
    fn a_newer_write_shadows_a_stale_cache_until_it_catches_up() {
        let recent = RecentWrites::default();
        recent.written(ms("a", "u", "10", 5));
        let merged = recent.merge(vec![Arc::new(ms("a", "u", "9", 3))]);
        assert_eq!(replicas_of(&merged, "a"), Some(5));
        // The cache caught up (and moved on): the cache wins and the entry is gone.
        let merged = recent.merge(vec![Arc::new(ms("a", "u", "11", 4))]);
        assert_eq!(replicas_of(&merged, "a"), Some(4));
        let merged = recent.merge(vec![Arc::new(ms("a", "u", "9", 3))]);
        assert_eq!(replicas_of(&merged, "a"), Some(3));
    }

    #[test]
    fn a_created_set_is_visible_before_the_cache_has_it() {
        let recent = RecentWrites::default();
        recent.written(ms("new", "n", "12", 2));
        let merged = recent.merge(vec![Arc::new(ms("old", "o", "3", 1))]);
        assert_eq!(merged.len(), 2);
        assert_eq!(replicas_of(&merged, "new"), Some(2));
    }

    #[test]
    fn a_deleted_set_is_hidden_and_a_recreated_one_with_another_uid_is_not() {
        let recent = RecentWrites::default();
        recent.deleted("a", "u1");
        assert!(
            recent
                .merge(vec![Arc::new(ms("a", "u1", "3", 0))])
                .is_empty()
        );
        assert_eq!(recent.merge(vec![Arc::new(ms("a", "u2", "4", 1))]).len(), 1);
    }
}
