//! What goes wrong in one run of a safety controller ([`SafetyError`]); the runner
//! (`safety::reconcile`) logs it and retries.

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
