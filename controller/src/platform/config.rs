//! Command-line flags of `machine-controller-manager` and their validation.
//!
//! Upstream ships two binaries: `machine-controller-manager` (MachineSet, MachineDeployment and
//! overshooting safety; docs/behaviour.md#flags-mcm) and the provider's `machine-controller` (Machine, Node,
//! MachineClass, Secret and the other safety controllers; docs/behaviour.md#flags-mc). Our single binary can run either
//! share or both (`--controllers`, [`super::selection`]), so it accepts the union of both flag
//! sets with upstream names, types and defaults. Where the two
//! binaries disagree (`--port`, `--concurrent-syncs`, `--profiling`) the `machine-controller-manager`
//! default wins, because this binary takes that name, its lease and its admin port.
//!
//! Parsing ([`Args`], clap) only checks syntax; [`validate`] is pure and reports **every** violated
//! rule at once (as upstream's aggregated `Validate()` does), producing a typed [`Config`].
//!
//! One file per part: `flags.rs` (the clap [`Args`] and the Go-style parsers of their values),
//! `cluster.rs` (the kubeconfig flags' values, [`KubeconfigSource`]), `leader_election.rs` (the
//! Lease's name and lock, [`LeaderElectionConfig`]), `violations.rs` ([`FieldError`], the
//! collector of violations and the syntax checks), `rules.rs` ([`validate`]: every rule and the
//! resolution of valid flags into the settings) and `settings.rs` (the validated [`Config`] handed
//! to the controllers).

mod cluster;
mod flags;
mod leader_election;
mod rules;
mod settings;
mod violations;

pub use super::logging::LogFormat;
pub use cluster::{IN_CLUSTER_CONFIG, KubeconfigSource, TARGET_KUBECONFIG_DISABLED};
pub use flags::Args;
pub use leader_election::{
    LEASE_NAME, LEASES_RESOURCE_LOCK, LeaderElectionConfig, whole_seconds_up,
};
pub use rules::validate;
pub use settings::{ClientSettings, Config, SafetySettings};
pub use violations::FieldError;

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
