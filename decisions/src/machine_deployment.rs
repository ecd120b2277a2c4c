//! Decisions of the MachineDeployment controller: revisions, rolling, recreate and in-place
//! strategies, surge arithmetic, status, legacy set migration and the cluster-autoscaler's
//! deletion annotation.

pub mod autoscaler;
pub mod fencepost;
pub mod legacy;
pub mod ownership;
pub mod plan;
pub mod revision;
pub mod status;
