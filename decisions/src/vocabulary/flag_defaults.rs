//! The defaults of the flags whose settings the plans take (docs/operations-flags.md), each
//! written once: the controller's clap attributes show and parse these values, and the settings'
//! `Default` impls (what the plans' tests start from) are built from the same constants.
//!
//! Durations are kept as the text the flag's help shows (`20m`, not Go's `20m0s`), so the help
//! stays as upstream prints it; [`duration`] turns them into values.

use mcm_api::duration::Duration;

/// `--machine-creation-timeout`.
pub const CREATION_TIMEOUT: &str = "20m";
/// `--machine-health-timeout`.
pub const HEALTH_TIMEOUT: &str = "10m";
/// `--machine-drain-timeout`.
pub const DRAIN_TIMEOUT: &str = "2h";
/// `--machine-inplace-update-timeout`.
pub const IN_PLACE_UPDATE_TIMEOUT: &str = "20m";
/// `--machine-preserve-timeout`.
pub const PRESERVE_TIMEOUT: &str = "96h";
/// `--machine-max-evict-retries`.
pub const MAX_EVICT_RETRIES: i32 = 360;
/// `--machine-pv-detach-timeout`.
pub const PV_DETACH_TIMEOUT: &str = "2m";
/// `--machine-pv-reattach-timeout`.
pub const PV_REATTACH_TIMEOUT: &str = "90s";
/// `--node-conditions` (upstream's list, order kept).
pub const NODE_CONDITIONS: &str =
    "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable";
/// `--bootstrap-token-auth-extra-groups`.
pub const BOOTSTRAP_TOKEN_AUTH_EXTRA_GROUPS: &str = "";
/// `--resource-exhausted-retry`: upstream's long retry.
pub const RESOURCE_EXHAUSTED_RETRY: &str = "10m";
/// `--machine-retry-backoff-initial`: upstream's constant short retry.
pub const RETRY_BACKOFF_INITIAL: &str = "5s";
/// `--machine-retry-backoff-factor`: doubling.
pub const RETRY_BACKOFF_FACTOR: f64 = 2.0;
/// `--machine-retry-backoff-max`: a recovered provider is picked up within a minute.
pub const RETRY_BACKOFF_MAX: &str = "60s";
/// `--machine-meltdown-threshold`: the guard is off.
pub const MELTDOWN_THRESHOLD: f64 = 0.0;
/// `--safety-up`.
pub const SAFETY_UP: i32 = 2;
/// `--safety-down`.
pub const SAFETY_DOWN: i32 = 1;
/// `--machine-safety-apiserver-statuscheck-timeout`.
pub const APISERVER_STATUSCHECK_TIMEOUT: &str = "30s";
/// `--machine-safety-apiserver-statuscheck-period`.
pub const APISERVER_STATUSCHECK_PERIOD: &str = "1m";
/// `--autoscaler-scaledown-annotation-during-rollout`.
pub const AUTOSCALER_SCALEDOWN_ANNOTATION_DURING_ROLLOUT: bool = true;

/// The value of one of the duration defaults above.
///
/// # Panics
///
/// When the text is not a Go duration: a mistake in this file, which every test built on a
/// `Default` settings value reports at once.
#[must_use]
#[allow(clippy::expect_used)]
pub fn duration(default: &'static str) -> Duration {
    default
        .parse()
        .expect("the flag defaults of this module are Go durations")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values themselves are pinned by the controller's flag tests (docs/operations-flags.md).
    #[test]
    fn every_duration_default_is_a_go_duration() {
        for text in [
            CREATION_TIMEOUT,
            HEALTH_TIMEOUT,
            DRAIN_TIMEOUT,
            IN_PLACE_UPDATE_TIMEOUT,
            PRESERVE_TIMEOUT,
            PV_DETACH_TIMEOUT,
            PV_REATTACH_TIMEOUT,
            RESOURCE_EXHAUSTED_RETRY,
            RETRY_BACKOFF_INITIAL,
            RETRY_BACKOFF_MAX,
            APISERVER_STATUSCHECK_TIMEOUT,
            APISERVER_STATUSCHECK_PERIOD,
        ] {
            assert!(text.parse::<Duration>().is_ok(), "{text}");
        }
    }
}
