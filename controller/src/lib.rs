//! The controllers of the machine-controller-manager.
//!
//! Every controller folder has a pure `plan.rs` (decision logic: observed snapshot + current time +
//! configuration in, actions out; no I/O, no async, no clock reads) and, once wired, a thin
//! `reconcile.rs` shell that reads caches, calls the plan and executes its actions.

pub mod drain;
pub mod machine;
pub mod machine_deployment;
pub mod machine_set;
pub mod manager;
pub mod platform;
pub mod safety;
