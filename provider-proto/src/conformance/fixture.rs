//! What the kit needs from the driver under test ([`Fixture`] and its optional inputs), and
//! the test [`machine`] it builds machines with.

use std::time::Duration;

use mcm_api::v1alpha1::{Machine, MachineClass};

use crate::types::SecretData;

/// An invalid providerSpec and the field path the `InvalidArgument` message must name.
#[derive(Debug, Clone)]
pub struct InvalidSpec {
    /// A class (same provider) whose providerSpec is invalid.
    pub class: MachineClass,
    /// The field path, e.g. `providerSpec.bootDelay`.
    pub field_path: String,
}

/// Inputs of the UpdateMachine checks.
#[derive(Debug, Clone)]
pub struct HotUpdate {
    /// [`Fixture::class`] with only hot-updatable providerSpec fields changed.
    pub hot_class: MachineClass,
    /// [`Fixture::class`] with a field changed that is not hot-updatable.
    pub cold_class: MachineClass,
    /// The path of that field, which the refusal must name.
    pub cold_path: String,
}

/// Inputs of the deadline check.
#[derive(Debug, Clone)]
pub struct SlowCreate {
    /// A class whose CreateMachine takes much longer than `deadline`.
    pub class: MachineClass,
    /// The deadline to call it with.
    pub deadline: Duration,
}

/// What the suite needs from the driver under test.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Namespace of the test machines.
    pub namespace: String,
    /// Prefix of the test machines' names (make it unique per run).
    pub machine_prefix: String,
    /// A valid class. Its name must be unique to the run: ListMachines must return exactly the
    /// VMs this suite creates in it.
    pub class: MachineClass,
    /// A second valid class of the same provider, with another name.
    pub other_class: MachineClass,
    /// Secret data sent with every call.
    pub secret: SecretData,
    /// An invalid providerSpec to check validation (skipped when `None`).
    pub invalid: Option<InvalidSpec>,
    /// UpdateMachine inputs (skipped when `None` or when UpdateMachine is not implemented).
    pub hot_update: Option<HotUpdate>,
    /// Deadline inputs (skipped when `None`).
    pub slow_create: Option<SlowCreate>,
}

/// A machine for the suite (and for drivers' own tests), built from its upstream JSON shape.
pub fn machine(
    namespace: &str,
    name: &str,
    class_name: &str,
    provider_id: Option<&str>,
) -> Machine {
    let mut spec = serde_json::json!({
        "class": {"kind": "MachineClass", "name": class_name},
    });
    if let Some(provider_id) = provider_id {
        spec["providerID"] = provider_id.into();
    }
    let value = serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    });
    serde_json::from_value(value).expect("a minimal machine always decodes")
}
