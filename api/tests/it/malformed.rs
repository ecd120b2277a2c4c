//! Malformed objects are rejected with an error naming the problem, never with a panic.

use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachineSet};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn machine(spec: Value) -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": { "name": "m" },
        "spec": spec
    })
}

/// Decoding must fail, and the message must mention `needle`.
fn rejects<T: DeserializeOwned + std::fmt::Debug>(input: Value, needle: &str) {
    let text = input.to_string();
    let result = std::panic::catch_unwind(|| serde_json::from_str::<T>(&text));
    let Ok(result) = result else {
        panic!("decoding panicked on {text}");
    };
    match result {
        Ok(value) => panic!("decoded malformed input {text} into {value:?}"),
        Err(error) => assert!(
            error.to_string().contains(needle),
            "error {error:?} for {text} does not mention {needle:?}"
        ),
    }
}

#[test]
fn bad_durations_are_rejected() {
    for (value, needle) in [
        (json!("10 minutes"), "unknown unit"),
        (json!("10"), "missing unit"),
        (json!(""), "invalid duration"),
        (json!("9999999999h"), "invalid duration"),
        (json!(600), "Go duration string"),
        (json!(true), "Go duration string"),
        (json!({ "minutes": 10 }), "Go duration string"),
    ] {
        rejects::<Machine>(machine(json!({ "drainTimeout": value })), needle);
    }
}

#[test]
fn wrong_types_are_rejected() {
    rejects::<Machine>(machine(json!({ "maxEvictRetries": "ten" })), "invalid type");
    rejects::<Machine>(machine(json!({ "maxEvictRetries": 1.5 })), "invalid type");
    rejects::<Machine>(
        machine(json!({ "maxEvictRetries": 3_000_000_000_i64 })),
        "invalid value",
    );
    rejects::<Machine>(
        machine(json!({ "disableHealthTimeout": "yes" })),
        "invalid type",
    );
    rejects::<Machine>(machine(json!({ "class": "MachineClass" })), "invalid type");
    rejects::<Machine>(machine(json!({ "providerID": 42 })), "invalid type");
    rejects::<Machine>(
        machine(json!({ "nodeTemplate": { "spec": { "taints": "NoSchedule" } } })),
        "invalid type",
    );
    let mut status = machine(json!({}));
    status["status"] = json!({ "currentStatus": { "phase": 3 } });
    rejects::<Machine>(status.clone(), "invalid type");
    status["status"] = json!({ "currentStatus": { "lastUpdateTime": "yesterday" } });
    rejects::<Machine>(status, "");
    rejects::<Machine>(
        json!({ "metadata": { "name": "m" }, "spec": [] }),
        "invalid type",
    );
    rejects::<Machine>(json!("a machine"), "invalid type");
}

#[test]
fn missing_required_fields_are_rejected() {
    rejects::<MachineClass>(
        json!({ "metadata": { "name": "c" }, "provider": "AWS" }),
        "providerSpec",
    );
    rejects::<MachineClass>(
        json!({
            "metadata": { "name": "c" },
            "providerSpec": {},
            "nodeTemplate": { "instanceType": "m5.large", "region": "r", "zone": "z" }
        }),
        "capacity",
    );
    rejects::<MachineDeployment>(
        json!({ "metadata": { "name": "d" }, "spec": { "replicas": 1 } }),
        "template",
    );
    rejects::<MachineSet>(
        json!({
            "metadata": { "name": "s" },
            "spec": {},
            "status": { "machineSetCondition": [{ "status": "True" }] }
        }),
        "type",
    );
    rejects::<Machine>(json!({ "metadata": { "name": "m" } }), "spec");
}

#[test]
fn malformed_selectors_and_strategies_are_rejected() {
    let deployment = |spec: Value| json!({ "metadata": { "name": "d" }, "spec": spec });
    rejects::<MachineDeployment>(
        deployment(json!({ "template": {}, "selector": { "matchLabels": ["a"] } })),
        "invalid type",
    );
    rejects::<MachineDeployment>(
        deployment(json!({ "template": {}, "strategy": { "type": 1 } })),
        "invalid type",
    );
    rejects::<MachineDeployment>(
        deployment(
            json!({ "template": {}, "strategy": { "rollingUpdate": { "maxSurge": true } } }),
        ),
        "",
    );
    rejects::<MachineDeployment>(
        deployment(json!({ "template": {}, "strategy": { "rollingUpdate": { "maxSurge": 1.5 } } })),
        "",
    );
    rejects::<MachineSet>(
        json!({ "metadata": { "name": "s" }, "spec": { "replicas": -1.0 } }),
        "invalid type",
    );
}

#[test]
fn truncated_json_is_an_error() {
    let text = machine(json!({ "drainTimeout": "10m0s" })).to_string();
    for cut in [1, text.len() / 2, text.len() - 1] {
        assert!(serde_json::from_str::<Machine>(&text[..cut]).is_err());
    }
}
