//! API-server health freeze (docs/behaviour.md#machine-safety): freeze the machine controller when the control or target API
//! server has been unreachable for longer than the status-check timeout; on recovery reset the
//! health timeouts of `Unknown` machines (they could not be observed), unfreeze and re-enqueue
//! every machine.
//!
//! The state is process-local (as upstream) and passed in and out explicitly.

use jiff::Timestamp;
use mcm_api::duration::Duration;
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachinePhase, MachineState};

use crate::vocabulary::flag_defaults;

use crate::vocabulary::{
    StatusWrite, add, current_status, last_operation, phase_of, preserve_expiry_of,
};

/// Description written on `Unknown` machines when the freeze ends.
pub const HEALTH_TIMEOUT_RESET: &str =
    "Machine Health Timeout was reset due to APIServer being unreachable";

/// Delay before every machine is re-enqueued after an unfreeze.
pub const REENQUEUE_AFTER_UNFREEZE: Duration = Duration::from_secs(30);

/// Settings (`--machine-safety-apiserver-statuscheck-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiServerSafetySettings {
    /// How long the API may be down before freezing.
    pub timeout: Duration,
    /// Check period while healthy.
    pub period: Duration,
}

impl Default for ApiServerSafetySettings {
    fn default() -> Self {
        Self {
            timeout: flag_defaults::duration(flag_defaults::APISERVER_STATUSCHECK_TIMEOUT),
            period: flag_defaults::duration(flag_defaults::APISERVER_STATUSCHECK_PERIOD),
        }
    }
}

/// Process-local freeze state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FreezeState {
    /// Non-deleting machines are not reconciled while frozen.
    pub frozen: bool,
    /// When the API was first seen down in the current outage.
    pub down_since: Option<Timestamp>,
}

/// The decision of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiServerDecision {
    /// The state after this check.
    pub state: FreezeState,
    /// Reset the health timeouts of `Unknown` machines ([`health_timeout_reset`]) before
    /// unfreezing; the unfreeze (state above) only takes effect if all those writes succeed.
    pub reset_unknown_machines: bool,
    /// Re-enqueue every machine after this delay.
    pub reenqueue_all_after: Option<Duration>,
    /// Next check.
    pub next_check: Duration,
    /// Event-worthy transition, for logs and metrics (`mcm_machine_controller_frozen`).
    pub transition: Option<&'static str>,
}

/// One API-server check: `control_up`/`target_up` are the results of `GET machines/dummy` and
/// `GET nodes/dummy` (success or NotFound = up).
#[must_use]
pub fn plan_apiserver_check(
    state: FreezeState,
    control_up: bool,
    target_up: bool,
    settings: ApiServerSafetySettings,
    now: Timestamp,
) -> ApiServerDecision {
    let up = control_up && target_up;
    let fast = Duration::from_nanos(settings.timeout.as_nanos() / 5);
    if up {
        if state.frozen {
            return ApiServerDecision {
                state: FreezeState::default(),
                reset_unknown_machines: true,
                reenqueue_all_after: Some(REENQUEUE_AFTER_UNFREEZE),
                next_check: settings.period,
                transition: Some("unfrozen: API servers reachable again"),
            };
        }
        return ApiServerDecision {
            state: FreezeState::default(),
            reset_unknown_machines: false,
            reenqueue_all_after: None,
            next_check: settings.period,
            transition: None,
        };
    }
    let down_since = state.down_since.unwrap_or(now);
    let freeze = !state.frozen && add(down_since, settings.timeout) < now;
    ApiServerDecision {
        state: FreezeState {
            frozen: state.frozen || freeze,
            down_since: Some(down_since),
        },
        reset_unknown_machines: false,
        reenqueue_all_after: None,
        next_check: fast,
        transition: freeze
            .then_some("frozen: API server unreachable beyond the status-check timeout"),
    }
}

/// The status write that resets an `Unknown` machine after a freeze: phase Running, keeping the
/// preservation, so the health timeout starts again from a real observation. `None` for other
/// phases.
#[must_use]
pub fn health_timeout_reset(machine: &Machine, now: Timestamp) -> Option<StatusWrite> {
    (phase_of(machine) == Some(MachinePhase::Unknown)).then(|| {
        StatusWrite::new(
            last_operation(
                HEALTH_TIMEOUT_RESET,
                MachineState::Successful,
                MachineOperationType::HealthCheck,
                now,
            ),
            current_status(
                MachinePhase::Running,
                false,
                now,
                preserve_expiry_of(machine),
            ),
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use proptest::prelude::*;

    #[test]
    fn freezes_after_timeout_and_unfreezes_with_reset() {
        let s = ApiServerSafetySettings::default();
        let d = plan_apiserver_check(FreezeState::default(), true, true, s, at(0));
        assert_eq!(d.next_check, Duration::from_mins(1));
        assert!(!d.state.frozen);

        let d1 = plan_apiserver_check(FreezeState::default(), true, false, s, at(0));
        assert_eq!(
            d1.state,
            FreezeState {
                frozen: false,
                down_since: Some(at(0))
            }
        );
        assert_eq!(d1.next_check, Duration::from_secs(6));
        let d2 = plan_apiserver_check(d1.state, false, true, s, at(30));
        assert!(!d2.state.frozen, "exactly the timeout is not yet beyond it");
        let d3 = plan_apiserver_check(d2.state, false, false, s, at(31));
        assert!(d3.state.frozen);
        assert!(d3.transition.is_some());
        let d4 = plan_apiserver_check(d3.state, false, false, s, at(60));
        assert!(d4.state.frozen && d4.transition.is_none());

        let up = plan_apiserver_check(d4.state, true, true, s, at(90));
        assert_eq!(up.state, FreezeState::default());
        assert!(up.reset_unknown_machines);
        assert_eq!(up.reenqueue_all_after, Some(Duration::from_secs(30)));

        // A blip shorter than the timeout resets the timer.
        let blip = plan_apiserver_check(d1.state, true, true, s, at(10));
        assert_eq!(blip.state.down_since, None);
        assert!(!blip.reset_unknown_machines);
    }

    #[test]
    fn reset_only_touches_unknown_machines() {
        let unknown = machine("m")
            .with_phase(MachinePhase::Unknown, at(0))
            .with_preserve_expiry(Some(at(99)));
        let write = health_timeout_reset(&unknown, at(5)).unwrap();
        assert_eq!(write.current_status.phase, Some(MachinePhase::Running));
        assert_eq!(
            write.current_status.preserve_expiry_time,
            Some(Time(at(99)))
        );
        assert_eq!(
            write.last_operation.description.as_deref(),
            Some(HEALTH_TIMEOUT_RESET)
        );
        assert!(
            health_timeout_reset(&machine("m").with_phase(MachinePhase::Failed, at(0)), at(5))
                .is_none()
        );
    }

    proptest! {
        /// Never frozen unless some check saw the API down for longer than the timeout; always
        /// unfrozen right after an "up" check.
        #[test]
        fn prop_freeze_needs_a_long_outage(checks in proptest::collection::vec((any::<bool>(), 1i64..20), 1..30)) {
            let s = ApiServerSafetySettings::default();
            let mut state = FreezeState::default();
            let mut now = 0i64;
            let mut outage_start: Option<i64> = None;
            for (up, step) in checks {
                now += step;
                let decision = plan_apiserver_check(state, up, true, s, at(now));
                if up {
                    outage_start = None;
                    prop_assert!(!decision.state.frozen);
                } else {
                    let start = *outage_start.get_or_insert(now);
                    if decision.state.frozen {
                        prop_assert!(now - start > 30);
                    }
                }
                state = decision.state;
            }
        }
    }
}
