//! Know before you roll: what a change to a MachineDeployment or a MachineClass will do to the
//! machines, told before it happens (the webhook's admission warning, `kubectl mcm rollout
//! plan`) and after it happened (`kubectl mcm rollout history --explain`).
//!
//! Every rule comes from the functions the controllers run: template identity from
//! [`crate::machine_deployment::revision`], surge and unavailability from
//! [`crate::machine_deployment::fencepost`], the per-machine hot-update decision from
//! [`crate::machine::hot_update::plan_hot_update`], and the order in which machines go from
//! [`crate::machine_set::plan::deletion_order`]. Nothing here re-implements a rollout rule.
//!
//! - [`types`]: the snapshot given to the preview and the structured verdicts;
//! - [`field_diff`]: which fields changed and what each one does;
//! - [`batches`]: batch sizes, counts and the duration estimate;
//! - [`verdict`]: the verdicts for a deployment change and a class change;
//! - [`text`]: the one-line warnings and the detailed report.

pub mod batches;
pub mod field_diff;
pub mod text;
pub mod types;
pub mod verdict;

#[cfg(test)]
mod tests;
