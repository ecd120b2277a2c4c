//! The virtual kubelet: a thin loop that executes the decisions of [`crate::node`] and
//! [`crate::pods`] against the target cluster.
//!
//! It watches (one watch each, not one per node) the Nodes it manages, pods, PVCs and PVs; every
//! tick it registers the Nodes of booted VMs, renews their Leases in `kube-node-lease`, posts node
//! status when it changed or the report interval passed, marks pods on its nodes Running and
//! Ready, and completes pods whose grace period is over. A deleted VM simply drops out of the loop:
//! its Node stops heartbeating (deleting the Node object is the controller's job).
//!
//! Recovery after an API outage is a matter of seconds, as with a real kubelet: the client does not
//! retry inside a request (see [`target_client`]), every API call is bounded by
//! [`KubeletConfig::request_timeout`], and each node's heartbeat (registration, Lease renewal,
//! status post) runs as its own task, so one slow or stuck call never holds back the other nodes
//! or the next tick.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

mod heartbeats;

use self::heartbeats::Heartbeats;
use crate::driver::Fleet;
use crate::metrics::Metrics;
use crate::node::{
    CONDITIONS_ANNOTATION, HEARTBEAT_ANNOTATION, HEARTBEAT_STOPPED, HeartbeatConfig, MANAGED_LABEL,
    NodeAction, NodeClock, StatusKey, conditions, node_actions, parse_condition_overrides,
    registration_node, server_disagrees, status_patch, transition_times, with_stored_statuses,
};
use crate::pods::{PodAction, node_volumes, pod_actions, running_pod_status};
use crate::state::Vm;

/// The namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Default of [`KubeletConfig::request_timeout`]: the kubelet's own heartbeat client gives up
/// after its node status update frequency (10 s) too.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A client for the target cluster without kube's built-in retries.
///
/// kube retries 429/503/504 inside one request up to 15 times with a backoff that grows to
/// 1,000 s: during an API outage every heartbeat would sit in those retries and the nodes would
/// freeze long after the API came back. The kubelet's answer to a failed call is the next
/// heartbeat, so the loop retries instead (the manager builds its clients the same way).
///
/// # Errors
///
/// When the configuration cannot be turned into a client (e.g. TLS settings).
pub fn target_client(mut config: kube::Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    // Name ourselves in the API server's audit log, as client-go components do.
    let agent = mcm_api::user_agent::user_agent("provider-virtual", env!("CARGO_PKG_VERSION"));
    if let Ok(agent) = axum::http::HeaderValue::from_str(&agent) {
        config.headers.push((axum::http::header::USER_AGENT, agent));
    }
    Client::try_from(config)
}

/// An API call that did not answer within [`KubeletConfig::request_timeout`].
#[derive(Debug, thiserror::Error)]
#[error("no answer from the API server within {0:?}")]
pub struct DeadlineExceeded(pub Duration);

/// Settings of the loop.
#[derive(Debug, Clone, Copy)]
pub struct KubeletConfig {
    /// How often the loop wakes up (tests use a few milliseconds).
    pub tick: Duration,
    /// Lease and status intervals.
    pub heartbeat: HeartbeatConfig,
    /// Concurrent API requests (heartbeats of all nodes together, and pod updates per tick).
    pub concurrency: usize,
    /// Deadline of every API call. A call still unanswered then counts as failed and is retried
    /// at a later tick, so a hung connection costs one deadline, not the rest of the outage.
    pub request_timeout: Duration,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(1),
            heartbeat: HeartbeatConfig::default(),
            concurrency: 32,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// The virtual kubelet of all VMs of a fleet.
pub struct Kubelet {
    client: Client,
    fleet: Arc<Fleet>,
    config: KubeletConfig,
    metrics: Arc<Metrics>,
    /// Shared by the heartbeat tasks of all nodes: `config.concurrency` calls at a time.
    permits: Arc<Semaphore>,
}

struct Stores {
    nodes: Store<Node>,
    pods: Store<Pod>,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
}

fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .touched_objects();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let drain = stream.for_each(|event| {
            if let Err(error) = event {
                tracing::debug!(%error, "watch error (retrying with backoff)");
            }
            futures::future::ready(())
        });
        tokio::select! {
            () = drain => {}
            () = shutdown.cancelled() => {}
        }
    });
    reader
}

fn api_result<T>(result: &Result<T, kube::Error>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(kube::Error::Api(status)) => status.code.to_string(),
        Err(_) => "error".to_owned(),
    }
}

fn is_status(result: &Result<impl Sized, kube::Error>, code: u16) -> bool {
    matches!(result, Err(kube::Error::Api(status)) if status.code == code)
}

impl Kubelet {
    /// A kubelet for `fleet` talking to the target cluster through `client`.
    pub fn new(
        client: Client,
        fleet: Arc<Fleet>,
        config: KubeletConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            client,
            fleet,
            permits: Arc::new(Semaphore::new(config.concurrency.max(1))),
            config,
            metrics,
        }
    }

    /// `call` bounded by the request deadline; a missed deadline is a failed call.
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        let deadline = self.config.request_timeout;
        tokio::time::timeout(deadline, call)
            .await
            .unwrap_or_else(|_| Err(kube::Error::Service(Box::new(DeadlineExceeded(deadline)))))
    }

    /// Runs until `shutdown` is cancelled.
    pub async fn run(self, shutdown: CancellationToken) {
        let this = Arc::new(self);
        let stores = Stores {
            nodes: spawn_reflector(
                Api::<Node>::all(this.client.clone()),
                watcher::Config::default().labels(&format!("{MANAGED_LABEL}=true")),
                &shutdown,
            ),
            pods: spawn_reflector(
                Api::<Pod>::all(this.client.clone()),
                watcher::Config::default(),
                &shutdown,
            ),
            claims: spawn_reflector(
                Api::<PersistentVolumeClaim>::all(this.client.clone()),
                watcher::Config::default(),
                &shutdown,
            ),
            volumes: spawn_reflector(
                Api::<PersistentVolume>::all(this.client.clone()),
                watcher::Config::default(),
                &shutdown,
            ),
        };
        let mut clocks: HashMap<String, NodeClock> = HashMap::new();
        let mut heartbeats = Heartbeats::default();
        let mut ticker = tokio::time::interval(this.config.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tracing::info!(tick = ?this.config.tick, request_timeout = ?this.config.request_timeout, "virtual kubelet started");
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = shutdown.cancelled() => break,
            }
            this.tick(&stores, &mut clocks, &mut heartbeats).await;
        }
        // Dropping the set aborts the heartbeats still in flight.
        drop(heartbeats);
        tracing::info!("virtual kubelet stopped");
    }

    /// kube-apiserver creates `kube-node-lease` itself, so this runs only when a Lease create
    /// finds it missing (a bare API server): the chart's target role does not, and need not,
    /// allow creating namespaces.
    async fn ensure_lease_namespace(&self) {
        let namespaces = Api::<Namespace>::all(self.client.clone());
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(LEASE_NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let result = self
            .bounded(namespaces.create(&PostParams::default(), &namespace))
            .await;
        if let Err(error) = &result
            && !is_status(&result, 409)
        {
            tracing::warn!(%error, "cannot create namespace {LEASE_NAMESPACE}");
        }
    }

    async fn tick(
        self: &Arc<Self>,
        stores: &Stores,
        clocks: &mut HashMap<String, NodeClock>,
        heartbeats: &mut Heartbeats,
    ) {
        clocks.extend(heartbeats.finished());
        let now = Timestamp::now();
        let running: Vec<Vm> = self
            .fleet
            .vms()
            .into_iter()
            .filter(|vm| vm.runs_node(now))
            .collect();
        let running_names: HashSet<String> =
            running.iter().map(|vm| vm.node_name.clone()).collect();
        // A deleted VM stops heartbeating: forget its clock.
        clocks.retain(|node, _| running_names.contains(node));

        let pods_ready = stores.pods.wait_until_ready().now_or_never_ready();
        let pods = stores.pods.state();
        let volumes_by_node = if pods_ready {
            let claims_owned = stores.claims.state();
            let volumes_owned = stores.volumes.state();
            let claims = claims_owned
                .iter()
                .map(|claim| {
                    (
                        (
                            claim.metadata.namespace.clone().unwrap_or_default(),
                            claim.metadata.name.clone().unwrap_or_default(),
                        ),
                        claim.as_ref(),
                    )
                })
                .collect();
            let volumes = volumes_owned
                .iter()
                .map(|volume| {
                    (
                        volume.metadata.name.clone().unwrap_or_default(),
                        volume.as_ref(),
                    )
                })
                .collect();
            node_volumes(pods.iter().map(AsRef::as_ref), &claims, &volumes)
        } else {
            HashMap::new()
        };

        for vm in &running {
            // Its previous heartbeat is still running (within its deadlines): the clock in
            // `clocks` is stale until it ends, and two heartbeats of one node must not race.
            if heartbeats.busy(&vm.node_name) {
                continue;
            }
            let observed = stores.nodes.get(&ObjectRef::new(&vm.node_name));
            let annotation = |key: &str| {
                observed
                    .as_ref()
                    .and_then(|node| node.metadata.annotations.as_ref())
                    .and_then(|annotations| annotations.get(key))
                    .cloned()
            };
            if annotation(HEARTBEAT_ANNOTATION).as_deref() == Some(HEARTBEAT_STOPPED)
                || self.fleet.heartbeat_stopped(&vm.node_name)
            {
                // Fault injection: this node's kubelet is cut off. When it is back, its first
                // heartbeat posts the status (as a kubelet that reconnects does).
                if let Some(clock) = clocks.get_mut(&vm.node_name) {
                    clock.last_status_post = None;
                }
                continue;
            }
            let mut overrides = self.fleet.overrides(&vm.node_name);
            if let Some(text) = observed
                .as_ref()
                .and_then(|node| node.metadata.annotations.as_ref())
                .and_then(|annotations| annotations.get(CONDITIONS_ANNOTATION))
            {
                match parse_condition_overrides(text) {
                    Ok(parsed) => overrides.extend(parsed),
                    Err(error) => {
                        tracing::warn!(node = %vm.node_name, %error, "ignoring condition annotation")
                    }
                }
            }
            let key = StatusKey {
                conditions: conditions(vm, &overrides, now),
                volumes: volumes_by_node
                    .get(&vm.node_name)
                    .cloned()
                    .unwrap_or_default(),
            };
            let mut clock = clocks.entry(vm.node_name.clone()).or_default().clone();
            // The stored Node says otherwise (e.g. the node lifecycle controller marked it
            // Unknown after missed heartbeats): post again, at most once per lease interval
            // while the node watch catches up with our own post.
            let stored_conditions = observed
                .as_ref()
                .and_then(|node| node.status.as_ref())
                .and_then(|status| status.conditions.as_deref())
                .unwrap_or_default();
            if server_disagrees(stored_conditions, &key) {
                // Back to Ready after being marked Unknown is a transition, at its own time.
                clock.transitions = with_stored_statuses(&clock.transitions, stored_conditions);
                if clock.last_status_post.is_some_and(|posted| {
                    now.duration_since(posted) >= self.config.heartbeat.lease_interval
                }) {
                    clock.last_status_post = None;
                }
            }
            let actions = node_actions(&clock, &key, now, &self.config.heartbeat);
            if !actions.is_empty() {
                let node_uid = observed.and_then(|node| node.metadata.uid.clone());
                let this = Arc::clone(self);
                let owned = vm.clone();
                let task = heartbeats.tasks.spawn(async move {
                    // The semaphore is never closed; without a permit the heartbeat still runs.
                    let _permit = this.permits.acquire().await.ok();
                    this.heartbeat(&owned, clock, key, actions, node_uid, now)
                        .await
                });
                heartbeats.started(task.id(), vm.node_name.clone());
            }
        }

        if pods_ready {
            let registered: HashSet<String> = clocks
                .iter()
                .filter(|(_, clock)| clock.registered && !clock.lost)
                .map(|(node, _)| node.clone())
                .collect();
            let ips: HashMap<&str, &str> = running
                .iter()
                .map(|vm| (vm.node_name.as_str(), vm.internal_ip.as_str()))
                .collect();
            let actions = pod_actions(pods.iter().map(AsRef::as_ref), &registered, now);
            let pods_by_key: HashMap<(&str, &str), &Pod> = pods
                .iter()
                .filter_map(|pod| {
                    Some((
                        (
                            pod.metadata.namespace.as_deref()?,
                            pod.metadata.name.as_deref()?,
                        ),
                        pod.as_ref(),
                    ))
                })
                .collect();
            futures::stream::iter(actions.into_iter().map(|action| {
                let ips = &ips;
                let pods_by_key = &pods_by_key;
                async move { self.pod_action(action, ips, pods_by_key, now).await }
            }))
            .buffer_unordered(self.config.concurrency.max(1))
            .collect::<Vec<()>>()
            .await;
        }
    }

    async fn heartbeat(
        &self,
        vm: &Vm,
        mut clock: NodeClock,
        key: StatusKey,
        actions: Vec<NodeAction>,
        node_uid: Option<String>,
        now: Timestamp,
    ) -> (String, NodeClock) {
        let nodes = Api::<Node>::all(self.client.clone());
        let name = vm.node_name.clone();
        let mut node_uid = node_uid;
        for action in actions {
            match action {
                NodeAction::Register => {
                    let result = self
                        .bounded(
                            nodes.create(&PostParams::default(), &registration_node(vm, &key, now)),
                        )
                        .await;
                    self.metrics
                        .record_kube("register_node", &api_result(&result));
                    match result {
                        Ok(created) => {
                            tracing::info!(node = %name, provider_id = %vm.provider_id, "registered node");
                            node_uid = created.metadata.uid;
                            clock.registered = true;
                        }
                        Err(kube::Error::Api(status)) if status.code == 409 => {
                            tracing::info!(node = %name, "node already registered (provider restart)");
                            clock.registered = true;
                        }
                        Err(error) => {
                            tracing::warn!(node = %name, %error, "cannot register node");
                            return (name, clock);
                        }
                    }
                }
                NodeAction::RenewLease => {
                    if self.renew_lease(&name, node_uid.as_deref(), now).await {
                        clock.last_lease_renewal = Some(now);
                    } else {
                        // Cut off from the API server: the control plane may mark the node
                        // Unknown meanwhile, so the first heartbeat that gets through posts
                        // the status too.
                        clock.last_status_post = None;
                    }
                }
                NodeAction::PostStatus => {
                    let transitions = transition_times(&clock.transitions, &key.conditions, now);
                    // Strategic merge, as the kubelet: conditions merge by type, so the
                    // conditions other components own on this Node are left alone.
                    let patch =
                        status_patch(vm, &key, clock.last_posted.as_ref(), &transitions, now);
                    let result = self
                        .bounded(nodes.patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Strategic(patch),
                        ))
                        .await;
                    self.metrics
                        .record_kube("post_node_status", &api_result(&result));
                    match result {
                        Ok(_) => {
                            clock.last_status_post = Some(now);
                            clock.last_posted = Some(key.clone());
                            clock.transitions = transitions;
                        }
                        Err(kube::Error::Api(status)) if status.code == 404 => {
                            tracing::warn!(node = %name, "node object is gone; stopping its heartbeat");
                            clock.lost = true;
                        }
                        Err(error) => {
                            tracing::warn!(node = %name, %error, "cannot post node status")
                        }
                    }
                }
            }
        }
        (name, clock)
    }

    async fn renew_lease(&self, node: &str, node_uid: Option<&str>, now: Timestamp) -> bool {
        let leases = Api::<Lease>::namespaced(self.client.clone(), LEASE_NAMESPACE);
        let spec = LeaseSpec {
            holder_identity: Some(node.to_owned()),
            lease_duration_seconds: Some(self.config.heartbeat.lease_duration_seconds),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        };
        let result = self
            .bounded(leases.patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": spec})),
            ))
            .await;
        self.metrics
            .record_kube("renew_lease", &api_result(&result));
        match result {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                // Like the kubelet: the Lease is owned by the Node, so it goes with it.
                let owner = node_uid.map(|uid| OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node.to_owned(),
                    uid: uid.to_owned(),
                    ..OwnerReference::default()
                });
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(node.to_owned()),
                        namespace: Some(LEASE_NAMESPACE.into()),
                        owner_references: owner.map(|owner| vec![owner]),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                let mut result = self
                    .bounded(leases.create(&PostParams::default(), &lease))
                    .await;
                if is_status(&result, 404) {
                    // The lease namespace could not be created at start-up (API down then).
                    self.ensure_lease_namespace().await;
                    result = self
                        .bounded(leases.create(&PostParams::default(), &lease))
                        .await;
                }
                self.metrics
                    .record_kube("create_lease", &api_result(&result));
                match result {
                    Ok(_) => true,
                    Err(error) => {
                        tracing::warn!(%node, %error, "cannot create node lease");
                        false
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%node, %error, "cannot renew node lease");
                false
            }
        }
    }

    async fn pod_action(
        &self,
        action: PodAction,
        ips: &HashMap<&str, &str>,
        pods: &HashMap<(&str, &str), &Pod>,
        now: Timestamp,
    ) {
        match action {
            PodAction::MarkRunning {
                namespace,
                name,
                node,
            } => {
                let Some(pod) = pods.get(&(namespace.as_str(), name.as_str())) else {
                    return;
                };
                let status = running_pod_status(
                    pod,
                    ips.get(node.as_str()).copied().unwrap_or_default(),
                    now,
                );
                let api = Api::<Pod>::namespaced(self.client.clone(), &namespace);
                let result = self
                    .bounded(api.patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(serde_json::json!({"status": status})),
                    ))
                    .await;
                self.metrics
                    .record_kube("mark_pod_running", &api_result(&result));
                if let Err(error) = result {
                    tracing::debug!(%namespace, pod = %name, %error, "cannot mark pod running");
                }
            }
            PodAction::Complete {
                namespace,
                name,
                uid,
            } => {
                let api = Api::<Pod>::namespaced(self.client.clone(), &namespace);
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: uid.map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                let result = self.bounded(api.delete(&name, &params)).await;
                self.metrics
                    .record_kube("complete_pod", &api_result(&result));
                match result {
                    Ok(_) => tracing::debug!(%namespace, pod = %name, "completed terminating pod"),
                    Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                    Err(error) => {
                        tracing::debug!(%namespace, pod = %name, %error, "cannot complete pod")
                    }
                }
            }
        }
    }
}

/// Checks readiness of a store without waiting.
trait NowOrNever {
    fn now_or_never_ready(self) -> bool;
}

impl<F: std::future::Future<Output = Result<(), reflector::store::WriterDropped>>> NowOrNever
    for F
{
    fn now_or_never_ready(self) -> bool {
        matches!(futures::FutureExt::now_or_never(self), Some(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_node_is_busy_while_its_heartbeat_runs_and_free_once_it_ended() {
        let mut heartbeats = Heartbeats::default();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let task = heartbeats.tasks.spawn(async move {
            let _ = released.await;
            ("node-a".to_owned(), NodeClock::default())
        });
        heartbeats.started(task.id(), "node-a".to_owned());
        assert!(heartbeats.busy("node-a"));
        assert!(!heartbeats.busy("node-b"), "another node is not busy");
        assert!(heartbeats.finished().is_empty(), "the heartbeat still runs");
        assert!(heartbeats.busy("node-a"));

        let _ = release.send(());
        let mut done = Vec::new();
        while done.is_empty() {
            tokio::task::yield_now().await;
            done = heartbeats.finished();
        }
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].0, "node-a");
        assert!(
            !heartbeats.busy("node-a"),
            "a finished heartbeat frees its node"
        );
    }
}
