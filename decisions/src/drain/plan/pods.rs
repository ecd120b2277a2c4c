//! Pod classification ([`classify_pod`]) and the persistent volumes a drain waits for
//! ([`pvc_claims`], [`exclude_shared_volumes`], [`claim_volume_names`], [`pod_volume_ids`]), plus
//! the pod key of the ledger ([`pod_key`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;

/// Annotation of mirror (static) pods; they cannot be evicted.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What the drain does with one pod of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodDisposition {
    /// Mirror (static) pod: left alone.
    SkipMirror,
    /// Owned by a DaemonSet: left alone (its controller would recreate it).
    SkipDaemonSet,
    /// Bound to another node (defensive: the shell lists by node).
    SkipOtherNode,
    /// Succeeded or Failed: deleted without eviction, nothing to wait for.
    DeleteCompleted,
    /// Already terminating: waited for (deleted with grace 0 in force mode).
    WaitTerminating,
    /// Evicted; pods with persistent volume claims are drained one at a time.
    Evict {
        /// Has at least one `persistentVolumeClaim` volume.
        with_volumes: bool,
    },
}

/// Classifies a pod for draining `node_name`.
#[must_use]
pub fn classify_pod(pod: &Pod, node_name: &str) -> PodDisposition {
    if pod
        .spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .is_some_and(|bound| bound != node_name)
    {
        return PodDisposition::SkipOtherNode;
    }
    if pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|annotations| annotations.contains_key(MIRROR_POD_ANNOTATION))
    {
        return PodDisposition::SkipMirror;
    }
    let owned_by_daemon_set = pod
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|owners| {
            owners
                .iter()
                .any(|owner| owner.controller == Some(true) && owner.kind == "DaemonSet")
        });
    if owned_by_daemon_set {
        return PodDisposition::SkipDaemonSet;
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|status| status.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return PodDisposition::DeleteCompleted;
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return PodDisposition::WaitTerminating;
    }
    PodDisposition::Evict {
        with_volumes: !pvc_claims(pod).is_empty(),
    }
}

/// Claim names of the pod's `persistentVolumeClaim` volumes.
#[must_use]
pub fn pvc_claims(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.volumes.as_ref())
        .map(|volumes| {
            volumes
                .iter()
                .filter_map(|volume| volume.persistent_volume_claim.as_ref())
                .map(|claim| claim.claim_name.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes persistent volumes referenced by more than one pod from every pod's list: the drain
/// does not wait for shared volumes to detach (upstream rule).
#[must_use]
pub fn exclude_shared_volumes(
    volumes_by_pod: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, Vec<String>> {
    let mut users: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (pod, volumes) in volumes_by_pod {
        for volume in volumes {
            users.entry(volume).or_default().insert(pod);
        }
    }
    volumes_by_pod
        .iter()
        .map(|(pod, volumes)| {
            let own = volumes
                .iter()
                .filter(|volume| {
                    users
                        .get(volume.as_str())
                        .is_some_and(|pods| pods.len() == 1)
                })
                .cloned()
                .collect();
            (pod.clone(), own)
        })
        .collect()
}

/// The persistent volumes behind a pod's claims (upstream `getPersistentVolumeNamesForPod`):
/// `bound` maps the claims that exist to their `spec.volumeName`; a claim that does not exist or
/// is not bound yet contributes nothing.
#[must_use]
pub fn claim_volume_names(claims: &[String], bound: &BTreeMap<String, String>) -> Vec<String> {
    claims
        .iter()
        .filter_map(|claim| bound.get(claim))
        .filter(|volume| !volume.is_empty())
        .cloned()
        .collect()
}

/// The volume IDs whose detachment the drain waits for, per pod (upstream `getPodVolumeInfos`):
/// shared persistent volumes are dropped ([`exclude_shared_volumes`]), then each remaining
/// volume is mapped through `ids_by_volume` (the driver's GetVolumeIDs answers). A volume that
/// does not exist, could not be resolved, or belongs to no volume type of the provider (empty
/// answer) is not waited for; pods left without IDs are omitted.
#[must_use]
pub fn pod_volume_ids(
    volumes_by_pod: &BTreeMap<String, Vec<String>>,
    ids_by_volume: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, Vec<String>> {
    exclude_shared_volumes(volumes_by_pod)
        .into_iter()
        .filter_map(|(pod, volumes)| {
            let ids: Vec<String> = volumes
                .iter()
                .filter_map(|volume| ids_by_volume.get(volume))
                .flatten()
                .filter(|id| !id.is_empty())
                .cloned()
                .collect();
            (!ids.is_empty()).then_some((pod, ids))
        })
        .collect()
}

/// `namespace/name` of a pod, the key of the ledger.
#[must_use]
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

pub(super) fn pod_uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}
