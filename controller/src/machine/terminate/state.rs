//! What the termination workers share: the drain memory per node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::drain::reconcile::NodeDrainState;
use crate::machine::context::MachineContext;

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
