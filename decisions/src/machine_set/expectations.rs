//! Expectations: the creations and deletions the MachineSet controller has issued and not yet seen
//! in its cache, so that it never acts twice on a stale cache (zero overshoot).
//!
//! Upstream records expectations but never consults them (docs/behaviour.md#manager-process, quirk docs/behaviour.md#q5). Here the
//! planner refuses to create or delete machines for a MachineSet while its expectations are
//! pending, exactly like Kubernetes' ReplicaSet controller does, until every issued operation has
//! been observed or the entry expired ([`DEFAULT_TTL`], 5 minutes as upstream, so a lost watch
//! event cannot block a MachineSet forever).
//!
//! Creations are tracked twice: a count of creations issued whose outcome is not known yet
//! (`in_flight`), and the names the API server returned (`created`) until the cache shows them.
//! Deletions are tracked by machine name until the cache shows the machine gone or deleting.
//! Both event handlers (`observe_*`) and whole-cache reconciliation ([`Expectations::observe_snapshot`])
//! settle entries, so the order in which a watch event and an API response arrive does not
//! matter. Time is always a parameter.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use mcm_api::v1alpha1::Machine;

/// How long an unsatisfied expectation blocks its MachineSet (upstream `ExpectationsTimeout`).
pub const DEFAULT_TTL: SignedDuration = SignedDuration::from_mins(5);

/// Outstanding operations of one MachineSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetExpectations {
    /// Creations issued whose API response has not been processed yet.
    pub in_flight_creations: u32,
    /// Machines whose creation succeeded (name from the API response) but that the cache has not
    /// shown yet.
    pub created: BTreeSet<String>,
    /// Machines deleted that the cache still shows as present and not deleting.
    pub deleting: BTreeSet<String>,
    /// Machines whose watch event arrived before the API response of their creation.
    pub observed_early: BTreeSet<String>,
    /// Created machines settled by a cache snapshot before their watch event was processed (the
    /// event must then not settle another, still unknown, creation).
    pub settled_by_snapshot: BTreeSet<String>,
    /// Last time an operation was recorded; the entry expires `ttl` after it.
    pub recorded_at: Timestamp,
}

impl SetExpectations {
    fn new(now: Timestamp) -> Self {
        Self {
            in_flight_creations: 0,
            created: BTreeSet::new(),
            deleting: BTreeSet::new(),
            observed_early: BTreeSet::new(),
            settled_by_snapshot: BTreeSet::new(),
            recorded_at: now,
        }
    }

    /// True when nothing is outstanding.
    #[must_use]
    pub fn is_settled(&self) -> bool {
        self.in_flight_creations == 0 && self.created.is_empty() && self.deleting.is_empty()
    }
}

/// The answer to "may the planner act on this MachineSet's cache?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Nothing outstanding (or no entry): act.
    Satisfied,
    /// Outstanding operations older than the TTL: act anyway (upstream behaviour on a lost event).
    Expired,
    /// Outstanding operations: do not create or delete; look again at the latest after `retry_in`.
    Pending {
        /// Time until the entry expires.
        retry_in: SignedDuration,
    },
}

impl Readiness {
    /// Whether replicas may be managed now.
    #[must_use]
    pub fn may_act(self) -> bool {
        !matches!(self, Self::Pending { .. })
    }
}

/// Expectations of every MachineSet, keyed by `namespace/name`.
#[derive(Debug, Clone)]
pub struct Expectations {
    ttl: SignedDuration,
    by_set: BTreeMap<String, SetExpectations>,
}

impl Default for Expectations {
    fn default() -> Self {
        Self::new(DEFAULT_TTL)
    }
}

impl Expectations {
    /// Empty expectations with the given time-to-live.
    #[must_use]
    pub fn new(ttl: SignedDuration) -> Self {
        Self {
            ttl,
            by_set: BTreeMap::new(),
        }
    }

    /// The entry of one MachineSet, if any.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&SetExpectations> {
        self.by_set.get(key)
    }

    fn entry(&mut self, key: &str, now: Timestamp) -> &mut SetExpectations {
        // An expired entry is forgotten before new operations are recorded: its lost events
        // must not keep the set blocked again.
        if self.readiness(key, now) == Readiness::Expired {
            self.by_set.remove(key);
        }
        self.by_set
            .entry(key.to_owned())
            .or_insert_with(|| SetExpectations::new(now))
    }

    /// Records `count` creations about to be issued (call before the first create request).
    pub fn expect_creations(&mut self, key: &str, count: u32, now: Timestamp) {
        let e = self.entry(key, now);
        e.in_flight_creations = e.in_flight_creations.saturating_add(count);
        e.recorded_at = now;
    }

    /// A create request succeeded and the API server named the machine `name`.
    pub fn creation_succeeded(&mut self, key: &str, name: &str, now: Timestamp) {
        let e = self.entry(key, now);
        if e.observed_early.remove(name) {
            // Its watch event already settled the in-flight creation.
            return;
        }
        e.in_flight_creations = e.in_flight_creations.saturating_sub(1);
        e.created.insert(name.to_owned());
    }

    /// A create request failed for sure, or was skipped (slow start stopped): nothing will appear.
    pub fn creation_skipped(&mut self, key: &str, count: u32) {
        if let Some(e) = self.by_set.get_mut(key) {
            e.in_flight_creations = e.in_flight_creations.saturating_sub(count);
        }
    }

    /// A create request timed out: the machine may or may not exist. The creation stays in flight
    /// until an unknown machine of this set is observed or the entry expires.
    pub fn creation_outcome_unknown(&mut self, _key: &str) {}

    /// Records deletions about to be issued.
    pub fn expect_deletions<'a>(
        &mut self,
        key: &str,
        names: impl IntoIterator<Item = &'a str>,
        now: Timestamp,
    ) {
        let e = self.entry(key, now);
        e.deleting.extend(names.into_iter().map(str::to_owned));
        e.recorded_at = now;
    }

    /// A delete request failed: the machine stays, do not wait for it.
    pub fn deletion_failed(&mut self, key: &str, name: &str) {
        if let Some(e) = self.by_set.get_mut(key) {
            e.deleting.remove(name);
        }
    }

    /// Watch event: a machine controlled by this set was added.
    pub fn observe_added(&mut self, key: &str, name: &str) {
        if let Some(e) = self.by_set.get_mut(key)
            && !e.created.remove(name)
            && !e.settled_by_snapshot.remove(name)
            && e.in_flight_creations > 0
        {
            // Response not processed yet (or timed out): the event settles an in-flight creation.
            e.in_flight_creations -= 1;
            e.observed_early.insert(name.to_owned());
        }
    }

    /// Watch event: a machine controlled by this set was deleted or got a deletion timestamp.
    pub fn observe_deleted(&mut self, key: &str, name: &str) {
        if let Some(e) = self.by_set.get_mut(key) {
            e.deleting.remove(name);
        }
    }

    /// Settles the entry against the current cache content of the set's machines: created names
    /// present in the cache and deleted names absent or deleting are done.
    pub fn observe_snapshot<M: std::borrow::Borrow<Machine>>(&mut self, key: &str, machines: &[M]) {
        let Some(e) = self.by_set.get_mut(key) else {
            return;
        };
        let present: BTreeMap<&str, bool> = machines
            .iter()
            .map(std::borrow::Borrow::borrow)
            .filter_map(|m: &Machine| {
                Some((
                    m.metadata.name.as_deref()?,
                    m.metadata.deletion_timestamp.is_some(),
                ))
            })
            .collect();
        let (seen, missing): (BTreeSet<String>, BTreeSet<String>) = std::mem::take(&mut e.created)
            .into_iter()
            .partition(|n| present.contains_key(n.as_str()));
        e.created = missing;
        e.settled_by_snapshot.extend(seen);
        e.deleting
            .retain(|n| present.get(n.as_str()).is_some_and(|deleting| !deleting));
    }

    /// Whether the planner may act for `key` at `now`.
    #[must_use]
    pub fn readiness(&self, key: &str, now: Timestamp) -> Readiness {
        match self.by_set.get(key) {
            None => Readiness::Satisfied,
            Some(e) if e.is_settled() => Readiness::Satisfied,
            Some(e) => {
                let age = now.duration_since(e.recorded_at);
                if age >= self.ttl {
                    Readiness::Expired
                } else {
                    Readiness::Pending {
                        retry_in: self.ttl - age,
                    }
                }
            }
        }
    }

    /// Drops the entry (MachineSet gone, or expired and about to act again).
    pub fn forget(&mut self, key: &str) {
        self.by_set.remove(key);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn machine(name: &str, deleting: bool) -> Machine {
        let mut m = Machine::default();
        m.metadata.name = Some(name.into());
        if deleting {
            m.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(0)));
        }
        m
    }

    #[test]
    fn creations_block_until_observed_in_any_order() {
        let mut e = Expectations::default();
        assert_eq!(e.readiness("ns/a", t(0)), Readiness::Satisfied);
        e.expect_creations("ns/a", 3, t(0));
        assert!(!e.readiness("ns/a", t(1)).may_act());
        // Event before response for m1, response before event for m2, m3 failed.
        e.observe_added("ns/a", "m1");
        e.creation_succeeded("ns/a", "m1", t(1));
        e.creation_succeeded("ns/a", "m2", t(1));
        e.creation_skipped("ns/a", 1);
        assert!(!e.readiness("ns/a", t(2)).may_act());
        // m1 was settled by its event; m2 is still missing from the cache.
        e.observe_snapshot("ns/a", &[machine("m1", false)]);
        assert!(!e.readiness("ns/a", t(2)).may_act());
        e.observe_added("ns/a", "m2");
        assert_eq!(e.readiness("ns/a", t(2)), Readiness::Satisfied);
    }

    #[test]
    fn deletions_settle_when_gone_or_deleting() {
        let mut e = Expectations::default();
        e.expect_deletions("k", ["a", "b", "c"], t(0));
        e.deletion_failed("k", "c");
        e.observe_snapshot("k", &[machine("a", false), machine("b", true)]);
        assert_eq!(
            e.get("k").unwrap().deleting,
            BTreeSet::from(["a".to_owned()])
        );
        e.observe_snapshot::<Machine>("k", &[]);
        assert_eq!(e.readiness("k", t(1)), Readiness::Satisfied);
    }

    #[test]
    fn pending_entries_expire_after_ttl() {
        let mut e = Expectations::new(SignedDuration::from_secs(300));
        e.expect_creations("k", 1, t(0));
        e.creation_outcome_unknown("k");
        assert_eq!(
            e.readiness("k", t(100)),
            Readiness::Pending {
                retry_in: SignedDuration::from_secs(200)
            }
        );
        assert_eq!(e.readiness("k", t(300)), Readiness::Expired);
        assert!(e.readiness("k", t(300)).may_act());
        // New operations after expiry start a fresh entry.
        e.expect_creations("k", 2, t(301));
        assert_eq!(e.get("k").unwrap().in_flight_creations, 2);
        e.forget("k");
        assert_eq!(e.readiness("k", t(300)), Readiness::Satisfied);
    }

    #[test]
    fn unrelated_events_do_not_go_negative() {
        let mut e = Expectations::default();
        e.observe_added("k", "x");
        e.observe_deleted("k", "x");
        e.creation_skipped("k", 5);
        assert_eq!(e.readiness("k", t(0)), Readiness::Satisfied);
        e.expect_creations("k", 1, t(0));
        e.observe_added("k", "x");
        e.observe_added("k", "y");
        assert_eq!(e.get("k").unwrap().in_flight_creations, 0);
    }

    #[test]
    fn event_after_snapshot_does_not_settle_an_unknown_creation() {
        let mut e = Expectations::default();
        e.expect_creations("k", 2, t(0));
        e.creation_succeeded("k", "m1", t(1));
        // The second create timed out: it may exist, unseen.
        e.creation_outcome_unknown("k");
        e.observe_snapshot("k", &[machine("m1", false)]);
        // m1's watch event is processed after the snapshot settled it.
        e.observe_added("k", "m1");
        assert!(
            !e.readiness("k", t(2)).may_act(),
            "the unknown creation is still outstanding"
        );
        e.observe_added("k", "m2");
        assert_eq!(e.readiness("k", t(2)), Readiness::Satisfied);
    }

    proptest! {
        /// Whatever the interleaving of responses and events, the entry is satisfied exactly when
        /// every issued creation has been observed.
        #[test]
        fn satisfied_iff_all_observed(n in 1u32..20, order in proptest::collection::vec(any::<bool>(), 20)) {
            let mut e = Expectations::default();
            e.expect_creations("k", n, t(0));
            for i in 0..n {
                let name = format!("m{i}");
                if order[i as usize] {
                    e.observe_added("k", &name);
                    e.creation_succeeded("k", &name, t(1));
                } else {
                    e.creation_succeeded("k", &name, t(1));
                }
                if i + 1 < n {
                    prop_assert!(!e.readiness("k", t(2)).may_act());
                }
            }
            let all: Vec<Machine> = (0..n).map(|i| machine(&format!("m{i}"), false)).collect();
            e.observe_snapshot("k", &all);
            prop_assert_eq!(e.readiness("k", t(2)), Readiness::Satisfied);
        }
    }
}
