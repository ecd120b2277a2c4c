//! Generated protobuf code (feature `grpc`): compiled from `proto/` by `build.rs` with protox.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// `mcm.driver.v1`: the Driver service and its messages.
pub mod v1 {
    tonic::include_proto!("mcm.driver.v1");
}

/// `google.rpc`: the status envelope of `grpc-status-details-bin`.
pub mod rpc {
    tonic::include_proto!("google.rpc");
}
