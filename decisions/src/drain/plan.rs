//! Pure drain decisions (docs/behaviour.md#drain): the drain configuration of a deleting machine (force rules,
//! timeouts, retry budget), which pods to evict, and, pass by pass, the next evictions/deletions
//! plus the time the next decision is due.
//!
//! Upstream drains in one long blocking call. Here the drain is a sequence of short passes: the
//! shell lists the node's pods, calls [`plan_drain`] with the [`DrainLedger`] it keeps between
//! passes, executes the returned [`DrainAction`]s, records their results with
//! [`DrainLedger::record`], and comes back at [`DrainOutcome::InProgress::next_check_at`] (never
//! later than the drain deadline, so the deadline is honoured within one pass).

mod config;
mod planner;
mod pods;
mod timing;

pub use config::{
    DrainConfig, deletion_drain_config, in_place_drain_config, preserved_drain_config,
};
pub use planner::{DrainAction, DrainInput, DrainOutcome, DrainPlan, plan_drain};
pub use planner::{
    DrainLedger, EvictionFailure, EvictionResult, PodProgress, VolumeEvent, misconfigured_refusals,
    volume_progress,
};
pub use pods::{
    MIRROR_POD_ANNOTATION, PodDisposition, claim_volume_names, classify_pod,
    exclude_shared_volumes, pod_key, pod_volume_ids, pvc_claims,
};
pub use timing::{
    DEFAULT_GRACE_SECONDS, EVICTION_RETRY_INTERVAL, FORCE_DRAIN_TIMEOUT, POLL_INTERVAL,
    TERMINATION_SLACK, UNHEALTHY_NODE_FORCE_AFTER,
};

#[cfg(test)]
mod tests;
