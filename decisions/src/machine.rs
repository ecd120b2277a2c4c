//! Decisions of the Machine controller: creation and initialization, health and phases, node
//! sync, hot and in-place updates, preservation, deletion and the MachineClass/Secret finalizers.
//! No I/O, no async, no clock: `now` is a parameter.

pub mod backoff;
pub mod class;
pub mod class_validation;
pub mod creation;
pub mod deletion;
pub mod health;
pub mod hot_update;
pub mod in_place;
pub mod meltdown;
pub mod node_sync;
pub mod order;
pub mod preservation;
pub mod routing;
pub mod waiting;

#[cfg(test)]
mod upstream;
