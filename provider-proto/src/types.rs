//! Typed requests and responses of the driver contract.
//!
//! The protobuf messages carry Kubernetes objects as JSON bytes; these types hold them decoded
//! (`Machine`, `MachineClass`, secret data, `PersistentVolumeSpec`), so a Rust driver never touches
//! the wire format (the encoding is in `wire.rs`, feature `grpc`). Everything here is plain data,
//! available without the `grpc` feature, except `Capabilities`, which lists generated `Method`s.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeAddress, PersistentVolumeSpec};
use mcm_api::v1alpha1::{Machine, MachineClass};

/// The data of the secret a request carries (class secrets merged; for create/initialise with the
/// user-data placeholders substituted).
pub type SecretData = BTreeMap<String, Vec<u8>>;

/// A method of the Driver service (the generated protobuf enum).
#[cfg(feature = "grpc")]
pub use crate::pb::v1::Method;

/// Input of CreateMachine, InitializeMachine, DeleteMachine and GetMachineStatus.
#[derive(Debug, Clone)]
pub struct MachineRequest {
    /// The machine (for DeleteMachine possibly synthetic: name, namespace and providerID only).
    pub machine: Machine,
    /// The machine's class.
    pub class: MachineClass,
    /// The secret data.
    pub secret: SecretData,
}

/// Input of ListMachines.
#[derive(Debug, Clone)]
pub struct ListMachinesRequest {
    /// The class whose VMs are listed.
    pub class: MachineClass,
    /// The secret data.
    pub secret: SecretData,
}

/// Input of GetVolumeIDs.
#[derive(Debug, Clone, Default)]
pub struct GetVolumeIdsRequest {
    /// Specs of the persistent volumes whose provider IDs are wanted.
    pub pv_specs: Vec<PersistentVolumeSpec>,
}

/// Input of UpdateMachine.
#[derive(Debug, Clone)]
pub struct UpdateMachineRequest {
    /// The VM to update.
    pub provider_id: String,
    /// The providerSpec last applied to the VM.
    pub last_applied_provider_spec: serde_json::Value,
    /// The class holding the new providerSpec.
    pub class: MachineClass,
    /// The secret data.
    pub secret: SecretData,
    /// The machine, when the controller sent it.
    pub machine: Option<Machine>,
}

/// Input of ValidateMachineClass.
#[derive(Debug, Clone)]
pub struct ValidateMachineClassRequest {
    /// The class to check.
    pub class: MachineClass,
    /// The secret data (class secrets merged, user data not substituted).
    pub secret: SecretData,
}

/// One invalid field of a MachineClass, as ValidateMachineClass reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClassFieldError {
    /// The field path from the class's top level, e.g. `providerSpec.bootDelay`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for ClassFieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Output of ValidateMachineClass: the invalid fields, empty when the class is valid.
pub type ClassFieldErrors = Vec<ClassFieldError>;

/// Output of CreateMachine.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CreateMachineResponse {
    /// Unique VM ID, set as the Node's `spec.providerID`.
    pub provider_id: String,
    /// The VM's Node name.
    pub node_name: String,
    /// Opaque provider state (machine `status.lastKnownState`).
    pub last_known_state: String,
    /// Addresses of the VM.
    pub addresses: Vec<NodeAddress>,
}

/// Output of InitializeMachine.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InitializeMachineResponse {
    /// Unique VM ID.
    pub provider_id: String,
    /// The VM's Node name.
    pub node_name: String,
    /// Addresses of the VM.
    pub addresses: Vec<NodeAddress>,
}

/// Output of GetMachineStatus (also returned together with `Uninitialized`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MachineStatus {
    /// Unique VM ID.
    pub provider_id: String,
    /// The VM's Node name.
    pub node_name: String,
    /// Addresses of the VM.
    pub addresses: Vec<NodeAddress>,
}

/// Output of DeleteMachine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteMachineResponse {
    /// Opaque provider state after deletion.
    pub last_known_state: String,
}

/// Output of ListMachines: providerID → machine name.
pub type MachineList = BTreeMap<String, String>;

/// Output of UpdateMachine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateMachineResponse {
    /// providerSpec paths the call changed.
    pub updated_paths: Vec<String>,
}

/// Output of GetCapabilities.
#[cfg(feature = "grpc")]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// The `MachineClass.provider` value this driver serves.
    pub provider_name: String,
    /// Implemented methods.
    pub methods: Vec<Method>,
    /// providerSpec paths UpdateMachine can change on a running VM.
    pub hot_updatable_paths: Vec<String>,
    /// The driver's version.
    pub driver_version: String,
}

#[cfg(feature = "grpc")]
impl Capabilities {
    /// Whether the driver implements `method`.
    pub fn implements(&self, method: Method) -> bool {
        self.methods.contains(&method)
    }
}
