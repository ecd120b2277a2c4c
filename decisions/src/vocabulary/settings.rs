//! The controller-wide settings (flags) the plans need, and their per-machine resolution.

use mcm_api::duration::Duration;
use mcm_api::keys::annotation;
use mcm_api::v1alpha1::Machine;

use super::flag_defaults::{self as defaults, duration};
use super::machine_fields::{machine_annotation, name_of};

/// Controller-wide settings (flags of docs/behaviour.md#flags-mc) the plans need, built by the
/// controller's flag validation; the defaults are [`super::flag_defaults`]'.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerSettings {
    /// `--machine-creation-timeout`.
    pub creation_timeout: Duration,
    /// `--machine-health-timeout`.
    pub health_timeout: Duration,
    /// `--machine-drain-timeout`.
    pub drain_timeout: Duration,
    /// `--machine-inplace-update-timeout`.
    pub in_place_update_timeout: Duration,
    /// `--machine-preserve-timeout`.
    pub preserve_timeout: Duration,
    /// `--machine-max-evict-retries`.
    pub max_evict_retries: i32,
    /// `--node-conditions`.
    pub node_conditions: String,
    /// `--machine-pv-detach-timeout`.
    pub pv_detach_timeout: Duration,
    /// `--machine-pv-reattach-timeout`.
    pub pv_reattach_timeout: Duration,
    /// `--resource-exhausted-retry` as given; what 0 means is the creation plan's rule
    /// (`machine::creation::resource_exhausted_retry`).
    pub resource_exhausted_retry: Duration,
    /// `--machine-retry-backoff-{initial,factor,max}`: backoff of failing
    /// CreateMachine, InitializeMachine and DeleteMachine calls.
    pub retry_backoff: BackoffSettings,
    /// `--machine-meltdown-threshold` (0 = off): share of a deployment's (or zone's) machines
    /// Unknown/Failed above which unhealthy machines are not replaced.
    pub meltdown_threshold: f64,
    /// `--bootstrap-token-auth-extra-groups`.
    pub bootstrap_token_auth_extra_groups: String,
    /// False with `--target-kubeconfig=none`.
    pub target_cluster: bool,
}

impl Default for ControllerSettings {
    /// The flags' defaults, with a target cluster.
    fn default() -> Self {
        Self {
            creation_timeout: duration(defaults::CREATION_TIMEOUT),
            health_timeout: duration(defaults::HEALTH_TIMEOUT),
            drain_timeout: duration(defaults::DRAIN_TIMEOUT),
            in_place_update_timeout: duration(defaults::IN_PLACE_UPDATE_TIMEOUT),
            preserve_timeout: duration(defaults::PRESERVE_TIMEOUT),
            max_evict_retries: defaults::MAX_EVICT_RETRIES,
            node_conditions: defaults::NODE_CONDITIONS.to_owned(),
            pv_detach_timeout: duration(defaults::PV_DETACH_TIMEOUT),
            pv_reattach_timeout: duration(defaults::PV_REATTACH_TIMEOUT),
            resource_exhausted_retry: duration(defaults::RESOURCE_EXHAUSTED_RETRY),
            retry_backoff: BackoffSettings::default(),
            meltdown_threshold: defaults::MELTDOWN_THRESHOLD,
            bootstrap_token_auth_extra_groups: defaults::BOOTSTRAP_TOKEN_AUTH_EXTRA_GROUPS
                .to_owned(),
            target_cluster: true,
        }
    }
}

/// Per-machine settings after resolution (docs/behaviour.md#effective-settings).
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveSettings {
    /// Creation timeout: machine annotation, then `spec.creationTimeout`, then the flag.
    pub creation_timeout: Duration,
    /// Health timeout.
    pub health_timeout: Duration,
    /// Drain timeout.
    pub drain_timeout: Duration,
    /// In-place update timeout.
    pub in_place_update_timeout: Duration,
    /// Preserve timeout.
    pub preserve_timeout: Duration,
    /// Max evict retries before capping to `drainTimeout / 20s`.
    pub max_evict_retries: i32,
    /// Node condition types that must be `False` for a healthy node (split on `,`, no trimming).
    pub node_conditions: Vec<String>,
    /// `spec.disableHealthTimeout`.
    pub disable_health_timeout: bool,
    /// Problems found while resolving (an unparsable annotation); the shell logs them.
    pub warnings: Vec<String>,
}

/// Resolves the effective settings of one machine: machine spec fields override the flags; the
/// `effective-creation-timeout` annotation overrides both for the creation timeout (an unparsable
/// value is ignored with a warning).
#[must_use]
pub fn effective_settings(machine: &Machine, settings: &ControllerSettings) -> EffectiveSettings {
    let config = &machine.spec.configuration;
    let mut warnings = Vec::new();
    let annotated_creation_timeout =
        machine_annotation(machine, annotation::EFFECTIVE_CREATION_TIMEOUT).and_then(|text| {
            match text.parse::<Duration>() {
                Ok(duration) => Some(duration),
                Err(error) => {
                    warnings.push(format!(
                        "machine {:?}: ignoring annotation {}: {error}",
                        name_of(machine),
                        annotation::EFFECTIVE_CREATION_TIMEOUT
                    ));
                    None
                }
            }
        });
    let node_conditions = config
        .node_conditions
        .clone()
        .unwrap_or_else(|| settings.node_conditions.clone());
    EffectiveSettings {
        creation_timeout: annotated_creation_timeout
            .or(config.creation_timeout)
            .unwrap_or(settings.creation_timeout),
        health_timeout: config.health_timeout.unwrap_or(settings.health_timeout),
        drain_timeout: config.drain_timeout.unwrap_or(settings.drain_timeout),
        in_place_update_timeout: config
            .in_place_update_timeout
            .unwrap_or(settings.in_place_update_timeout),
        preserve_timeout: config
            .machine_preserve_timeout
            .unwrap_or(settings.preserve_timeout),
        max_evict_retries: config
            .max_evict_retries
            .unwrap_or(settings.max_evict_retries),
        node_conditions: node_conditions.split(',').map(str::to_owned).collect(),
        disable_health_timeout: config.disable_health_timeout.unwrap_or(false),
        warnings,
    }
}

/// The backoff flags (`--machine-retry-backoff-initial`, `-factor`, `-max`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffSettings {
    /// Delay after the first failure of a call that upstream retries after ShortRetry.
    pub initial: Duration,
    /// Growth per consecutive failure (≥ 1; 1 gives upstream's constant retry).
    pub factor: f64,
    /// Upper bound of the delay. Errors that upstream retries after MediumRetry are never retried
    /// sooner than that, whatever this bound says.
    pub max: Duration,
}

impl Default for BackoffSettings {
    /// The flags' defaults ([`super::flag_defaults`]).
    fn default() -> Self {
        Self {
            initial: duration(defaults::RETRY_BACKOFF_INITIAL),
            factor: defaults::RETRY_BACKOFF_FACTOR,
            max: duration(defaults::RETRY_BACKOFF_MAX),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use mcm_api::v1alpha1::MachineSpec;
    use std::collections::BTreeMap;

    #[test]
    fn effective_settings_prefer_annotation_then_spec_then_flag() {
        let mut machine = Machine::new("m", MachineSpec::default());
        let flags = ControllerSettings::default();
        let resolved = effective_settings(&machine, &flags);
        assert_eq!(resolved.creation_timeout, Duration::from_mins(20));
        assert_eq!(resolved.node_conditions.len(), 4);
        assert!(!resolved.disable_health_timeout);

        machine.spec.configuration.creation_timeout = Some(Duration::from_mins(5));
        machine.spec.configuration.health_timeout = Some(Duration::from_mins(3));
        machine.spec.configuration.node_conditions = Some("A, B".into());
        machine.spec.configuration.disable_health_timeout = Some(true);
        let resolved = effective_settings(&machine, &flags);
        assert_eq!(resolved.creation_timeout, Duration::from_mins(5));
        assert_eq!(resolved.health_timeout, Duration::from_mins(3));
        // No trimming, case sensitive (as upstream).
        assert_eq!(
            resolved.node_conditions,
            vec!["A".to_owned(), " B".to_owned()]
        );
        assert!(resolved.disable_health_timeout);

        machine.metadata = ObjectMeta {
            name: Some("m".into()),
            annotations: Some(BTreeMap::from([(
                annotation::EFFECTIVE_CREATION_TIMEOUT.to_owned(),
                "7m".to_owned(),
            )])),
            ..ObjectMeta::default()
        };
        assert_eq!(
            effective_settings(&machine, &flags).creation_timeout,
            Duration::from_mins(7)
        );

        machine.metadata.annotations.as_mut().unwrap().insert(
            annotation::EFFECTIVE_CREATION_TIMEOUT.into(),
            "seven".into(),
        );
        let resolved = effective_settings(&machine, &flags);
        assert_eq!(resolved.creation_timeout, Duration::from_mins(5));
        assert_eq!(resolved.warnings.len(), 1);
    }
}
