//! Rollouts: RollingUpdate to a new class (never below the desired count of Running machines
//! with maxUnavailable 0), Recreate (old machines gone before new ones appear), pause and
//! resume, rollback to an earlier revision.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mcm_api::keys::annotation;
use mcm_e2e::objects::{
    Kind, create, create_class, delete, delete_deployment_and_wait, deployment, describe_machines,
    machines, merge_patch, must_get, name, names, node, of_deployment, phase, terminating,
    wait_running,
};
use mcm_e2e::{Probe, Result, System, consistently, ensure, eventually};
use serde_json::{Value, json};

use crate::harness::Outcome;

fn class_of(machine: &Value) -> &str {
    machine["spec"]["class"]["name"].as_str().unwrap_or("")
}

/// Waits until every machine of the deployment is Running on `class`, exactly `replicas` of
/// them, none of `old` left; calls `observe` with each snapshot on the way.
async fn wait_rolled(
    s: &System,
    deployment: &str,
    replicas: usize,
    class: &str,
    old: &BTreeSet<String>,
    observe: &(dyn Fn(&[Value]) + Sync),
) -> Result<Vec<Value>> {
    eventually(
        &format!("{deployment}: {replicas} Running machine(s) of class {class}, none of {old:?}"),
        300,
        || async move {
            let current = machines(s, deployment).await?;
            observe(&current);
            let done = current.len() == replicas
                && current.iter().all(|m| {
                    phase(m) == "Running"
                        && !terminating(m)
                        && class_of(m) == class
                        && !old.contains(name(m))
                });
            Ok(if done {
                Probe::Done(current)
            } else {
                Probe::Waiting(describe_machines(s, &current).await)
            })
        },
    )
    .await
}

/// RollingUpdate (maxSurge 1, maxUnavailable 0) from class A to class B.
pub async fn rolling_update_to_new_class(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "ru-a", json!({"bootDelay": "1s"}), "2").await?;
    create_class(s, "ru-b", json!({"bootDelay": "1s"}), "4").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "ru-md", 2, "ru-a", json!({})),
    )
    .await?;
    let before = names(&wait_running(s, "ru-md", 2, 180).await?);
    merge_patch(
        s,
        Kind::MachineDeployment,
        "ru-md",
        json!({"spec": {"template": {"spec": {"class": {"name": "ru-b"}}}}}),
    )
    .await?;
    let min_running = AtomicUsize::new(usize::MAX);
    let max_total = AtomicUsize::new(0);
    let observe = |current: &[Value]| {
        let running = current
            .iter()
            .filter(|m| phase(m) == "Running" && !terminating(m))
            .count();
        min_running.fetch_min(running, Ordering::Relaxed);
        max_total.fetch_max(
            current.iter().filter(|m| !terminating(m)).count(),
            Ordering::Relaxed,
        );
    };
    let after = wait_rolled(s, "ru-md", 2, "ru-b", &before, &observe).await?;
    ensure(min_running.load(Ordering::Relaxed) >= 2, || {
        format!(
            "with maxUnavailable 0 the Running machines dropped to {}",
            min_running.load(Ordering::Relaxed)
        )
    })?;
    ensure(max_total.load(Ordering::Relaxed) <= 3, || {
        format!(
            "with maxSurge 1 there were {} machines at once",
            max_total.load(Ordering::Relaxed)
        )
    })?;
    for machine in &after {
        let n = node(s, name(machine)).await?.unwrap_or(Value::Null);
        ensure(n["status"]["capacity"]["cpu"] == "4", || {
            format!(
                "node {} does not have class ru-b's capacity: {}",
                name(machine),
                n["status"]["capacity"]
            )
        })?;
    }
    let md = must_get(s, Kind::MachineDeployment, "ru-md").await?;
    ensure(
        md["metadata"]["annotations"][annotation::REVISION] == "2",
        || {
            format!(
                "revision after one rollout: {}",
                md["metadata"]["annotations"]
            )
        },
    )?;
    eventually(
        "ru-md: the old MachineSet is scaled to 0",
        60,
        || async move {
            let sets = of_deployment(s, Kind::MachineSet, "ru-md").await?;
            let replicas: Vec<i64> = sets
                .iter()
                .map(|set| set["spec"]["replicas"].as_i64().unwrap_or(0))
                .collect();
            Ok(
                if sets.len() == 2 && replicas.iter().sum::<i64>() == 2 && replicas.contains(&0) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("MachineSet replicas {replicas:?}"))
                },
            )
        },
    )
    .await?;
    delete_deployment_and_wait(s, "ru-md").await?;
    delete(s, Kind::MachineClass, "ru-a").await?;
    delete(s, Kind::MachineClass, "ru-b").await?;
    Ok(Outcome::Passed)
}

/// Recreate: all old machines are gone before any new one is created.
pub async fn recreate(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "rc-a", json!({"bootDelay": "1s"}), "2").await?;
    create_class(s, "rc-b", json!({"bootDelay": "1s"}), "4").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(
            s,
            "rc-md",
            2,
            "rc-a",
            json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": null}}}),
        ),
    )
    .await?;
    let before = names(&wait_running(s, "rc-md", 2, 180).await?);
    merge_patch(
        s,
        Kind::MachineDeployment,
        "rc-md",
        json!({"spec": {"template": {"spec": {"class": {"name": "rc-b"}}}}}),
    )
    .await?;
    let overlap = AtomicBool::new(false);
    let seen = std::sync::Mutex::new(String::new());
    let observe = |current: &[Value]| {
        let old = current.iter().any(|m| before.contains(name(m)));
        let new = current.iter().any(|m| !before.contains(name(m)));
        if old && new {
            overlap.store(true, Ordering::Relaxed);
            if let Ok(mut s) = seen.lock() {
                *s = current
                    .iter()
                    .map(|m| format!("{} {}", name(m), phase(m)))
                    .collect::<Vec<_>>()
                    .join(", ");
            }
        }
    };
    wait_rolled(s, "rc-md", 2, "rc-b", &before, &observe).await?;
    ensure(!overlap.load(Ordering::Relaxed), || {
        format!(
            "Recreate created new machines while old ones existed: {}",
            seen.lock().map(|s| s.clone()).unwrap_or_default()
        )
    })?;
    delete_deployment_and_wait(s, "rc-md").await?;
    delete(s, Kind::MachineClass, "rc-a").await?;
    delete(s, Kind::MachineClass, "rc-b").await?;
    Ok(Outcome::Passed)
}

/// A paused deployment does not roll out a template change; resuming rolls it out.
pub async fn pause_and_resume(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "pr-a", json!({"bootDelay": "1s"}), "2").await?;
    create_class(s, "pr-b", json!({"bootDelay": "1s"}), "4").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "pr-md", 1, "pr-a", json!({})),
    )
    .await?;
    let before = names(&wait_running(s, "pr-md", 1, 180).await?);
    merge_patch(
        s,
        Kind::MachineDeployment,
        "pr-md",
        json!({"spec": {"paused": true}}),
    )
    .await?;
    merge_patch(
        s,
        Kind::MachineDeployment,
        "pr-md",
        json!({"spec": {"template": {"spec": {"class": {"name": "pr-b"}}}}}),
    )
    .await?;
    eventually(
        "pr-md: Progressing condition says the deployment is paused",
        60,
        || async move {
            let md = must_get(s, Kind::MachineDeployment, "pr-md").await?;
            let paused = md["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Progressing" && c["reason"] == "DeploymentPaused")
            });
            Ok(if paused {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("conditions {}", md["status"]["conditions"]))
            })
        },
    )
    .await?;
    let before_ref = &before;
    consistently(
        "pr-md paused: no new machine and no new MachineSet",
        10,
        || async move {
            let current = machines(s, "pr-md").await?;
            let sets = of_deployment(s, Kind::MachineSet, "pr-md").await?;
            Ok(if names(&current) == *before_ref && sets.len() == 1 {
                Probe::Done(())
            } else {
                Probe::Waiting(format!(
                    "machines {:?}, {} MachineSets",
                    names(&current),
                    sets.len()
                ))
            })
        },
    )
    .await?;
    merge_patch(
        s,
        Kind::MachineDeployment,
        "pr-md",
        json!({"spec": {"paused": false}}),
    )
    .await?;
    wait_rolled(s, "pr-md", 1, "pr-b", &before, &|_| {}).await?;
    delete_deployment_and_wait(s, "pr-md").await?;
    delete(s, Kind::MachineClass, "pr-a").await?;
    delete(s, Kind::MachineClass, "pr-b").await?;
    Ok(Outcome::Passed)
}

/// `spec.rollbackTo.revision: 1` after a rollout to class B brings back class A machines.
pub async fn rollback(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "rb-a", json!({"bootDelay": "1s"}), "2").await?;
    create_class(s, "rb-b", json!({"bootDelay": "1s"}), "4").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "rb-md", 1, "rb-a", json!({})),
    )
    .await?;
    let first = names(&wait_running(s, "rb-md", 1, 180).await?);
    merge_patch(
        s,
        Kind::MachineDeployment,
        "rb-md",
        json!({"spec": {"template": {"spec": {"class": {"name": "rb-b"}}}}}),
    )
    .await?;
    let second = names(&wait_rolled(s, "rb-md", 1, "rb-b", &first, &|_| {}).await?);
    merge_patch(
        s,
        Kind::MachineDeployment,
        "rb-md",
        json!({"spec": {"rollbackTo": {"revision": 1}}}),
    )
    .await?;
    wait_rolled(s, "rb-md", 1, "rb-a", &second, &|_| {}).await?;
    let md = must_get(s, Kind::MachineDeployment, "rb-md").await?;
    ensure(
        md["spec"]["template"]["spec"]["class"]["name"] == "rb-a",
        || {
            format!(
                "the template was not rolled back: {}",
                md["spec"]["template"]
            )
        },
    )?;
    ensure(md["spec"]["rollbackTo"].is_null(), || {
        format!("rollbackTo not cleared: {}", md["spec"]["rollbackTo"])
    })?;
    ensure(
        md["metadata"]["annotations"][annotation::REVISION] == "3",
        || {
            format!(
                "revision after the rollback: {}",
                md["metadata"]["annotations"]
            )
        },
    )?;
    delete_deployment_and_wait(s, "rb-md").await?;
    delete(s, Kind::MachineClass, "rb-a").await?;
    delete(s, Kind::MachineClass, "rb-b").await?;
    Ok(Outcome::Passed)
}
