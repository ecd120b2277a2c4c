//! The vocabulary of an admission request, shared by every stage that judges or patches it:
//! which kind, which served version, validate or mutate, CREATE or UPDATE, and who asks.
//!
//! This module imports nothing from the crate, so [`crate::paths`], [`crate::defaulting`],
//! [`crate::ratchet`], [`crate::validation`] and [`crate::admission`] can all depend on it and
//! imports run one way only: `request` ← `paths` ← `ratchet` ← `admission`.

/// The API group of every kind served here.
pub const GROUP: &str = "machine.sapcloud.io";

/// The four kinds with admission webhooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `Machine`.
    Machine,
    /// `MachineSet`.
    MachineSet,
    /// `MachineDeployment`.
    MachineDeployment,
    /// `MachineClass`.
    MachineClass,
}

impl Kind {
    /// All kinds.
    pub const ALL: [Kind; 4] = [
        Kind::Machine,
        Kind::MachineSet,
        Kind::MachineDeployment,
        Kind::MachineClass,
    ];

    /// The Kind name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kind::Machine => "Machine",
            Kind::MachineSet => "MachineSet",
            Kind::MachineDeployment => "MachineDeployment",
            Kind::MachineClass => "MachineClass",
        }
    }

    /// The lower-case name used in webhook paths (`/validate-machine-sapcloud-io-<this>`).
    #[must_use]
    pub fn path_name(self) -> &'static str {
        match self {
            Kind::Machine => "machine",
            Kind::MachineSet => "machineset",
            Kind::MachineDeployment => "machinedeployment",
            Kind::MachineClass => "machineclass",
        }
    }
}

/// Served versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// `v1alpha1`.
    V1alpha1,
    /// `v1beta1`.
    V1beta1,
}

/// Validating or mutating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `/validate-...`.
    Validate,
    /// `/mutate-...`.
    Mutate,
}

/// The admission operation being validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A new object.
    Create,
    /// A change to an existing object.
    Update,
}

/// What the rules may know about the request besides the objects.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// CREATE or UPDATE.
    pub operation: Operation,
    /// `request.userInfo.username`.
    pub username: &'a str,
}
