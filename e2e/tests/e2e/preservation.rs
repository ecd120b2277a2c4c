//! Preservation of machines (annotation `node.machine.sapcloud.io/preserve`): `now` keeps a
//! machine even when it fails, `when-failed` keeps it once it failed (drained), `false` lets a
//! failed machine be replaced, and `autoPreserveFailedMachineMax` preserves failed machines
//! automatically.

use std::sync::Arc;

use mcm_api::keys::annotation;
use mcm_e2e::objects::{
    Kind, create, create_class, delete, delete_deployment_and_wait, deployment, describe_machines,
    get, machines, name, node, patch_node, phase, terminating, wait_running,
};
use mcm_e2e::{Probe, Result, System, consistently, ensure, eventually};
use serde_json::{Value, json};

use crate::harness::Outcome;
use crate::health::make_unhealthy;

fn preserved(machine: &Value) -> bool {
    !machine["status"]["currentStatus"]["preserveExpiryTime"].is_null()
}

fn node_condition<'a>(node: &'a Value, kind: &str) -> Option<&'a Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

async fn start(s: &System, md: &str, overrides: Value) -> Result<String> {
    create_class(s, &format!("{md}-class"), json!({"bootDelay": "1s"}), "2").await?;
    let mut spec = json!({"spec": {"template": {"spec": {"healthTimeout": "10s"}}}});
    json_patch::merge(&mut spec, &overrides);
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, md, 1, &format!("{md}-class"), spec),
    )
    .await?;
    let running = wait_running(s, md, 1, 180).await?;
    Ok(name(&running[0]).to_owned())
}

async fn finish(s: &System, md: &str) -> Result<()> {
    delete_deployment_and_wait(s, md).await?;
    delete(s, Kind::MachineClass, &format!("{md}-class")).await
}

async fn set_node_preserve(s: &System, node: &str, value: &str) -> Result<()> {
    patch_node(
        s,
        node,
        json!({"metadata": {"annotations": {annotation::PRESERVE: value}}}),
    )
    .await
}

/// Waits until `machine` is Failed and preserved (not terminating).
async fn wait_failed_and_preserved(s: &System, md: &str, machine: &str) -> Result<()> {
    eventually(
        &format!("{machine} Failed and preserved"),
        120,
        || async move {
            let current = machines(s, md).await?;
            let m = current.iter().find(|m| name(m) == machine);
            Ok(match m {
                Some(m) if phase(m) == "Failed" && preserved(m) && !terminating(m) => {
                    Probe::Done(())
                }
                _ => Probe::Waiting(describe_machines(s, &current).await),
            })
        },
    )
    .await
}

/// Asserts the preserved machine stays for a while (longer than its 10s health timeout).
async fn stays(s: &System, md: &str, machine: &str) -> Result<()> {
    consistently(
        &format!("{machine} is kept while preserved"),
        12,
        || async move {
            let m = get(s, Kind::Machine, machine).await?;
            Ok(match m {
                Some(m) if !terminating(&m) => Probe::Done(()),
                Some(_) => Probe::Waiting("it is being deleted".to_owned()),
                None => Probe::Waiting(format!("it is gone ({md})")),
            })
        },
    )
    .await
    .map(|_| ())
}

/// Waits until `machine` is gone and the deployment has one Running machine again.
async fn wait_replaced(s: &System, md: &str, machine: &str) -> Result<()> {
    eventually(&format!("{md}: {machine} replaced"), 240, || async move {
        let old = get(s, Kind::Machine, machine).await?;
        if old.is_some() {
            return Ok(Probe::Waiting(format!("{machine} still exists")));
        }
        match wait_running(s, md, 1, 1).await {
            Ok(_) => Ok(Probe::Done(())),
            Err(e) => Ok(Probe::Waiting(e.to_string())),
        }
    })
    .await
}

/// `preserve=now` on the node: preserved at once, kept when it fails; `false` releases it.
pub async fn now(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    let md = "pv-now";
    let machine = start(s, md, json!({})).await?;
    set_node_preserve(s, &machine, "now").await?;
    let m = machine.as_str();
    eventually(
        &format!("{m}: preserved with node condition Preserved=True"),
        90,
        || async move {
            let current = get(s, Kind::Machine, m).await?.unwrap_or(Value::Null);
            let n = node(s, m).await?.unwrap_or(Value::Null);
            let condition = node_condition(&n, "Preserved")
                .cloned()
                .unwrap_or(Value::Null);
            Ok(if preserved(&current) && condition["status"] == "True" {
                Probe::Done(())
            } else {
                Probe::Waiting(format!(
                    "currentStatus {} Preserved condition {condition}",
                    current["status"]["currentStatus"]
                ))
            })
        },
    )
    .await?;
    make_unhealthy(s, m).await?;
    wait_failed_and_preserved(s, md, m).await?;
    stays(s, md, m).await?;
    set_node_preserve(s, m, "false").await?;
    wait_replaced(s, md, m).await?;
    finish(s, md).await?;
    Ok(Outcome::Passed)
}

/// `preserve=when-failed`: nothing while healthy; once Failed the machine is preserved and its
/// node drained; `false` releases it.
pub async fn when_failed(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    let md = "pv-wf";
    let machine = start(s, md, json!({})).await?;
    let m = machine.as_str();
    set_node_preserve(s, m, "when-failed").await?;
    consistently(
        &format!("{m}: not preserved while Running"),
        4,
        || async move {
            let current = get(s, Kind::Machine, m).await?.unwrap_or(Value::Null);
            Ok(if preserved(&current) {
                Probe::Waiting(format!("preserved while {}", phase(&current)))
            } else {
                Probe::Done(())
            })
        },
    )
    .await?;
    make_unhealthy(s, m).await?;
    wait_failed_and_preserved(s, md, m).await?;
    eventually(
        &format!("{m}: node condition says the preserved node was drained"),
        90,
        || async move {
            let n = node(s, m).await?.unwrap_or(Value::Null);
            let condition = node_condition(&n, "Preserved")
                .cloned()
                .unwrap_or(Value::Null);
            Ok(
                if condition["message"]
                    .as_str()
                    .is_some_and(|t| t.contains("Preserved node drained successfully"))
                {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("Preserved condition {condition}"))
                },
            )
        },
    )
    .await?;
    stays(s, md, m).await?;
    set_node_preserve(s, m, "false").await?;
    wait_replaced(s, md, m).await?;
    finish(s, md).await?;
    Ok(Outcome::Passed)
}

/// `preserve=false`: a failed machine is replaced as if not annotated.
pub async fn false_value(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    let md = "pv-false";
    let machine = start(s, md, json!({})).await?;
    set_node_preserve(s, &machine, "false").await?;
    make_unhealthy(s, &machine).await?;
    wait_replaced(s, md, &machine).await?;
    finish(s, md).await?;
    Ok(Outcome::Passed)
}

/// `autoPreserveFailedMachineMax: 1`: the failed machine is annotated `auto-preserved`,
/// preserved and kept past its health timeout.
pub async fn auto(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    let md = "pv-auto";
    let machine = start(s, md, json!({"spec": {"autoPreserveFailedMachineMax": 1}})).await?;
    let m = machine.as_str();
    make_unhealthy(s, m).await?;
    wait_failed_and_preserved(s, md, m).await?;
    let failed = get(s, Kind::Machine, m).await?.unwrap_or(Value::Null);
    ensure(
        failed["metadata"]["annotations"][annotation::PRESERVE] == "auto-preserved",
        || {
            format!(
                "{m} lacks preserve=auto-preserved: {}",
                failed["metadata"]["annotations"]
            )
        },
    )?;
    // The failed machine keeps its replica slot while preserved (it is not Terminating, so the
    // MachineSet does not scale up; docs/behaviour.md#manage-replicas, docs/behaviour.md#auto-preservation): it must simply stay.
    stays(s, md, m).await?;
    finish(s, md).await?;
    Ok(Outcome::Passed)
}
