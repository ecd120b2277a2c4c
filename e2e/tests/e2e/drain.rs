//! Drain before deletion: a pod guarded by a PodDisruptionBudget is not evicted while the budget
//! forbids it (the machine, its node and VM stay), a pod with a PVC-backed volume is evicted and
//! its volume detaches; once the budget is lifted the drain completes and the machine goes.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, PostParams};
use mcm_e2e::objects::{
    Kind, create, create_class, delete, delete_deployment_and_wait, deployment, get, machines,
    merge_patch, name, node, phase, terminating, vms_with_prefix, wait_running,
};
use mcm_e2e::{E2eError, Probe, Result, System, consistently, eventually};
use serde_json::{Value, json};

use crate::harness::Outcome;

async fn create_json<K>(api: &Api<K>, value: Value, what: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(value).map_err(E2eError::decode(what.to_owned()))?;
    api.create(&PostParams::default(), &object)
        .await
        .map(|_| ())
        .map_err(E2eError::kube(format!("create {what}")))
}

fn attached(node: &Value) -> Vec<String> {
    node["status"]["volumesAttached"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|v| v["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Scale 1 → 0 with a PDB-guarded pod and a pod using a PV on the node.
pub async fn respects_pdb_and_volume(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    let ns = s.namespace().to_owned();
    create_class(s, "dr-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(
            s,
            "dr-md",
            1,
            "dr-class",
            json!({"spec": {"template": {"spec": {"drainTimeout": "5m"}}}}),
        ),
    )
    .await?;
    let running = wait_running(s, "dr-md", 1, 180).await?;
    let machine = name(&running[0]).to_owned();
    let pods: Api<Pod> = Api::namespaced(s.client(), &ns);
    let pvs: Api<PersistentVolume> = Api::all(s.client());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(s.client(), &ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client(), &ns);
    create_json(
        &pvs,
        json!({
            "metadata": {"name": "dr-pv"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": ns, "name": "dr-pvc"},
                "csi": {"driver": "e2e.csi.mcm", "volumeHandle": "dr-vol-1"}
            }
        }),
        "PV dr-pv",
    )
    .await?;
    create_json(&pvcs, json!({
        "metadata": {"name": "dr-pvc"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": "dr-pv", "resources": {"requests": {"storage": "1Gi"}}}
    }), "PVC dr-pvc").await?;
    create_json(&pods, json!({
        "metadata": {"name": "dr-volume"},
        "spec": {
            "nodeName": machine, "priority": 0, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "pause", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "dr-pvc"}}]
        }
    }), "pod dr-volume").await?;
    create_json(&pods, json!({
        "metadata": {"name": "dr-guarded", "labels": {"app": "dr-guarded"}},
        "spec": {"nodeName": machine, "priority": 0, "terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": "pause"}]}
    }), "pod dr-guarded").await?;
    create_json(
        &pdbs,
        json!({
            "metadata": {"name": "dr-guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "dr-guarded"}}}
        }),
        "PDB dr-guard",
    )
    .await?;
    let m = machine.as_str();
    eventually(
        &format!("node {m} reports the PV attached and both pods Running"),
        60,
        || {
            let pods = pods.clone();
            async move {
                let n = node(s, m).await?.unwrap_or(Value::Null);
                let mut running = 0;
                for pod in ["dr-volume", "dr-guarded"] {
                    if let Some(p) = pods
                        .get_opt(pod)
                        .await
                        .map_err(E2eError::kube(format!("get pod {pod}")))?
                        && p.status.and_then(|s| s.phase).as_deref() == Some("Running")
                    {
                        running += 1;
                    }
                }
                let volumes = attached(&n);
                Ok(
                    if running == 2 && volumes.iter().any(|v| v.contains("dr-vol-1")) {
                        Probe::Done(())
                    } else {
                        Probe::Waiting(format!("{running} pods Running, attached {volumes:?}"))
                    },
                )
            }
        },
    )
    .await?;
    // Drain starts: the MachineSet deletes the machine.
    merge_patch(
        s,
        Kind::MachineDeployment,
        "dr-md",
        json!({"spec": {"replicas": 0}}),
    )
    .await?;
    eventually(
        "the pod with the volume is evicted and its volume detached",
        120,
        || {
            let pods = pods.clone();
            async move {
                let pod = pods
                    .get_opt("dr-volume")
                    .await
                    .map_err(E2eError::kube("get pod dr-volume"))?;
                let n = node(s, m).await?.unwrap_or(Value::Null);
                let volumes = attached(&n);
                Ok(
                    if pod.is_none() && !volumes.iter().any(|v| v.contains("dr-vol-1")) {
                        Probe::Done(())
                    } else {
                        Probe::Waiting(format!(
                            "pod present {}, attached {volumes:?}",
                            pod.is_some()
                        ))
                    },
                )
            }
        },
    )
    .await?;
    consistently(
        "the PDB keeps its pod, the machine, its node and VM",
        12,
        || {
            let pods = pods.clone();
            async move {
                let pod = pods
                    .get_opt("dr-guarded")
                    .await
                    .map_err(E2eError::kube("get pod dr-guarded"))?;
                let machine = get(s, Kind::Machine, m).await?;
                let vm_alive = if s.has_local_processes() {
                    vms_with_prefix(s, m)
                        .await?
                        .iter()
                        .any(|vm| vm["machineName"] == m)
                } else {
                    true
                };
                let pod_kept = pod.is_some_and(|p| p.metadata.deletion_timestamp.is_none());
                Ok(if pod_kept && machine.is_some() && vm_alive {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!(
                        "pod kept {pod_kept}, machine present {}, VM alive {vm_alive}",
                        machine.is_some()
                    ))
                })
            }
        },
    )
    .await?;
    pdbs.delete("dr-guard", &DeleteParams::default())
        .await
        .map_err(E2eError::kube("delete PDB dr-guard"))?;
    eventually(
        "drain completes after the PDB is lifted: pod, machine and VM gone",
        180,
        || {
            let pods = pods.clone();
            async move {
                let pod = pods
                    .get_opt("dr-guarded")
                    .await
                    .map_err(E2eError::kube("get pod dr-guarded"))?;
                let current = machines(s, "dr-md").await?;
                let vms = if s.has_local_processes() {
                    vms_with_prefix(s, m).await?.len()
                } else {
                    0
                };
                Ok(if pod.is_none() && current.is_empty() && vms == 0 {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!(
                        "pod present {}, machines {:?}, VMs {vms}",
                        pod.is_some(),
                        current
                            .iter()
                            .map(|x| format!("{} {} {}", name(x), phase(x), terminating(x)))
                            .collect::<Vec<_>>()
                    ))
                })
            }
        },
    )
    .await?;
    let _ = pods
        .delete("dr-guarded-pending", &DeleteParams::default())
        .await;
    let _ = pvcs.delete("dr-pvc", &DeleteParams::default()).await;
    let _ = pvs.delete("dr-pv", &DeleteParams::default()).await;
    delete_deployment_and_wait(s, "dr-md").await?;
    delete(s, Kind::MachineClass, "dr-class").await?;
    Ok(Outcome::Passed)
}
