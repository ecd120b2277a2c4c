//! Decisions of the MachineSet controller, one module per upstream seam: the reconcile pass
//! ([`decide`]), changes to existing machines ([`machine_updates`]), replicas ([`scaling`]) and
//! which machines go first ([`deletion`]), status ([`status`]), events ([`events`]) and
//! validation ([`validation`]); besides them adoption and release ([`claim`]), expectations,
//! which owners a watch event concerns, and Go's semantic equality of API values.
//! [`plan`] re-exports what the controller's shells use.

pub mod claim;
pub mod decide;
pub mod deletion;
pub mod events;
pub mod expectations;
pub mod machine_updates;
pub mod plan;
pub mod routing;
pub mod scaling;
pub mod semantic_equality;
pub mod status;
pub mod types;
pub mod validation;

/// Test-only code of this controller's tests: the objects they share.
#[cfg(test)]
mod tests {
    pub(crate) mod fixtures;
}
