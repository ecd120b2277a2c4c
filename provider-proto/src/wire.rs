//! The wire encoding of the typed requests and responses (feature `grpc`): Kubernetes objects as
//! JSON bytes, and conversions to and from the protobuf messages. Decoding failures are
//! `InvalidArgument` errors naming the object.

use std::collections::HashMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{NodeAddress, Secret};
use serde::de::DeserializeOwned;

use crate::error::MachineError;
use crate::pb::v1;
use crate::types::{
    Capabilities, CreateMachineResponse, InitializeMachineResponse, MachineList, MachineRequest,
    MachineStatus, Method, SecretData,
};

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
