//! The one error type of the reconcile shells ([`ApiError`]): a failed call to an API server or a
//! driver, with the object it was about, and the retry policy every shell applies to it.

use mcm_decisions::machine::node_sync::NodeSyncError;
use mcm_decisions::vocabulary::{Retry, WriteFailure};

/// A failed call of a reconcile shell, with the object it was about.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A call to the control or target API server failed.
    #[error("{action} {kind} {name:?} failed: {source}")]
    Api {
        /// What was attempted (`update`, `update status of`, `get`, ...).
        action: &'static str,
        /// The object's kind.
        kind: &'static str,
        /// The object's name.
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A read-modify-write kept conflicting.
    #[error("{action} {kind} {name:?}: still conflicting after {attempts} attempts")]
    Conflicts {
        /// What was attempted.
        action: &'static str,
        /// The object's kind.
        kind: &'static str,
        /// The object's name.
        name: String,
        /// How many attempts were made.
        attempts: u32,
    },
    /// The target cluster is needed but not configured.
    #[error("{what} needs a target cluster, but --target-kubeconfig is none")]
    NoTarget {
        /// What needed it.
        what: &'static str,
    },
    /// The node metadata plan refused the node.
    #[error(transparent)]
    NodeSync(#[from] NodeSyncError),
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

impl ApiError {
    /// A failed API call `action` on the `kind` object `name`.
    pub fn api(action: &'static str, kind: &'static str, name: &str, source: kube::Error) -> Self {
        Self::Api {
            action,
            kind,
            name: name.to_owned(),
            source,
        }
    }

    /// Whether the API server answered 409 Conflict (an optimistic-concurrency race: retry soon,
    /// nothing is wrong).
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(self, ApiError::Api { source: kube::Error::Api(status), .. } if status.code == 409)
    }

    /// Whether the API server answered 404 Not Found.
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::Api { source: kube::Error::Api(status), .. } if status.code == 404)
    }

    /// Upstream's retry after a failed write: ConflictRetry on conflicts, else ShortRetry.
    #[must_use]
    pub fn retry(&self) -> Retry {
        if self.is_conflict() {
            Retry::Conflict
        } else {
            Retry::Short
        }
    }

    /// The text of the underlying failure without the object it was about: what upstream puts
    /// into a machine's lastOperation after "failed due to error:".
    #[must_use]
    pub fn cause(&self) -> String {
        match self {
            ApiError::Api { source, .. } => source.to_string(),
            other => other.to_string(),
        }
    }

    /// The failure as the plans see it.
    #[must_use]
    pub fn as_write_failure(&self) -> WriteFailure {
        WriteFailure {
            conflict: self.is_conflict(),
            message: self.to_string(),
        }
    }
}
