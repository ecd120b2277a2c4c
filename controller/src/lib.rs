//! The controllers of the machine-controller-manager.
//!
//! Filled by the Machine lifecycle and MachineSet/MachineDeployment issues: pure `plan.rs` decision
//! modules per controller and thin `reconcile.rs` shells, plus the manager binary.
