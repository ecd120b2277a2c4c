//! Errors of the Machine controller shell.

use mcm_decisions::machine::node_sync::NodeSyncError;
use mcm_decisions::vocabulary::{Retry, WriteFailure};

/// A failed API call of the Machine controller shell, with the object it was about.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A write to the control or target API server failed.
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
    /// The target cluster is needed but not configured.
    #[error("{what} needs a target cluster, but --target-kubeconfig is none")]
    NoTarget {
        /// What needed it.
        what: &'static str,
    },
    /// The node metadata plan refused the node.
    #[error(transparent)]
    NodeSync(#[from] NodeSyncError),
}

impl ReconcileError {
    /// Whether the API server answered 409 Conflict.
    pub fn is_conflict(&self) -> bool {
        matches!(self, ReconcileError::Api { source: kube::Error::Api(status), .. } if status.code == 409)
    }

    /// Whether the API server answered 404 Not Found.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReconcileError::Api { source: kube::Error::Api(status), .. } if status.code == 404)
    }

    /// Upstream's retry after a failed write: ConflictRetry on conflicts, else ShortRetry.
    pub fn retry(&self) -> Retry {
        if self.is_conflict() {
            Retry::Conflict
        } else {
            Retry::Short
        }
    }

    /// The failure as the plans see it.
    pub fn as_write_failure(&self) -> WriteFailure {
        WriteFailure {
            conflict: self.is_conflict(),
            message: self.to_string(),
        }
    }
}
