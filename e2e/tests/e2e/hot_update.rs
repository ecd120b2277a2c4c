//! A change of the hot-updatable `providerSpec.tags` of a class reaches the running VMs through
//! UpdateMachine: no new machines, no new MachineSet.

use std::sync::Arc;

use mcm_e2e::objects::{
    Kind, create, create_class, delete, delete_deployment_and_wait, deployment, machines,
    merge_patch, names, of_deployment, vms_with_prefix, wait_running,
};
use mcm_e2e::{Probe, Result, System, consistently, eventually};
use serde_json::{Value, json};

use crate::harness::Outcome;

/// The annotation the machine controller writes after a successful UpdateMachine.
const LAST_APPLIED_PROVIDER_SPEC: &str = "node.machine.sapcloud.io/last-applied-providerspec";

fn applied_team(machine: &Value) -> Option<String> {
    let text = machine["metadata"]["annotations"][LAST_APPLIED_PROVIDER_SPEC].as_str()?;
    let spec: Value = serde_json::from_str(text).ok()?;
    spec["tags"]["team"].as_str().map(str::to_owned)
}

/// tags team=a → team=b on the class; the 2 machines stay, their VMs get the new tags.
pub async fn tags_without_rollout(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(
        s,
        "hu-class",
        json!({"bootDelay": "1s", "tags": {"team": "a"}}),
        "2",
    )
    .await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "hu-md", 2, "hu-class", json!({})),
    )
    .await?;
    let before = names(&wait_running(s, "hu-md", 2, 180).await?);
    merge_patch(
        s,
        Kind::MachineClass,
        "hu-class",
        json!({"providerSpec": {"tags": {"team": "b"}}}),
    )
    .await?;
    eventually(
        "hu-md: every machine records tags team=b as applied",
        120,
        || async move {
            let current = machines(s, "hu-md").await?;
            let teams: Vec<Option<String>> = current.iter().map(applied_team).collect();
            Ok(
                if current.len() == 2 && teams.iter().all(|t| t.as_deref() == Some("b")) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("applied teams {teams:?} on {:?}", names(&current)))
                },
            )
        },
    )
    .await?;
    if s.has_local_processes() {
        eventually("hu-md: the VMs carry tags team=b", 60, || async move {
            let vms = vms_with_prefix(s, "hu-md-").await?;
            let teams: Vec<&Value> = vms.iter().map(|vm| &vm["spec"]["tags"]["team"]).collect();
            Ok(if vms.len() == 2 && teams.iter().all(|t| **t == "b") {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("VM tags {teams:?}"))
            })
        })
        .await?;
    }
    let before_ref = &before;
    consistently("hu-md: no rollout after a hot update", 5, || async move {
        let current = machines(s, "hu-md").await?;
        let sets = of_deployment(s, Kind::MachineSet, "hu-md").await?;
        Ok(if names(&current) == *before_ref && sets.len() == 1 {
            Probe::Done(())
        } else {
            Probe::Waiting(format!(
                "machines {:?}, {} MachineSets",
                names(&current),
                sets.len()
            ))
        })
    })
    .await?;
    delete_deployment_and_wait(s, "hu-md").await?;
    delete(s, Kind::MachineClass, "hu-class").await?;
    Ok(Outcome::Passed)
}
