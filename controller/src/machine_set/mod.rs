//! The MachineSet controller: claim, adopt and release machines, keep the replica count, status.
//!
//! Map of reference sections (docs/behaviour.md) to decisions, shell parts and tests:
//! docs/decision-maps.md#machine-set-controller.

pub mod context;
pub mod reconcile;
