//! The manager against a Go provider: upstream's `driver.Driver` interface, implemented by the
//! in-memory driver of `provider-go/`, behind the Go bridge. Create, scale, roll to another
//! class (by replacement: the bridge offers no UpdateMachine), one driver error per retry class,
//! delete; no VM, Node or Machine is left.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use mcm_e2e::objects::{
    Kind, SUITE_LABEL, create, delete, delete_deployment_and_wait, deployment, describe_machines,
    machines, merge_patch, name, names, phase, terminating, wait_running,
};
use mcm_e2e::system::USERDATA_SECRET;
use mcm_e2e::{E2eError, Probe, Result, System, ensure, eventually};
use serde_json::{Value, json};

use crate::harness::Outcome;

/// The label of the Nodes the in-memory Go provider registers.
const MEMORY_NODE_LABEL: &str = "memory.provider.mcm.gardener.cloud/managed=true";

/// A MachineClass of the in-memory Go provider (`provider: Memory`).
async fn memory_class(s: &System, class: &str, provider_spec: Value) -> Result<()> {
    let object = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": class, "namespace": s.namespace(), "labels": {SUITE_LABEL: "true"}},
        "provider": "Memory",
        "providerSpec": provider_spec,
        "secretRef": {"name": USERDATA_SECRET, "namespace": s.namespace()}
    });
    create(s, Kind::MachineClass, object).await.map(drop)
}

fn class_of(machine: &Value) -> &str {
    machine["spec"]["class"]["name"].as_str().unwrap_or("")
}

fn last_operation(machine: &Value) -> String {
    machine["status"]["lastOperation"]["description"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// Waits until the deployment's one machine is Running and returns every lastOperation text
/// seen on the way (the driver's errors show there between retries).
async fn running_after_errors(s: &System, deployment: &str) -> Result<BTreeSet<String>> {
    let seen = Mutex::new(BTreeSet::new());
    wait_with(s, deployment, &seen).await?;
    Ok(seen
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner()))
}

async fn wait_with(s: &System, deployment: &str, seen: &Mutex<BTreeSet<String>>) -> Result<()> {
    eventually(
        &format!("{deployment}: its machine Running after the injected driver errors"),
        120,
        || async move {
            let current = machines(s, deployment).await?;
            for machine in &current {
                if let Ok(mut seen) = seen.lock() {
                    seen.insert(last_operation(machine));
                }
            }
            Ok(
                if current.len() == 1 && current.iter().all(|m| phase(m) == "Running") {
                    Probe::Done(())
                } else {
                    Probe::Waiting(describe_machines(s, &current).await)
                },
            )
        },
    )
    .await
}

pub async fn machines_through_the_go_bridge(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    memory_class(s, "br-a", json!({})).await?;
    memory_class(s, "br-b", json!({"bootDelay": "1s"})).await?;

    // Create and scale.
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "br-md", 2, "br-a", json!({})),
    )
    .await?;
    wait_running(s, "br-md", 2, 180).await?;
    merge_patch(
        s,
        Kind::MachineDeployment,
        "br-md",
        json!({"spec": {"replicas": 4}}),
    )
    .await?;
    let before = names(&wait_running(s, "br-md", 4, 180).await?);

    // Roll to another class: replaced machine by machine, never above replicas + maxSurge.
    merge_patch(
        s,
        Kind::MachineDeployment,
        "br-md",
        json!({"spec": {"template": {"spec": {"class": {"name": "br-b"}}}}}),
    )
    .await?;
    let most = AtomicUsize::new(0);
    let before = &before;
    let most_ref = &most;
    eventually(
        "br-md: 4 Running machines of class br-b, none of before",
        300,
        || async move {
            let current = machines(s, "br-md").await?;
            most_ref.fetch_max(current.len(), Ordering::Relaxed);
            let done = current.len() == 4
                && current.iter().all(|m| {
                    phase(m) == "Running"
                        && !terminating(m)
                        && class_of(m) == "br-b"
                        && !before.contains(name(m))
                });
            Ok(if done {
                Probe::Done(())
            } else {
                Probe::Waiting(describe_machines(s, &current).await)
            })
        },
    )
    .await?;
    let most = most.load(Ordering::Relaxed);
    ensure(most <= 5, || {
        format!("the rollout had {most} machines at once, more than 4 + maxSurge 1")
    })?;

    // One driver error per retry class: transient (Unavailable: short retry), ResourceExhausted
    // (--resource-exhausted-retry), and an error that needs a human (InvalidArgument).
    memory_class(
        s,
        "br-flaky",
        json!({"failures": {"create": {"code": "Unavailable", "times": 2},
                            "delete": {"code": "Unavailable", "times": 1}}}),
    )
    .await?;
    memory_class(
        s,
        "br-exhausted",
        json!({"failures": {"create": {"code": "ResourceExhausted", "times": 2}}}),
    )
    .await?;
    memory_class(
        s,
        "br-invalid",
        json!({"failures": {"create": {"code": "InvalidArgument", "times": 1000000}}}),
    )
    .await?;
    for (md, class) in [
        ("br-flaky-md", "br-flaky"),
        ("br-exhausted-md", "br-exhausted"),
        ("br-invalid-md", "br-invalid"),
    ] {
        create(
            s,
            Kind::MachineDeployment,
            deployment(s, md, 1, class, json!({})),
        )
        .await?;
    }
    // Both are watched at once: each error shows only until its retry succeeds.
    let (flaky, exhausted) = tokio::join!(
        running_after_errors(s, "br-flaky-md"),
        running_after_errors(s, "br-exhausted-md")
    );
    for (md, code, seen) in [
        ("br-flaky-md", "Unavailable", flaky?),
        ("br-exhausted-md", "ResourceExhausted", exhausted?),
    ] {
        ensure(
            seen.iter()
                .any(|text| text.contains("injected create failure") && text.contains(code)),
            || format!("{md}: the driver's {code} error never showed in lastOperation: {seen:?}"),
        )?;
    }
    let invalid = eventually(
        "br-invalid-md: the driver's InvalidArgument in its machine's lastOperation",
        120,
        || async move {
            let current = machines(s, "br-invalid-md").await?;
            Ok(
                match current.iter().find(|m| {
                    let text = last_operation(m);
                    text.contains("injected create failure") && text.contains("InvalidArgument")
                }) {
                    Some(machine) => Probe::Done(machine.clone()),
                    None => Probe::Waiting(describe_machines(s, &current).await),
                },
            )
        },
    )
    .await?;
    ensure(phase(&invalid) != "Running", || {
        format!("a machine whose VM cannot be created is Running: {invalid}")
    })?;

    // Delete everything (the flaky class's first DeleteMachine fails with Unavailable, which
    // upstream retries soon; Internal would wait for the long retry); nothing may leak.
    for md in ["br-md", "br-flaky-md", "br-exhausted-md", "br-invalid-md"] {
        delete_deployment_and_wait(s, md).await?;
    }
    let vms = s.vms().await?;
    let leaked: Vec<&Value> = vms
        .iter()
        .filter(|vm| {
            vm["machineName"]
                .as_str()
                .is_some_and(|m| m.starts_with("br-"))
        })
        .collect();
    ensure(leaked.is_empty(), || format!("VMs left behind: {leaked:?}"))?;
    let nodes: Api<Node> = Api::all(s.client());
    let left: Vec<String> = nodes
        .list(&ListParams::default().labels(MEMORY_NODE_LABEL))
        .await
        .map_err(E2eError::kube("list the in-memory provider's Nodes"))?
        .items
        .into_iter()
        .filter_map(|node| node.metadata.name)
        .filter(|node| node.starts_with("br-"))
        .collect();
    ensure(left.is_empty(), || format!("Nodes left behind: {left:?}"))?;
    for class in ["br-a", "br-b", "br-flaky", "br-exhausted", "br-invalid"] {
        delete(s, Kind::MachineClass, class).await?;
    }
    Ok(Outcome::Passed)
}
