//! Safety controllers: orphan VM collection and API-server health freezing (machine side), and the
//! overshooting freeze of MachineSets and MachineDeployments.

pub mod apiserver;
pub mod context;
pub mod orphans;
pub mod overshoot;
pub mod period;
pub mod reconcile;
