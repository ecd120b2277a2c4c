//! Node drain decisions: which pods to evict, in which order, and when a drain is done or must be
//! forced ([`plan`]), and the PodDisruptionBudget rules a refused eviction needs ([`pdb`]).

pub mod pdb;
pub mod plan;

#[cfg(test)]
mod upstream_run_drain;
#[cfg(test)]
mod upstream_tables;
