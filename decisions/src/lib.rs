//! The decisions of the machine-controller-manager: pure functions that take an observed snapshot,
//! the controller's settings and the current time, and return what to do (create, delete, scale,
//! drain, which phase comes next, which status to write). The controllers' shells in
//! `mcm-controller` read the caches, call these functions and execute their actions.
//!
//! This crate depends on no async runtime, API client, gRPC or HTTP stack, and reads no clock:
//! time is always a parameter. See `docs/architecture.md` for the map of modules.

pub mod drain;
pub mod machine;
pub mod machine_deployment;
pub mod machine_set;
pub mod rollout_preview;
pub mod safety;
pub mod selector;
pub mod vocabulary;

/// Builders of Machines, Nodes and times for tests of the decisions and of the shells that call
/// them (`test-support` feature).
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
