//! What the MachineDeployment controller is handed: a [`Platform`] plus its informers. No driver.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachineSet};

use crate::platform::Platform;
use crate::platform::informer::Informer;

/// The MachineDeployment controller's context; dereferences to its [`Platform`].
pub struct MachineDeploymentContext {
    /// Clients, configuration, metrics, events.
    pub platform: Arc<Platform>,
    /// Machines of the control namespace.
    pub machines: Informer<Machine>,
    /// MachineSets of the control namespace.
    pub machine_sets: Informer<MachineSet>,
    /// MachineDeployments of the control namespace.
    pub machine_deployments: Informer<MachineDeployment>,
    /// MachineClasses of the control namespace: a rollout to a class that does not exist takes
    /// no old machine away (docs/behaviour.md#missing-class).
    pub machine_classes: Informer<MachineClass>,
    /// Nodes of the target cluster (autoscaler annotations, in-place updates).
    pub nodes: Informer<Node>,
}

crate::deref_to_platform!(MachineDeploymentContext);
