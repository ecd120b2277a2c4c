//! "May this controller act now?": the answer from the freshness of the caches it reads
//! (docs/behaviour.md#stale-caches, "After a watch break").
//!
//! A cache whose watch broke (an API outage, a closed watch that could not be re-established)
//! keeps its last content, which may miss anything written meanwhile: Machines created just
//! before the break, Nodes Ready again. A controller acting on it creates machines that exist
//! already, or marks healthy machines Unknown. So a controller acts only while every cache it
//! reads has caught up since its last break (its watch was re-established with a fresh list);
//! otherwise it waits, whatever its leadership term. The informers report the freshness; the
//! work queues ask [`may_act`] before each pass.

use std::time::Duration;

use jiff::Timestamp;

/// One cache a controller reads, as its informer reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheView<'a> {
    /// The kind cached (for logs): `machines`, `nodes`, ...
    pub kind: &'a str,
    /// Whether the first list has been applied.
    pub synced: bool,
    /// Since when the cache has not caught up with the API server (its watch broke and no list
    /// has completed since); `None` while it follows the API server.
    pub stale_since: Option<Timestamp>,
}

/// The answer of [`may_act`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acting<'a> {
    /// Every cache is caught up: act.
    Act,
    /// Wait until this cache has caught up: it was never synced (`since` is `None`) or has been
    /// stale since `since` (the oldest break among the caches).
    Wait {
        /// The cache waited for.
        kind: &'a str,
        /// When it went stale.
        since: Option<Timestamp>,
    },
}

impl Acting<'_> {
    /// Whether the controller may act.
    #[must_use]
    pub fn may_act(&self) -> bool {
        matches!(self, Self::Act)
    }
}

/// Whether a controller reading `caches` may create, delete or change anything now: only when
/// every one of them is synced and caught up since its last watch break. A never-synced cache is
/// waited for first, then the one stale for longest.
#[must_use]
pub fn may_act<'a>(caches: &[CacheView<'a>]) -> Acting<'a> {
    if let Some(cache) = caches.iter().find(|cache| !cache.synced) {
        return Acting::Wait {
            kind: cache.kind,
            since: None,
        };
    }
    caches
        .iter()
        .filter_map(|cache| cache.stale_since.map(|since| (since, cache.kind)))
        .min()
        .map_or(Acting::Act, |(since, kind)| Acting::Wait {
            kind,
            since: Some(since),
        })
}

/// First pause before a broken watch is tried again.
pub const REWATCH_FIRST: Duration = Duration::from_millis(100);

/// Longest pause between two attempts to re-establish a broken watch: the caches catch up
/// within about this long after the API server answers again (kube-runtime's default backoff
/// grows to 30 s, which kept caches stale for tens of seconds after an outage).
pub const REWATCH_CAP: Duration = Duration::from_secs(1);

/// The pause before the next attempt to re-establish a watch after `failures` consecutive failed
/// attempts (0: the first retry): [`REWATCH_FIRST`] doubling up to [`REWATCH_CAP`].
#[must_use]
pub fn rewatch_pause(failures: u32) -> Duration {
    let factor = 1u32.checked_shl(failures.min(16)).unwrap_or(u32::MAX);
    REWATCH_FIRST.saturating_mul(factor).min(REWATCH_CAP)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn view(kind: &str, synced: bool, stale: Option<i64>) -> CacheView<'_> {
        CacheView {
            kind,
            synced,
            stale_since: stale.map(at),
        }
    }

    #[test]
    fn caught_up_caches_allow_acting() {
        assert_eq!(may_act(&[]), Acting::Act);
        assert!(may_act(&[view("machines", true, None), view("nodes", true, None)]).may_act());
    }

    #[test]
    fn one_stale_cache_forbids_acting_whatever_the_others() {
        let acting = may_act(&[
            view("machines", true, None),
            view("nodes", true, Some(5)),
            view("machinesets", true, None),
        ]);
        assert_eq!(
            acting,
            Acting::Wait {
                kind: "nodes",
                since: Some(at(5))
            }
        );
        assert!(!acting.may_act());
    }

    #[test]
    fn the_oldest_break_is_named_and_unsynced_caches_come_first() {
        assert_eq!(
            may_act(&[
                view("nodes", true, Some(9)),
                view("machines", true, Some(3))
            ]),
            Acting::Wait {
                kind: "machines",
                since: Some(at(3))
            }
        );
        assert_eq!(
            may_act(&[view("nodes", true, Some(9)), view("machines", false, None)]),
            Acting::Wait {
                kind: "machines",
                since: None
            }
        );
    }

    #[test]
    fn rewatch_pauses_double_up_to_a_second() {
        let pauses: Vec<u128> = (0..7).map(|n| rewatch_pause(n).as_millis()).collect();
        assert_eq!(pauses, vec![100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(rewatch_pause(u32::MAX), REWATCH_CAP);
    }

    proptest::proptest! {
        /// Acting is allowed exactly when every cache is synced and none is stale.
        #[test]
        fn act_iff_all_fresh(states in proptest::collection::vec((proptest::bool::ANY, proptest::option::of(0i64..100)), 0..6)) {
            let kinds: Vec<String> = (0..states.len()).map(|i| format!("k{i}")).collect();
            let views: Vec<CacheView<'_>> = states
                .iter()
                .zip(&kinds)
                .map(|((synced, stale), kind)| view(kind, *synced, *stale))
                .collect();
            let fresh = states.iter().all(|(synced, stale)| *synced && stale.is_none());
            proptest::prop_assert_eq!(may_act(&views).may_act(), fresh);
        }
    }
}
