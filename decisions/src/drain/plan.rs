//! Pure drain decisions (docs/behaviour.md#drain): the drain configuration of a deleting machine (force rules,
//! timeouts, retry budget), which pods to evict, and, pass by pass, the next evictions/deletions
//! plus the time the next decision is due.
//!
//! Upstream drains in one long blocking call. Here the drain is a sequence of short passes: the
//! shell lists the node's pods, calls [`plan_drain`] with the [`DrainLedger`] it keeps between
//! passes, executes the returned [`DrainAction`]s, records their results with
//! [`DrainLedger::record`], and comes back at [`DrainOutcome::InProgress::next_check_at`] (never
//! later than the drain deadline, so the deadline is honoured within one pass).

use jiff::SignedDuration;
use mcm_api::duration::Duration;

mod config;
mod ledger;
mod planner;
mod pods;

pub use config::{
    DrainConfig, deletion_drain_config, in_place_drain_config, preserved_drain_config,
};
pub use ledger::{
    DrainLedger, EvictionFailure, EvictionResult, PodProgress, VolumeEvent, misconfigured_refusals,
    volume_progress,
};
pub use planner::{DrainAction, DrainInput, DrainOutcome, DrainPlan, plan_drain};
pub use pods::{
    PodDisposition, claim_volume_names, classify_pod, exclude_shared_volumes, pod_key,
    pod_volume_ids, pvc_claims,
};

/// Annotation of mirror (static) pods; they cannot be evicted.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Wait between eviction attempts of one pod (upstream `PodEvictionRetryInterval`).
pub const EVICTION_RETRY_INTERVAL: SignedDuration = SignedDuration::from_secs(20);
/// Poll interval while waiting for pods to go or volumes to detach.
pub const POLL_INTERVAL: SignedDuration = SignedDuration::from_secs(5);
/// How long `Ready`≠True or `ReadonlyFilesystem`≠False must last before pods are force-deleted.
pub const UNHEALTHY_NODE_FORCE_AFTER: SignedDuration = SignedDuration::from_mins(5);
/// Drain timeout in force mode.
pub const FORCE_DRAIN_TIMEOUT: Duration = Duration::from_mins(1);
/// Extra time given to an evicted pod beyond its termination grace period.
pub const TERMINATION_SLACK: SignedDuration = SignedDuration::from_secs(30);
/// Upstream's default termination grace period when a pod does not set one.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

#[cfg(test)]
mod tests;
