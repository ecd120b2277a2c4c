//! `mcm_cache_stale_since_seconds{kind}` (ours, both ports): since when each informer's cache has
//! not caught up after its watch broke (docs/behaviour.md#stale-caches).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::registration::{FloatGauge, register};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

/// The cache-staleness family (one family shared by both registries).
pub(super) struct CacheFamily {
    family: Family<KindLabels, FloatGauge>,
}

impl CacheFamily {
    /// Registers the family on the manager's registry `r` and the machine registry `m`.
    pub(super) fn register(r: &mut Registry, m: &mut Registry) -> Self {
        let help = "Unix time since which the cache of this kind has not caught up with the API server after its watch broke; 0 while it follows the API server. Controllers reading a stale cache do not act.";
        let family = register(r, "mcm_cache_stale_since_seconds", help, Family::default());
        m.register("mcm_cache_stale_since_seconds", help, family.clone());
        Self { family }
    }

    /// See `Metrics::set_cache_stale_since`.
    pub(super) fn set(&self, kind: &str, stale_since: Option<jiff::Timestamp>) {
        let value = stale_since.map_or(0.0, |since| since.as_millisecond() as f64 / 1000.0);
        self.family
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .set(value);
    }
}
