//! The manager is stopped in the middle of a rollout and started again: the rollout converges
//! and every VM belongs to a machine (none leaked, none doubled).

use std::sync::Arc;

use mcm_e2e::objects::{
    Kind, create, create_class, delete, delete_deployment_and_wait, deployment, describe_machines,
    machines, merge_patch, name, names, phase, terminating, vms_with_prefix, wait_running,
};
use mcm_e2e::{Probe, Result, System, ensure, eventually};
use serde_json::json;

use crate::harness::Outcome;

/// 3 machines roll from class A to B; the manager restarts once the first B machine exists.
pub async fn manager_restart_mid_rollout(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "rs-a", json!({"bootDelay": "1s"}), "2").await?;
    create_class(s, "rs-b", json!({"bootDelay": "3s"}), "4").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "rs-md", 3, "rs-a", json!({})),
    )
    .await?;
    let before = names(&wait_running(s, "rs-md", 3, 180).await?);
    merge_patch(
        s,
        Kind::MachineDeployment,
        "rs-md",
        json!({"spec": {"template": {"spec": {"class": {"name": "rs-b"}}}}}),
    )
    .await?;
    let before_ref = &before;
    eventually(
        "rs-md: the rollout has created its first new machine",
        120,
        || async move {
            let current = machines(s, "rs-md").await?;
            Ok(if current.iter().any(|m| !before_ref.contains(name(m))) {
                Probe::Done(())
            } else {
                Probe::Waiting(describe_machines(s, &current).await)
            })
        },
    )
    .await?;
    let code = s.stop_manager().await?;
    println!("manager stopped mid-rollout (exit code {code:?})");
    ensure(code == Some(0), || {
        format!("SIGTERM should stop the manager cleanly, exit code {code:?}")
    })?;
    s.start_manager().await?;
    let after = eventually(
        "rs-md: 3 Running machines of class rs-b after the restart",
        300,
        || async move {
            let current = machines(s, "rs-md").await?;
            let done = current.len() == 3
                && current.iter().all(|m| {
                    phase(m) == "Running" && !terminating(m) && m["spec"]["class"]["name"] == "rs-b"
                });
            Ok(if done {
                Probe::Done(current)
            } else {
                Probe::Waiting(describe_machines(s, &current).await)
            })
        },
    )
    .await?;
    let after_names = &names(&after);
    eventually(
        "rs-md: exactly one VM per machine (no leaked VM)",
        120,
        || async move {
            let vms = vms_with_prefix(s, "rs-md-").await?;
            let vm_machines: std::collections::BTreeSet<String> = vms
                .iter()
                .filter_map(|vm| vm["machineName"].as_str().map(str::to_owned))
                .collect();
            Ok(if vms.len() == 3 && vm_machines == *after_names {
                Probe::Done(())
            } else {
                Probe::Waiting(format!(
                    "VMs for {vm_machines:?} ({} VMs), machines {after_names:?}",
                    vms.len()
                ))
            })
        },
    )
    .await?;
    wait_running(s, "rs-md", 3, 60).await?;
    delete_deployment_and_wait(s, "rs-md").await?;
    delete(s, Kind::MachineClass, "rs-a").await?;
    delete(s, Kind::MachineClass, "rs-b").await?;
    Ok(Outcome::Passed)
}
