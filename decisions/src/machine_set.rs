//! Decisions of the MachineSet controller: replicas, adoption and release, expectations, which
//! owners a watch event concerns, and semantic equality of API values.

pub mod claim;
pub mod expectations;
pub mod plan;
pub mod routing;
pub mod semantic;
