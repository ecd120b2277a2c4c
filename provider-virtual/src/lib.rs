//! A provider driver whose VMs are simulated but whose Nodes are real objects in the target cluster.
//!
//! - [`spec`]: the providerSpec (boot delay, initialisation, failure injection, hot-updatable tags).
//! - [`state`]: VMs, their transitions and the atomically written state file.
//! - [`driver`]: the [`mcm_provider_proto::Driver`] implementation.
//! - [`node`], [`pods`]: what a minimal kubelet decides (pure): node objects, conditions, heartbeat
//!   schedule, pod completion and volume bookkeeping.
//! - [`kubelet`]: the loop that executes those decisions against the target cluster.
//! - [`metrics`], [`admin`]: Prometheus metrics and the admin/metrics HTTP endpoint.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod admin;
pub mod driver;
pub mod kubelet;
pub mod metrics;
pub mod node;
pub mod pods;
pub mod spec;
pub mod state;
