//! A node that turns unhealthy is replaced after the health timeout: its machine goes Unknown,
//! then Failed, is deleted, and the MachineSet creates a new one.

use std::sync::Arc;

use mcm_e2e::objects::{
    Kind, create, create_class, delete, delete_deployment_and_wait, deployment, machines, name,
    names, patch_node, phase, wait_running,
};
use mcm_e2e::{Probe, Result, System, ensure, eventually};
use serde_json::json;

use crate::harness::Outcome;

/// The provider-virtual annotation that overrides node conditions (works on any cluster where
/// provider-virtual runs, unlike its admin endpoint).
pub const CONDITIONS_ANNOTATION: &str = "provider-virtual.mcm.gardener.cloud/conditions";

/// Marks a node `Ready=False` through the provider-virtual annotation.
pub async fn make_unhealthy(s: &System, node: &str) -> Result<()> {
    patch_node(
        s,
        node,
        json!({"metadata": {"annotations": {CONDITIONS_ANNOTATION: "Ready=False"}}}),
    )
    .await
}

/// healthTimeout 15s: the unhealthy machine is replaced, the healthy one stays.
pub async fn unhealthy_node_replaced(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "hl-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(
            s,
            "hl-md",
            2,
            "hl-class",
            json!({"spec": {"template": {"spec": {"healthTimeout": "15s"}}}}),
        ),
    )
    .await?;
    let running = wait_running(s, "hl-md", 2, 180).await?;
    let sick = name(&running[0]).to_owned();
    let healthy = name(&running[1]).to_owned();
    make_unhealthy(s, &sick).await?;
    let sick_ref = sick.as_str();
    eventually(
        &format!("machine {sick} turns Unknown or Failed"),
        90,
        || async move {
            let current = machines(s, "hl-md").await?;
            let phase_now = current
                .iter()
                .find(|m| name(m) == sick_ref)
                .map(|m| phase(m).to_owned());
            Ok(match phase_now.as_deref() {
                Some("Unknown" | "Failed" | "Terminating") | None => Probe::Done(()),
                other => Probe::Waiting(format!("phase {other:?}")),
            })
        },
    )
    .await?;
    let after = eventually(
        "hl-md: the unhealthy machine is replaced",
        240,
        || async move {
            let current = wait_running(s, "hl-md", 2, 1).await;
            Ok(match current {
                Ok(current) if !names(&current).contains(sick_ref) => Probe::Done(current),
                Ok(current) => Probe::Waiting(format!("still {:?}", names(&current))),
                Err(e) => Probe::Waiting(e.to_string()),
            })
        },
    )
    .await?;
    ensure(names(&after).contains(&healthy), || {
        format!(
            "the healthy machine {healthy} was replaced too: {:?}",
            names(&after)
        )
    })?;
    delete_deployment_and_wait(s, "hl-md").await?;
    delete(s, Kind::MachineClass, "hl-class").await?;
    Ok(Outcome::Passed)
}
