//! Decisions of the safety controllers: API-server health freezing, orphan VM collection and the
//! overshooting freeze of MachineSets and MachineDeployments.

pub mod apiserver;
pub mod orphans;
pub mod overshoot;

/// Upstream's test cases replayed (docs/upstream-conformance.md).
#[cfg(test)]
mod upstream {
    mod tables;
}
