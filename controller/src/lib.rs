//! The controllers of the machine-controller-manager.
//!
//! The shells: every controller folder holds a `reconcile.rs` (and its submodules) that reads
//! caches and the API, calls the controller's pure decisions in the `mcm-decisions` crate
//! (observed snapshot + current time + configuration in, actions out; no I/O, no async, no clock
//! reads) and executes the actions (docs/architecture.md).

pub mod drain;
pub mod machine;
pub mod machine_deployment;
pub mod machine_set;
pub mod manager;
pub mod platform;
pub mod safety;
