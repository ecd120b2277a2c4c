//! Pod eviction against PodDisruptionBudgets, PDB status, and graceful pod deletion.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{EVENTUALLY, Target, api_error, wait_for};

/// A pod: bound to `node` when given, otherwise held unscheduled by a scheduling gate (so a
/// real cluster's scheduler leaves it alone).
fn pod(name: &str, app: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox:1.36"}]});
    match node {
        Some(n) => spec["nodeName"] = json!(n),
        None => spec["schedulingGates"] = json!([{"name": "conformance.example.com/hold"}]),
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": app}}, "spec": spec}),
    )
    .expect("pod literal")
}

async fn make_ready(pods: &Api<Pod>, name: &str) {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .unwrap_or_else(|e| panic!("mark pod {name} Ready: {e}"));
}

async fn gone_or_terminating(pods: &Api<Pod>, name: &str) -> bool {
    match pods.get(name).await {
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Ok(p) => p.metadata.deletion_timestamp.is_some(),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_without_pdb_is_allowed() {
    let t = Target::sandbox_or_env().await;
    let pods = t.api::<Pod>();
    pods.create(&PostParams::default(), &pod("free", "free", None))
        .await
        .expect("create pod");
    let status = pods
        .evict("free", &EvictParams::default())
        .await
        .expect("POST pods/free/eviction");
    assert!(
        status.is_success(),
        "eviction answers a Success Status: {status:?}"
    );
    wait_for("evicted pod is deleted", EVENTUALLY, || {
        let pods = pods.clone();
        async move { gone_or_terminating(&pods, "free").await.then_some(()) }
    })
    .await;
    let err = api_error(
        pods.evict("missing", &EvictParams::default()).await,
        "evict missing pod",
    );
    assert_eq!(
        err.code, 404,
        "evicting a missing pod is 404 NotFound: {err:?}"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_respects_pod_disruption_budget_and_status_is_kept_current() {
    let t = Target::sandbox_or_env().await;
    let pods = t.api::<Pod>();
    let pdbs = t.api::<PodDisruptionBudget>();
    for name in ["web-0", "web-1"] {
        pods.create(&PostParams::default(), &pod(name, "web", None))
            .await
            .expect("create");
        make_ready(&pods, name).await;
    }
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .expect("pdb literal");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create pdb");
    let status = wait_for(
        "PDB status: currentHealthy=2 desiredHealthy=2 disruptionsAllowed=0",
        EVENTUALLY,
        || {
            let pdbs = pdbs.clone();
            async move {
                let p = pdbs.get("web").await.ok()?;
                let s = p.status?;
                (s.current_healthy == 2
                    && s.desired_healthy == 2
                    && s.disruptions_allowed == 0
                    && s.expected_pods == 2
                    && s.observed_generation == p.metadata.generation)
                    .then_some(s)
            }
        },
    )
    .await;
    assert!(
        status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "DisruptionAllowed" && c.status == "False"),
        "PDB condition DisruptionAllowed=False when no disruption is allowed"
    );

    let err = api_error(
        pods.evict("web-0", &EvictParams::default()).await,
        "evict under a full PDB",
    );
    assert_eq!(
        (err.code, err.reason.as_str()),
        (429, "TooManyRequests"),
        "PDB violation is 429 TooManyRequests: {err:?}"
    );
    assert_eq!(
        err.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let causes = err.details.map(|d| d.causes).unwrap_or_default();
    assert!(
        causes.iter().any(|c| c.reason == "DisruptionBudget"
            && c.message == "The disruption budget web needs 2 healthy pods and has 2 currently"),
        "cause names the budget: {causes:?}"
    );
    assert!(
        pods.get("web-0")
            .await
            .expect("get")
            .metadata
            .deletion_timestamp
            .is_none(),
        "a refused eviction deletes nothing"
    );

    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 1}})),
    )
    .await
    .expect("relax pdb");
    wait_for("PDB disruptionsAllowed=1 after minAvailable=1", EVENTUALLY, || {
        let pdbs = pdbs.clone();
        async move { (pdbs.get("web").await.ok()?.status?.disruptions_allowed == 1).then_some(()) }
    })
    .await;
    pods.evict("web-0", &EvictParams::default())
        .await
        .expect("eviction within budget is allowed");
    wait_for("evicted pod deleted", EVENTUALLY, || {
        let pods = pods.clone();
        async move { gone_or_terminating(&pods, "web-0").await.then_some(()) }
    })
    .await;
    wait_for(
        "PDB status follows: currentHealthy=1 disruptionsAllowed=0",
        EVENTUALLY,
        || {
            let pdbs = pdbs.clone();
            async move {
                let s = pdbs.get("web").await.ok()?.status?;
                (s.current_healthy == 1 && s.disruptions_allowed == 0).then_some(())
            }
        },
    )
    .await;
    let err = api_error(
        pods.evict("web-1", &EvictParams::default()).await,
        "second eviction",
    );
    assert_eq!(err.code, 429, "the budget is used up again: {err:?}");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unready_pods_can_be_evicted_despite_budget() {
    let t = Target::sandbox_or_env().await;
    let pods = t.api::<Pod>();
    let pdbs = t.api::<PodDisruptionBudget>();
    pods.create(&PostParams::default(), &pod("api-0", "api", None))
        .await
        .expect("create");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "api"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "api"}}}
    }))
    .expect("pdb literal");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create pdb");
    wait_for("PDB observes the unhealthy pod", EVENTUALLY, || {
        let pdbs = pdbs.clone();
        async move {
            let s = pdbs.get("api").await.ok()?.status?;
            (s.expected_pods == 1 && s.current_healthy == 0).then_some(())
        }
    })
    .await;
    // A Pending (not Running) pod is not counted as healthy and eviction of it is not blocked.
    pods.evict("api-0", &EvictParams::default())
        .await
        .expect("a pending pod is evictable");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_bound_pod_is_graceful() {
    let t = Target::sandbox_or_env().await;
    let nodes: Api<Node> = Api::all(t.client.clone());
    let node = t.cluster_name("kubelet-less");
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": node}})).expect("node"),
        )
        .await
        .expect("create node");
    t.delete_at_end(ApiResource::erase::<Node>(&()), &node);
    let pods = t.api::<Pod>();
    pods.create(&PostParams::default(), &pod("bound", "b", Some(&node)))
        .await
        .expect("create bound pod");
    pods.create(&PostParams::default(), &pod("unbound", "b", None))
        .await
        .expect("create unbound pod");

    pods.delete("bound", &DeleteParams::default())
        .await
        .expect("delete bound");
    let still = pods
        .get("bound")
        .await
        .expect("a pod bound to a node stays until the kubelet confirms");
    assert!(
        still.metadata.deletion_timestamp.is_some(),
        "deletionTimestamp is set"
    );
    assert_eq!(
        still.metadata.deletion_grace_period_seconds,
        Some(30),
        "grace period from terminationGracePeriodSeconds"
    );

    pods.create(&PostParams::default(), &pod("short", "b", Some(&node)))
        .await
        .expect("create short-grace pod");
    pods.delete("short", &DeleteParams::default().grace_period(5))
        .await
        .expect("delete with grace 5");
    let short = pods.get("short").await.expect("still terminating");
    assert_eq!(
        short.metadata.deletion_grace_period_seconds,
        Some(5),
        "DeleteOptions.gracePeriodSeconds wins"
    );
    pods.delete("short", &DeleteParams::default().grace_period(0))
        .await
        .expect("force delete");

    pods.delete("unbound", &DeleteParams::default())
        .await
        .expect("delete unbound");
    let err = api_error(pods.get("unbound").await, "get unbound after delete");
    assert_eq!(
        err.code, 404,
        "an unscheduled pod is removed at once: {err:?}"
    );

    pods.delete("bound", &DeleteParams::default().grace_period(0))
        .await
        .expect("force delete");
    wait_for(
        "gracePeriodSeconds=0 removes the bound pod",
        EVENTUALLY,
        || {
            let pods = pods.clone();
            async move {
                matches!(pods.get("bound").await, Err(kube::Error::Api(s)) if s.code == 404)
                    .then_some(())
            }
        },
    )
    .await;
    t.finish().await;
}
