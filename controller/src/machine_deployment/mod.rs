//! The MachineDeployment controller: revisions, rollouts (RollingUpdate, Recreate), scaling,
//! pause, rollback, progress, status and history cleanup.
//!
//! Map of reference sections (docs/behaviour.md) to decisions, shell parts and tests:
//! docs/decision-maps.md#machine-deployment-controller.

pub mod context;
pub mod reconcile;
