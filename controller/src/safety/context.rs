//! What each safety controller is handed: a [`Platform`] plus only what it uses. The overshooting
//! check (upstream's `machine-controller-manager` share) needs no driver; the orphan collection
//! and the API-server check belong to the machine share.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachineSet};
use mcm_provider_proto::DriverClient;

use crate::machine::class_secrets::ClassSecrets;
use crate::platform::Platform;
use crate::platform::freeze::FreezeSwitch;
use crate::platform::informer::Informer;

/// The overshooting check's context.
pub struct OvershootContext {
    /// Clients, configuration, metrics, events.
    pub platform: Arc<Platform>,
    /// Machines of the control namespace.
    pub machines: Informer<Machine>,
    /// MachineSets of the control namespace.
    pub machine_sets: Informer<MachineSet>,
    /// MachineDeployments of the control namespace.
    pub machine_deployments: Informer<MachineDeployment>,
}

/// The orphan VM and orphan Node collection's context.
pub struct OrphanContext {
    /// Clients, configuration, metrics, events.
    pub platform: Arc<Platform>,
    /// Machines of the control namespace.
    pub machines: Informer<Machine>,
    /// MachineClasses of the control namespace.
    pub machine_classes: Informer<MachineClass>,
    /// Nodes of the target cluster.
    pub nodes: Informer<Node>,
    /// The provider driver (ListMachines, DeleteMachine).
    pub driver: DriverClient,
    /// The class Secrets (the Machine controller's cache).
    pub secrets: ClassSecrets,
}

/// The API-server check's context. It owns the freeze switch.
pub struct ApiServerContext {
    /// Clients, configuration, metrics, events.
    pub platform: Arc<Platform>,
    /// Machines of the control namespace (reset to Running after an outage).
    pub machines: Informer<Machine>,
    /// The Machine controller's freeze switch (written here).
    pub freeze: FreezeSwitch,
}

crate::deref_to_platform!(OvershootContext);
crate::deref_to_platform!(OrphanContext);
crate::deref_to_platform!(ApiServerContext);

impl OrphanContext {
    /// The merged Secret data of `class`.
    pub async fn class_secret_data(
        &self,
        class: &MachineClass,
    ) -> Result<
        std::collections::BTreeMap<String, Vec<u8>>,
        crate::machine::class_secrets::SecretReadError,
    > {
        self.secrets.class_secret_data(class).await
    }
}

impl ApiServerContext {
    /// True while the Machine controller is frozen.
    pub fn machine_controller_frozen(&self) -> bool {
        self.freeze.is_frozen()
    }

    /// Freezes or unfreezes the Machine controller.
    pub fn set_machine_controller_frozen(&self, frozen: bool) {
        self.freeze.set(frozen);
    }
}
