//! The settings of the Machine controller's decisions, read from the validated flags: shared by
//! the creation, health and termination shells.

use mcm_decisions::vocabulary::ControllerSettings;

use crate::platform::Platform;

/// The controller settings of the plans from the validated flags.
pub fn controller_settings(platform: &Platform) -> ControllerSettings {
    let machine = &platform.config.machine;
    ControllerSettings {
        creation_timeout: machine.creation_timeout,
        health_timeout: machine.health_timeout,
        drain_timeout: machine.drain_timeout,
        in_place_update_timeout: machine.inplace_update_timeout,
        preserve_timeout: machine.preserve_timeout,
        max_evict_retries: i32::try_from(machine.max_evict_retries).unwrap_or(i32::MAX),
        node_conditions: machine.node_conditions.clone(),
        pv_detach_timeout: machine.pv_detach_timeout,
        pv_reattach_timeout: machine.pv_reattach_timeout,
        resource_exhausted_retry: machine.resource_exhausted_retry,
        retry_backoff: mcm_decisions::machine::backoff::BackoffSettings {
            initial: machine.retry_backoff_initial,
            factor: machine.retry_backoff_factor,
            max: machine.retry_backoff_max,
        },
        meltdown_threshold: machine.meltdown_threshold,
        bootstrap_token_auth_extra_groups: machine.bootstrap_token_auth_extra_groups.clone(),
        target_cluster: platform.target.is_some(),
    }
}
