//! The drain configurations: how a deleting ([`deletion_drain_config`]), preserved
//! ([`preserved_drain_config`]) or in-place updated ([`in_place_drain_config`]) machine's node is
//! drained ([`DrainConfig`]).

use jiff::Timestamp;
use mcm_api::duration::Duration;
use mcm_api::keys::label;
use mcm_api::v1alpha1::Machine;

use super::timing::{EVICTION_RETRY_INTERVAL, FORCE_DRAIN_TIMEOUT, UNHEALTHY_NODE_FORCE_AFTER};
use crate::vocabulary::{EffectiveSettings, add, parse_go_bool};

/// How the drain of a machine's node runs.
#[derive(Clone, Debug, PartialEq)]
pub struct DrainConfig {
    /// Drain timeout (1 minute in force mode).
    pub timeout: Duration,
    /// Evictions per pod before falling back to deletion (`min(maxEvictRetries, timeout/20s)`, 1
    /// when forced by label or timeout).
    pub max_evict_retries: u32,
    /// Delete pods with grace period 0 instead of evicting them.
    pub force_delete_pods: bool,
    /// Continue with VM deletion even if the drain fails.
    pub force_delete_machine: bool,
    /// Deadline of the normal drain: deletion time + drain timeout; afterwards the drain is forced.
    pub deadline: Timestamp,
    /// PV detach wait per pod beyond its grace period (`--machine-pv-detach-timeout`).
    pub pv_detach_timeout: Duration,
    /// Warnings (unparsable `force-deletion` label).
    pub warnings: Vec<String>,
}

fn condition_bad_for(machine: &Machine, type_: &str, good: &str, now: Timestamp) -> bool {
    machine
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|condition| condition.type_ == type_))
        .is_some_and(|condition| {
            condition.status != good
                && condition
                    .last_transition_time
                    .as_ref()
                    .is_some_and(|since| now.duration_since(since.0) > UNHEALTHY_NODE_FORCE_AFTER)
        })
}

/// The drain configuration of a machine being deleted (`drainNode` preamble of docs/behaviour.md#deletion-flow).
#[must_use]
pub fn deletion_drain_config(
    machine: &Machine,
    settings: &EffectiveSettings,
    pv_detach_timeout: Duration,
    now: Timestamp,
) -> DrainConfig {
    let mut warnings = Vec::new();
    let force_label = match machine
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(label::FORCE_DELETION))
    {
        None => false,
        Some(text) => parse_go_bool(text).unwrap_or_else(|| {
            warnings.push(format!(
                "machine {:?}: label {}={text:?} is not a boolean, treated as false",
                machine.metadata.name.as_deref().unwrap_or(""),
                label::FORCE_DELETION
            ));
            false
        }),
    };
    let mut timeout = settings.drain_timeout;
    let per_attempt = EVICTION_RETRY_INTERVAL.as_secs();
    let cap = u32::try_from(timeout.as_secs() / per_attempt).unwrap_or(u32::MAX);
    let mut max_evict_retries = u32::try_from(settings.max_evict_retries.max(0))
        .unwrap_or(0)
        .min(cap);
    let unhealthy_node = condition_bad_for(machine, "Ready", "True", now)
        || condition_bad_for(machine, "ReadonlyFilesystem", "False", now);
    let mut force_delete_pods = unhealthy_node;
    let mut force_delete_machine = unhealthy_node;
    let deleted_at = machine
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or(now, |at| at.0);
    let deadline = add(deleted_at, settings.drain_timeout);
    if force_label || now > deadline {
        force_delete_pods = true;
        force_delete_machine = true;
        timeout = FORCE_DRAIN_TIMEOUT;
        max_evict_retries = 1;
    }
    DrainConfig {
        timeout,
        max_evict_retries,
        force_delete_pods,
        force_delete_machine,
        deadline,
        pv_detach_timeout,
        warnings,
    }
}

/// The drain configuration of a preserved Failed machine (`drainPreservedNode`, docs/behaviour.md#preservation): forced by
/// label `force-drain=True` or when `currentStatus.lastUpdateTime` is older than the drain timeout;
/// an unhealthy node (NotReady/ReadonlyFilesystem > 5 min) only forces pod deletion.
#[must_use]
pub fn preserved_drain_config(
    machine: &Machine,
    settings: &EffectiveSettings,
    pv_detach_timeout: Duration,
    now: Timestamp,
) -> DrainConfig {
    let force_label = machine
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(label::FORCE_DRAIN))
        .is_some_and(|text| text == mcm_api::keys::value::TRUE_CAPITALISED);
    let since = machine
        .status
        .as_ref()
        .and_then(|status| status.current_status.as_ref())
        .and_then(|current| current.last_update_time.as_ref())
        .map_or(now, |at| at.0);
    let deadline = add(since, settings.drain_timeout);
    let per_attempt = EVICTION_RETRY_INTERVAL.as_secs();
    let cap = u32::try_from(settings.drain_timeout.as_secs() / per_attempt).unwrap_or(u32::MAX);
    let unhealthy_node = condition_bad_for(machine, "Ready", "True", now)
        || condition_bad_for(machine, "ReadonlyFilesystem", "False", now);
    let forced = force_label || now > deadline;
    DrainConfig {
        timeout: if forced {
            FORCE_DRAIN_TIMEOUT
        } else {
            settings.drain_timeout
        },
        max_evict_retries: if forced {
            1
        } else {
            u32::try_from(settings.max_evict_retries.max(0))
                .unwrap_or(0)
                .min(cap)
        },
        force_delete_pods: forced || unhealthy_node,
        force_delete_machine: false,
        deadline,
        pv_detach_timeout,
        warnings: Vec::new(),
    }
}

/// The drain configuration of an in-place update (`drainNodeForInPlace`, docs/behaviour.md#in-place-machine): forced by label
/// `force-drain=True` or when the node was selected (`selected_since`, the condition's
/// lastTransitionTime) longer than the drain timeout ago; an unhealthy node only forces pod
/// deletion.
#[must_use]
pub fn in_place_drain_config(
    machine: &Machine,
    settings: &EffectiveSettings,
    selected_since: Timestamp,
    pv_detach_timeout: Duration,
    now: Timestamp,
) -> DrainConfig {
    let force_label = machine
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(label::FORCE_DRAIN))
        .is_some_and(|text| text == mcm_api::keys::value::TRUE_CAPITALISED);
    let deadline = add(selected_since, settings.drain_timeout);
    let per_attempt = EVICTION_RETRY_INTERVAL.as_secs();
    let cap = u32::try_from(settings.drain_timeout.as_secs() / per_attempt).unwrap_or(u32::MAX);
    let unhealthy_node = condition_bad_for(machine, "Ready", "True", now)
        || condition_bad_for(machine, "ReadonlyFilesystem", "False", now);
    let forced = force_label || now > deadline;
    DrainConfig {
        timeout: if forced {
            FORCE_DRAIN_TIMEOUT
        } else {
            settings.drain_timeout
        },
        max_evict_retries: if forced {
            1
        } else {
            u32::try_from(settings.max_evict_retries.max(0))
                .unwrap_or(0)
                .min(cap)
        },
        force_delete_pods: forced || unhealthy_node,
        force_delete_machine: false,
        deadline: if forced {
            add(now, FORCE_DRAIN_TIMEOUT)
        } else {
            deadline
        },
        pv_detach_timeout,
        warnings: Vec::new(),
    }
}
