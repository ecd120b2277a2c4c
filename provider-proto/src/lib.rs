//! The gRPC driver contract between the machine controller and a provider (`mcm.driver.v1`).
//!
//! - [`Code`], [`MachineError`], [`StatusError`]: machine error codes (upstream table, with
//!   `Uninitialized` = 17 carried in a status detail) and the upstream error-string format.
//! - The typed requests and responses ([`MachineStatus`], [`CreateMachineResponse`], ...).
//!
//! These are plain data: with `default-features = false` the crate gives only them (no tonic,
//! prost or tokio), for code that decides on driver answers without calling a driver. The `grpc`
//! feature (on by default) adds the wire:
//!
//! - `pb`: the generated protobuf messages, client and server (from `proto/`, compiled with
//!   protox, no `protoc`), and the conversions of the typed values and errors to them.
//! - `Driver` and `serve`: implement a provider in Rust with typed inputs.
//! - `DriverClient`: the controller side, with a deadline on every call.
//! - `conformance`: a reusable suite every driver runs against itself (like csi-sanity).

#![cfg_attr(test, allow(clippy::unwrap_used))]

#[cfg(feature = "grpc")]
pub mod client;
pub mod codes;
#[cfg(feature = "grpc")]
pub mod conformance;
#[cfg(feature = "grpc")]
pub mod driver;
pub mod endpoint;
pub mod error;
#[cfg(feature = "grpc")]
pub mod pb;
#[cfg(feature = "grpc")]
pub mod server;
#[cfg(feature = "grpc")]
mod status;
pub mod types;
#[cfg(feature = "grpc")]
mod wire;

#[cfg(feature = "grpc")]
pub use client::{ConnectError, DEFAULT_DEADLINE, DriverClient};
pub use codes::{Code, DecodedError, code_name, decode_machine_error, format_machine_error};
#[cfg(feature = "grpc")]
pub use driver::Driver;
pub use endpoint::{Endpoint, EndpointError};
pub use error::{MachineError, StatusError};
#[cfg(feature = "grpc")]
pub use server::{BoundServer, ServeError, serve};
#[cfg(feature = "grpc")]
pub use types::{Capabilities, Method};
pub use types::{
    ClassFieldError, ClassFieldErrors, CreateMachineResponse, DeleteMachineResponse,
    GetVolumeIdsRequest, InitializeMachineResponse, ListMachinesRequest, MachineList,
    MachineRequest, MachineStatus, SecretData, UpdateMachineRequest, UpdateMachineResponse,
    ValidateMachineClassRequest,
};
