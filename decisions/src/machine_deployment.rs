//! Decisions of the MachineDeployment controller, one module per upstream seam: the top-level
//! pass ([`decide`]), the new MachineSet and its revision ([`new_machine_set`]), scaling
//! ([`scaling`]), the rolling, recreate and in-place strategies (`rolling`, `recreate`,
//! `in_place`), rollback (`rollback`), rollout progress (`progress`), cleanup of old sets
//! (`cleanup`) and status ([`status`]); besides them revisions, surge arithmetic, the
//! migration of MachineSets lacking the hash label and the cluster-autoscaler's deletion
//! annotation. [`plan`] re-exports what the controller's shell uses.

pub mod autoscaler;
mod cleanup;
pub mod decide;
pub mod fencepost;
pub mod hash_label_migration;
mod in_place;
pub mod new_machine_set;
mod node_marks;
pub mod ownership;
pub mod plan;
mod progress;
mod recreate;
pub mod revision;
mod rollback;
mod rolling;
pub mod scaling;
pub mod status;
pub mod types;
pub mod validation;
mod work;

/// Test-only code of this controller's tests: the objects they share.
#[cfg(test)]
mod tests {
    pub(crate) mod fixtures;
}
