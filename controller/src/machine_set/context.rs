//! What the MachineSet controller is handed: a [`Platform`] plus its informers. No driver: the
//! MachineSet controller only writes Machine objects.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use mcm_api::v1alpha1::{Machine, MachineSet};

use crate::platform::Platform;
use crate::platform::informer::Informer;

/// The MachineSet controller's context; dereferences to its [`Platform`].
pub struct MachineSetContext {
    /// Clients, configuration, metrics, events.
    pub platform: Arc<Platform>,
    /// Machines of the control namespace.
    pub machines: Informer<Machine>,
    /// MachineSets of the control namespace.
    pub machine_sets: Informer<MachineSet>,
    /// Nodes of the target cluster (read for the deletion order).
    pub nodes: Informer<Node>,
}

crate::deref_to_platform!(MachineSetContext);
