//! Objects decode into the v1alpha1 types and encode back to the same JSON.
//!
//! The realistic objects below are written from the upstream field tables (every field set,
//! unknown fields inside `providerSpec` and `nodeTemplate`, unknown enum values, int-or-string as
//! number and as percentage). The property test generates typed objects, encodes and decodes them.

use mcm_api::duration::Duration;
use mcm_api::v1alpha1::{
    ConditionStatus, Machine, MachineClass, MachineDeployment, MachineDeploymentConditionType,
    MachineDeploymentStrategyType, MachineOperationType, MachinePhase, MachineSet,
    MachineSetConditionType, MachineState, OrchestrationType,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Decodes `input` as `T`, encodes it again and returns both the typed value and the JSON.
fn round_trip<T: DeserializeOwned + Serialize>(input: &Value) -> (T, Value) {
    let typed: T = serde_json::from_value(input.clone())
        .unwrap_or_else(|e| panic!("decoding failed: {e}\n{input:#}"));
    let output = serde_json::to_value(&typed).unwrap();
    (typed, output)
}

/// Drops object members whose value is `null`: Go writes `"creationTimestamp": null` in embedded
/// metadata and every field here treats null like absent, so these are the same object.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(object) => Value::Object(
            object
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

fn machine_json() -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": "shoot-worker-a-7d9f8-x2k4p",
            "namespace": "shoot--dev--demo",
            "uid": "0a4f1c8e-6f62-4d1c-9f3c-2f3f0b1f6a11",
            "resourceVersion": "123456",
            "generation": 3,
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": {
                "name": "shoot-worker-a",
                "machine-template-hash": "1234567890",
                "node": "ip-10-250-0-12.eu-west-1.compute.internal"
            },
            "annotations": { "machinepriority.machine.sapcloud.io": "3" },
            "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
            "ownerReferences": [{
                "apiVersion": "machine.sapcloud.io/v1alpha1",
                "kind": "MachineSet",
                "name": "shoot-worker-a-7d9f8",
                "uid": "5b9e2a36-3a4e-4c0e-8a55-0c1b0e2f9d77",
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "class": { "apiGroup": "machine.sapcloud.io", "kind": "MachineClass", "name": "shoot-worker-a-9c1e2" },
            "providerID": "aws:///eu-west-1a/i-0123456789abcdef0",
            "nodeTemplate": {
                "metadata": {
                    "creationTimestamp": null,
                    "labels": { "worker.gardener.cloud/pool": "worker-a" },
                    "annotations": { "example.com/owner": "team-a" }
                },
                "spec": {
                    "podCIDR": "100.96.1.0/24",
                    "podCIDRs": ["100.96.1.0/24"],
                    "providerID": "aws:///eu-west-1a/i-0123456789abcdef0",
                    "unschedulable": false,
                    "taints": [
                        { "key": "dedicated", "value": "gpu", "effect": "NoSchedule" },
                        { "key": "node.machine.sapcloud.io/preserved", "effect": "NoSchedule", "timeAdded": "2026-11-20T11:00:00Z" }
                    ],
                    "configSource": { "configMap": { "name": "kubelet", "namespace": "kube-system", "kubeletConfigKey": "kubelet" } },
                    "externalID": "legacy"
                }
            },
            "drainTimeout": "2h0m0s",
            "healthTimeout": "10m0s",
            "creationTimeout": "20m0s",
            "inPlaceUpdateTimeout": "1h30m0s",
            "machinePreserveTimeout": "96h0m0s",
            "disableHealthTimeout": false,
            "maxEvictRetries": 30,
            "nodeConditions": "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable"
        },
        "status": {
            "addresses": [
                { "type": "InternalIP", "address": "10.250.0.12" },
                { "type": "Hostname", "address": "ip-10-250-0-12" }
            ],
            "conditions": [
                {
                    "type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-11-20T12:00:00Z",
                    "lastTransitionTime": "2026-11-20T10:05:00Z"
                },
                {
                    "type": "Preserved", "status": "True", "reason": "Preserved by user.",
                    "message": "Preserved node drained successfully.",
                    "lastHeartbeatTime": "2026-11-20T12:00:00Z",
                    "lastTransitionTime": "2026-11-20T11:00:00Z"
                }
            ],
            "lastOperation": {
                "description": "Machine shoot-worker-a-7d9f8-x2k4p successfully joined the cluster",
                "errorCode": "",
                "lastUpdateTime": "2026-11-20T10:05:00Z",
                "state": "Successful",
                "type": "Create"
            },
            "currentStatus": {
                "phase": "Running",
                "timeoutActive": false,
                "lastUpdateTime": "2026-11-20T10:05:00Z",
                "preserveExpiryTime": "2026-11-24T10:05:00Z"
            },
            "lastKnownState": "{\"instanceID\":\"i-0123456789abcdef0\"}"
        }
    })
}

fn machine_class_json() -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {
            "name": "shoot-worker-a-9c1e2",
            "namespace": "shoot--dev--demo",
            "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
            "labels": { "worker.gardener.cloud/pool": "worker-a" }
        },
        "provider": "AWS",
        "providerSpec": {
            "ami": "ami-0123456789",
            "machineType": "m5.large",
            "region": "eu-west-1",
            "blockDevices": [{ "ebs": { "volumeSize": 50, "volumeType": "gp3", "encrypted": true } }],
            "networkInterfaces": [{ "subnetID": "subnet-1", "securityGroupIDs": ["sg-1", "sg-2"] }],
            "tags": { "kubernetes.io/cluster/shoot--dev--demo": "1" },
            "srcAndDstChecksEnabled": false,
            "futureProviderField": { "nested": [1, 2.5, "three", null, { "deep": true }] }
        },
        "nodeTemplate": {
            "capacity": { "cpu": "2", "memory": "8Gi", "gpu": "0", "ephemeral-storage": "50Gi" },
            "virtualCapacity": { "subdomain.domain.com/virtual-resource-name": "1024" },
            "instanceType": "m5.large",
            "region": "eu-west-1",
            "zone": "eu-west-1a",
            "architecture": "amd64",
            "futureNodeTemplateField": { "kept": ["as", "is"] },
            "anotherUnknown": 42
        },
        "secretRef": { "name": "cloudprovider-and-userdata", "namespace": "shoot--dev--demo" },
        "credentialsSecretRef": { "name": "cloudprovider", "namespace": "shoot--dev--demo" }
    })
}

fn template_json() -> Value {
    json!({
        "metadata": {
            "creationTimestamp": null,
            "labels": { "name": "shoot-worker-a" },
            "annotations": { "checksum/secret": "abc" }
        },
        "spec": {
            "class": { "kind": "MachineClass", "name": "shoot-worker-a-9c1e2" },
            "nodeTemplate": {
                "metadata": { "creationTimestamp": null, "labels": { "worker.gardener.cloud/pool": "worker-a" } },
                "spec": { "taints": [{ "key": "k", "value": "v", "effect": "NoExecute" }] }
            },
            "drainTimeout": "2h0m0s",
            "healthTimeout": "10m0s",
            "creationTimeout": "20m0s",
            "inPlaceUpdateTimeout": "10m0s",
            "machinePreserveTimeout": "3h0m0s",
            "disableHealthTimeout": true,
            "maxEvictRetries": 10,
            "nodeConditions": "KernelDeadlock"
        }
    })
}

fn summary_json() -> Value {
    json!({
        "name": "shoot-worker-a-7d9f8-zz9q1",
        "providerID": "aws:///eu-west-1a/i-0fedcba9876543210",
        "ownerRef": "shoot-worker-a-7d9f8",
        "lastOperation": {
            "description": "Cloud provider message - machine codes error: code = [ResourceExhausted] message = [insufficient capacity]",
            "errorCode": "ResourceExhausted",
            "lastUpdateTime": "2026-11-20T10:10:00Z",
            "state": "Failed",
            "type": "Create"
        }
    })
}

fn machine_set_json() -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {
            "name": "shoot-worker-a-7d9f8",
            "namespace": "shoot--dev--demo",
            "labels": { "name": "shoot-worker-a", "machine-template-hash": "1234567890", "freeze": "True" },
            "annotations": {
                "deployment.kubernetes.io/revision": "4",
                "deployment.kubernetes.io/desired-replicas": "3",
                "deployment.kubernetes.io/max-replicas": "4"
            }
        },
        "spec": {
            "replicas": 3,
            "selector": {
                "matchLabels": { "name": "shoot-worker-a", "machine-template-hash": "1234567890" },
                "matchExpressions": [{ "key": "zone", "operator": "In", "values": ["a", "b"] }]
            },
            "machineClass": { "kind": "MachineClass", "name": "shoot-worker-a-9c1e2" },
            "template": template_json(),
            "minReadySeconds": 0,
            "autoPreserveFailedMachineMax": 1
        },
        "status": {
            "replicas": 3,
            "fullyLabeledReplicas": 3,
            "readyReplicas": 2,
            "availableReplicas": 2,
            "preservedFailedReplicas": 1,
            "observedGeneration": 7,
            "machineSetCondition": [
                { "type": "Frozen", "status": "True", "lastTransitionTime": "2026-11-20T10:00:00Z", "reason": "OvershootingReplicaCount", "message": "frozen" },
                { "type": "SomethingNewer", "status": "Degraded" }
            ],
            "lastOperation": { "description": "Deleting machine from cloud provider", "state": "Processing", "type": "Delete", "lastUpdateTime": "2026-11-20T10:00:00Z" },
            "failedMachines": [summary_json()],
            "autoPreserveFailedMachineCount": 1
        }
    })
}

fn machine_deployment_json() -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {
            "name": "shoot-worker-a",
            "namespace": "shoot--dev--demo",
            "generation": 12,
            "annotations": {
                "deployment.kubernetes.io/revision": "4",
                "node.machine.sapcloud.io/trigger-deletion-by-mcm": "m1~2026-11-20T10:00:00Z,m2"
            }
        },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "name": "shoot-worker-a" } },
            "template": template_json(),
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": { "maxSurge": 1, "maxUnavailable": "25%" },
                "inPlaceUpdate": { "maxSurge": "0%", "maxUnavailable": 2, "orchestrationType": "Manual" }
            },
            "minReadySeconds": 500,
            "revisionHistoryLimit": 0,
            "paused": false,
            "rollbackTo": { "revision": 2 },
            "progressDeadlineSeconds": 600,
            "autoPreserveFailedMachineMax": 2
        },
        "status": {
            "observedGeneration": 12,
            "replicas": 4,
            "updatedReplicas": 2,
            "readyReplicas": 3,
            "availableReplicas": 3,
            "preservedFailedReplicas": 1,
            "unavailableReplicas": 1,
            "conditions": [
                {
                    "type": "Available", "status": "True",
                    "lastUpdateTime": "2026-11-20T10:00:00Z", "lastTransitionTime": "2026-11-20T09:00:00Z",
                    "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."
                },
                {
                    "type": "Progressing", "status": "True",
                    "lastUpdateTime": "2026-11-20T10:00:00Z", "lastTransitionTime": "2026-11-20T09:00:00Z",
                    "reason": "MachineSetUpdated", "message": "MachineSet \"shoot-worker-a-7d9f8\" is progressing."
                }
            ],
            "collisionCount": 1,
            "failedMachines": [summary_json()]
        }
    })
}

#[test]
fn machine_round_trips_with_every_field() {
    let input = machine_json();
    let (machine, output) = round_trip::<Machine>(&input);
    assert_eq!(output, without_nulls(&input));
    assert_eq!(machine.phase(), Some(&MachinePhase::Running));
    assert_eq!(
        machine.node_name(),
        Some("ip-10-250-0-12.eu-west-1.compute.internal")
    );
    let config = &machine.spec.configuration;
    assert_eq!(config.drain_timeout, Some(Duration::from_hours(2)));
    assert_eq!(
        config.machine_preserve_timeout,
        Some(Duration::from_hours(96))
    );
    assert_eq!(config.max_evict_retries, Some(30));
    let last = machine.last_operation().unwrap();
    assert_eq!(last.state, Some(MachineState::Successful));
    assert_eq!(last.type_, Some(MachineOperationType::Create));
}

#[test]
fn machine_keeps_unknown_enum_values() {
    let mut input = machine_json();
    input["status"]["currentStatus"]["phase"] = json!("Hibernating");
    input["status"]["lastOperation"]["state"] = json!("Paused");
    input["status"]["lastOperation"]["type"] = json!("Resize");
    let (machine, output) = round_trip::<Machine>(&input);
    assert_eq!(output, without_nulls(&input));
    assert_eq!(
        machine.phase(),
        Some(&MachinePhase::Other("Hibernating".into()))
    );
    let last = machine.last_operation().unwrap();
    assert_eq!(last.state, Some(MachineState::Other("Paused".into())));
    assert_eq!(
        last.type_,
        Some(MachineOperationType::Other("Resize".into()))
    );
}

#[test]
fn minimal_machine_writes_nothing_that_was_not_there() {
    let input = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": { "name": "m" },
        "spec": {}
    });
    let (_, output) = round_trip::<Machine>(&input);
    assert_eq!(output, input);

    // Empty values that were written explicitly are kept as written, not dropped or defaulted.
    let input = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": { "name": "m" },
        "spec": { "providerID": "", "maxEvictRetries": 0, "class": {} },
        "status": { "currentStatus": { "phase": "", "timeoutActive": false }, "conditions": [] }
    });
    let (machine, output) = round_trip::<Machine>(&input);
    assert_eq!(output, input);
    assert_eq!(machine.phase(), Some(&MachinePhase::Other(String::new())));
}

#[test]
fn machine_class_round_trips_with_unknown_fields() {
    let input = machine_class_json();
    let (class, output) = round_trip::<MachineClass>(&input);
    assert_eq!(output, input);
    assert_eq!(
        class.provider_spec["futureProviderField"]["nested"][1],
        json!(2.5)
    );
    let node_template = class.node_template.unwrap();
    assert_eq!(node_template.zone, "eu-west-1a");
    assert_eq!(node_template.extra["anotherUnknown"], json!(42));
    assert_eq!(node_template.capacity["memory"].0, "8Gi");
}

#[test]
fn machine_class_integer_quantities_are_written_as_strings_like_go() {
    // resource.Quantity accepts a number and always writes a string; so do we.
    let mut input = machine_class_json();
    input["nodeTemplate"]["capacity"]["cpu"] = json!(2);
    let (_, output) = round_trip::<MachineClass>(&input);
    assert_eq!(output["nodeTemplate"]["capacity"]["cpu"], json!("2"));
    assert_eq!(output, machine_class_json());
}

#[test]
fn machine_class_without_api_version_gets_it_on_write() {
    let mut input = machine_class_json();
    let object = input.as_object_mut().unwrap();
    object.remove("apiVersion");
    object.remove("kind");
    let (_, output) = round_trip::<MachineClass>(&input);
    assert_eq!(output, machine_class_json());
}

#[test]
fn machine_set_round_trips_with_every_field() {
    let input = machine_set_json();
    let (set, output) = round_trip::<MachineSet>(&input);
    assert_eq!(output, without_nulls(&input));
    let status = set.status.unwrap();
    let conditions = status.conditions.unwrap();
    assert_eq!(conditions[0].type_, MachineSetConditionType::Frozen);
    assert_eq!(conditions[0].status, ConditionStatus::True);
    assert_eq!(
        conditions[1].type_,
        MachineSetConditionType::Other("SomethingNewer".into())
    );
    assert_eq!(
        conditions[1].status,
        ConditionStatus::Other("Degraded".into())
    );
    assert_eq!(
        status.failed_machines.unwrap()[0].owner_ref.as_deref(),
        Some("shoot-worker-a-7d9f8")
    );
}

#[test]
fn machine_deployment_round_trips_with_every_field() {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    let input = machine_deployment_json();
    let (deployment, output) = round_trip::<MachineDeployment>(&input);
    assert_eq!(output, without_nulls(&input));
    let strategy = deployment.spec.strategy.unwrap();
    assert_eq!(
        strategy.type_,
        Some(MachineDeploymentStrategyType::RollingUpdate)
    );
    let rolling = strategy.rolling_update.unwrap().update_configuration;
    assert_eq!(rolling.max_surge, Some(IntOrString::Int(1)));
    assert_eq!(
        rolling.max_unavailable,
        Some(IntOrString::String("25%".into()))
    );
    let in_place = strategy.in_place_update.unwrap();
    assert_eq!(in_place.orchestration_type, Some(OrchestrationType::Manual));
    assert_eq!(
        in_place.update_configuration.max_unavailable,
        Some(IntOrString::Int(2))
    );
    assert_eq!(deployment.spec.revision_history_limit, Some(0));
    let conditions = deployment.status.unwrap().conditions.unwrap();
    assert_eq!(
        conditions[1].type_,
        MachineDeploymentConditionType::Progressing
    );
}

#[test]
fn machine_deployment_keeps_unknown_strategy_values() {
    let mut input = machine_deployment_json();
    input["spec"]["strategy"]["type"] = json!("BlueGreen");
    input["spec"]["strategy"]["inPlaceUpdate"]["orchestrationType"] = json!("SemiAuto");
    let (deployment, output) = round_trip::<MachineDeployment>(&input);
    assert_eq!(output, without_nulls(&input));
    let strategy = deployment.spec.strategy.unwrap();
    assert_eq!(
        strategy.type_,
        Some(MachineDeploymentStrategyType::Other("BlueGreen".into()))
    );
}

#[test]
fn lists_decode() {
    let input = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineList",
        "metadata": { "resourceVersion": "42" },
        "items": [machine_json(), machine_json()]
    });
    let list: mcm_api::v1alpha1::MachineList = serde_json::from_value(input).unwrap();
    assert_eq!(list.items.len(), 2);
    let classes: mcm_api::v1alpha1::MachineClassList = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClassList",
        "metadata": {},
        "items": [machine_class_json()]
    }))
    .unwrap();
    assert_eq!(classes.items[0].provider.as_deref(), Some("AWS"));
}

#[test]
fn durations_are_rewritten_in_go_canonical_form() {
    // Go's metav1.Duration does the same: `10m` is read and written back as `10m0s`.
    let mut input = machine_json();
    input["spec"]["healthTimeout"] = json!("10m");
    input["spec"]["drainTimeout"] = json!("1.5h");
    input["spec"]["creationTimeout"] = json!("90s");
    let (_, output) = round_trip::<Machine>(&input);
    assert_eq!(output["spec"]["healthTimeout"], json!("10m0s"));
    assert_eq!(output["spec"]["drainTimeout"], json!("1h30m0s"));
    assert_eq!(output["spec"]["creationTimeout"], json!("1m30s"));
}

mod generated {
    //! Property test: typed objects survive encode → decode unchanged. The strategies are the
    //! crate's shared ones (`mcm_api::arbitrary`, feature `proptest`), also used by the
    //! conversion and webhook property tests.

    use mcm_api::arbitrary::{machine, machine_class, machine_deployment, machine_set};
    use proptest::prelude::*;

    fn assert_round_trip<T>(value: &T) -> Result<(), TestCaseError>
    where
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let json = serde_json::to_value(value).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let decoded: T = serde_json::from_value(json.clone())
            .map_err(|e| TestCaseError::fail(format!("{e}: {json:#}")))?;
        prop_assert_eq!(&decoded, value);
        let again =
            serde_json::to_value(&decoded).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(again, json);
        Ok(())
    }

    /// Runs the round trip over `cases` generated values. The strategies of these deep types
    /// are large value trees, so the runner gets its own thread with a big stack (debug builds
    /// overflow the default 2 MiB).
    fn check<T, S>(strategy: fn() -> S)
    where
        S: Strategy<Value = T> + 'static,
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let outcome = std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn(move || {
                let config = ProptestConfig {
                    cases: 64,
                    ..ProptestConfig::default()
                };
                proptest::test_runner::TestRunner::new(config)
                    .run(&strategy(), |value| assert_round_trip(&value))
                    .map_err(|e| e.to_string())
            })
            .expect("spawn the property test thread")
            .join()
            .expect("property test thread finished");
        if let Err(failure) = outcome {
            panic!("{failure}");
        }
    }

    #[test]
    fn machines_round_trip() {
        check(machine);
    }

    #[test]
    fn machine_sets_round_trip() {
        check(machine_set);
    }

    #[test]
    fn machine_deployments_round_trip() {
        check(machine_deployment);
    }

    #[test]
    fn machine_classes_round_trip() {
        check(machine_class);
    }
}
