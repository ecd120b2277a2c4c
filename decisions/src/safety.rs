//! Decisions of the safety controllers: API-server health freezing, orphan VM collection and the
//! overshooting freeze of MachineSets and MachineDeployments.

pub mod apiserver;
pub mod orphans;
pub mod overshoot;

#[cfg(test)]
mod upstream_tables;
