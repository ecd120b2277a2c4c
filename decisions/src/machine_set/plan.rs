//! The MachineSet plan as the controller's shell uses it: [`plan`] decides one reconcile pass;
//! the types, the deletion order, the status and the events the shell and the other controllers
//! need are re-exported here from the modules that own them (one per upstream seam:
//! [`super::decide`], [`super::machine_updates`], [`super::scaling`], [`super::deletion`],
//! [`super::status`], [`super::events`], [`super::validation`]).

pub use super::decide::plan;
pub use super::deletion::{
    deletion_order, is_preserved, machines_to_delete, phase_rank,
    should_failed_machine_be_terminated, terminating_status,
};
pub use super::events;
pub use super::machine_updates::apply_update;
pub use super::scaling::{machine_from_template, manage_replicas, slow_start_batches};
pub use super::status::{
    STATUS_COUNT_WRITE_INTERVAL, machine_set_status, status_needs_update, status_write_delay,
};
pub use super::types::{
    BURST_REPLICAS, KIND, MachineRef, MachineSetAction, MachineSetError, MachineSetInput,
    MachineSetPlan, MachineUpdate, RESYNC, ReplicaError, SLOW_START_INITIAL_BATCH,
};
pub use super::validation::validate;

/// Upstream's test cases replayed (docs/upstream-conformance.md).
#[cfg(test)]
mod upstream {
    mod tables;
}
