//! A MachineDeployment reaches Running machines with Ready nodes; scaling up and down (the
//! deletion priority annotation decides which machine goes); force deletion skips a blocked
//! drain.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, PostParams};
use mcm_api::keys::{annotation, label};
use mcm_e2e::objects::{
    Kind, create, create_class, delete, delete_deployment_and_wait, deployment, machines,
    merge_patch, must_get, name, names, node, of_deployment, phase, terminating, vms_with_prefix,
    wait_running,
};
use mcm_e2e::{E2eError, Probe, Result, System, ensure, eventually};
use serde_json::{Value, json};

use crate::harness::Outcome;

/// 2 replicas → 2 Running machines, each with a Ready Node carrying the template's labels and
/// a VM; status counts; deletion removes everything. The class's VMs need InitializeMachine
/// although GetMachineStatus reports them like a real cloud does (`initialization: silent`, their
/// Nodes register only once initialised): each VM receives exactly one call.
pub async fn deployment_reaches_running_nodes(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(
        s,
        "lc-class",
        json!({"bootDelay": "1s", "initialization": "silent"}),
        "2",
    )
    .await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "lc-basic", 2, "lc-class", json!({})),
    )
    .await?;
    let running = wait_running(s, "lc-basic", 2, 180).await?;
    for machine in &running {
        let machine_name = name(machine);
        ensure(
            machine["metadata"]["labels"][label::NODE] == machine_name,
            || {
                format!(
                    "machine {machine_name} lacks label node={machine_name}: {}",
                    machine["metadata"]
                )
            },
        )?;
        // Node labels are synced from the template after the node joined.
        eventually(
            &format!("node {machine_name} has the template label and the providerID"),
            60,
            || async move {
                let node = node(s, machine_name).await?.unwrap_or_default();
                Ok(
                    if node["metadata"]["labels"]["e2e.mcm/deployment"] == "lc-basic"
                        && node["spec"]["providerID"] == machine["spec"]["providerID"]
                    {
                        Probe::Done(())
                    } else {
                        Probe::Waiting(format!(
                            "node metadata {} spec {}",
                            node["metadata"]["labels"], node["spec"]
                        ))
                    },
                )
            },
        )
        .await?;
    }
    if s.has_local_processes() {
        let vms = vms_with_prefix(s, "lc-basic-").await?;
        ensure(vms.len() == 2, || format!("expected 2 VMs, got {vms:?}"))?;
        let calls: Vec<&Value> = vms.iter().map(|vm| &vm["initializeCalls"]).collect();
        ensure(calls.iter().all(|calls| **calls == 1), || {
            format!("expected exactly one InitializeMachine call per VM, got {calls:?}")
        })?;
    }
    eventually(
        "lc-basic: MachineDeployment status counts 2 ready/available",
        60,
        || async {
            let md = must_get(s, Kind::MachineDeployment, "lc-basic").await?;
            let status = &md["status"];
            Ok(
                if status["readyReplicas"] == 2
                    && status["availableReplicas"] == 2
                    && status["updatedReplicas"] == 2
                {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("status {status}"))
                },
            )
        },
    )
    .await?;
    let sets = of_deployment(s, Kind::MachineSet, "lc-basic").await?;
    ensure(sets.len() == 1, || {
        format!("expected one MachineSet, got {}", sets.len())
    })?;
    delete_deployment_and_wait(s, "lc-basic").await?;
    for machine in &running {
        ensure(node(s, name(machine)).await?.is_none(), || {
            format!("node {} survived its machine", name(machine))
        })?;
    }
    delete(s, Kind::MachineClass, "lc-class").await?;
    Ok(Outcome::Passed)
}

/// 3 → 2 deletes the machine with the lowest priority annotation; 2 → 4 adds two.
pub async fn scale_up_and_down_respects_priority(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "sc-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "sc-md", 3, "sc-class", json!({})),
    )
    .await?;
    let running = wait_running(s, "sc-md", 3, 180).await?;
    // Pick the newest machine: without the annotation it would not be the first to go
    // (older first at equal priority and phase).
    let mut by_age = running.clone();
    by_age.sort_by(|a, b| {
        a["metadata"]["creationTimestamp"]
            .as_str()
            .cmp(&b["metadata"]["creationTimestamp"].as_str())
            .then(name(a).cmp(name(b)))
    });
    let victim = name(by_age.last().unwrap_or(&running[0])).to_owned();
    merge_patch(
        s,
        Kind::Machine,
        &victim,
        json!({"metadata": {"annotations": {annotation::MACHINE_PRIORITY: "1"}}}),
    )
    .await?;
    merge_patch(
        s,
        Kind::MachineDeployment,
        "sc-md",
        json!({"spec": {"replicas": 2}}),
    )
    .await?;
    let after_down = wait_running(s, "sc-md", 2, 180).await?;
    let remaining = names(&after_down);
    ensure(!remaining.contains(&victim), || {
        format!("scale-down kept the priority-1 machine {victim}; remaining {remaining:?}")
    })?;
    let expected: std::collections::BTreeSet<String> = names(&running)
        .into_iter()
        .filter(|n| *n != victim)
        .collect();
    ensure(remaining == expected, || {
        format!(
            "scale-down removed other machines: before {:?}, after {remaining:?}",
            names(&running)
        )
    })?;
    merge_patch(
        s,
        Kind::MachineDeployment,
        "sc-md",
        json!({"spec": {"replicas": 4}}),
    )
    .await?;
    let after_up = wait_running(s, "sc-md", 4, 180).await?;
    ensure(names(&after_up).is_superset(&remaining), || {
        format!(
            "scale-up replaced existing machines: {remaining:?} → {:?}",
            names(&after_up)
        )
    })?;
    delete_deployment_and_wait(s, "sc-md").await?;
    delete(s, Kind::MachineClass, "sc-class").await?;
    Ok(Outcome::Passed)
}

/// A machine whose drain is blocked by a PDB (and a 10 minute drain timeout) is deleted at
/// once when labelled `force-deletion=true`; the MachineSet replaces it.
pub async fn force_deletion(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "fd-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(
            s,
            "fd-md",
            1,
            "fd-class",
            json!({"spec": {"template": {"spec": {"drainTimeout": "10m"}}}}),
        ),
    )
    .await?;
    let running = wait_running(s, "fd-md", 1, 180).await?;
    let victim = name(&running[0]).to_owned();
    let pods: Api<Pod> = Api::namespaced(s.client(), s.namespace());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "fd-guarded", "labels": {"app": "fd-guarded"}},
        "spec": {"nodeName": victim, "terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": "pause"}]}
    }))
    .map_err(E2eError::decode("pod fd-guarded"))?;
    pods.create(&PostParams::default(), &pod)
        .await
        .map_err(E2eError::kube("create pod fd-guarded"))?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client(), s.namespace());
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "fd-guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "fd-guarded"}}}
    }))
    .map_err(E2eError::decode("PDB fd-guard"))?;
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .map_err(E2eError::kube("create PDB fd-guard"))?;
    merge_patch(
        s,
        Kind::Machine,
        &victim,
        json!({"metadata": {"labels": {label::FORCE_DELETION: "true"}}}),
    )
    .await?;
    delete(s, Kind::Machine, &victim).await?;
    let victim_ref = victim.as_str();
    eventually(
        &format!("force-deleted machine {victim} gone despite the PDB (drain timeout 10m)"),
        150,
        || async move {
            let current = machines(s, "fd-md").await?;
            let still = current.iter().find(|m| name(m) == victim_ref);
            Ok(match still {
                None => Probe::Done(()),
                Some(m) => Probe::Waiting(format!(
                    "phase {:?} terminating {} lastOperation {}",
                    phase(m),
                    terminating(m),
                    m["status"]["lastOperation"]
                )),
            })
        },
    )
    .await?;
    let replaced = wait_running(s, "fd-md", 1, 180).await?;
    ensure(name(&replaced[0]) != victim, || {
        "the machine was not replaced".to_owned()
    })?;
    if s.has_local_processes() {
        let vms = vms_with_prefix(s, &victim).await?;
        ensure(
            vms.iter().all(|vm| vm["machineName"] != victim.as_str()),
            || format!("the force-deleted machine's VM survived: {vms:?}"),
        )?;
    }
    let _ = pdbs.delete("fd-guard", &Default::default()).await;
    let _ = pods.delete("fd-guarded", &Default::default()).await;
    delete_deployment_and_wait(s, "fd-md").await?;
    delete(s, Kind::MachineClass, "fd-class").await?;
    Ok(Outcome::Passed)
}

/// Deleting a MachineDeployment in the foreground (`propagationPolicy: Foreground`): the API
/// server's garbage collector deletes its MachineSets first (they carry `blockOwnerDeletion`),
/// the MachineSets' machines drain and go, and only then is the deployment itself removed; while
/// it waits with its deletion timestamp, no controller creates a new MachineSet or Machine for it.
pub async fn foreground_deletion_cascades(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "fg-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "fg-md", 2, "fg-class", json!({})),
    )
    .await?;
    let running = wait_running(s, "fg-md", 2, 180).await?;
    let original = names(&running);
    let api = mcm_e2e::objects::api(s, Kind::MachineDeployment);
    api.delete("fg-md", &kube::api::DeleteParams::foreground())
        .await
        .map_err(E2eError::kube(
            "delete MachineDeployment fg-md in the foreground",
        ))?;
    eventually(
        "fg-md: the foreground deletion removes sets, machines and then the deployment",
        240,
        || {
            let original = original.clone();
            async move {
                let md = mcm_e2e::objects::get(s, Kind::MachineDeployment, "fg-md").await?;
                let sets = of_deployment(s, Kind::MachineSet, "fg-md").await?;
                let current = machines(s, "fg-md").await?;
                let strangers: Vec<String> = names(&current)
                    .into_iter()
                    .filter(|m| !original.contains(m))
                    .collect();
                if !strangers.is_empty() {
                    return Err(E2eError::Assertion(format!(
                        "a machine was created for a deployment being deleted: {strangers:?}"
                    )));
                }
                if let Some(md) = &md {
                    let finalizers = &md["metadata"]["finalizers"];
                    if md["metadata"]["deletionTimestamp"].is_null() {
                        return Err(E2eError::Assertion(format!(
                            "fg-md has no deletion timestamp after its delete: {}",
                            md["metadata"]
                        )));
                    }
                    return Ok(Probe::Waiting(format!(
                        "deployment waits (finalizers {finalizers}); sets {}, machines {}",
                        sets.len(),
                        current.len()
                    )));
                }
                ensure(sets.is_empty() && current.is_empty(), || {
                    format!(
                        "fg-md is gone before its dependents: sets {}, machines {}",
                        sets.len(),
                        current.len()
                    )
                })?;
                Ok(Probe::Done(()))
            }
        },
    )
    .await?;
    delete_deployment_and_wait(s, "fg-md").await?;
    delete(s, Kind::MachineClass, "fg-class").await?;
    Ok(Outcome::Passed)
}
