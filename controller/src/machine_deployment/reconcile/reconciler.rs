//! What the MachineDeployment workers share: the controller's context and the MachineSets
//! written recently. Its own module so that the executor (`apply`) and the reconcile
//! loop both use it without using each other.

use std::sync::Arc;

use super::recent_writes::RecentWrites;
use crate::machine_deployment::context::MachineDeploymentContext;

/// State shared by the workers.
pub(crate) struct Reconciler {
    /// The controller's context (platform and informers).
    pub(crate) context: Arc<MachineDeploymentContext>,
    /// The MachineSets written recently, until the informer shows them.
    pub(crate) recent: RecentWrites,
}
