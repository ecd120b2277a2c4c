//! Serving a [`Driver`] over gRPC on a Unix socket or TCP, with graceful shutdown.
//!
//! The adapter decodes the JSON objects of each request, calls the driver, and encodes its errors
//! with the machine-code detail ([`crate::MachineError::to_status`]). tonic's server honours the
//! caller's `grpc-timeout`: when it expires the driver's future is dropped and the caller gets a
//! deadline error.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::{Request, Response, Status};

use crate::driver::Driver;
use crate::endpoint::Endpoint;
use crate::error::MachineError;
use crate::pb::v1;
use crate::pb::v1::driver_server::{Driver as GrpcDriver, DriverServer};
use crate::types::{
    GetVolumeIdsRequest, ListMachinesRequest, UpdateMachineRequest, ValidateMachineClassRequest,
};
use crate::wire::{decode_json, decode_machine_request, decode_secret, machine_list_to_pb};

/// Failures to bind or serve a driver endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener could not be created.
    #[error("cannot listen on driver endpoint {endpoint}: {source}")]
    Bind {
        /// The endpoint.
        endpoint: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("driver gRPC server on {endpoint} failed: {source}")]
    Serve {
        /// The endpoint.
        endpoint: String,
        /// The transport error.
        source: tonic::transport::Error,
    },
}

enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

/// A bound driver endpoint, not yet serving. Binding first lets a caller learn the real address of
/// `tcp://127.0.0.1:0` before serving.
pub struct BoundServer {
    listener: Listener,
    endpoint: Endpoint,
}

impl BoundServer {
    /// Binds the endpoint. A stale Unix socket file left by a previous run is removed first.
    pub async fn bind(endpoint: &Endpoint) -> Result<Self, ServeError> {
        let bind_error = |source| ServeError::Bind {
            endpoint: endpoint.to_string(),
            source,
        };
        match endpoint {
            Endpoint::Unix(path) => {
                if let Some(parent) = path
                    .parent()
                    .filter(|parent| !parent.as_os_str().is_empty())
                {
                    tokio::fs::create_dir_all(parent)
                        .await
                        .map_err(bind_error)?;
                }
                match tokio::fs::remove_file(path).await {
                    Ok(()) => tracing::info!(path = %path.display(), "removed stale driver socket"),
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => return Err(bind_error(error)),
                }
                let listener = UnixListener::bind(path).map_err(bind_error)?;
                Ok(Self {
                    listener: Listener::Unix(listener, path.clone()),
                    endpoint: endpoint.clone(),
                })
            }
            Endpoint::Tcp(address) => {
                let listener = TcpListener::bind(address).await.map_err(bind_error)?;
                let local = listener.local_addr().map_err(bind_error)?;
                Ok(Self {
                    listener: Listener::Tcp(listener),
                    endpoint: Endpoint::Tcp(local),
                })
            }
        }
    }

    /// The bound endpoint (with the real port for `tcp://…:0`).
    pub fn local_endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Serves `driver` until `shutdown` completes, then lets in-flight calls finish. The Unix socket
    /// file is removed afterwards.
    pub async fn serve<D: Driver>(
        self,
        driver: Arc<D>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let service = DriverServer::new(DriverService { driver });
        let router = tonic::transport::Server::builder().add_service(service);
        let endpoint = self.endpoint.to_string();
        tracing::info!(%endpoint, "driver gRPC server listening");
        let result = match self.listener {
            Listener::Unix(listener, path) => {
                let result = router
                    .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
                    .await;
                if let Err(error) = tokio::fs::remove_file(&path).await {
                    tracing::debug!(path = %path.display(), %error, "driver socket not removed");
                }
                result
            }
            Listener::Tcp(listener) => {
                router
                    .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
                    .await
            }
        };
        tracing::info!(%endpoint, "driver gRPC server stopped");
        result.map_err(|source| ServeError::Serve { endpoint, source })
    }
}

/// Serves `driver` on `endpoint` until `shutdown` completes (graceful: in-flight calls finish).
pub async fn serve<D: Driver>(
    driver: D,
    endpoint: &Endpoint,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    BoundServer::bind(endpoint)
        .await?
        .serve(Arc::new(driver), shutdown)
        .await
}

/// The generated gRPC service trait, implemented on top of a [`Driver`].
struct DriverService<D> {
    driver: Arc<D>,
}

fn reject(method: &'static str, error: &MachineError) -> Status {
    tracing::debug!(method, code = %error.code, message = %error.message, "driver call failed");
    error.to_status()
}

#[tonic::async_trait]
impl<D: Driver> GrpcDriver for DriverService<D> {
    async fn get_capabilities(
        &self,
        _request: Request<v1::GetCapabilitiesRequest>,
    ) -> Result<Response<v1::GetCapabilitiesResponse>, Status> {
        Ok(Response::new(self.driver.capabilities().into()))
    }

    async fn create_machine(
        &self,
        request: Request<v1::CreateMachineRequest>,
    ) -> Result<Response<v1::CreateMachineResponse>, Status> {
        const METHOD: &str = "CreateMachine";
        let request = request.into_inner();
        let typed =
            decode_machine_request(&request.machine, &request.machine_class, &request.secret)
                .map_err(|error| reject(METHOD, &error))?;
        match self.driver.create_machine(typed).await {
            Ok(response) => Ok(Response::new(response.into())),
            Err(error) => Err(reject(METHOD, &error)),
        }
    }

    async fn initialize_machine(
        &self,
        request: Request<v1::InitializeMachineRequest>,
    ) -> Result<Response<v1::InitializeMachineResponse>, Status> {
        const METHOD: &str = "InitializeMachine";
        let request = request.into_inner();
        let typed =
            decode_machine_request(&request.machine, &request.machine_class, &request.secret)
                .map_err(|error| reject(METHOD, &error))?;
        match self.driver.initialize_machine(typed).await {
            Ok(response) => Ok(Response::new(response.into())),
            Err(error) => Err(reject(METHOD, &error)),
        }
    }

    async fn delete_machine(
        &self,
        request: Request<v1::DeleteMachineRequest>,
    ) -> Result<Response<v1::DeleteMachineResponse>, Status> {
        const METHOD: &str = "DeleteMachine";
        let request = request.into_inner();
        let typed =
            decode_machine_request(&request.machine, &request.machine_class, &request.secret)
                .map_err(|error| reject(METHOD, &error))?;
        match self.driver.delete_machine(typed).await {
            Ok(response) => Ok(Response::new(v1::DeleteMachineResponse {
                last_known_state: response.last_known_state,
            })),
            Err(error) => Err(reject(METHOD, &error)),
        }
    }

    async fn get_machine_status(
        &self,
        request: Request<v1::GetMachineStatusRequest>,
    ) -> Result<Response<v1::GetMachineStatusResponse>, Status> {
        const METHOD: &str = "GetMachineStatus";
        let request = request.into_inner();
        let typed =
            decode_machine_request(&request.machine, &request.machine_class, &request.secret)
                .map_err(|error| reject(METHOD, &error))?;
        match self.driver.get_machine_status(typed).await {
            Ok(response) => Ok(Response::new(response.into())),
            Err(error) => {
                tracing::debug!(method = METHOD, code = %error.code(), message = %error.error.message, "driver call failed");
                Err(error.to_status())
            }
        }
    }

    async fn list_machines(
        &self,
        request: Request<v1::ListMachinesRequest>,
    ) -> Result<Response<v1::ListMachinesResponse>, Status> {
        const METHOD: &str = "ListMachines";
        let request = request.into_inner();
        let typed = decode_json(&request.machine_class, "machine class")
            .and_then(|class| {
                Ok(ListMachinesRequest {
                    class,
                    secret: decode_secret(&request.secret)?,
                })
            })
            .map_err(|error| reject(METHOD, &error))?;
        match self.driver.list_machines(typed).await {
            Ok(list) => Ok(Response::new(v1::ListMachinesResponse {
                machine_list: machine_list_to_pb(list),
            })),
            Err(error) => Err(reject(METHOD, &error)),
        }
    }

    async fn get_volume_i_ds(
        &self,
        request: Request<v1::GetVolumeIDsRequest>,
    ) -> Result<Response<v1::GetVolumeIDsResponse>, Status> {
        const METHOD: &str = "GetVolumeIDs";
        let pv_specs = request
            .into_inner()
            .pv_specs
            .iter()
            .map(|spec| decode_json(spec, "persistent volume spec"))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| reject(METHOD, &error))?;
        match self
            .driver
            .get_volume_ids(GetVolumeIdsRequest { pv_specs })
            .await
        {
            Ok(volume_ids) => Ok(Response::new(v1::GetVolumeIDsResponse { volume_ids })),
            Err(error) => Err(reject(METHOD, &error)),
        }
    }

    async fn update_machine(
        &self,
        request: Request<v1::UpdateMachineRequest>,
    ) -> Result<Response<v1::UpdateMachineResponse>, Status> {
        const METHOD: &str = "UpdateMachine";
        let request = request.into_inner();
        let decode = || -> Result<UpdateMachineRequest, MachineError> {
            Ok(UpdateMachineRequest {
                provider_id: request.provider_id.clone(),
                last_applied_provider_spec: if request.last_applied_provider_spec.is_empty() {
                    serde_json::Value::Null
                } else {
                    decode_json(
                        &request.last_applied_provider_spec,
                        "last applied providerSpec",
                    )?
                },
                class: decode_json(&request.machine_class, "machine class")?,
                secret: decode_secret(&request.secret)?,
                machine: if request.machine.is_empty() {
                    None
                } else {
                    Some(decode_json(&request.machine, "machine")?)
                },
            })
        };
        let typed = decode().map_err(|error| reject(METHOD, &error))?;
        match self.driver.update_machine(typed).await {
            Ok(response) => Ok(Response::new(v1::UpdateMachineResponse {
                updated_paths: response.updated_paths,
            })),
            Err(error) => Err(reject(METHOD, &error)),
        }
    }

    async fn validate_machine_class(
        &self,
        request: Request<v1::ValidateMachineClassRequest>,
    ) -> Result<Response<v1::ValidateMachineClassResponse>, Status> {
        const METHOD: &str = "ValidateMachineClass";
        let request = request.into_inner();
        let typed = decode_json(&request.machine_class, "machine class")
            .and_then(|class| {
                Ok(ValidateMachineClassRequest {
                    class,
                    secret: decode_secret(&request.secret)?,
                })
            })
            .map_err(|error| reject(METHOD, &error))?;
        match self.driver.validate_machine_class(typed).await {
            Ok(errors) => Ok(Response::new(v1::ValidateMachineClassResponse {
                errors: errors
                    .into_iter()
                    .map(|error| v1::FieldError {
                        field: error.field,
                        message: error.message,
                    })
                    .collect(),
            })),
            Err(error) => Err(reject(METHOD, &error)),
        }
    }
}
