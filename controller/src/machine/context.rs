//! What each machine-side controller is handed: a [`Platform`] plus only the informers, driver and
//! handles it uses. The manager builds them (`manager::compose`); tests may build them directly.
//!
//! Each context dereferences to its [`Platform`], so reconcile code reads `context.config`,
//! `context.event(..)` whatever context it works with.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use mcm_api::v1alpha1::{Machine, MachineClass};
use mcm_provider_proto::DriverClient;

use crate::drain::reconcile::DrainTarget;
use crate::machine::class_secrets::{ClassSecrets, SecretReadError};
use crate::machine::creation_flows::CreationFlows;
use crate::platform::Platform;
use crate::platform::freeze::FreezeReader;
use crate::platform::index::Index;
use crate::platform::informer::Informer;

/// The context of the two controllers that act on one machine: the Machine controller and the
/// termination controller (drain, VM and node deletion). The Machine controller writes the
/// creation-flow registry; the termination controller only asks it ([`Self::in_creation_flow`]).
pub struct MachineContext {
    /// Clients, configuration, metrics, events.
    pub platform: Arc<Platform>,
    /// Machines of the control namespace.
    pub machines: Informer<Machine>,
    /// MachineClasses of the control namespace.
    pub machine_classes: Informer<MachineClass>,
    /// Nodes of the target cluster.
    pub nodes: Informer<Node>,
    /// The provider driver.
    pub driver: DriverClient,
    /// The class Secrets (shared with the other driver callers).
    pub secrets: ClassSecrets,
    /// Machines inside the creation flow.
    pub creation_flows: CreationFlows,
    /// The API-server check's freeze switch (read only).
    pub frozen: FreezeReader,
    /// Machine names by their `node` label.
    pub machines_by_node: Index,
    /// Node names by their machine-name label (`node.gardener.cloud/machine-name`).
    pub nodes_by_machine_name: Index,
}

/// The Node controller's context.
pub struct NodeContext {
    /// Clients, configuration, metrics, events.
    pub platform: Arc<Platform>,
    /// Machines of the control namespace.
    pub machines: Informer<Machine>,
    /// Nodes of the target cluster.
    pub nodes: Informer<Node>,
    /// Machine names by their `node` label.
    pub machines_by_node: Index,
}

/// The MachineClass (and class Secret finalizer) controller's context.
pub struct MachineClassContext {
    /// Clients, configuration, metrics, events.
    pub platform: Arc<Platform>,
    /// Machines of the control namespace.
    pub machines: Informer<Machine>,
    /// MachineClasses of the control namespace.
    pub machine_classes: Informer<MachineClass>,
    /// The provider driver, when the manager has one (ValidateMachineClass).
    pub driver: Option<DriverClient>,
    /// The class Secrets (sent with ValidateMachineClass).
    pub secrets: ClassSecrets,
    /// What each class was last validated with (class name → fingerprint of its provider,
    /// providerSpec and Secret data), so a resync does not call the driver again.
    pub validated: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    /// The provider the driver serves (GetCapabilities, asked once).
    pub driver_provider: tokio::sync::OnceCell<String>,
}

crate::deref_to_platform!(MachineContext);
crate::deref_to_platform!(NodeContext);
crate::deref_to_platform!(MachineClassContext);

impl MachineContext {
    /// True while the API-server safety check keeps the Machine controller frozen.
    pub fn machine_controller_frozen(&self) -> bool {
        self.frozen.is_frozen()
    }

    /// True while `name` is inside the creation flow.
    pub fn in_creation_flow(&self, name: &str) -> bool {
        self.creation_flows.contains(name)
    }

    /// The merged Secret data of `class` ([`ClassSecrets::class_secret_data`]).
    pub async fn class_secret_data(
        &self,
        class: &MachineClass,
    ) -> Result<BTreeMap<String, Vec<u8>>, SecretReadError> {
        self.secrets.class_secret_data(class).await
    }
}

impl MachineContext {
    /// The provider of the machine's class in the cache (empty when the class is unknown): the
    /// driver metrics' label.
    pub fn class_provider(&self, machine: &Machine) -> String {
        machine
            .spec
            .class
            .as_ref()
            .and_then(|class| class.name.as_deref())
            .and_then(|class| self.machine_classes.get(class))
            .and_then(|class| class.provider.clone())
            .unwrap_or_default()
    }

    /// What every drain of this controller's machines works with (the deletion drain, the
    /// in-place update's and the preservation's): the target cluster `client`, the driver, the
    /// metrics under `provider` and `--machine-pv-reattach-timeout`.
    pub fn drain_target<'a>(&'a self, client: &'a Client, provider: &'a str) -> DrainTarget<'a> {
        DrainTarget {
            client,
            driver: &self.driver,
            metrics: &self.metrics,
            provider,
            pv_reattach_timeout: self.config.machine.pv_reattach_timeout,
        }
    }
}
