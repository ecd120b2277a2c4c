//! What the MachineDeployment workers share: the controller's context and the overlay of the
//! MachineSets it wrote. Its own module so that the executor (`apply`) and the reconcile loop
//! both use it without using each other.

use std::sync::Arc;

use mcm_api::v1alpha1::MachineSet;

use crate::machine_deployment::context::MachineDeploymentContext;
use crate::platform::overlay::Overlay;

/// State shared by the workers.
pub(crate) struct Reconciler {
    /// The controller's context (platform and informers).
    pub(crate) context: Arc<MachineDeploymentContext>,
    /// The MachineSets written, created or deleted by this shell, until the informer shows them
    /// (its change handler forgets them then).
    pub(crate) written: Arc<Overlay<MachineSet>>,
}

impl Reconciler {
    /// Remembers the API server's answer to a MachineSet write, unless the cache shows it.
    pub(crate) fn remember(&self, written: MachineSet) {
        let cached = written
            .metadata
            .name
            .as_deref()
            .and_then(|name| self.context.machine_sets.get(name));
        self.written.remember(written, cached);
    }
}
