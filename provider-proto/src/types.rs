//! Typed requests and responses of the driver contract, and their JSON/protobuf encoding.
//!
//! The protobuf messages carry Kubernetes objects as JSON bytes; these types hold them decoded
//! (`Machine`, `MachineClass`, secret data, `PersistentVolumeSpec`), so a Rust driver never touches
//! the wire format. Decoding failures are `InvalidArgument` errors naming the object.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{NodeAddress, PersistentVolumeSpec, Secret};
use mcm_api::v1alpha1::{Machine, MachineClass};
use serde::de::DeserializeOwned;

use crate::error::MachineError;
use crate::pb::v1;

/// The data of the secret a request carries (class secrets merged; for create/initialise with the
/// user-data placeholders substituted).
pub type SecretData = BTreeMap<String, Vec<u8>>;

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

impl Capabilities {
    /// Whether the driver implements `method`.
    pub fn implements(&self, method: Method) -> bool {
        self.methods.contains(&method)
    }
}

// ---- JSON helpers -------------------------------------------------------------------------

pub(crate) fn decode_json<T: DeserializeOwned>(
    bytes: &[u8],
    what: &str,
) -> Result<T, MachineError> {
    serde_json::from_slice(bytes).map_err(|error| {
        MachineError::invalid_argument(format!("cannot decode the {what} JSON: {error}"))
    })
}

pub(crate) fn encode_json<T: serde::Serialize>(
    value: &T,
    what: &str,
) -> Result<Vec<u8>, MachineError> {
    serde_json::to_vec(value).map_err(|error| {
        MachineError::internal(format!("cannot encode the {what} as JSON: {error}"))
    })
}

/// Decodes the secret of a request: `data` merged with `stringData` (which wins, as in the API
/// server). Empty bytes mean an empty secret.
pub(crate) fn decode_secret(bytes: &[u8]) -> Result<SecretData, MachineError> {
    if bytes.is_empty() {
        return Ok(SecretData::new());
    }
    let secret: Secret = decode_json(bytes, "secret")?;
    let mut data: SecretData = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, ByteString(value))| (key, value))
        .collect();
    for (key, value) in secret.string_data.unwrap_or_default() {
        data.insert(key, value.into_bytes());
    }
    Ok(data)
}

pub(crate) fn encode_secret(data: &SecretData) -> Result<Vec<u8>, MachineError> {
    let secret = Secret {
        data: Some(
            data.iter()
                .map(|(key, value)| (key.clone(), ByteString(value.clone())))
                .collect(),
        ),
        ..Secret::default()
    };
    encode_json(&secret, "secret")
}

pub(crate) fn decode_machine_request(
    machine: &[u8],
    class: &[u8],
    secret: &[u8],
) -> Result<MachineRequest, MachineError> {
    Ok(MachineRequest {
        machine: decode_json(machine, "machine")?,
        class: decode_json(class, "machine class")?,
        secret: decode_secret(secret)?,
    })
}

// ---- protobuf conversions -----------------------------------------------------------------

fn addresses_to_pb(addresses: Vec<NodeAddress>) -> Vec<v1::NodeAddress> {
    addresses
        .into_iter()
        .map(|address| v1::NodeAddress {
            r#type: address.type_,
            address: address.address,
        })
        .collect()
}

fn addresses_from_pb(addresses: Vec<v1::NodeAddress>) -> Vec<NodeAddress> {
    addresses
        .into_iter()
        .map(|address| NodeAddress {
            type_: address.r#type,
            address: address.address,
        })
        .collect()
}

impl From<CreateMachineResponse> for v1::CreateMachineResponse {
    fn from(value: CreateMachineResponse) -> Self {
        Self {
            provider_id: value.provider_id,
            node_name: value.node_name,
            last_known_state: value.last_known_state,
            addresses: addresses_to_pb(value.addresses),
        }
    }
}

impl From<v1::CreateMachineResponse> for CreateMachineResponse {
    fn from(value: v1::CreateMachineResponse) -> Self {
        Self {
            provider_id: value.provider_id,
            node_name: value.node_name,
            last_known_state: value.last_known_state,
            addresses: addresses_from_pb(value.addresses),
        }
    }
}

impl From<InitializeMachineResponse> for v1::InitializeMachineResponse {
    fn from(value: InitializeMachineResponse) -> Self {
        Self {
            provider_id: value.provider_id,
            node_name: value.node_name,
            addresses: addresses_to_pb(value.addresses),
        }
    }
}

impl From<v1::InitializeMachineResponse> for InitializeMachineResponse {
    fn from(value: v1::InitializeMachineResponse) -> Self {
        Self {
            provider_id: value.provider_id,
            node_name: value.node_name,
            addresses: addresses_from_pb(value.addresses),
        }
    }
}

impl From<MachineStatus> for v1::GetMachineStatusResponse {
    fn from(value: MachineStatus) -> Self {
        Self {
            provider_id: value.provider_id,
            node_name: value.node_name,
            addresses: addresses_to_pb(value.addresses),
        }
    }
}

impl From<v1::GetMachineStatusResponse> for MachineStatus {
    fn from(value: v1::GetMachineStatusResponse) -> Self {
        Self {
            provider_id: value.provider_id,
            node_name: value.node_name,
            addresses: addresses_from_pb(value.addresses),
        }
    }
}

impl From<Capabilities> for v1::GetCapabilitiesResponse {
    fn from(value: Capabilities) -> Self {
        Self {
            provider_name: value.provider_name,
            methods: value
                .methods
                .into_iter()
                .map(|method| method as i32)
                .collect(),
            hot_updatable_paths: value.hot_updatable_paths,
            driver_version: value.driver_version,
        }
    }
}

impl From<v1::GetCapabilitiesResponse> for Capabilities {
    fn from(value: v1::GetCapabilitiesResponse) -> Self {
        Self {
            provider_name: value.provider_name,
            // Methods added in a later contract revision are unknown here and left out.
            methods: value
                .methods
                .into_iter()
                .filter_map(|method| Method::try_from(method).ok())
                .filter(|method| *method != Method::Unspecified)
                .collect(),
            hot_updatable_paths: value.hot_updatable_paths,
            driver_version: value.driver_version,
        }
    }
}

pub(crate) fn machine_list_to_pb(list: MachineList) -> HashMap<String, String> {
    list.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_string_data_overrides_data() {
        let json = br#"{"apiVersion":"v1","kind":"Secret","data":{"userData":"YQ==","k":"Yg=="},"stringData":{"k":"c"}}"#;
        let data = decode_secret(json).unwrap();
        assert_eq!(data.get("userData").map(Vec::as_slice), Some(&b"a"[..]));
        assert_eq!(data.get("k").map(Vec::as_slice), Some(&b"c"[..]));
    }

    #[test]
    fn secret_round_trips_and_empty_bytes_are_an_empty_secret() {
        let data = SecretData::from([("userData".to_owned(), b"#cloud-config".to_vec())]);
        assert_eq!(decode_secret(&encode_secret(&data).unwrap()).unwrap(), data);
        assert!(decode_secret(b"").unwrap().is_empty());
    }

    #[test]
    fn malformed_objects_are_invalid_argument_naming_the_object() {
        let error = decode_machine_request(b"{not json", b"{}", b"").unwrap_err();
        assert_eq!(error.code, crate::Code::InvalidArgument);
        assert!(error.message.contains("machine JSON"), "{}", error.message);
        let error = decode_secret(br#"{"data":{"k":"***"}}"#).unwrap_err();
        assert!(error.message.contains("secret JSON"), "{}", error.message);
    }

    #[test]
    fn unknown_methods_from_a_newer_driver_are_dropped() {
        let capabilities = Capabilities::from(v1::GetCapabilitiesResponse {
            provider_name: "x".into(),
            methods: vec![Method::CreateMachine as i32, 99, 0],
            hot_updatable_paths: vec![],
            driver_version: String::new(),
        });
        assert_eq!(capabilities.methods, vec![Method::CreateMachine]);
    }
}
