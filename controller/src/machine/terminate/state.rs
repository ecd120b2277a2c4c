//! What the termination workers share: the pass's error type and the drain memory per node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::drain::reconcile::NodeDrainState;
use crate::machine::context::MachineContext;

/// What can go wrong in one termination pass (logged; the key is retried).
#[derive(Debug, thiserror::Error)]
pub enum TerminationError {
    /// A Kubernetes API call failed.
    #[error("{what} for machine {machine:?} failed: {source}")]
    Api {
        /// The call.
        what: String,
        /// The machine.
        machine: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The machine's finalizer could not be removed.
    #[error("cannot remove the machine finalizer: {}", .0.message)]
    Finalizer(mcm_decisions::vocabulary::WriteFailure),
}

/// State shared by the termination workers.
pub(crate) struct Termination {
    pub(super) context: Arc<MachineContext>,
    /// Drain memory per node name.
    pub(super) drains: Mutex<HashMap<String, NodeDrainState>>,
}

impl Termination {
    pub(super) fn drain_state(&self, node: &str, now: jiff::Timestamp) -> NodeDrainState {
        self.lock_drains()
            .entry(node.to_owned())
            .or_insert_with(|| NodeDrainState::new(now))
            .clone()
    }

    pub(super) fn store_drain_state(&self, node: &str, state: NodeDrainState) {
        self.lock_drains().insert(node.to_owned(), state);
    }

    pub(super) fn forget_drain(&self, node: &str) {
        self.lock_drains().remove(node);
    }

    pub(super) fn lock_drains(&self) -> std::sync::MutexGuard<'_, HashMap<String, NodeDrainState>> {
        self.drains
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
