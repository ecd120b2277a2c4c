//! The gRPC driver contract between the machine controller and a provider (`mcm.driver.v1`).
//!
//! - [`pb`]: the generated protobuf messages, client and server (from `proto/`, compiled with
//!   protox, no `protoc`).
//! - [`Code`], [`MachineError`], [`StatusError`]: machine error codes (upstream table, with
//!   `Uninitialized` = 17 carried in a status detail) and the upstream error-string format.
//! - [`Driver`] and [`serve`]: implement a provider in Rust with typed inputs.
//! - [`DriverClient`]: the controller side, with a deadline on every call.
//! - [`conformance`]: a reusable suite every driver runs against itself (like csi-sanity).

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod client;
pub mod codes;
pub mod conformance;
pub mod driver;
pub mod endpoint;
pub mod error;
pub mod server;
pub mod types;

/// Generated protobuf code.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    /// `mcm.driver.v1`: the Driver service and its messages.
    pub mod v1 {
        tonic::include_proto!("mcm.driver.v1");
    }
    /// `google.rpc`: the status envelope of `grpc-status-details-bin`.
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

pub use client::{ConnectError, DEFAULT_DEADLINE, DriverClient};
pub use codes::{Code, DecodedError, code_name, decode_machine_error, format_machine_error};
pub use driver::Driver;
pub use endpoint::{Endpoint, EndpointError};
pub use error::{MachineError, StatusError};
pub use server::{BoundServer, ServeError, serve};
pub use types::{
    Capabilities, CreateMachineResponse, DeleteMachineResponse, GetVolumeIdsRequest,
    InitializeMachineResponse, ListMachinesRequest, MachineList, MachineRequest, MachineStatus,
    Method, SecretData, UpdateMachineRequest, UpdateMachineResponse,
};
