//! Node drain decisions: which pods to evict, in which order, and when a drain is done or must be
//! forced ([`plan`]), and the PodDisruptionBudget rules a refused eviction needs ([`pdb`]).

pub mod pdb;
pub mod plan;

/// Upstream's test cases replayed (docs/upstream-conformance.md).
#[cfg(test)]
mod upstream {
    mod run_drain;
    mod tables;
}
