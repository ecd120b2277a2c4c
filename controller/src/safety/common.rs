//! What the safety shells share: their error type and the period floor. The shells and the
//! runner ([`super::reconcile`]) import it; it imports none of them.

use mcm_api::duration::Duration;

/// Shortest period used, whatever the flags say: a `0s` period must not become a busy loop.
pub const MIN_PERIOD: Duration = Duration::from_millis(100);

/// What went wrong in one safety run (logged; the run is retried).
#[derive(Debug, thiserror::Error)]
pub enum SafetyError {
    /// An API call failed.
    #[error("cannot {action} {kind} {name}: {source}")]
    Api {
        /// What was attempted (`get`, `update status of`, ...).
        action: &'static str,
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A driver call failed.
    #[error("driver {method} for MachineClass {class} failed: {source}")]
    Driver {
        /// The driver method.
        method: &'static str,
        /// The MachineClass of the request.
        class: String,
        /// The driver's error.
        #[source]
        source: mcm_provider_proto::MachineError,
    },
}

impl SafetyError {
    /// Whether this is an optimistic-concurrency conflict (retry soon, nothing is wrong).
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(self, SafetyError::Api { source: kube::Error::Api(status), .. } if status.code == 409)
    }
}

/// A flag duration as a loop period (negative values are refused by flag validation; they and
/// zero become [`MIN_PERIOD`]).
#[must_use]
pub fn period(duration: Duration) -> Duration {
    duration.max(MIN_PERIOD)
}
