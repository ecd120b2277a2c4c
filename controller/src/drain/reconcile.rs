//! The drain executor: one pass of [`mcm_decisions::drain::plan::plan_drain`] against the target cluster.
//!
//! A pass lists the node's pods live (field selector `spec.nodeName`, never a cluster-wide pod
//! cache), resolves the volume IDs of pods with persistent volume claims (PVC → PV →
//! `driver.get_volume_ids`, cached per pod and PV in [`NodeDrainState`]), asks the plan for the
//! next evictions/deletions, executes them and records the results in the node's
//! [`DrainLedger`]. The caller keeps the [`NodeDrainState`] between passes and bounds every pass by
//! the remaining drain deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Client;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Preconditions};
use mcm_provider_proto::DriverClient;

use crate::platform::metrics::Metrics;
use mcm_decisions::drain::pdb;
use mcm_decisions::drain::plan::{
    DrainAction, DrainConfig, DrainInput, DrainLedger, DrainOutcome, EvictionFailure,
    EvictionResult, PodDisposition, VolumeEvent, claim_volume_names, classify_pod,
    exclude_shared_volumes, misconfigured_refusals, plan_drain, pod_key, pod_volume_ids,
    pvc_claims, volume_progress,
};

/// What the shell remembers about the drain of one node between passes (in memory; after a
/// restart the accounting restarts, which only adds retries: the deadline comes from the
/// machine's deletionTimestamp).
#[derive(Clone, Debug)]
pub struct NodeDrainState {
    /// Per-pod eviction accounting of the plan.
    pub ledger: DrainLedger,
    /// Persistent volume names per `pod key@uid` (claims resolved once).
    pv_names: BTreeMap<String, Vec<String>>,
    /// Volume IDs per persistent volume (from GetVolumeIDs; empty = nothing to wait for).
    volume_ids: BTreeMap<String, Vec<String>>,
    /// When this process started draining the node (drain-duration metric).
    pub started: Timestamp,
}

impl NodeDrainState {
    /// A fresh state for a drain starting at `now`.
    #[must_use]
    pub fn new(now: Timestamp) -> Self {
        Self {
            ledger: DrainLedger::default(),
            pv_names: BTreeMap::new(),
            volume_ids: BTreeMap::new(),
            started: now,
        }
    }
}

/// The target cluster and driver a drain pass works with.
pub struct DrainTarget<'a> {
    /// Target cluster client.
    pub client: &'a Client,
    /// The provider driver (GetVolumeIDs).
    pub driver: &'a DriverClient,
    /// Metrics (driver call latency).
    pub metrics: &'a Metrics,
    /// Provider name for the driver metrics.
    pub provider: &'a str,
    /// `--machine-pv-reattach-timeout`: how long an evicted pod's detached volumes are waited
    /// for on another node (0 skips the wait).
    pub pv_reattach_timeout: mcm_api::duration::Duration,
}

/// Longest wait for the answer to one eviction. The client's transport retries 429 (a budget
/// refusing the eviction) with exponential backoff for minutes; a drain pass must not wait that
/// long for one pod.
const EVICTION_ANSWER_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

fn api_error_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Runs one pass of the drain of `node_name` and returns where it stands.
pub async fn drain_pass(
    target: &DrainTarget<'_>,
    node_name: &str,
    node: Option<&Node>,
    config: &DrainConfig,
    state: &mut NodeDrainState,
    now: Timestamp,
) -> DrainOutcome {
    let pods_api: Api<Pod> = Api::all(target.client.clone());
    let listed = pods_api
        .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
        .await;
    let pods = match listed {
        Ok(list) => list.items,
        Err(error) => {
            return DrainOutcome::Failed {
                reason: format!("listing the pods of node {node_name} failed: {error}"),
            };
        }
    };
    let volume_ids = if config.force_delete_pods {
        BTreeMap::new()
    } else {
        resolve_volume_ids(target, node_name, &pods, state).await
    };
    if !config.force_delete_pods {
        reattach_wait(
            target,
            node_name,
            node,
            &pods,
            &volume_ids,
            config,
            state,
            now,
        )
        .await;
    }
    let plan = plan_drain(&DrainInput {
        node_name,
        node,
        pods: &pods,
        volume_ids: &volume_ids,
        ledger: &state.ledger,
        config,
        now,
    });
    if !plan.actions.is_empty() {
        tracing::debug!(
            node = node_name,
            actions = plan.actions.len(),
            force = config.force_delete_pods,
            "drain pass acting on pods"
        );
    }
    let by_key: BTreeMap<String, &Pod> = pods.iter().map(|pod| (pod_key(pod), pod)).collect();
    let results = futures::future::join_all(
        plan.actions
            .iter()
            .map(|action| execute(target.client, action, &by_key)),
    )
    .await;
    let mut force_errors = Vec::new();
    for (action, result) in plan.actions.iter().zip(&results) {
        state.ledger.record(action, result, now);
        if let EvictionResult::Failed(failure) = result {
            let pod = match action {
                DrainAction::Evict { pod, .. } | DrainAction::Delete { pod, .. } => pod,
            };
            tracing::info!(
                node = node_name,
                pod,
                ?failure,
                "eviction or deletion refused"
            );
            if config.force_delete_pods {
                force_errors.push(format!("deleting pod {pod:?} failed: {failure:?}"));
            }
        }
    }
    if let Some(reason) = misconfigured_refusals(&plan.actions, &results) {
        return DrainOutcome::Failed { reason };
    }
    if !force_errors.is_empty() {
        return DrainOutcome::Failed {
            reason: force_errors.join("; "),
        };
    }
    plan.outcome
}

/// Upstream's `waitForReattach`: after an evicted pod's volumes detached from the drained node,
/// the serial volume queue waits until one of its persistent volumes is attached to another node
/// (a VolumeAttachment with `status.attached` elsewhere) or `--machine-pv-reattach-timeout`
/// passes; a timeout is only logged (and counted), the drain goes on. The decisions are
/// [`volume_progress`]'s; VolumeAttachments are listed only while a pod is waiting.
#[allow(clippy::too_many_arguments)]
async fn reattach_wait(
    target: &DrainTarget<'_>,
    node_name: &str,
    node: Option<&Node>,
    pods: &[Pod],
    volume_ids: &BTreeMap<String, Vec<String>>,
    config: &DrainConfig,
    state: &mut NodeDrainState,
    now: Timestamp,
) {
    let waiting: Vec<(String, String)> = state
        .ledger
        .pods
        .iter()
        .filter(|(_, progress)| progress.reattach_deadline.is_some() && !progress.reattach_settled)
        .map(|(key, progress)| (key.clone(), format!("{key}@{}", progress.uid)))
        .collect();
    let mut attached_elsewhere = BTreeSet::new();
    if !waiting.is_empty() {
        let api: Api<VolumeAttachment> = Api::all(target.client.clone());
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                for (key, cache_key) in &waiting {
                    let pvs = state.pv_names.get(cache_key).cloned().unwrap_or_default();
                    let elsewhere = list.items.iter().any(|attachment| {
                        attachment.spec.node_name != node_name
                            && attachment.status.as_ref().is_some_and(|s| s.attached)
                            && attachment
                                .spec
                                .source
                                .persistent_volume_name
                                .as_ref()
                                .is_some_and(|pv| pvs.contains(pv))
                    });
                    if elsewhere {
                        attached_elsewhere.insert(key.clone());
                    }
                }
            }
            // Without the list the wait simply ends at its timeout, as upstream without an
            // informer.
            Err(error) => {
                tracing::debug!(node = node_name, %error, "cannot list VolumeAttachments");
            }
        }
    }
    let input = DrainInput {
        node_name,
        node,
        pods,
        volume_ids,
        ledger: &state.ledger,
        config,
        now,
    };
    let events = volume_progress(&input, target.pv_reattach_timeout, &attached_elsewhere);
    for event in &events {
        match event {
            VolumeEvent::Detached { pod } => {
                tracing::info!(node = node_name, pod, timeout = %target.pv_reattach_timeout, "volumes detached; waiting for them to be attached elsewhere");
            }
            VolumeEvent::Reattached { pod } => {
                tracing::info!(node = node_name, pod, "volumes re-attached on another node");
                target.metrics.volume_reattach("reattached");
            }
            VolumeEvent::ReattachTimedOut { pod } => {
                tracing::warn!(node = node_name, pod, timeout = %target.pv_reattach_timeout, "timed out waiting for volumes to be attached elsewhere; the drain goes on");
                target.metrics.volume_reattach("timeout");
            }
        }
        state
            .ledger
            .record_volume_event(event, target.pv_reattach_timeout, now);
    }
}

/// Volume IDs to wait for per pod key (shared volumes excluded; pods without volumes or whose
/// lookups failed have no entry: nothing to wait for, as upstream skips such volumes).
async fn resolve_volume_ids(
    target: &DrainTarget<'_>,
    node_name: &str,
    pods: &[Pod],
    state: &mut NodeDrainState,
) -> BTreeMap<String, Vec<String>> {
    let mut pv_by_pod: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pod in pods {
        if classify_pod(pod, node_name) != (PodDisposition::Evict { with_volumes: true }) {
            continue;
        }
        let key = pod_key(pod);
        let cache_key = format!("{key}@{}", pod.metadata.uid.as_deref().unwrap_or(""));
        if let Some(names) = state.pv_names.get(&cache_key) {
            pv_by_pod.insert(key, names.clone());
            continue;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(target.client.clone(), namespace);
        let pod_claims = pvc_claims(pod);
        let mut bound = BTreeMap::new();
        let mut complete = true;
        for claim in &pod_claims {
            match claims.get_opt(claim).await {
                Ok(Some(found)) => {
                    if let Some(volume) = found.spec.and_then(|spec| spec.volume_name) {
                        bound.insert(claim.clone(), volume);
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    complete = false;
                    tracing::warn!(node = node_name, pod = key, claim, %error, "cannot read a persistent volume claim");
                }
            }
        }
        let names = claim_volume_names(&pod_claims, &bound);
        if complete {
            state.pv_names.insert(cache_key, names.clone());
        }
        pv_by_pod.insert(key, names);
    }
    let volumes: Api<PersistentVolume> = Api::all(target.client.clone());
    let wanted: BTreeSet<String> = exclude_shared_volumes(&pv_by_pod)
        .into_values()
        .flatten()
        .collect();
    for name in wanted {
        if state.volume_ids.contains_key(&name) {
            continue;
        }
        let spec = match volumes.get_opt(&name).await {
            Ok(Some(volume)) => volume.spec,
            Ok(None) => {
                state.volume_ids.insert(name, Vec::new());
                continue;
            }
            Err(error) => {
                tracing::warn!(node = node_name, volume = name, %error, "cannot read a persistent volume");
                continue;
            }
        };
        let Some(spec) = spec else {
            continue;
        };
        let started = Instant::now();
        let answer = target
            .driver
            .get_volume_ids(std::slice::from_ref(&spec))
            .await;
        let code = match &answer {
            Ok(_) => "OK".to_owned(),
            Err(error) => error.code.to_string(),
        };
        target
            .metrics
            .driver_call(target.provider, "GetVolumeIDs", &code, started.elapsed());
        match answer {
            Ok(found) => {
                state.volume_ids.insert(name, found);
            }
            // Upstream skips a volume whose IDs cannot be found (no detach wait for it).
            Err(error) => {
                tracing::warn!(node = node_name, volume = name, %error, "GetVolumeIDs failed; not waiting for this volume to detach");
            }
        }
    }
    pod_volume_ids(&pv_by_pod, &state.volume_ids)
}

fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

async fn execute(
    client: &Client,
    action: &DrainAction,
    pods: &BTreeMap<String, &Pod>,
) -> EvictionResult {
    match action {
        DrainAction::Evict { pod, uid, .. } => {
            let (namespace, name) = split_key(pod);
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let params = EvictParams {
                delete_options: Some(DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()).filter(|uid| !uid.is_empty()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                }),
                ..EvictParams::default()
            };
            let answer =
                tokio::time::timeout(EVICTION_ANSWER_LIMIT, api.evict(name, &params)).await;
            let Ok(answer) = answer else {
                // kube's client retries 429 answers itself (up to minutes of backoff); an eviction
                // that has not been answered by now is a budget refusing it. Classifying it now
                // keeps the drain pass short and the PDB rules (misconfigured budget) in force.
                tracing::debug!(
                    pod,
                    "eviction unanswered: treated as refused by a disruption budget"
                );
                return EvictionResult::Failed(
                    classify_429(client, namespace, pods.get(pod)).await,
                );
            };
            match answer {
                Ok(_) => EvictionResult::Accepted,
                Err(error) => match api_error_code(&error) {
                    Some(404) => EvictionResult::NotFound,
                    Some(429) => {
                        EvictionResult::Failed(classify_429(client, namespace, pods.get(pod)).await)
                    }
                    _ => EvictionResult::Failed(EvictionFailure::Other(format!(
                        "error when evicting pod {pod:?}: {error}"
                    ))),
                },
            }
        }
        DrainAction::Delete {
            pod,
            uid,
            grace_period_seconds,
            ..
        } => {
            let (namespace, name) = split_key(pod);
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let params = DeleteParams {
                grace_period_seconds: grace_period_seconds
                    .and_then(|seconds| u32::try_from(seconds.max(0)).ok()),
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()).filter(|uid| !uid.is_empty()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(name, &params).await {
                Ok(_) => EvictionResult::Accepted,
                // 409: the UID precondition failed, the pod we meant is gone (replaced).
                Err(error) if matches!(api_error_code(&error), Some(404 | 409)) => {
                    EvictionResult::NotFound
                }
                Err(error) => EvictionResult::Failed(EvictionFailure::Other(format!(
                    "error when deleting pod {pod:?}: {error}"
                ))),
            }
        }
    }
}

/// A 429 means a budget blocks the eviction now; a misconfigured budget blocks it forever.
async fn classify_429(client: &Client, namespace: &str, pod: Option<&&Pod>) -> EvictionFailure {
    let Some(pod) = pod else {
        return EvictionFailure::TooManyRequests;
    };
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), namespace);
    match api.list(&ListParams::default()).await {
        Ok(list) => match pdb::budget_for_pod(pod, &list.items) {
            Some(budget) if pdb::is_misconfigured(budget) => EvictionFailure::MisconfiguredPdb {
                pdb: pdb::budget_key(budget),
            },
            Some(budget) => EvictionFailure::BlockedByPdb {
                pdb: pdb::budget_key(budget),
            },
            None => EvictionFailure::TooManyRequests,
        },
        Err(error) => {
            tracing::debug!(namespace, %error, "cannot list disruption budgets");
            EvictionFailure::TooManyRequests
        }
    }
}
