//! The Machine controller: creation, health, node metadata sync, preservation, hot update and
//! deletion flows.
//!
//! Map of reference sections (docs/behaviour.md) to decisions, shell parts and tests:
//! docs/decision-maps.md#machine-controller.

pub mod class_reconcile;
pub mod class_secrets;
pub mod context;
pub mod creation_flows;
pub mod node_reconcile;
pub mod reconcile;
pub mod terminate;
pub mod writes;
