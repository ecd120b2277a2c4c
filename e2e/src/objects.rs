//! Object helpers for scenarios: MachineClasses and MachineDeployments built as JSON (the shape
//! a user writes), reads of Machines, MachineSets, Nodes, Events and VMs as JSON, merge patches,
//! and the waits every scenario needs ("n machines Running with Ready nodes", "all gone").
//!
//! JSON rather than the typed structs keeps the suite a black-box test of the wire format.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::error::{E2eError, Result};
use crate::system::{System, USERDATA_SECRET};
use crate::wait::{Probe, eventually};

/// Label on every MachineClass and MachineDeployment the suite creates, so a run against a
/// cluster can remove what an interrupted earlier run left behind.
pub const SUITE_LABEL: &str = "e2e.mcm/suite";

/// The kinds of `machine.sapcloud.io`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Machine.
    Machine,
    /// MachineSet.
    MachineSet,
    /// MachineDeployment.
    MachineDeployment,
    /// MachineClass.
    MachineClass,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Machine => "Machine",
            Self::MachineSet => "MachineSet",
            Self::MachineDeployment => "MachineDeployment",
            Self::MachineClass => "MachineClass",
        }
    }
}

/// The `v1alpha1` API of a kind in the system's namespace.
pub fn api(system: &System, kind: Kind) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("machine.sapcloud.io", "v1alpha1", kind.name());
    let resource = ApiResource::from_gvk(&gvk);
    Api::namespaced_with(system.client(), system.namespace(), &resource)
}

/// An object as JSON.
fn to_json(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// `status.currentStatus.phase` of a Machine (`""` when unset).
pub fn phase(machine: &Value) -> &str {
    machine["status"]["currentStatus"]["phase"]
        .as_str()
        .unwrap_or("")
}

/// `metadata.name`.
pub fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or("")
}

/// Whether the object has a deletion timestamp.
pub fn terminating(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// A label value.
pub fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["labels"][key].as_str()
}

/// An annotation value.
pub fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][key].as_str()
}

/// Whether a Node JSON has `Ready=True`.
pub fn node_ready(node: &Value) -> bool {
    node["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Creates a MachineClass of provider-virtual with the given providerSpec and CPU count.
pub async fn create_class(
    system: &System,
    class: &str,
    provider_spec: Value,
    cpu: &str,
) -> Result<()> {
    let object = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": class, "namespace": system.namespace(), "labels": {SUITE_LABEL: "true"}},
        "provider": "virtual",
        "nodeTemplate": {
            "capacity": {"cpu": cpu, "gpu": "0", "memory": "4Gi", "pods": "110"},
            "instanceType": format!("v.cpu{cpu}"),
            "region": "virt-1",
            "zone": "virt-1a"
        },
        "providerSpec": provider_spec,
        "secretRef": {"name": USERDATA_SECRET, "namespace": system.namespace()}
    });
    create(system, Kind::MachineClass, object).await.map(|_| ())
}

/// Creates an object of `kind` from JSON and returns what the API server stored.
pub async fn create(system: &System, kind: Kind, object: Value) -> Result<Value> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("?")
        .to_owned();
    let dynamic: DynamicObject = serde_json::from_value(object)
        .map_err(E2eError::decode(format!("{} {name}", kind.name())))?;
    api(system, kind)
        .create(&PostParams::default(), &dynamic)
        .await
        .map(|o| to_json(&o))
        .map_err(E2eError::kube(format!("create {} {name}", kind.name())))
}

/// A MachineDeployment of `replicas` machines of `class`: selector and template label
/// `name: <deployment>`, RollingUpdate (maxSurge 1, maxUnavailable 0), then `overrides` merged in
/// (JSON merge patch semantics).
pub fn deployment(
    system: &System,
    deployment: &str,
    replicas: i64,
    class: &str,
    overrides: Value,
) -> Value {
    let mut object = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": deployment, "namespace": system.namespace(), "labels": {SUITE_LABEL: "true"}},
        "spec": {
            "replicas": replicas,
            "minReadySeconds": 0,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": {"name": deployment}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"name": deployment}},
                "spec": {
                    "class": {"kind": "MachineClass", "name": class},
                    "nodeTemplate": {"metadata": {"labels": {"e2e.mcm/deployment": deployment}}},
                    "creationTimeout": "3m",
                    "healthTimeout": "20s",
                    "drainTimeout": "60s",
                    "maxEvictRetries": 10
                }
            }
        }
    });
    json_patch::merge(&mut object, &overrides);
    object
}

/// Gets an object (`None` when it does not exist).
pub async fn get(system: &System, kind: Kind, name: &str) -> Result<Option<Value>> {
    api(system, kind)
        .get_opt(name)
        .await
        .map(|o| o.as_ref().map(to_json))
        .map_err(E2eError::kube(format!("get {} {name}", kind.name())))
}

/// Gets an object that must exist.
pub async fn must_get(system: &System, kind: Kind, name: &str) -> Result<Value> {
    get(system, kind, name)
        .await?
        .ok_or_else(|| E2eError::Assertion(format!("{} {name} does not exist", kind.name())))
}

/// Applies a JSON merge patch to an object.
pub async fn merge_patch(system: &System, kind: Kind, name: &str, patch: Value) -> Result<Value> {
    api(system, kind)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|o| to_json(&o))
        .map_err(E2eError::kube(format!(
            "merge-patch {} {name} with {patch}",
            kind.name()
        )))
}

/// Deletes an object (absent is fine).
pub async fn delete(system: &System, kind: Kind, name: &str) -> Result<()> {
    match api(system, kind)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(E2eError::kube(format!("delete {} {name}", kind.name()))(e)),
    }
}

/// Objects of `kind` with label `name=<deployment>` (Machines and MachineSets of a deployment).
pub async fn of_deployment(system: &System, kind: Kind, deployment: &str) -> Result<Vec<Value>> {
    let list = api(system, kind)
        .list(&ListParams::default().labels(&format!("name={deployment}")))
        .await
        .map_err(E2eError::kube(format!(
            "list {}s of {deployment}",
            kind.name()
        )))?;
    let mut items: Vec<Value> = list.items.iter().map(to_json).collect();
    items.sort_by(|a, b| name(a).cmp(name(b)));
    Ok(items)
}

/// The machines of a deployment.
pub async fn machines(system: &System, deployment: &str) -> Result<Vec<Value>> {
    of_deployment(system, Kind::Machine, deployment).await
}

/// A Node (`None` when absent).
pub async fn node(system: &System, name: &str) -> Result<Option<Value>> {
    let nodes: Api<Node> = Api::all(system.client());
    let node = nodes
        .get_opt(name)
        .await
        .map_err(E2eError::kube(format!("get Node {name}")))?;
    Ok(node.map(|n| serde_json::to_value(n).unwrap_or(Value::Null)))
}

/// Merge-patches a Node.
pub async fn patch_node(system: &System, name: &str, patch: Value) -> Result<()> {
    let nodes: Api<Node> = Api::all(system.client());
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(E2eError::kube(format!(
            "merge-patch Node {name} with {patch}"
        )))
}

/// One line per machine (`name phase node-ready`) for messages.
pub async fn describe_machines(system: &System, machines: &[Value]) -> String {
    let mut lines = Vec::new();
    for machine in machines {
        let machine_name = name(machine);
        let node_state = match node(system, machine_name).await {
            Ok(Some(n)) if node_ready(&n) => "node Ready",
            Ok(Some(_)) => "node not Ready",
            Ok(None) => "no node",
            Err(_) => "node unreadable",
        };
        lines.push(format!(
            "{machine_name} phase={:?}{} lastOperation={:?} ({node_state})",
            phase(machine),
            if terminating(machine) {
                " terminating"
            } else {
                ""
            },
            machine["status"]["lastOperation"]["description"]
                .as_str()
                .unwrap_or("")
        ));
    }
    if lines.is_empty() {
        "no machines".to_owned()
    } else {
        lines.join("; ")
    }
}

/// Waits until the deployment has exactly `replicas` machines, all `Running`, not terminating,
/// each with a Ready Node; returns them.
pub async fn wait_running(
    system: &System,
    deployment: &str,
    replicas: usize,
    seconds: u64,
) -> Result<Vec<Value>> {
    eventually(
        &format!("{deployment}: exactly {replicas} machine(s) Running with Ready nodes"),
        seconds,
        || async move {
            let machines = machines(system, deployment).await?;
            let mut good = 0;
            for machine in &machines {
                if phase(machine) == "Running"
                    && !terminating(machine)
                    && let Some(n) = node(system, name(machine)).await?
                    && node_ready(&n)
                {
                    good += 1;
                }
            }
            if machines.len() == replicas && good == replicas {
                Ok(Probe::Done(machines))
            } else {
                Ok(Probe::Waiting(describe_machines(system, &machines).await))
            }
        },
    )
    .await
}

/// Names of a list of objects.
pub fn names(objects: &[Value]) -> BTreeSet<String> {
    objects.iter().map(|o| name(o).to_owned()).collect()
}

/// VMs of provider-virtual whose machine name starts with `prefix` (sandbox only).
pub async fn vms_with_prefix(system: &System, prefix: &str) -> Result<Vec<Value>> {
    Ok(system
        .vms()
        .await?
        .into_iter()
        .filter(|vm| {
            vm["machineName"]
                .as_str()
                .is_some_and(|m| m.starts_with(prefix))
        })
        .collect())
}

/// Deletes a deployment and waits until its machines, their nodes and (sandbox) their VMs are
/// gone: the clean-up every scenario ends with, and a check that deletion leaks nothing.
pub async fn delete_deployment_and_wait(system: &System, deployment: &str) -> Result<()> {
    delete(system, Kind::MachineDeployment, deployment).await?;
    eventually(
        &format!("{deployment}: deleted with its machines, nodes and VMs"),
        240,
        || async move {
            let machines = machines(system, deployment).await?;
            let md = get(system, Kind::MachineDeployment, deployment).await?;
            if !machines.is_empty() || md.is_some() {
                return Ok(Probe::Waiting(format!(
                    "deployment present: {}; machines: {}",
                    md.is_some(),
                    describe_machines(system, &machines).await
                )));
            }
            if system.has_local_processes() {
                let vms = vms_with_prefix(system, &format!("{deployment}-")).await?;
                if !vms.is_empty() {
                    let ids: Vec<&str> = vms
                        .iter()
                        .filter_map(|v| v["machineName"].as_str())
                        .collect();
                    return Ok(Probe::Waiting(format!("VMs left: {ids:?}")));
                }
            }
            Ok(Probe::Done(()))
        },
    )
    .await
}

/// Events in the namespace about the object `name` (any kind), as `reason: message` lines.
pub async fn events_about(system: &System, name: &str) -> Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(system.client(), system.namespace());
    let list = events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .map_err(E2eError::kube(format!("list events about {name}")))?;
    Ok(list
        .items
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.as_deref().unwrap_or(""),
                e.message.as_deref().unwrap_or("")
            )
        })
        .collect())
}

/// Deletes the MachineDeployments and MachineClasses an earlier run left (label
/// [`SUITE_LABEL`]) and waits until their machines are gone. Used against clusters, where
/// objects outlive the suite.
pub async fn remove_leftovers(system: &System) -> Result<()> {
    let selector = ListParams::default().labels(&format!("{SUITE_LABEL}=true"));
    let deployments = api(system, Kind::MachineDeployment)
        .list(&selector)
        .await
        .map_err(E2eError::kube("list leftover MachineDeployments"))?;
    for md in &deployments.items {
        let md_name = md.metadata.name.clone().unwrap_or_default();
        println!("mcm-e2e: removing MachineDeployment {md_name} left by an earlier run");
        delete_deployment_and_wait(system, &md_name).await?;
    }
    let classes = api(system, Kind::MachineClass)
        .list(&selector)
        .await
        .map_err(E2eError::kube("list leftover MachineClasses"))?;
    for class in &classes.items {
        let class_name = class.metadata.name.clone().unwrap_or_default();
        delete(system, Kind::MachineClass, &class_name).await?;
    }
    Ok(())
}

/// A finalizer of the suite that keeps a surplus Machine while a scenario waits for the
/// overshooting freeze: a MachineSet deletes surplus machines at once, and without a finalizer
/// they can vanish before the check counts them (a real machine always carries the machine
/// controller's finalizer, so it stays while it terminates; the count includes terminating
/// machines). [`release_hold`] removes it.
pub const HOLD_FINALIZER: &str = "e2e.mcm/hold";

/// Removes [`HOLD_FINALIZER`] from a machine (absent machine: nothing to do).
///
/// The patch carries the resourceVersion it was computed from and is computed again after a
/// refusal: the machine controller may remove its own finalizer in between, and a list written
/// from the older read would add that finalizer back to an object being deleted. The API server
/// refuses that with 422 (validation comes before the resourceVersion check) or 409.
pub async fn release_hold(system: &System, machine: &str) -> Result<()> {
    let mut attempt = 0;
    loop {
        let Some(object) = get(system, Kind::Machine, machine).await? else {
            return Ok(());
        };
        let rest: Vec<&Value> = object["metadata"]["finalizers"]
            .as_array()
            .map(|f| f.iter().filter(|f| *f != HOLD_FINALIZER).collect())
            .unwrap_or_default();
        let patch = json!({"metadata": {
            "resourceVersion": object["metadata"]["resourceVersion"],
            "finalizers": rest,
        }});
        match api(system, Kind::Machine)
            .patch(machine, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(kube::Error::Api(status))
                if (status.code == 409 || status.code == 422) && attempt < 5 =>
            {
                attempt += 1;
            }
            Err(e) => {
                return Err(E2eError::kube(format!(
                    "merge-patch Machine {machine} with {patch}"
                ))(e));
            }
        }
    }
}

/// A Machine named `machine` made from the MachineSet JSON `set`'s template and owned by it
/// (controller reference), with `finalizers`: how a scenario makes a MachineSet overshoot.
pub fn machine_of_set(system: &System, set: &Value, machine: &str, finalizers: &[&str]) -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": machine,
            "namespace": system.namespace(),
            "finalizers": finalizers,
            "labels": set["spec"]["template"]["metadata"]["labels"],
            "ownerReferences": [{
                "apiVersion": "machine.sapcloud.io/v1alpha1",
                "kind": "MachineSet",
                "name": name(set),
                "uid": set["metadata"]["uid"],
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": set["spec"]["template"]["spec"]
    })
}

/// Whether the overshooting safety froze a MachineSet or MachineDeployment (label
/// `freeze: True` or a `Frozen` condition).
pub fn frozen(object: &Value) -> bool {
    object["metadata"]["labels"]["freeze"] == "True"
        || object["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Frozen"))
}

/// Waits until the MachineSet `set` is frozen for overshooting (its `freeze` label, or the
/// `FrozeMachineSet` event when it was unfrozen again before a poll saw the label).
pub async fn wait_frozen(system: &System, set: &str, seconds: u64) -> Result<()> {
    eventually(
        &format!("MachineSet {set} frozen for overshooting"),
        seconds,
        || async move {
            let events = events_about(system, set).await?;
            let object = must_get(system, Kind::MachineSet, set).await?;
            Ok(
                if object["metadata"]["labels"]["freeze"] == "True"
                    || events.iter().any(|e| e.starts_with("FrozeMachineSet"))
                {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!(
                        "labels {}, events {events:?}",
                        object["metadata"]["labels"]
                    ))
                },
            )
        },
    )
    .await
}
