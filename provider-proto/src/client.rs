//! [`DriverClient`]: the controller's side of the contract, with a deadline on every call.
//!
//! Each call sends `grpc-timeout` (so the provider stops working on it) and also races a local
//! timer (so a provider that ignores deadlines, or a hung connection, cannot stall the caller).
//! Errors come back as [`MachineError`]s with the machine code restored from the status detail.

use std::future::Future;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::PersistentVolumeSpec;
use mcm_api::v1alpha1::{Machine, MachineClass};
use tonic::transport::Channel;

use crate::codes::Code;
use crate::endpoint::Endpoint;
use crate::error::{MachineError, StatusError};
use crate::pb::v1;
use crate::pb::v1::driver_client::DriverClient as GrpcClient;
use crate::types::{
    Capabilities, ClassFieldError, ClassFieldErrors, CreateMachineResponse, DeleteMachineResponse,
    InitializeMachineResponse, MachineList, MachineStatus, SecretData, UpdateMachineResponse,
};
use crate::wire::{encode_json, encode_secret};

/// The default deadline of a driver call.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// A failure to set up the client connection.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up a driver client for {endpoint}: {source}")]
pub struct ConnectError {
    /// The endpoint.
    pub endpoint: String,
    /// The transport error.
    pub source: tonic::transport::Error,
}

/// A driver client. Cheap to clone; clones share the connection.
#[derive(Debug, Clone)]
pub struct DriverClient {
    inner: GrpcClient<Channel>,
    deadline: Duration,
}

impl DriverClient {
    /// A client for `endpoint` whose calls have `deadline`. The connection is made lazily (and
    /// re-made after failures), so the provider does not need to be up yet.
    pub async fn connect(endpoint: &Endpoint, deadline: Duration) -> Result<Self, ConnectError> {
        let connect_error = |source| ConnectError {
            endpoint: endpoint.to_string(),
            source,
        };
        let channel = match endpoint {
            Endpoint::Tcp(address) => {
                tonic::transport::Endpoint::from_shared(format!("http://{address}"))
                    .map_err(connect_error)?
                    .connect_lazy()
            }
            Endpoint::Unix(path) => {
                let path = path.clone();
                // The URI is required by the HTTP/2 layer but never resolved: the connector dials
                // the socket.
                tonic::transport::Endpoint::from_static("http://driver.invalid")
                    .connect_with_connector_lazy(tower::service_fn(move |_uri| {
                        let path = path.clone();
                        async move {
                            tokio::net::UnixStream::connect(path)
                                .await
                                .map(TokioIo::new)
                        }
                    }))
            }
        };
        Ok(Self {
            inner: GrpcClient::new(channel),
            deadline,
        })
    }

    /// The same client with another deadline.
    pub fn with_deadline(&self, deadline: Duration) -> Self {
        Self {
            inner: self.inner.clone(),
            deadline,
        }
    }

    /// The deadline of every call.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    async fn call<M, R, F, Fut>(
        &self,
        method: &'static str,
        message: M,
        send: F,
    ) -> Result<R, StatusError>
    where
        F: FnOnce(GrpcClient<Channel>, tonic::Request<M>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.deadline);
        match tokio::time::timeout(self.deadline, send(self.inner.clone(), request)).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => {
                let mut error = StatusError::from_status(&status);
                // tonic's server answers an expired grpc-timeout with Cancelled("Timeout expired").
                if status.code() == tonic::Code::Cancelled && status.message() == "Timeout expired"
                {
                    error.error = MachineError::new(
                        Code::DeadlineExceeded,
                        format!("{method} did not complete within {:?}", self.deadline),
                    );
                }
                tracing::debug!(method, code = %error.code(), message = %error.error.message, "driver call failed");
                Err(error)
            }
            Err(_elapsed) => Err(MachineError::new(
                Code::DeadlineExceeded,
                format!("{method} did not complete within {:?}", self.deadline),
            )
            .into()),
        }
    }

    /// GetCapabilities.
    pub async fn get_capabilities(&self) -> Result<Capabilities, MachineError> {
        self.call(
            "GetCapabilities",
            v1::GetCapabilitiesRequest {},
            |mut client, request| async move { client.get_capabilities(request).await },
        )
        .await
        .map(Capabilities::from)
        .map_err(|error| error.error)
    }

    /// CreateMachine.
    pub async fn create_machine(
        &self,
        machine: &Machine,
        class: &MachineClass,
        secret: &SecretData,
    ) -> Result<CreateMachineResponse, MachineError> {
        let message = v1::CreateMachineRequest {
            machine: encode_json(machine, "machine")?,
            machine_class: encode_json(class, "machine class")?,
            secret: encode_secret(secret)?,
        };
        self.call("CreateMachine", message, |mut client, request| async move {
            client.create_machine(request).await
        })
        .await
        .map(CreateMachineResponse::from)
        .map_err(|error| error.error)
    }

    /// InitializeMachine.
    pub async fn initialize_machine(
        &self,
        machine: &Machine,
        class: &MachineClass,
        secret: &SecretData,
    ) -> Result<InitializeMachineResponse, MachineError> {
        let message = v1::InitializeMachineRequest {
            machine: encode_json(machine, "machine")?,
            machine_class: encode_json(class, "machine class")?,
            secret: encode_secret(secret)?,
        };
        self.call(
            "InitializeMachine",
            message,
            |mut client, request| async move { client.initialize_machine(request).await },
        )
        .await
        .map(InitializeMachineResponse::from)
        .map_err(|error| error.error)
    }

    /// DeleteMachine (the machine may be synthetic: name, namespace and providerID).
    pub async fn delete_machine(
        &self,
        machine: &Machine,
        class: &MachineClass,
        secret: &SecretData,
    ) -> Result<DeleteMachineResponse, MachineError> {
        let message = v1::DeleteMachineRequest {
            machine: encode_json(machine, "machine")?,
            machine_class: encode_json(class, "machine class")?,
            secret: encode_secret(secret)?,
        };
        self.call("DeleteMachine", message, |mut client, request| async move {
            client.delete_machine(request).await
        })
        .await
        .map(|response| DeleteMachineResponse {
            last_known_state: response.last_known_state,
        })
        .map_err(|error| error.error)
    }

    /// GetMachineStatus. With `Uninitialized` the error carries the VM's status.
    pub async fn get_machine_status(
        &self,
        machine: &Machine,
        class: &MachineClass,
        secret: &SecretData,
    ) -> Result<MachineStatus, StatusError> {
        let message = v1::GetMachineStatusRequest {
            machine: encode_json(machine, "machine")?,
            machine_class: encode_json(class, "machine class")?,
            secret: encode_secret(secret)?,
        };
        self.call(
            "GetMachineStatus",
            message,
            |mut client, request| async move { client.get_machine_status(request).await },
        )
        .await
        .map(MachineStatus::from)
    }

    /// ListMachines: providerID → machine name.
    pub async fn list_machines(
        &self,
        class: &MachineClass,
        secret: &SecretData,
    ) -> Result<MachineList, MachineError> {
        let message = v1::ListMachinesRequest {
            machine_class: encode_json(class, "machine class")?,
            secret: encode_secret(secret)?,
        };
        self.call("ListMachines", message, |mut client, request| async move {
            client.list_machines(request).await
        })
        .await
        .map(|response| response.machine_list.into_iter().collect())
        .map_err(|error| error.error)
    }

    /// GetVolumeIDs.
    pub async fn get_volume_ids(
        &self,
        pv_specs: &[PersistentVolumeSpec],
    ) -> Result<Vec<String>, MachineError> {
        let message = v1::GetVolumeIDsRequest {
            pv_specs: pv_specs
                .iter()
                .map(|spec| encode_json(spec, "persistent volume spec"))
                .collect::<Result<_, _>>()?,
        };
        self.call("GetVolumeIDs", message, |mut client, request| async move {
            client.get_volume_i_ds(request).await
        })
        .await
        .map(|response| response.volume_ids)
        .map_err(|error| error.error)
    }

    /// UpdateMachine: apply the class's providerSpec to the VM `provider_id`, which last had
    /// `last_applied_provider_spec`.
    pub async fn update_machine(
        &self,
        provider_id: &str,
        last_applied_provider_spec: &serde_json::Value,
        class: &MachineClass,
        secret: &SecretData,
        machine: Option<&Machine>,
    ) -> Result<UpdateMachineResponse, MachineError> {
        let message = v1::UpdateMachineRequest {
            provider_id: provider_id.to_owned(),
            last_applied_provider_spec: encode_json(
                last_applied_provider_spec,
                "last applied providerSpec",
            )?,
            machine_class: encode_json(class, "machine class")?,
            secret: encode_secret(secret)?,
            machine: match machine {
                Some(machine) => encode_json(machine, "machine")?,
                None => Vec::new(),
            },
        };
        self.call("UpdateMachine", message, |mut client, request| async move {
            client.update_machine(request).await
        })
        .await
        .map(|response| UpdateMachineResponse {
            updated_paths: response.updated_paths,
        })
        .map_err(|error| error.error)
    }

    /// ValidateMachineClass: the invalid fields of `class` (empty when valid). A driver without
    /// the method answers `Unimplemented`.
    pub async fn validate_machine_class(
        &self,
        class: &MachineClass,
        secret: &SecretData,
    ) -> Result<ClassFieldErrors, MachineError> {
        let message = v1::ValidateMachineClassRequest {
            machine_class: encode_json(class, "machine class")?,
            secret: encode_secret(secret)?,
        };
        self.call(
            "ValidateMachineClass",
            message,
            |mut client, request| async move { client.validate_machine_class(request).await },
        )
        .await
        .map(|response| {
            response
                .errors
                .into_iter()
                .map(|error| ClassFieldError {
                    field: error.field,
                    message: error.message,
                })
                .collect()
        })
        .map_err(|error| error.error)
    }
}
