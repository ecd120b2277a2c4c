//! The MachineDeployment plan as the controller's shell uses it: [`plan`] decides one reconcile
//! pass; the types, the create-conflict decisions and the arithmetic the shell and the safety
//! controller need are re-exported here from the modules that own them (one per upstream seam:
//! [`super::decide`], [`super::new_machine_set`], [`super::scaling`], `rolling`,
//! `recreate`, `in_place`, `rollback`, `progress`,
//! `cleanup`, [`super::status`]).

pub use super::decide::plan;
pub use super::new_machine_set::{
    CreateConflict, REASON_MACHINE_SET_CREATE_ERROR, REASON_NEW_MACHINE_SET_CREATED,
    create_conflict, create_failure, new_machine_set_replicas,
};
pub use super::scaling::{is_scaling_event, proportional_scale_in};
pub use super::types::{
    DeploymentAction, DeploymentConfig, DeploymentError, DeploymentInput, DeploymentPlan, NodeView,
    RESYNC,
};
pub use super::validation::validate;

/// Upstream's test cases replayed (docs/upstream-conformance.md).
#[cfg(test)]
mod upstream {
    mod tables;
}
