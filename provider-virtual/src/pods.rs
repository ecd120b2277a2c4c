//! What the virtual kubelet does with pods and volumes (pure: time is a parameter).
//!
//! - Pods bound to a running virtual node become Running and Ready.
//! - Pods being deleted on such a node are completed (deleted with grace 0) once their
//!   `deletionTimestamp` has passed: the API server sets it to request time + grace period.
//! - `volumesAttached`/`volumesInUse` of a node follow the PVC-backed pods on it: a volume is
//!   attached while a pod that is not finished uses it, and detached when the last such pod is gone,
//!   so a drain can wait for detachment.
//! - Volume IDs of persistent volumes (GetVolumeIDs): CSI `volumeHandle` and in-tree sources.

use std::collections::{BTreeSet, HashMap, HashSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, Pod,
};

/// One action on a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodAction {
    /// Post status Running + Ready.
    MarkRunning {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Node the pod runs on (for hostIP).
        node: String,
    },
    /// Delete with grace period 0 (the containers have "exited").
    Complete {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID precondition, so a recreated pod of the same name is not deleted.
        uid: Option<String>,
    },
}

fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status
            .as_ref()
            .and_then(|status| status.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn running_and_ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

/// The actions due for the pods bound to `nodes` (running virtual nodes) at `now`.
pub fn pod_actions<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    nodes: &HashSet<String>,
    now: Timestamp,
) -> Vec<PodAction> {
    let mut actions = Vec::new();
    for pod in pods {
        let Some(node) = pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()) else {
            continue;
        };
        if !nodes.contains(node) {
            continue;
        }
        let (Some(namespace), Some(name)) =
            (pod.metadata.namespace.clone(), pod.metadata.name.clone())
        else {
            continue;
        };
        match &pod.metadata.deletion_timestamp {
            Some(deadline) if now >= deadline.0 => actions.push(PodAction::Complete {
                namespace,
                name,
                uid: pod.metadata.uid.clone(),
            }),
            Some(_) => {}
            None if !finished(pod) && !running_and_ready(pod) => {
                actions.push(PodAction::MarkRunning {
                    namespace,
                    name,
                    node: node.to_owned(),
                })
            }
            None => {}
        }
    }
    actions
}

/// The status that makes a pod Running and Ready on a node with address `node_ip`.
pub fn running_pod_status(pod: &Pod, node_ip: &str, now: Timestamp) -> serde_json::Value {
    let since = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
    let condition = |type_: &str| serde_json::json!({"type": type_, "status": "True", "lastTransitionTime": since});
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let containers: Vec<serde_json::Value> = pod
        .spec
        .iter()
        .flat_map(|spec| spec.containers.iter())
        .map(|container| {
            serde_json::json!({
                "name": container.name,
                "image": container.image.clone().unwrap_or_default(),
                "imageID": "",
                "containerID": format!("virtual://{uid}/{}", container.name),
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": {"running": {"startedAt": since}},
            })
        })
        .collect();
    serde_json::json!({
        "phase": "Running",
        "hostIP": node_ip,
        "podIP": node_ip,
        "startTime": since,
        "conditions": [condition("PodScheduled"), condition("Initialized"), condition("ContainersReady"), condition("Ready")],
        "containerStatuses": containers,
    })
}

/// The unique name under which a persistent volume shows in `node.status.volumesAttached`
/// (as the attach/detach controller names it), `None` for sources that are not attached.
pub fn attached_volume_name(spec: &PersistentVolumeSpec) -> Option<String> {
    if let Some(csi) = &spec.csi {
        return Some(format!(
            "kubernetes.io/csi/{}^{}",
            csi.driver, csi.volume_handle
        ));
    }
    let (plugin, id) = in_tree_volume(spec)?;
    Some(format!("kubernetes.io/{plugin}/{id}"))
}

fn in_tree_volume(spec: &PersistentVolumeSpec) -> Option<(&'static str, String)> {
    if let Some(ebs) = &spec.aws_elastic_block_store {
        return Some(("aws-ebs", ebs.volume_id.clone()));
    }
    if let Some(gce) = &spec.gce_persistent_disk {
        return Some(("gce-pd", gce.pd_name.clone()));
    }
    if let Some(azure) = &spec.azure_disk {
        return Some(("azure-disk", azure.disk_name.clone()));
    }
    if let Some(cinder) = &spec.cinder {
        return Some(("cinder", cinder.volume_id.clone()));
    }
    if let Some(vsphere) = &spec.vsphere_volume {
        return Some(("vsphere-volume", vsphere.volume_path.clone()));
    }
    None
}

/// The provider volume ID of a persistent volume (GetVolumeIDs): the CSI `volumeHandle`, or the ID
/// of an in-tree cloud disk; `None` for volumes that are not disks (NFS, hostPath, local...).
pub fn volume_id(spec: &PersistentVolumeSpec) -> Option<String> {
    if let Some(csi) = &spec.csi {
        return Some(csi.volume_handle.clone()).filter(|handle| !handle.is_empty());
    }
    in_tree_volume(spec)
        .map(|(_, id)| id)
        .filter(|id| !id.is_empty())
}

/// The attached volume names of each node: for every unfinished pod on a node, each volume that
/// comes from a bound PVC whose PV is an attachable disk. Sorted and de-duplicated per node.
pub fn node_volumes<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    claims: &HashMap<(String, String), &PersistentVolumeClaim>,
    volumes: &HashMap<String, &PersistentVolume>,
) -> HashMap<String, Vec<String>> {
    let mut result: HashMap<String, BTreeSet<String>> = HashMap::new();
    for pod in pods {
        if finished(pod) {
            continue;
        }
        let Some(spec) = &pod.spec else { continue };
        let Some(node) = spec.node_name.as_ref() else {
            continue;
        };
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        for volume in spec.volumes.iter().flatten() {
            let Some(claim) = &volume.persistent_volume_claim else {
                continue;
            };
            let bound_volume = claims
                .get(&(namespace.clone(), claim.claim_name.clone()))
                .and_then(|claim| claim.spec.as_ref())
                .and_then(|spec| spec.volume_name.as_ref());
            let name = bound_volume
                .and_then(|name| volumes.get(name))
                .and_then(|volume| volume.spec.as_ref())
                .and_then(attached_volume_name);
            if let Some(name) = name {
                result.entry(node.clone()).or_default().insert(name);
            }
        }
    }
    result
        .into_iter()
        .map(|(node, names)| (node, names.into_iter().collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn t(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn nodes() -> HashSet<String> {
        HashSet::from(["n1".to_owned()])
    }

    #[test]
    fn pending_pods_on_our_nodes_are_marked_running() {
        let pods = [
            pod(
                json!({"metadata": {"name": "a", "namespace": "d"}, "spec": {"nodeName": "n1", "containers": []}}),
            ),
            pod(
                json!({"metadata": {"name": "other-node", "namespace": "d"}, "spec": {"nodeName": "n2", "containers": []}}),
            ),
            pod(
                json!({"metadata": {"name": "unscheduled", "namespace": "d"}, "spec": {"containers": []}}),
            ),
            pod(
                json!({"metadata": {"name": "ready", "namespace": "d"}, "spec": {"nodeName": "n1", "containers": []},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
            ),
            pod(
                json!({"metadata": {"name": "done", "namespace": "d"}, "spec": {"nodeName": "n1", "containers": []},
                "status": {"phase": "Succeeded"}}),
            ),
        ];
        assert_eq!(
            pod_actions(&pods, &nodes(), t("2026-01-01T00:00:00Z")),
            vec![PodAction::MarkRunning {
                namespace: "d".into(),
                name: "a".into(),
                node: "n1".into()
            }]
        );
    }

    #[test]
    fn the_running_status_is_ready_with_every_container_started() {
        let pod = pod(
            json!({"metadata": {"name": "a", "namespace": "d", "uid": "u"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "nginx"}, {"name": "sidecar"}]}}),
        );
        let status = running_pod_status(&pod, "10.0.0.7", t("2026-01-01T00:00:00Z"));
        assert_eq!(status["phase"], "Running");
        assert_eq!(status["hostIP"], "10.0.0.7");
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        let containers = status["containerStatuses"].as_array().unwrap();
        assert_eq!(containers.len(), 2);
        assert!(
            containers
                .iter()
                .all(|c| c["ready"] == true && c["state"]["running"].is_object())
        );
        // Once posted, the pod needs no further action.
        let mut posted = pod.clone();
        posted.status = Some(serde_json::from_value(status).unwrap());
        assert!(pod_actions([&posted], &nodes(), t("2026-01-01T00:00:01Z")).is_empty());
    }

    #[test]
    fn deleting_pods_complete_only_after_their_grace_period() {
        let pods = [pod(json!({
            "metadata": {"name": "a", "namespace": "d", "uid": "u1", "deletionTimestamp": "2026-01-01T00:00:30Z"},
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"phase": "Running"}
        }))];
        assert!(pod_actions(&pods, &nodes(), t("2026-01-01T00:00:29Z")).is_empty());
        assert_eq!(
            pod_actions(&pods, &nodes(), t("2026-01-01T00:00:30Z")),
            vec![PodAction::Complete {
                namespace: "d".into(),
                name: "a".into(),
                uid: Some("u1".into())
            }]
        );
    }

    #[test]
    fn volume_ids_come_from_csi_and_in_tree_sources() {
        let spec = |value: serde_json::Value| -> PersistentVolumeSpec {
            serde_json::from_value(value).unwrap()
        };
        assert_eq!(
            volume_id(&spec(
                json!({"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}})
            )),
            Some("vol-1".into())
        );
        assert_eq!(
            volume_id(&spec(
                json!({"awsElasticBlockStore": {"volumeID": "aws://eu-1a/vol-2"}})
            )),
            Some("aws://eu-1a/vol-2".into())
        );
        assert_eq!(
            volume_id(&spec(json!({"gcePersistentDisk": {"pdName": "disk-3"}}))),
            Some("disk-3".into())
        );
        assert_eq!(
            volume_id(&spec(
                json!({"azureDisk": {"diskName": "d4", "diskURI": "/x/d4"}})
            )),
            Some("d4".into())
        );
        assert_eq!(
            volume_id(&spec(json!({"cinder": {"volumeID": "c5"}}))),
            Some("c5".into())
        );
        assert_eq!(
            volume_id(&spec(json!({"vsphereVolume": {"volumePath": "[ds] v6"}}))),
            Some("[ds] v6".into())
        );
        assert_eq!(
            volume_id(&spec(json!({"nfs": {"server": "s", "path": "/p"}}))),
            None
        );
        assert_eq!(volume_id(&spec(json!({"hostPath": {"path": "/p"}}))), None);
        assert_eq!(
            volume_id(&spec(json!({"csi": {"driver": "d", "volumeHandle": ""}}))),
            None
        );
        assert_eq!(
            attached_volume_name(&spec(
                json!({"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}})
            )),
            Some("kubernetes.io/csi/ebs.csi.aws.com^vol-1".into())
        );
    }

    #[test]
    fn node_volumes_follow_unfinished_pvc_backed_pods() {
        let claim = |name: &str, volume: Option<&str>| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "d"}, "spec": {"volumeName": volume}})).unwrap()
        };
        let volume = |name: &str, handle: &str| -> PersistentVolume {
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"csi": {"driver": "virtual", "volumeHandle": handle}}})).unwrap()
        };
        let claims_owned = [
            claim("c1", Some("pv1")),
            claim("c2", Some("pv2")),
            claim("pending", None),
        ];
        let volumes_owned = [volume("pv1", "h1"), volume("pv2", "h2")];
        let claims = claims_owned
            .iter()
            .map(|c| (("d".to_owned(), c.metadata.name.clone().unwrap()), c))
            .collect();
        let volumes = volumes_owned
            .iter()
            .map(|v| (v.metadata.name.clone().unwrap(), v))
            .collect();
        let with_claims = |name: &str, node: &str, claims: &[&str], phase: &str| {
            let volumes: Vec<_> = claims
                .iter()
                .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
                .collect();
            pod(json!({"metadata": {"name": name, "namespace": "d"},
                "spec": {"nodeName": node, "containers": [], "volumes": volumes}, "status": {"phase": phase}}))
        };
        let pods = [
            with_claims("p1", "n1", &["c1", "pending"], "Running"),
            with_claims("p2", "n1", &["c1", "c2"], "Pending"),
            with_claims("p3", "n2", &["c2"], "Succeeded"),
            with_claims("p4", "n3", &["missing-claim"], "Running"),
        ];
        let result = node_volumes(&pods, &claims, &volumes);
        assert_eq!(
            result.get("n1"),
            Some(&vec![
                "kubernetes.io/csi/virtual^h1".to_owned(),
                "kubernetes.io/csi/virtual^h2".to_owned()
            ])
        );
        assert_eq!(result.get("n2"), None, "finished pods hold no volume");
        assert_eq!(result.get("n3"), None);
    }
}
