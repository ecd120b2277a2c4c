//! Shared builders.

use mcm_api::v1alpha1::MachineClass;
use serde_json::{Value, json};

/// A MachineClass of the virtual provider with a node template.
pub fn class(name: &str, spec: Value) -> MachineClass {
    class_with_provider(name, spec, "virtual")
}

/// A MachineClass with any provider value.
pub fn class_with_provider(name: &str, spec: Value, provider: &str) -> MachineClass {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": "shoot--test"},
        "provider": provider,
        "providerSpec": spec,
        "nodeTemplate": {
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "instanceType": "v.small",
            "region": "virt-1",
            "zone": "virt-1a",
        },
    }))
    .unwrap()
}
