//! Node heartbeats: the sandbox marks a Node `Ready=Unknown` and taints it
//! unreachable when its kubelet (provider-virtual) stops renewing its Lease and posting status,
//! as kube-controller-manager's node lifecycle controller does.
//!
//! - A long API-server outage lapses every heartbeat, but the node monitor cannot write during it
//!   (as kube-controller-manager cannot) and counts its grace period from the API's return: no
//!   Node goes `Unknown`, no machine goes `Failed` or is replaced, and the same machines run.
//! - One node whose heartbeat alone stops (provider-virtual's heartbeat annotation) goes
//!   `Unknown` and its machine is replaced after the health timeout.
//!
//! Both run on a system of their own with a short `--node-monitor-grace-period`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use mcm_e2e::objects::{
    Kind, api, create, create_class, delete, delete_deployment_and_wait, deployment, machines,
    name, names, node, patch_node, phase, wait_running,
};
use mcm_e2e::{E2eError, Probe, Result, System, ensure, eventually};
use serde_json::{Value, json};

use crate::harness::Outcome;

/// The sandbox's `--node-monitor-grace-period` on this system: short, so nodes go `Unknown`
/// early in the outage, yet three Lease renewals (every 10 s) long, so a loaded machine does not
/// lapse healthy nodes.
pub const GRACE_PERIOD: &str = "30s";

/// How long the API server is down: well past the grace period and the manager's health timeout.
pub const OUTAGE_SECONDS: u64 = 150;

/// provider-virtual's Node annotation that stops one node's heartbeat.
const HEARTBEAT_ANNOTATION: &str = "provider-virtual.mcm.gardener.cloud/heartbeat";

/// The `Ready` condition of a Node JSON.
fn ready(node: &Value) -> Option<&Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

fn ready_status(node: &Value) -> &str {
    ready(node).and_then(|c| c["status"].as_str()).unwrap_or("")
}

fn has_taint(node: &Value, key: &str, effect: &str) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["key"] == key && t["effect"] == effect))
}

/// The current resourceVersion (the sandbox has one for all kinds).
pub(crate) async fn resource_version(s: &System) -> Result<String> {
    let nodes: Api<Node> = Api::all(s.client());
    let list = nodes
        .list_metadata(&ListParams::default().limit(1))
        .await
        .map_err(E2eError::kube("list Nodes"))?;
    list.metadata
        .resource_version
        .ok_or_else(|| E2eError::Assertion("a list without resourceVersion".to_owned()))
}

/// Every change of the objects of `api` since `rv` as `(ADDED|MODIFIED|DELETED, object)`,
/// replayed from the API server's watch history (so states that lasted only while the test could
/// not read are seen too).
pub(crate) async fn history_events<K>(api: Api<K>, rv: &str) -> Result<Vec<(&'static str, Value)>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let stream = api
        .watch(&WatchParams::default().timeout(3), rv)
        .await
        .map_err(E2eError::kube("watch from before the outage"))?;
    let events: Vec<WatchEvent<K>> = stream
        .try_collect()
        .await
        .map_err(E2eError::kube("read the watch"))?;
    let mut changes = Vec::new();
    for event in events {
        let (kind, object) = match event {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => {
                return Err(E2eError::Assertion(format!(
                    "the watch history since {rv} is not available: {e:?}"
                )));
            }
        };
        changes.push((kind, serde_json::to_value(object).unwrap_or(Value::Null)));
    }
    Ok(changes)
}

/// Every stored state of the objects of `api` since `rv` (see [`history_events`]).
async fn history<K>(api: Api<K>, rv: &str) -> Result<Vec<Value>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    Ok(history_events(api, rv)
        .await?
        .into_iter()
        .map(|(_, state)| state)
        .collect())
}

/// A 150 s outage (five grace periods): no node is marked `Unknown` or tainted unreachable, no
/// machine goes `Failed` or is replaced, and the same machines run with `Ready` nodes afterwards.
pub async fn outage_marks_no_node_and_replaces_nothing(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "hb-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "hb-md", 2, "hb-class", json!({})),
    )
    .await?;
    let before = names(&wait_running(s, "hb-md", 2, 180).await?);
    let rv = resource_version(s).await?;
    let started = Instant::now();
    let outage_start = jiff::Timestamp::now();
    s.sandbox_admin(
        http::Method::POST,
        "unavailable",
        Some(json!({"seconds": OUTAGE_SECONDS, "mode": "ServiceUnavailable"})),
    )
    .await?;
    println!("heartbeat: outage from {outage_start} for {OUTAGE_SECONDS}s");
    // The admin endpoint stays reachable; everything else answers 503 until the window ends.
    tokio::time::sleep(Duration::from_secs(OUTAGE_SECONDS)).await;
    s.sandbox_admin(http::Method::DELETE, "unavailable", None)
        .await?;
    let outage_end = jiff::Timestamp::now();
    println!(
        "heartbeat: outage over at {outage_end} ({:.0}s)",
        started.elapsed().as_secs_f64()
    );
    let before_ref = &before;
    let after = eventually(
        "hb-md: the same machines Running with Ready nodes after the outage",
        180,
        || async move {
            Ok(match wait_running(s, "hb-md", 2, 1).await {
                Ok(now) if names(&now) == *before_ref => Probe::Done(now),
                Ok(now) => Probe::Waiting(format!("machines {:?}", names(&now))),
                Err(e) => Probe::Waiting(e.to_string()),
            })
        },
    )
    .await?;
    let recovered = jiff::Timestamp::now();

    // What happened meanwhile, from the watch history.
    let node_states = history(Api::<Node>::all(s.client()), &rv).await?;
    let mut unknown_at: BTreeMap<String, String> = BTreeMap::new();
    let mut ready_again_at: BTreeMap<String, String> = BTreeMap::new();
    let mut tainted: BTreeSet<String> = BTreeSet::new();
    for state in &node_states {
        let node_name = name(state).to_owned();
        if !before.contains(&node_name) {
            continue;
        }
        let since = ready(state)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or("")
            .to_owned();
        match ready_status(state) {
            "Unknown" => {
                ensure(
                    ready(state).is_some_and(|c| c["reason"] == "NodeStatusUnknown"),
                    || format!("node {node_name} Unknown with another reason: {state}"),
                )?;
                if has_taint(state, "node.kubernetes.io/unreachable", "NoSchedule") {
                    tainted.insert(node_name.clone());
                }
                unknown_at.entry(node_name).or_insert(since);
            }
            "True" if unknown_at.contains_key(&node_name) => {
                // The kubelet's post time.
                let posted = ready(state)
                    .and_then(|c| c["lastHeartbeatTime"].as_str())
                    .unwrap_or("")
                    .to_owned();
                ready_again_at.entry(node_name).or_insert(posted);
            }
            _ => {}
        }
    }
    println!(
        "heartbeat timeline: outage {outage_start} .. {outage_end}; nodes Unknown at {unknown_at:?}; \
         Ready again at {ready_again_at:?}; machines Running again by {recovered}"
    );
    ensure(unknown_at.is_empty() && tainted.is_empty(), || {
        format!(
            "nodes were marked for heartbeats the outage kept from arriving: Unknown at {unknown_at:?}, tainted {tainted:?}"
        )
    })?;
    let machine_states = history(api(s, Kind::Machine), &rv).await?;
    let failed: BTreeSet<String> = machine_states
        .iter()
        .filter(|m| before.contains(name(m)) && phase(m) == "Failed")
        .map(|m| name(m).to_owned())
        .collect();
    let phases: BTreeSet<String> = machine_states
        .iter()
        .filter(|m| before.contains(name(m)))
        .map(|m| format!("{}={}", name(m), phase(m)))
        .collect();
    if phases.is_empty() {
        println!("heartbeat: the machines were not written at all since the outage began");
    } else {
        println!("heartbeat: machine phases stored since the outage began: {phases:?}");
    }
    ensure(failed.is_empty(), || {
        format!("machines went Failed around the outage: {failed:?}")
    })?;
    ensure(names(&after) == before, || {
        format!(
            "machines were replaced around the outage: {before:?} → {:?}",
            names(&after)
        )
    })?;
    for machine in &before {
        let n = node(s, machine).await?.unwrap_or(Value::Null);
        ensure(
            !has_taint(&n, "node.kubernetes.io/unreachable", "NoSchedule")
                && !has_taint(&n, "node.kubernetes.io/unreachable", "NoExecute"),
            || format!("node {machine} is still tainted unreachable: {}", n["spec"]),
        )?;
    }
    delete_deployment_and_wait(s, "hb-md").await?;
    delete(s, Kind::MachineClass, "hb-class").await?;
    Ok(Outcome::Passed)
}

/// One node's heartbeat stops: it goes `Unknown` with the unreachable taints and its machine is
/// replaced after the health timeout (15 s); the other machine stays.
pub async fn silent_node_replaced(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "hs-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(
            s,
            "hs-md",
            2,
            "hs-class",
            json!({"spec": {"template": {"spec": {"healthTimeout": "15s"}}}}),
        ),
    )
    .await?;
    let running = wait_running(s, "hs-md", 2, 180).await?;
    let silent = name(&running[0]).to_owned();
    let healthy = name(&running[1]).to_owned();
    patch_node(
        s,
        &silent,
        json!({"metadata": {"annotations": {HEARTBEAT_ANNOTATION: "stopped"}}}),
    )
    .await?;
    let stopped = Instant::now();
    let silent_ref = silent.as_str();
    let marked = eventually(
        &format!("node {silent} is marked Unknown and tainted unreachable"),
        120,
        || async move {
            let Some(n) = node(s, silent_ref).await? else {
                return Ok(Probe::Waiting("the node is gone already".to_owned()));
            };
            Ok(
                if ready_status(&n) == "Unknown"
                    && has_taint(&n, "node.kubernetes.io/unreachable", "NoSchedule")
                    && has_taint(&n, "node.kubernetes.io/unreachable", "NoExecute")
                {
                    Probe::Done(n)
                } else {
                    Probe::Waiting(format!(
                        "Ready={} taints={}",
                        ready_status(&n),
                        n["spec"]["taints"]
                    ))
                },
            )
        },
    )
    .await?;
    println!(
        "heartbeat: node {silent} Unknown {:.0}s after its heartbeat stopped: {}",
        stopped.elapsed().as_secs_f64(),
        ready(&marked).cloned().unwrap_or(Value::Null)
    );
    ensure(
        ready(&marked).is_some_and(|c| {
            c["reason"] == "NodeStatusUnknown"
                && c["message"] == "Kubelet stopped posting node status."
        }),
        || {
            format!(
                "not kube's reason and message: {}",
                marked["status"]["conditions"]
            )
        },
    )?;
    let healthy_node = node(s, &healthy).await?.unwrap_or(Value::Null);
    ensure(ready_status(&healthy_node) == "True", || {
        format!(
            "the healthy node {healthy} is not Ready: {}",
            healthy_node["status"]
        )
    })?;
    let after = eventually(
        "hs-md: the silent machine is replaced",
        240,
        || async move {
            let current = wait_running(s, "hs-md", 2, 1).await;
            Ok(match current {
                Ok(current) if !names(&current).contains(silent_ref) => Probe::Done(current),
                Ok(current) => Probe::Waiting(format!("still {:?}", names(&current))),
                Err(e) => {
                    let phases: Vec<String> = machines(s, "hs-md")
                        .await?
                        .iter()
                        .map(|m| format!("{}={}", name(m), phase(m)))
                        .collect();
                    Probe::Waiting(format!("{e}; {phases:?}"))
                }
            })
        },
    )
    .await?;
    println!(
        "heartbeat: machine {silent} replaced {:.0}s after its heartbeat stopped",
        stopped.elapsed().as_secs_f64()
    );
    ensure(names(&after).contains(&healthy), || {
        format!(
            "the healthy machine {healthy} was replaced too: {:?}",
            names(&after)
        )
    })?;
    delete_deployment_and_wait(s, "hs-md").await?;
    delete(s, Kind::MachineClass, "hs-class").await?;
    Ok(Outcome::Passed)
}

/// The scenarios of the heartbeat system, in order (the outage disturbs everything on it).
pub fn scenarios() -> Vec<crate::harness::Scenario> {
    vec![
        crate::harness::Scenario {
            name: "heartbeat_silent_node_replaced",
            needs: crate::harness::Needs::LocalProcesses,
            run: |s| Box::pin(silent_node_replaced(s)),
        },
        crate::harness::Scenario {
            name: "heartbeat_outage_marks_no_node_and_replaces_nothing",
            needs: crate::harness::Needs::Sandbox,
            run: |s| Box::pin(outage_marks_no_node_and_replaces_nothing(s)),
        },
    ]
}

/// The system: its own sandbox with a short node-monitor grace period.
pub fn system_config() -> mcm_e2e::SystemConfig {
    let mut config = mcm_e2e::SystemConfig::new("heartbeat");
    config.namespace = "e2e-heartbeat".to_owned();
    config
        .sandbox_flags
        .push(format!("--node-monitor-grace-period={GRACE_PERIOD}"));
    config
}
