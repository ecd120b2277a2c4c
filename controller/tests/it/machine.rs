//! Integration tests of the Machine controller shell (`machine::reconcile`): creation, health,
//! node sync, hot update, preservation, driver error reactions, crash safety and API conflicts,
//! against two sandboxes with provider-virtual in-process (wrapped by a recording driver where a
//! test needs to see what the driver received).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mcm_api::v1alpha1::{Machine, MachinePhase};
use mcm_provider_proto::{
    BoundServer, Capabilities, CreateMachineResponse, DeleteMachineResponse, Driver, Endpoint,
    GetVolumeIdsRequest, InitializeMachineResponse, ListMachinesRequest, MachineError, MachineList,
    MachineRequest, MachineStatus, StatusError, UpdateMachineRequest, UpdateMachineResponse,
};
use mcm_provider_virtual::driver::VirtualDriver;
use tokio_util::sync::CancellationToken;

use crate::harness::{NAMESPACE, World, events_with_reason, eventually, scrape};

const LIMIT: Duration = Duration::from_secs(60);

fn machine_shell() -> Vec<mcm_controller::manager::compose::ControllerSpec> {
    mcm_controller::manager::compose::named(&["machine"])
}

/// A provider-virtual class whose finalizer is already set (the MachineClass controller is not
/// part of these tests).
async fn ready_class(world: &World, name: &str, spec: serde_json::Value) {
    world.create_class(name, spec).await;
    world
        .machine_classes()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"finalizers": ["machine.sapcloud.io/machine-controller-manager"]}
            })),
        )
        .await
        .unwrap();
}

fn machine_object(name: &str, class: &str, extra_spec: serde_json::Value) -> Machine {
    let mut spec = serde_json::json!({"class": {"kind": "MachineClass", "name": class}});
    if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra_spec) {
        spec.extend(extra);
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"name": "md-1"}},
        "spec": spec
    }))
    .unwrap()
}

async fn create_machine(world: &World, name: &str, class: &str, extra_spec: serde_json::Value) {
    world
        .machines()
        .create(
            &PostParams::default(),
            &machine_object(name, class, extra_spec),
        )
        .await
        .unwrap();
}

fn phase(machine: &Machine) -> Option<MachinePhase> {
    machine.phase().cloned()
}

fn description(machine: &Machine) -> String {
    machine
        .last_operation()
        .and_then(|op| op.description.clone())
        .unwrap_or_default()
}

async fn wait_machine(
    world: &World,
    name: &str,
    what: &str,
    check: impl Fn(&Machine) -> bool,
) -> Machine {
    eventually(&format!("machine {name}: {what}"), LIMIT, || async {
        world
            .machines()
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .filter(|m| check(m))
    })
    .await
}

async fn wait_phase(world: &World, name: &str, wanted: MachinePhase) -> Machine {
    let what = format!("phase {wanted:?}");
    wait_machine(world, name, &what, |m| phase(m) == Some(wanted.clone())).await
}

/// Waits until an Event with `reason` is stored. Events are written by a task of their own,
/// alongside or after the status write they explain: a test that has just seen the status may
/// not see the event yet.
async fn wait_event(world: &World, reason: &str) {
    eventually(&format!("an event {reason}"), LIMIT, || async {
        (!events_with_reason(world, reason).await.is_empty()).then_some(())
    })
    .await;
}

async fn wait_node(world: &World, name: &str, what: &str, check: impl Fn(&Node) -> bool) -> Node {
    eventually(&format!("node {name}: {what}"), LIMIT, || async {
        world
            .nodes()
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .filter(|n| check(n))
    })
    .await
}

fn node_annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.annotations().get(key).map(String::as_str)
}

fn node_condition(node: &Node, type_: &str) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_))
        .map(|c| c.status.clone())
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

async fn annotate_node(world: &World, node: &str, key: &str, value: Option<&str>) {
    world
        .nodes()
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .unwrap();
}

/// provider-virtual plus a record of the user data each CreateMachine received and scripted
/// GetMachineStatus failures (provider-virtual cannot inject those).
struct RecordingDriver {
    inner: VirtualDriver,
    user_data: Mutex<BTreeMap<String, String>>,
    /// Per machine: errors the next GetMachineStatus calls answer.
    status_failures: Mutex<BTreeMap<String, VecDeque<MachineError>>>,
    /// Machines whose InitializeMachine answers Unimplemented.
    initialize_unimplemented: Mutex<BTreeSet<String>>,
    /// Per machine: when each CreateMachine call arrived (backoff spacing).
    create_calls: Mutex<BTreeMap<String, Vec<std::time::Instant>>>,
    /// Per VM (providerID): how many UpdateMachine calls arrived.
    update_calls: Mutex<BTreeMap<String, usize>>,
}

impl Driver for RecordingDriver {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn create_machine(
        &self,
        request: MachineRequest,
    ) -> Result<CreateMachineResponse, MachineError> {
        let name = request.machine.name_any();
        let user_data = request
            .secret
            .get("userData")
            .map(|data| String::from_utf8_lossy(data).into_owned())
            .unwrap_or_default();
        self.create_calls
            .lock()
            .unwrap()
            .entry(name.clone())
            .or_default()
            .push(std::time::Instant::now());
        self.user_data.lock().unwrap().insert(name, user_data);
        self.inner.create_machine(request).await
    }

    async fn initialize_machine(
        &self,
        request: MachineRequest,
    ) -> Result<InitializeMachineResponse, MachineError> {
        if self
            .initialize_unimplemented
            .lock()
            .unwrap()
            .contains(&request.machine.name_any())
        {
            return Err(MachineError::unimplemented("InitializeMachine"));
        }
        self.inner.initialize_machine(request).await
    }

    async fn delete_machine(
        &self,
        request: MachineRequest,
    ) -> Result<DeleteMachineResponse, MachineError> {
        self.inner.delete_machine(request).await
    }

    async fn get_machine_status(
        &self,
        request: MachineRequest,
    ) -> Result<MachineStatus, StatusError> {
        let scripted = self
            .status_failures
            .lock()
            .unwrap()
            .get_mut(&request.machine.name_any())
            .and_then(VecDeque::pop_front);
        if let Some(error) = scripted {
            return Err(error.into());
        }
        self.inner.get_machine_status(request).await
    }

    async fn list_machines(
        &self,
        request: ListMachinesRequest,
    ) -> Result<MachineList, MachineError> {
        self.inner.list_machines(request).await
    }

    async fn get_volume_ids(
        &self,
        request: GetVolumeIdsRequest,
    ) -> Result<Vec<String>, MachineError> {
        self.inner.get_volume_ids(request).await
    }

    async fn validate_machine_class(
        &self,
        request: mcm_provider_proto::ValidateMachineClassRequest,
    ) -> Result<mcm_provider_proto::ClassFieldErrors, MachineError> {
        self.inner.validate_machine_class(request).await
    }

    async fn update_machine(
        &self,
        request: UpdateMachineRequest,
    ) -> Result<UpdateMachineResponse, MachineError> {
        *self
            .update_calls
            .lock()
            .unwrap()
            .entry(request.provider_id.clone())
            .or_default() += 1;
        self.inner.update_machine(request).await
    }
}

/// Serves a [`RecordingDriver`] over the world's fleet and points the world's manager at it.
async fn record_driver(world: &mut World, stop: &CancellationToken) -> Arc<RecordingDriver> {
    let driver = Arc::new(RecordingDriver {
        inner: VirtualDriver::new(Arc::clone(&world.fleet)),
        user_data: Mutex::new(BTreeMap::new()),
        status_failures: Mutex::new(BTreeMap::new()),
        initialize_unimplemented: Mutex::new(BTreeSet::new()),
        create_calls: Mutex::new(BTreeMap::new()),
        update_calls: Mutex::new(BTreeMap::new()),
    });
    let bound = BoundServer::bind(&Endpoint::Tcp("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    world.driver_endpoint = bound.local_endpoint().clone();
    let served = Arc::clone(&driver);
    let stop = stop.clone();
    tokio::spawn(async move {
        let _ = bound.serve(served, stop.cancelled_owned()).await;
    });
    driver
}

// ---------------------------------------------------------------------------------------------

/// Class `name`, ready, whose Secret holds `user_data`.
/// Creates a Node named like its machine that carries the startup taint
/// `node.machine.sapcloud.io/instance-not-ready:NoSchedule`, as a kubelet registering with it would.
async fn create_tainted_node(world: &World, name: &str, labels: serde_json::Value) {
    world
        .create_node(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": [{"key": "node.machine.sapcloud.io/instance-not-ready", "effect": "NoSchedule"}]}
        }))
        .await;
}

/// Waits until the bootstrap token Secret with `token_id` is gone from the target's `kube-system`.
async fn wait_bootstrap_token_deleted(world: &World, token_id: &str) {
    let tokens: Api<Secret> = Api::namespaced(world.target.clone(), "kube-system");
    let secret = format!("bootstrap-token-{token_id}");
    eventually("the bootstrap token to be deleted", LIMIT, || async {
        tokens
            .get_opt(&secret)
            .await
            .ok()
            .and_then(|found| found.is_none().then_some(()))
    })
    .await;
}

async fn ready_class_with_user_data(world: &World, name: &str, user_data: &str) {
    ready_class(world, name, serde_json::json!({})).await;
    Api::<Secret>::namespaced(world.control.clone(), NAMESPACE)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"userData": user_data}})),
        )
        .await
        .unwrap();
}

/// docs/behaviour.md#creation-flow: a bootstrap token Secret that exists before the machine's first
/// creation pass (left by a manager that stopped between creating it and storing the VM) is the
/// one the VM receives. The first pass creates the Secret without reading it first, so this is
/// the path where the creation answers 409 and the existing Secret is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_bootstrap_token_is_reused_by_the_first_creation() {
    let mut world = World::start().await;
    let stop = CancellationToken::new();
    let driver = record_driver(&mut world, &stop).await;
    ready_class_with_user_data(&world, "c1", "token=<<BOOTSTRAP_TOKEN>>\n").await;
    let tokens: Api<Secret> = Api::namespaced(world.target.clone(), "kube-system");
    let left_over: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "bootstrap-token-6e652d", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": "6e652d", "token-secret": "0123456789abcdef"}
    }))
    .unwrap();
    tokens
        .create(&PostParams::default(), &left_over)
        .await
        .unwrap();
    world.start_manager(machine_shell(), &[]).await;
    create_machine(&world, "machine-a1", "c1", serde_json::json!({})).await;

    let user_data = eventually("CreateMachine to receive the user data", LIMIT, || async {
        driver.user_data.lock().unwrap().get("machine-a1").cloned()
    })
    .await;
    assert_eq!(user_data, "token=6e652d.0123456789abcdef\n");
    wait_phase(&world, "machine-a1", MachinePhase::Running).await;
    world.stop_manager().await.unwrap();
    stop.cancel();
}

/// docs/behaviour.md#creation-flow happy path, user-data placeholders and bootstrap token, docs/behaviour.md#health-check Pending → Running with the
/// startup taint removed, docs/behaviour.md#node-sync machine-name label, docs/behaviour.md#metrics-mc metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_is_created_and_runs_with_its_node() {
    let mut world = World::start().await;
    let stop = CancellationToken::new();
    let driver = record_driver(&mut world, &stop).await;
    // User data with both placeholders.
    ready_class_with_user_data(
        &world,
        "c1",
        "name=<<MACHINE_NAME>>\ntoken=<<BOOTSTRAP_TOKEN>>\n",
    )
    .await;
    // A Node that already carries the startup taint; provider-virtual takes it over at boot.
    create_tainted_node(
        &world,
        "machine-a1",
        serde_json::json!({"untouched": "yes"}),
    )
    .await;
    world
        .start_manager(
            machine_shell(),
            &["--bootstrap-token-auth-extra-groups=system:extra"],
        )
        .await;
    create_machine(&world, "machine-a1", "c1", serde_json::json!({})).await;

    let running = wait_phase(&world, "machine-a1", MachinePhase::Running).await;
    assert!(
        running
            .finalizers()
            .contains(&"machine.sapcloud.io/machine-controller-manager".to_owned())
    );
    assert_eq!(
        running.labels().get("node").map(String::as_str),
        Some("machine-a1")
    );
    assert_eq!(
        running
            .annotations()
            .get("machinepriority.machine.sapcloud.io")
            .map(String::as_str),
        Some("3")
    );
    let provider_id = running.spec.provider_id.clone().unwrap_or_default();
    assert!(provider_id.starts_with("virtual:///"), "{provider_id}");
    assert!(
        description(&running).starts_with("Machine machine-a1 successfully joined the cluster in"),
        "{}",
        description(&running)
    );
    wait_node(&world, "machine-a1", "startup taint removed", |n| {
        !has_taint(n, "node.machine.sapcloud.io/instance-not-ready")
    })
    .await;
    let node = wait_node(&world, "machine-a1", "machine-name label", |n| {
        n.labels()
            .get("node.gardener.cloud/machine-name")
            .map(String::as_str)
            == Some("machine-a1")
    })
    .await;
    assert_eq!(
        node.labels().get("untouched").map(String::as_str),
        Some("yes")
    );

    // The VM received the substituted user data; the token is the bootstrap token Secret's.
    let user_data = driver
        .user_data
        .lock()
        .unwrap()
        .get("machine-a1")
        .cloned()
        .unwrap_or_default();
    assert!(user_data.contains("name=machine-a1\n"), "{user_data}");
    assert!(!user_data.contains("<<"), "{user_data}");
    let token = user_data
        .lines()
        .find_map(|line| line.strip_prefix("token="))
        .unwrap_or_default()
        .to_owned();
    // Token id = hex of bytes len-5..len-3 of the name: "ne-a1"[..3] = "ne-" → 6e652d.
    assert!(token.starts_with("6e652d."), "{token}");
    assert_eq!(token.len(), 6 + 1 + 16);
    // The bootstrap token Secret is deleted once the machine joined.
    wait_bootstrap_token_deleted(&world, "6e652d").await;
    assert_eq!(world.fleet.vms().len(), 1);

    let metrics = scrape(&world).await;
    assert!(
        metrics.contains("method=\"CreateMachine\"") && metrics.contains("code=\"OK\""),
        "driver call metrics missing"
    );
    assert!(metrics.contains("mcm_machine_current_status_phase"));
    assert!(metrics.contains("mcm_machine_create_duration_seconds"));
    world.stop_manager().await.unwrap();
    stop.cancel();
}

/// docs/behaviour.md#health-check: the bootstrap token is deleted in the pass that sees the machine
/// join, before anything else of that pass can fail. Every Node update is refused with a conflict
/// (the manager writes Nodes from its cache, and a kubelet's heartbeat makes that copy stale), so
/// the startup taint cannot be removed in the joining pass; the token must be deleted all the same,
/// and the taint once the Node can be written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_token_is_deleted_even_when_the_joining_pass_fails_on_the_node() {
    let mut world = World::start().await;
    let Some(faults) = world.target_faults() else {
        eprintln!("SKIPPED: no target sandbox to inject Node conflicts into");
        return;
    };
    let stop = CancellationToken::new();
    let driver = record_driver(&mut world, &stop).await;
    ready_class_with_user_data(&world, "c1", "token=<<BOOTSTRAP_TOKEN>>\n").await;
    create_tainted_node(&world, "machine-b1", serde_json::json!({})).await;
    // provider-virtual's kubelet creates Nodes and patches their status: only the manager updates.
    faults.inject_errors(mcm_sandbox::ErrorRule {
        verb: Some(mcm_sandbox::Verb::Update),
        resource: Some("nodes".to_owned()),
        status: 409,
        rate: 1.0,
        count: None,
    });
    world.start_manager(machine_shell(), &[]).await;
    create_machine(&world, "machine-b1", "c1", serde_json::json!({})).await;
    wait_phase(&world, "machine-b1", MachinePhase::Running).await;

    // "ne-b1"[..3] = "ne-" → token id 6e652d.
    let token = driver
        .user_data
        .lock()
        .unwrap()
        .get("machine-b1")
        .cloned()
        .unwrap_or_default();
    assert!(token.contains("token=6e652d."), "{token}");
    wait_bootstrap_token_deleted(&world, "6e652d").await;
    // The joining pass does fail on the Node: the token goes before the Node write (as upstream
    // orders them), so the refused update may come just after the deletion; wait for it.
    eventually("a refused Node update", LIMIT, || async {
        (faults
            .counters()
            .get(mcm_sandbox::Verb::Update, "nodes", 409)
            > 0)
        .then_some(())
    })
    .await;
    let node = world.nodes().get("machine-b1").await.unwrap();
    assert!(has_taint(
        &node,
        "node.machine.sapcloud.io/instance-not-ready"
    ));

    faults.clear_errors();
    wait_node(&world, "machine-b1", "startup taint removed", |n| {
        !has_taint(n, "node.machine.sapcloud.io/instance-not-ready")
    })
    .await;
    world.stop_manager().await.unwrap();
    stop.cancel();
}

/// Records every version of every Node the target's watch delivers, to see what each write
/// carried; abort the task when done.
fn record_node_versions(world: &World) -> (Arc<Mutex<Vec<Node>>>, tokio::task::JoinHandle<()>) {
    use futures::StreamExt as _;
    let versions: Arc<Mutex<Vec<Node>>> = Arc::default();
    let stream = kube::runtime::watcher(world.nodes(), kube::runtime::watcher::Config::default());
    let recorded = Arc::clone(&versions);
    let recorder = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(
                kube::runtime::watcher::Event::Apply(node)
                | kube::runtime::watcher::Event::InitApply(node),
            ) = event
            {
                recorded.lock().unwrap().push(node);
            }
        }
    });
    (versions, recorder)
}

/// Fails if a recorded version that `written` selects lacks the kubelet's nodeInfo or
/// allocatable: a status write that started from the Node cache (which leaves them out) and did
/// not restore them would have erased them. `what` names the write; at least one version must match.
fn assert_kept_kubelet_status(versions: &[Node], what: &str, written: impl Fn(&Node) -> bool) {
    let written: Vec<&Node> = versions.iter().filter(|node| written(node)).collect();
    assert!(!written.is_empty(), "no recorded Node version with {what}");
    for version in written {
        let status = version.status.as_ref();
        assert!(
            status.is_some_and(|s| s.node_info.is_some() && s.allocatable.is_some()),
            "resourceVersion {:?} with {what} lost the kubelet's nodeInfo or allocatable: {status:?}",
            version.resource_version()
        );
    }
}

/// docs/behaviour.md#node-sync: labels, annotations and taints of the node template with the last-applied annotation;
/// keys MCM never applied are kept; removed template keys are removed from the Node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_template_is_synced_to_the_node() {
    let mut world = World::start().await;
    ready_class(&world, "c1", serde_json::json!({})).await;
    world
        .machine_classes()
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"nodeTemplate": {
                "capacity": {"cpu": "2", "gpu": "0", "memory": "4Gi"},
                "instanceType": "v.small", "region": "virt-1", "zone": "virt-1a",
                "virtualCapacity": {"example.com/dongle": "3"}
            }})),
        )
        .await
        .unwrap();
    // Every stored version of the Node, to see what each write carried.
    let (versions, recorder) = record_node_versions(&world);
    world.start_manager(machine_shell(), &[]).await;
    create_machine(
        &world,
        "machine-t1",
        "c1",
        serde_json::json!({"nodeTemplate": {
            "metadata": {"labels": {"team": "a", "tier": "web"}, "annotations": {"owner": "me"}},
            "spec": {"taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]}
        }}),
    )
    .await;
    wait_phase(&world, "machine-t1", MachinePhase::Running).await;
    let node = wait_node(&world, "machine-t1", "template applied", |n| {
        n.labels().get("team").map(String::as_str) == Some("a") && has_taint(n, "dedicated")
    })
    .await;
    assert_eq!(node_annotation(&node, "owner"), Some("me"));
    // The class's virtual capacity reaches the node's capacity.
    let node = wait_node(&world, "machine-t1", "virtual capacity", |n| {
        n.status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("example.com/dongle"))
            .is_some_and(|q| q.0 == "3")
    })
    .await;
    assert!(
        node_annotation(
            &node,
            "node.machine.sapcloud.io/last-applied-virtual-capacity"
        )
        .is_some_and(|text| text.contains("dongle"))
    );
    assert!(
        node_annotation(
            &node,
            "node.machine.sapcloud.io/last-applied-anno-labels-taints"
        )
        .is_some_and(|text| text.contains("\"tier\":\"web\""))
    );
    // A label nobody templated (from provider-virtual) stays.
    assert!(node.labels().contains_key("kubernetes.io/hostname"));
    // The machine-name label was stored with the template, in one Node update: no stored version
    // has the one without the other.
    assert_eq!(
        node.labels()
            .get("node.gardener.cloud/machine-name")
            .map(String::as_str),
        Some("machine-t1")
    );
    recorder.abort();
    let versions = versions.lock().unwrap().clone();
    assert!(
        versions
            .iter()
            .any(|n| n.labels().contains_key("node.gardener.cloud/machine-name")),
        "the watch saw no version with the machine-name label"
    );
    // The virtual capacity's UpdateStatus starts from the cached Node, which has no nodeInfo,
    // allocatable or images: no stored version may have lost what the kubelet reported.
    assert_kept_kubelet_status(&versions, "the virtual capacity", |n| {
        n.status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .is_some_and(|c| c.contains_key("example.com/dongle"))
    });
    for version in &versions {
        assert_eq!(
            version
                .labels()
                .contains_key("node.gardener.cloud/machine-name"),
            version.labels().get("team").map(String::as_str) == Some("a"),
            "resourceVersion {:?} has one of the machine-name label and the template without the other: {:?}",
            version.resource_version(),
            version.labels()
        );
    }

    world
        .machines()
        .patch(
            "machine-t1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"nodeTemplate": {
                "metadata": {"labels": {"team": "b", "tier": null}, "annotations": null},
                "spec": {"taints": null}
            }}})),
        )
        .await
        .unwrap();
    let node = wait_node(&world, "machine-t1", "template change applied", |n| {
        n.labels().get("team").map(String::as_str) == Some("b")
            && !n.labels().contains_key("tier")
            && !has_taint(n, "dedicated")
    })
    .await;
    assert_eq!(node_annotation(&node, "owner"), None);
    assert!(node.labels().contains_key("kubernetes.io/hostname"));
    world.stop_manager().await.unwrap();
}

/// docs/behaviour.md#health-check: Running → Unknown on an unhealthy node, Unknown → Failed after the health timeout, at
/// most one machine of a MachineDeployment failed at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_nodes_fail_one_machine_per_deployment_at_a_time() {
    let mut world = World::start().await;
    ready_class(&world, "c1", serde_json::json!({})).await;
    world
        .start_manager(machine_shell(), &["--machine-health-timeout=2s"])
        .await;
    for name in ["machine-h1", "machine-h2"] {
        create_machine(&world, name, "c1", serde_json::json!({})).await;
    }
    for name in ["machine-h1", "machine-h2"] {
        wait_phase(&world, name, MachinePhase::Running).await;
    }
    for name in ["machine-h1", "machine-h2"] {
        world.fleet.set_overrides(
            name,
            BTreeMap::from([("Ready".to_owned(), "False".to_owned())]),
        );
    }
    let failed = eventually("one machine to be Failed", LIMIT, || async {
        let list = world.machines().list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|m| phase(m) == Some(MachinePhase::Failed))
    })
    .await;
    assert!(
        description(&failed).contains("health checks failing since last 2s minutes"),
        "{}",
        description(&failed)
    );
    let other = if failed.name_any() == "machine-h1" {
        "machine-h2"
    } else {
        "machine-h1"
    };
    let unknown = wait_phase(&world, other, MachinePhase::Unknown).await;
    assert!(description(&unknown).contains("is unhealthy - changing MachinePhase to Unknown"));
    // Several health timeouts later the sibling is still Unknown: the Failed machine blocks it
    // (nothing replaces it in this test).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let still = world.machines().get(other).await.unwrap();
    assert_eq!(phase(&still), Some(MachinePhase::Unknown));
    wait_event(&world, "MachineHealthTimeout").await;

    // The node recovers: the Unknown machine re-joins.
    world.fleet.set_overrides(other, BTreeMap::new());
    let rejoined = wait_phase(&world, other, MachinePhase::Running).await;
    assert!(description(&rejoined).contains("successfully re-joined the cluster"));

    // docs/behaviour.md#preservation: `when-failed` on the Failed machine's node preserves it, drains the node (no pods
    // here) behind the preserved NoSchedule taint ...
    let failed = failed.name_any();
    annotate_node(
        &world,
        &failed,
        "node.machine.sapcloud.io/preserve",
        Some("when-failed"),
    )
    .await;
    wait_machine(&world, &failed, "preserved while Failed", |m| {
        phase(m) == Some(MachinePhase::Failed)
            && m.status
                .as_ref()
                .and_then(|s| s.current_status.as_ref())
                .is_some_and(|c| c.preserve_expiry_time.is_some())
    })
    .await;
    let node = wait_node(&world, &failed, "preserved node drained", |n| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Preserved"))
            .and_then(|c| c.message.clone())
            .is_some_and(|m| m.contains("Preserved node drained successfully."))
    })
    .await;
    assert!(has_taint(&node, "node.machine.sapcloud.io/preserved"));
    // ... and when its node recovers it becomes a preserved running machine without the taint.
    world.fleet.set_overrides(&failed, BTreeMap::new());
    let recovered = wait_phase(&world, &failed, MachinePhase::Running).await;
    assert!(
        recovered
            .status
            .as_ref()
            .and_then(|s| s.current_status.as_ref())
            .is_some_and(|c| c.preserve_expiry_time.is_some())
    );
    wait_node(&world, &failed, "preserved taint removed", |n| {
        !has_taint(n, "node.machine.sapcloud.io/preserved")
    })
    .await;
    world.stop_manager().await.unwrap();
}

/// docs/behaviour.md#health-check: a Pending machine whose node never joins is Failed after the creation timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creation_timeout_fails_a_pending_machine() {
    let mut world = World::start().await;
    ready_class(&world, "slow", serde_json::json!({"bootDelay": "1h"})).await;
    world
        .start_manager(
            machine_shell(),
            &[
                "--machine-creation-timeout=3s",
                "--bootstrap-token-auth-extra-groups=system:bootstrappers:extra",
            ],
        )
        .await;
    create_machine(&world, "machine-p1", "slow", serde_json::json!({})).await;
    // The bootstrap token Secret of the machine that never joins stays in the target cluster's
    // kube-system, with the configured extra groups.
    let tokens: Api<Secret> = Api::namespaced(world.target.clone(), "kube-system");
    let token = eventually("the bootstrap token Secret", LIMIT, || async {
        tokens
            .get_opt("bootstrap-token-6e652d")
            .await
            .ok()
            .flatten()
    })
    .await;
    assert_eq!(
        token.type_.as_deref(),
        Some("bootstrap.kubernetes.io/token")
    );
    let data = token.data.clone().unwrap_or_default();
    let field = |key: &str| {
        data.get(key)
            .map(|value| String::from_utf8_lossy(&value.0).into_owned())
            .unwrap_or_default()
    };
    assert_eq!(field("auth-extra-groups"), "system:bootstrappers:extra");
    assert_eq!(field("token-id"), "6e652d");
    assert_eq!(field("token-secret").len(), 16);
    assert_eq!(field("usage-bootstrap-authentication"), "true");
    assert!(!field("expiration").is_empty());
    // docs/behaviour.md#validation: a machine without spec.class.kind is not reconciled, and says why.
    let invalid: Machine = serde_json::from_value(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "machine-bad1", "namespace": NAMESPACE},
        "spec": {"class": {"name": "slow"}}
    }))
    .unwrap();
    world
        .machines()
        .create(&PostParams::default(), &invalid)
        .await
        .unwrap();
    eventually("the MachineInvalid event", LIMIT, || async {
        let found = events_with_reason(&world, "MachineInvalid").await;
        found
            .iter()
            .any(|e| {
                e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("Kind is required"))
            })
            .then_some(())
    })
    .await;
    let failed = wait_phase(&world, "machine-p1", MachinePhase::Failed).await;
    assert!(
        description(&failed).contains("failed to join the cluster in 3s minutes"),
        "{}",
        description(&failed)
    );
    // Events are written by a task of their own, not before the status write: on a loaded
    // machine the Failed phase can be read before the event is stored, so wait for it.
    eventually("the MachineCreationTimeout event", LIMIT, || async {
        events_with_reason(&world, "MachineCreationTimeout")
            .await
            .iter()
            .any(|e| {
                e.involved_object.name.as_deref() == Some("machine-p1")
                    && e.message.as_deref().is_some_and(|m| {
                        m.contains("machine-p1 failed to join the cluster in 3s minutes")
                    })
            })
            .then_some(())
    })
    .await;
    assert_eq!(
        world.fleet.vms().len(),
        1,
        "the VM exists; deletion is not this shell's job"
    );
    world.stop_manager().await.unwrap();
}

/// docs/behaviour.md#reaction-matrix rows GetMachineStatus (creation), CreateMachine, InitializeMachine: each failure code
/// leads to the upstream status (CrashLoopBackOff with the code) and retry; the cells with
/// ShortRetry or the resource-exhausted retry (1s here) recover within the test, MediumRetry (3m)
/// cells do not. The OK/NotFound/Uninitialized-with-response cells are the happy paths of the
/// other tests (GetMachineStatus OK adopts the VM after a crash, see the crash test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_errors_follow_the_reaction_matrix() {
    use mcm_provider_proto::Code;
    struct Case {
        machine: &'static str,
        spec: serde_json::Value,
        /// Errors of the first GetMachineStatus calls (scripted in the recording driver).
        status_failure: Option<Code>,
        /// InitializeMachine answers Unimplemented.
        initialize_unimplemented: bool,
        /// Expected lastOperation errorCode and description fragment of the failure (none: no
        /// failure is expected).
        failure: Option<(&'static str, &'static str)>,
        /// Whether the machine reaches Running within the test.
        recovers: bool,
    }
    let create = |code: &str| serde_json::json!({"failures": {"create": {"code": code}}});
    let initialize = |code: &str| {
        serde_json::json!({"requiresInitialization": true,
            "failures": {"initialize": {"code": code}}})
    };
    let cloud = "Cloud provider message - ";
    let init = "Initialize VM Instance";
    let case = |machine, spec, failure: Option<(&'static str, &'static str)>, recovers| Case {
        machine,
        spec,
        status_failure: None,
        initialize_unimplemented: false,
        failure,
        recovers,
    };
    let cases = vec![
        // GetMachineStatus in creation.
        Case {
            status_failure: Some(Code::Unavailable),
            ..case(
                "machine-e-gs-unavailable",
                serde_json::json!({}),
                Some(("Unavailable", cloud)),
                true,
            )
        },
        Case {
            status_failure: Some(Code::ResourceExhausted),
            ..case(
                "machine-e-gs-exhausted",
                serde_json::json!({}),
                Some(("ResourceExhausted", cloud)),
                true,
            )
        },
        Case {
            status_failure: Some(Code::Internal),
            ..case(
                "machine-e-gs-internal",
                serde_json::json!({}),
                Some(("Internal", cloud)),
                false,
            )
        },
        // CreateMachine.
        case(
            "machine-e-cr-exhausted",
            create("ResourceExhausted"),
            Some(("ResourceExhausted", cloud)),
            true,
        ),
        case(
            "machine-e-cr-unavailable",
            create("Unavailable"),
            Some(("Unavailable", cloud)),
            true,
        ),
        case(
            "machine-e-cr-deadline",
            create("DeadlineExceeded"),
            Some(("DeadlineExceeded", cloud)),
            true,
        ),
        case(
            "machine-e-cr-internal",
            create("Internal"),
            Some(("Internal", cloud)),
            false,
        ),
        case(
            "machine-e-cr-notfound",
            create("NotFound"),
            Some(("NotFound", cloud)),
            false,
        ),
        case(
            "machine-e-cr-uninit",
            create("Uninitialized"),
            Some(("Uninitialized", cloud)),
            false,
        ),
        // InitializeMachine: every code but Unimplemented is Failed/CLBO with ShortRetry.
        case(
            "machine-e-in-internal",
            initialize("Internal"),
            Some(("Internal", init)),
            true,
        ),
        case(
            "machine-e-in-exhausted",
            initialize("ResourceExhausted"),
            Some(("ResourceExhausted", init)),
            true,
        ),
        case(
            "machine-e-in-notfound",
            initialize("NotFound"),
            Some(("NotFound", init)),
            true,
        ),
        Case {
            initialize_unimplemented: true,
            ..case("machine-e-in-unimpl", serde_json::json!({}), None, true)
        },
    ];
    let mut world = World::start().await;
    let stop = CancellationToken::new();
    let driver = record_driver(&mut world, &stop).await;
    for case in &cases {
        ready_class(&world, case.machine, case.spec.clone()).await;
        if let Some(code) = case.status_failure {
            driver.status_failures.lock().unwrap().insert(
                case.machine.to_owned(),
                VecDeque::from([MachineError::new(code, "cloud API trouble")]),
            );
        }
        if case.initialize_unimplemented {
            driver
                .initialize_unimplemented
                .lock()
                .unwrap()
                .insert(case.machine.to_owned());
        }
    }
    // The recovering cells may retry and run before this test polls them (ShortRetry is 5 s and
    // the cells are checked one after another), so the failures are looked up in every state
    // the watch delivered, not only in the current object.
    let (history, recorder) = record_machine_history(&world).await;
    world
        .start_manager(machine_shell(), &["--resource-exhausted-retry=1s"])
        .await;
    for case in &cases {
        create_machine(&world, case.machine, case.machine, serde_json::json!({})).await;
    }
    for case in &cases {
        let Some((code, fragment)) = case.failure else {
            continue;
        };
        let failed = eventually(
            &format!("machine {}: the failure recorded", case.machine),
            LIMIT,
            || async {
                history
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|m| {
                        m.name_any() == case.machine
                            && m.last_operation()
                                .and_then(|op| op.error_code.as_deref())
                                .is_some_and(|found| found == code)
                    })
                    .cloned()
            },
        )
        .await;
        assert_eq!(
            phase(&failed),
            Some(MachinePhase::CrashLoopBackOff),
            "{}",
            case.machine
        );
        assert!(
            description(&failed).contains(fragment),
            "{}: {}",
            case.machine,
            description(&failed)
        );
    }
    for case in cases.iter().filter(|case| case.recovers) {
        wait_phase(&world, case.machine, MachinePhase::Running).await;
    }
    for case in cases.iter().filter(|case| !case.recovers) {
        let machine = world.machines().get(case.machine).await.unwrap();
        assert_eq!(
            phase(&machine),
            Some(MachinePhase::CrashLoopBackOff),
            "{} waits for MediumRetry",
            case.machine
        );
        assert_eq!(
            machine
                .status
                .as_ref()
                .and_then(|s| s.last_known_state.as_deref()),
            Some(""),
            "{}: other codes clear lastKnownState",
            case.machine
        );
    }
    assert!(
        driver
            .status_failures
            .lock()
            .unwrap()
            .values()
            .all(VecDeque::is_empty)
    );
    wait_event(&world, "MachineCreationFailed").await;
    wait_event(&world, "MachineInitializationFailed").await;
    // At most one VM per machine; none for machines whose CreateMachine always failed.
    let vms = world.fleet.vms();
    let mut per_machine: BTreeMap<String, usize> = BTreeMap::new();
    for vm in &vms {
        *per_machine.entry(vm.machine_name.clone()).or_default() += 1;
    }
    assert!(per_machine.values().all(|count| *count == 1), "{vms:?}");
    for machine in [
        "machine-e-cr-internal",
        "machine-e-cr-notfound",
        "machine-e-cr-uninit",
    ] {
        assert!(!per_machine.contains_key(machine), "{machine}: {vms:?}");
    }
    recorder.abort();
    world.stop_manager().await.unwrap();
    stop.cancel();
}

/// Every Machine state a watch delivers from now on, in order: for tests whose intermediate
/// states may be overwritten before a poll would see them.
async fn record_machine_history(
    world: &World,
) -> (Arc<Mutex<Vec<Machine>>>, tokio::task::JoinHandle<()>) {
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    let history = Arc::new(Mutex::new(Vec::new()));
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let recorder = {
        let history = Arc::clone(&history);
        let mut stream = watcher(world.machines(), watcher::Config::default()).boxed();
        tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) => {
                        history.lock().unwrap().push(m);
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(ready) = ready_tx.take() {
                            let _ = ready.send(());
                        }
                    }
                    _ => {}
                }
            }
        })
    };
    // The watch is established before the caller creates anything it wants to see.
    let _ = tokio::time::timeout(LIMIT, ready_rx).await;
    (history, recorder)
}

/// A CreateMachine that fails 4 times (Unavailable, upstream ShortRetry) is
/// retried with a growing, per-machine backoff instead of every 5s; the attempt and next retry
/// time are on the Machine while it fails, the retries are counted in a metric, and the machine
/// runs once the provider recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_create_machine_backs_off_exponentially_and_says_why() {
    let mut world = World::start().await;
    let stop = CancellationToken::new();
    let driver = record_driver(&mut world, &stop).await;
    ready_class(
        &world,
        "c-backoff",
        serde_json::json!({"failures": {"create": {"code": "Unavailable", "times": 4}}}),
    )
    .await;
    world
        .start_manager(
            machine_shell(),
            &[
                "--machine-retry-backoff-initial=400ms",
                "--machine-retry-backoff-factor=2",
                "--machine-retry-backoff-max=1600ms",
            ],
        )
        .await;
    create_machine(
        &world,
        "machine-backoff",
        "c-backoff",
        serde_json::json!({}),
    )
    .await;
    // The mark of a failed attempt lasts only until the next call (0.8 s after the second, 1.6 s
    // after the third and fourth), which a poll on a loaded machine can miss: any retried one
    // will do.
    let retried = |m: &Machine| {
        (2..=4).find(|attempt| {
            description(m).contains(&format!(" (attempt {attempt}, next retry at "))
        })
    };
    let failing = wait_machine(
        &world,
        "machine-backoff",
        "a retried attempt recorded",
        |m| retried(m).is_some(),
    )
    .await;
    let attempt = retried(&failing).expect("a retried attempt");
    assert!(
        description(&failing).starts_with("Cloud provider message - "),
        "{}",
        description(&failing)
    );
    // The Blocked condition names the driver error and the next retry.
    let blocked = failing
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Blocked"))
        .cloned()
        .expect("a Blocked condition while CreateMachine fails");
    assert_eq!(blocked.reason.as_deref(), Some("DriverErrorBackoff"));
    let message = blocked.message.unwrap_or_default();
    assert!(
        message.starts_with("CreateMachine failed: Cloud provider message - "),
        "{message}"
    );
    assert!(message.contains("[Unavailable]"), "{message}");
    assert!(
        message.contains(&format!("attempt {attempt}, next retry at ")),
        "{message}"
    );
    assert!(message.contains("(creation timeout)"), "{message}");
    let running = wait_phase(&world, "machine-backoff", MachinePhase::Running).await;
    let still_blocked = wait_machine(
        &world,
        "machine-backoff",
        "the Blocked condition removed",
        |m| {
            m.status
                .as_ref()
                .and_then(|status| status.conditions.as_ref())
                .is_none_or(|conditions| conditions.iter().all(|c| c.type_ != "Blocked"))
        },
    )
    .await;
    assert_eq!(phase(&still_blocked), phase(&running));
    let calls = driver.create_calls.lock().unwrap()["machine-backoff"].clone();
    let gaps: Vec<u128> = calls
        .windows(2)
        .map(|pair| pair[1].duration_since(pair[0]).as_millis())
        .collect();
    println!("CreateMachine calls: {}, gaps (ms): {gaps:?}", calls.len());
    // 4 failures and the success: no call more.
    assert_eq!(calls.len(), 5, "{gaps:?}");
    // Each gap is at least the backoff minus its 20% jitter: 400, 800, 1600, 1600 ms.
    for (gap, delay) in gaps.iter().zip([400u128, 800, 1600, 1600]) {
        assert!(*gap >= delay * 8 / 10, "{gaps:?}");
    }
    let metrics = scrape(&world).await;
    assert!(
        metrics.contains(r#"mcm_machine_driver_retries_total{method="CreateMachine"} 4"#),
        "{metrics}"
    );
    assert!(metrics.contains("mcm_machine_driver_retry_backoff_seconds"));
    world.stop_manager().await.unwrap();
    stop.cancel();
}

/// The annotation recording the providerSpec last applied to a machine's VM.
const LAST_APPLIED: &str = "node.machine.sapcloud.io/last-applied-providerspec";

/// Waits until machine `name` records the providerSpec applied to its VM.
async fn wait_last_applied(world: &World, name: &str) {
    wait_machine(world, name, "last-applied providerSpec", |m| {
        m.annotations().contains_key(LAST_APPLIED)
    })
    .await;
}

/// Merge-patches MachineClass `name` with `patch` (a hot update or a cold change).
async fn patch_class(world: &World, name: &str, patch: serde_json::Value) {
    world
        .machine_classes()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Whether the machine's last operation is a successful hot update.
fn hot_update_succeeded(machine: &Machine) -> bool {
    machine.last_operation().is_some_and(|op| {
        op.type_ == Some(mcm_api::v1alpha1::MachineOperationType::Update)
            && op.state == Some(mcm_api::v1alpha1::MachineState::Successful)
    })
}

/// Hot update: a change of hot-updatable tags goes through UpdateMachine on the same VM; a
/// change elsewhere only warns that a new class is needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_update_changes_tags_in_place() {
    let mut world = World::start().await;
    ready_class(&world, "c1", serde_json::json!({"tags": {"team": "a"}})).await;
    world.start_manager(machine_shell(), &[]).await;
    create_machine(&world, "machine-u1", "c1", serde_json::json!({})).await;
    let running = wait_phase(&world, "machine-u1", MachinePhase::Running).await;
    let provider_id = running.spec.provider_id.clone().unwrap();
    wait_last_applied(&world, "machine-u1").await;

    patch_class(
        &world,
        "c1",
        serde_json::json!({"providerSpec": {"tags": {"team": "b"}}}),
    )
    .await;
    let updated = wait_machine(&world, "machine-u1", "hot update done", |m| {
        hot_update_succeeded(m)
    })
    .await;
    assert!(updated.annotations()[LAST_APPLIED].contains("\"b\""));
    assert_eq!(
        updated.spec.provider_id.as_deref(),
        Some(provider_id.as_str())
    );
    let vms = world.fleet.vms();
    assert_eq!(vms.len(), 1, "no new VM");
    assert_eq!(vms[0].spec.tags.get("team").map(String::as_str), Some("b"));
    assert_eq!(phase(&updated), Some(MachinePhase::Running));

    // A change outside the hot-updatable paths: warning, VM untouched.
    patch_class(
        &world,
        "c1",
        serde_json::json!({"providerSpec": {"bootDelay": "1s"}}),
    )
    .await;
    eventually("the new-class-needed warning", LIMIT, || async {
        let found = events_with_reason(&world, "MachineClassChangeNotHotUpdatable").await;
        (!found.is_empty()).then_some(())
    })
    .await;
    assert_eq!(world.fleet.vms().len(), 1);
    assert_eq!(
        world.fleet.vms()[0].spec.boot_delay,
        mcm_api::duration::Duration::ZERO
    );
    world.stop_manager().await.unwrap();
}

/// docs/behaviour.md#stale-caches: the Machine watch lags the API server, so the pass queued by
/// the event of a hot update's first write starts before the cache has its last one. That pass
/// must start from the write, not plan the update again on the older cache: one UpdateMachine per
/// VM, and no conflicting Machine write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_update_calls_update_machine_once_while_the_cache_lags() {
    const WATCH_DELAY: Duration = Duration::from_millis(300);
    let mut world = World::start().await;
    let Some(faults) = world.control_faults() else {
        eprintln!("SKIPPED: watch delays need the sandbox control cluster");
        return;
    };
    let stop = CancellationToken::new();
    let driver = record_driver(&mut world, &stop).await;
    ready_class(&world, "c1", serde_json::json!({"tags": {"team": "a"}})).await;
    world.start_manager(machine_shell(), &[]).await;
    let names = ["machine-s1", "machine-s2"];
    for name in names {
        create_machine(&world, name, "c1", serde_json::json!({})).await;
    }
    for name in names {
        wait_phase(&world, name, MachinePhase::Running).await;
        wait_last_applied(&world, name).await;
    }

    faults.set_watch_delay(WATCH_DELAY);
    faults.reset_counters();
    patch_class(
        &world,
        "c1",
        serde_json::json!({"providerSpec": {"tags": {"team": "b"}}}),
    )
    .await;
    for name in names {
        wait_machine(&world, name, "hot update recorded", |m| {
            m.annotations()
                .get(LAST_APPLIED)
                .is_some_and(|applied| applied.contains("\"b\""))
                && hot_update_succeeded(m)
        })
        .await;
    }
    // Every delayed event of the update has been delivered and handled after this.
    tokio::time::sleep(WATCH_DELAY * 4).await;

    let calls = driver.update_calls.lock().unwrap().clone();
    assert_eq!(
        calls.len(),
        names.len(),
        "UpdateMachine calls by VM: {calls:?}"
    );
    for (vm, count) in &calls {
        assert_eq!(*count, 1, "UpdateMachine calls of {vm}: {calls:?}");
    }
    let counters = faults.counters();
    let conflicts = ["machines", "machines/status"]
        .map(|resource| counters.get(mcm_sandbox::Verb::Update, resource, 409));
    assert_eq!(
        conflicts,
        [0, 0],
        "Machine and Machine status writes refused with 409 during the update"
    );
    for vm in world.fleet.vms() {
        assert_eq!(
            vm.spec.tags.get("team").map(String::as_str),
            Some("b"),
            "{vm:?}"
        );
    }
    faults.set_watch_delay(Duration::ZERO);
    world.stop_manager().await.unwrap();
    stop.cancel();
}

/// Regression (e2e `hot_update_of_tags_without_rollout`): a class change that lands before the
/// machine's first hot-update pass must still reach the VM. The machine used to get no
/// last-applied annotation at creation, so that pass adopted the *changed* class as applied and
/// never called UpdateMachine (annotation team=b, VM team=a). The manager is crashed as soon as the
/// providerID is stored, so no hot-update pass runs before the class changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_update_of_a_class_change_before_the_first_pass_reaches_the_vm() {
    let mut world = World::start().await;
    let created_from = serde_json::json!({"tags": {"team": "a"}});
    ready_class(&world, "c1", created_from.clone()).await;
    world.start_manager(machine_shell(), &[]).await;
    create_machine(&world, "machine-u2", "c1", serde_json::json!({})).await;
    let with_vm = wait_machine(&world, "machine-u2", "providerID", |m| {
        m.spec.provider_id.is_some()
    })
    .await;
    world.kill_manager().await;
    let recorded: serde_json::Value = serde_json::from_str(
        with_vm
            .annotations()
            .get(LAST_APPLIED)
            .expect("the last-applied providerSpec is stored with the providerID"),
    )
    .unwrap();
    assert_eq!(recorded, created_from);

    patch_class(
        &world,
        "c1",
        serde_json::json!({"providerSpec": {"tags": {"team": "b"}}}),
    )
    .await;
    world.start_manager(machine_shell(), &[]).await;
    eventually("the VM carries tags team=b", LIMIT, || async {
        let vms = world.fleet.vms();
        (vms.len() == 1 && vms[0].spec.tags.get("team").map(String::as_str) == Some("b"))
            .then_some(())
    })
    .await;
    // The Update/Successful lastOperation is transient here: the creation interrupted by the
    // kill goes on after the hot update and writes its own lastOperation, which a poll may see
    // first. The stored last-applied providerSpec is the lasting record of the hot update.
    let updated = wait_machine(&world, "machine-u2", "hot update recorded", |m| {
        m.annotations()
            .get(LAST_APPLIED)
            .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw).ok())
            .is_some_and(|applied| applied["tags"]["team"] == "b")
    })
    .await;
    let applied: serde_json::Value =
        serde_json::from_str(&updated.annotations()[LAST_APPLIED]).unwrap();
    assert_eq!(applied["tags"]["team"], "b");
    assert_eq!(updated.spec.provider_id, with_vm.spec.provider_id);
    world.stop_manager().await.unwrap();
}

/// docs/behaviour.md#preservation, docs/behaviour.md#preservation-scope preservation: `now` on the Node preserves (expiry, condition, autoscaler annotation
/// re-asserted), the Node's `false` wins over the Machine's `now` and releases, `when-failed` on a
/// running machine does nothing, and a user editing preserveExpiryTime is acted on at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preservation_follows_the_annotations() {
    const PRESERVE: &str = "node.machine.sapcloud.io/preserve";
    const SCALE_DOWN: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
    let mut world = World::start().await;
    ready_class(&world, "c1", serde_json::json!({})).await;
    world.start_manager(machine_shell(), &[]).await;
    create_machine(&world, "machine-k1", "c1", serde_json::json!({})).await;
    wait_phase(&world, "machine-k1", MachinePhase::Running).await;

    annotate_node(&world, "machine-k1", PRESERVE, Some("now")).await;
    let preserved = wait_machine(&world, "machine-k1", "preserveExpiryTime set", |m| {
        m.status
            .as_ref()
            .and_then(|s| s.current_status.as_ref())
            .is_some_and(|c| c.preserve_expiry_time.is_some())
    })
    .await;
    assert_eq!(phase(&preserved), Some(MachinePhase::Running));
    wait_node(
        &world,
        "machine-k1",
        "Preserved condition and CA annotation",
        |n| {
            node_condition(n, "Preserved").as_deref() == Some("True")
                && node_annotation(n, SCALE_DOWN) == Some("true")
        },
    )
    .await;
    // A user flips the autoscaler annotation: it is re-asserted.
    annotate_node(&world, "machine-k1", SCALE_DOWN, Some("false")).await;
    wait_node(&world, "machine-k1", "CA annotation re-asserted", |n| {
        node_annotation(n, SCALE_DOWN) == Some("true")
    })
    .await;

    // The Node's `false` wins over a Machine `now`: released.
    world
        .machines()
        .patch(
            "machine-k1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {PRESERVE: "now"}}})),
        )
        .await
        .unwrap();
    annotate_node(&world, "machine-k1", PRESERVE, Some("false")).await;
    wait_machine(&world, "machine-k1", "preservation released", |m| {
        m.status
            .as_ref()
            .and_then(|s| s.current_status.as_ref())
            .is_some_and(|c| c.preserve_expiry_time.is_none())
    })
    .await;
    let node = wait_node(&world, "machine-k1", "preservation stopped on node", |n| {
        node_condition(n, "Preserved").as_deref() == Some("False")
            && node_annotation(n, SCALE_DOWN).is_none()
    })
    .await;
    assert_eq!(node_annotation(&node, PRESERVE), Some("false"));

    // `when-failed` on a running machine: not preserved.
    annotate_node(&world, "machine-k1", PRESERVE, Some("when-failed")).await;
    wait_machine(&world, "machine-k1", "when-failed recorded", |m| {
        m.annotations()
            .get("node.machine.sapcloud.io/last-applied-node-preserve-value")
            .map(String::as_str)
            == Some("when-failed")
    })
    .await;
    let machine = world.machines().get("machine-k1").await.unwrap();
    assert!(
        machine
            .status
            .as_ref()
            .and_then(|s| s.current_status.as_ref())
            .and_then(|c| c.preserve_expiry_time.as_ref())
            .is_none()
    );

    // `now` again, then a user shortens preserveExpiryTime to the past: released at once.
    annotate_node(&world, "machine-k1", PRESERVE, Some("now")).await;
    let is_preserved = |m: &Machine| {
        m.status
            .as_ref()
            .and_then(|s| s.current_status.as_ref())
            .is_some_and(|c| c.preserve_expiry_time.is_some())
    };
    wait_machine(&world, "machine-k1", "preserved again", is_preserved).await;
    // The controller may still be writing the machine (node condition, annotations) after the
    // read: a conflicting edit is made again on the latest version, as a user would.
    eventually("the user's edit of preserveExpiryTime", LIMIT, || async {
        let mut edited = world.machines().get("machine-k1").await.ok()?;
        assert!(is_preserved(&edited), "machine-k1 is no longer preserved");
        if let Some(current) = edited
            .status
            .as_mut()
            .and_then(|s| s.current_status.as_mut())
        {
            current.preserve_expiry_time =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60),
                ));
        }
        match world
            .machines()
            .replace_status("machine-k1", &PostParams::default(), &edited)
            .await
        {
            Ok(_) => Some(()),
            Err(kube::Error::Api(status)) if status.code == 409 => None,
            Err(error) => panic!("edit preserveExpiryTime: {error}"),
        }
    })
    .await;
    wait_machine(&world, "machine-k1", "expired preservation released", |m| {
        m.status
            .as_ref()
            .and_then(|s| s.current_status.as_ref())
            .is_some_and(|c| c.preserve_expiry_time.is_none())
    })
    .await;
    let node = wait_node(
        &world,
        "machine-k1",
        "preserve annotation removed on expiry",
        |n| node_annotation(n, PRESERVE).is_none(),
    )
    .await;
    assert_eq!(node_condition(&node, "Preserved").as_deref(), Some("False"));
    wait_event(&world, "MachinePreserved").await;
    world.stop_manager().await.unwrap();
}

/// A driver that implements InitializeMachine and answers GetMachineStatus like a real
/// cloud (NotFound before CreateMachine, the VM after; provider-virtual's `initialization:
/// silent`, whose Node registers only once initialised) gets exactly one InitializeMachine per
/// created VM, in the pass that created it; the machines then run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vms_reported_normally_are_initialized_once_in_the_creating_pass() {
    let mut world = World::start().await;
    ready_class(
        &world,
        "c1",
        serde_json::json!({"initialization": "silent"}),
    )
    .await;
    world.start_manager(machine_shell(), &[]).await;
    let names = ["machine-i1", "machine-i2", "machine-i3"];
    for name in names {
        create_machine(&world, name, "c1", serde_json::json!({})).await;
    }
    for name in names {
        let running = wait_phase(&world, name, MachinePhase::Running).await;
        assert!(
            description(&running).starts_with(&format!("Machine {name} successfully joined")),
            "{}",
            description(&running)
        );
    }
    // Later passes (health checks, resyncs) do not call it again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let vms = world.fleet.vms();
    assert_eq!(vms.len(), names.len(), "{vms:?}");
    for vm in &vms {
        assert!(vm.initialized, "{vm:?}");
        assert_eq!(vm.initialize_calls, 1, "InitializeMachine calls of {vm:?}");
    }
    let metrics = scrape(&world).await;
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("mcm_machine_initialize_duration_seconds{")),
        "the initialize duration is recorded"
    );
    world.stop_manager().await.unwrap();
}

/// docs/architecture.md#crash-safety crash safety: killing the manager at several points of the creation flow and
/// starting it again never leaks or duplicates a VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_during_creation_leave_exactly_one_vm_per_machine() {
    let mut world = World::start().await;
    // A slow CreateMachine widens the window between the stored finalizer and the VM's existence.
    ready_class(&world, "c1", serde_json::json!({"createLatency": "300ms"})).await;
    let names = ["machine-x1", "machine-x2", "machine-x3"];
    for name in names {
        create_machine(&world, name, "c1", serde_json::json!({})).await;
    }
    for delay_ms in [150u64, 350, 600] {
        world.start_manager(machine_shell(), &[]).await;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        world.kill_manager().await;
    }
    world.start_manager(machine_shell(), &[]).await;
    for name in names {
        wait_phase(&world, name, MachinePhase::Running).await;
    }
    let vms = world.fleet.vms();
    let mut per_machine: BTreeMap<String, usize> = BTreeMap::new();
    for vm in &vms {
        *per_machine.entry(vm.machine_name.clone()).or_default() += 1;
    }
    assert_eq!(
        per_machine,
        names.iter().map(|n| ((*n).to_owned(), 1)).collect(),
        "{vms:?}"
    );
    for name in names {
        let machine = world.machines().get(name).await.unwrap();
        let vm = vms.iter().find(|vm| vm.machine_name == name).unwrap();
        assert_eq!(
            machine.spec.provider_id.as_deref(),
            Some(vm.provider_id.as_str())
        );
    }
    world.stop_manager().await.unwrap();
}

/// Rules for shells: 409 conflicts on machine writes are retried, never lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_writes_converge_under_conflicts() {
    let mut world = World::start().await;
    let Some(faults) = world.control_faults() else {
        eprintln!("SKIPPED: API fault injection needs the control sandbox");
        return;
    };
    faults.inject_errors(mcm_sandbox::faults::ErrorRule {
        verb: Some(mcm_sandbox::faults::Verb::Update),
        resource: Some("machines/status".into()),
        status: 409,
        rate: 0.5,
        count: Some(12),
    });
    faults.inject_errors(mcm_sandbox::faults::ErrorRule {
        verb: Some(mcm_sandbox::faults::Verb::Update),
        resource: Some("machines".into()),
        status: 409,
        rate: 0.5,
        count: Some(6),
    });
    // Node writes (machine-name label) conflict too, in the target cluster.
    let target_faults = world.target_faults();
    if let Some(target_faults) = &target_faults {
        target_faults.inject_errors(mcm_sandbox::faults::ErrorRule {
            verb: Some(mcm_sandbox::faults::Verb::Update),
            resource: Some("nodes".into()),
            status: 409,
            rate: 1.0,
            count: Some(2),
        });
    }
    ready_class(&world, "c1", serde_json::json!({})).await;
    world.start_manager(machine_shell(), &[]).await;
    for name in ["machine-c1", "machine-c2"] {
        create_machine(&world, name, "c1", serde_json::json!({})).await;
    }
    for name in ["machine-c1", "machine-c2"] {
        wait_phase(&world, name, MachinePhase::Running).await;
    }
    let conflicts =
        faults
            .counters()
            .get(mcm_sandbox::faults::Verb::Update, "machines/status", 409);
    assert!(conflicts > 0, "the fault rule was exercised");
    for name in ["machine-c1", "machine-c2"] {
        wait_node(&world, name, "machine-name label despite conflicts", |n| {
            n.labels()
                .get("node.gardener.cloud/machine-name")
                .is_some_and(|value| value == name)
        })
        .await;
    }
    if let Some(target_faults) = &target_faults {
        let node_conflicts =
            target_faults
                .counters()
                .get(mcm_sandbox::faults::Verb::Update, "nodes", 409);
        // At least: the node template now follows the label write in the same pass, on the
        // node as stored by that write, and a node change in between (the fleet's own status
        // update) is a real conflict on top of the injected ones, retried like them.
        assert!(
            node_conflicts >= 2,
            "both injected node conflicts were hit ({node_conflicts})"
        );
    }
    assert_eq!(world.fleet.vms().len(), 2);
    world.stop_manager().await.unwrap();
}

fn in_place_reason(node: &Node) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "InPlaceUpdate"))
        .and_then(|c| c.reason.clone())
}

fn machine_in_place_reason(machine: &Machine) -> Option<String> {
    machine
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "InPlaceUpdate"))
        .and_then(|c| c.reason.clone())
}

fn operation_type(machine: &Machine) -> Option<String> {
    machine
        .last_operation()
        .and_then(|op| op.type_.as_ref())
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
}

/// Sets (`Some`) or removes (`None`) node labels, as the MachineDeployment controller and the
/// node agent do.
async fn label_node(world: &World, node: &str, labels: serde_json::Value) {
    world
        .nodes()
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap();
}

/// docs/behaviour.md#in-place-machine: the node's update labels drive its `InPlaceUpdate` condition; a selected node is
/// cordoned and drained, the machine goes `InPlaceUpdating` and the node is handed to the node
/// agent (`ReadyForUpdate`); the agent's `update-result` moves the machine to
/// `InPlaceUpdateSuccessful` and back to `Running`, or to `InPlaceUpdateFailed` with its reason.
/// The kubelet's status posts keep the condition throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_update_drains_the_selected_node_and_follows_the_agent_result() {
    const CANDIDATE: &str = "node.machine.sapcloud.io/candidate-for-update";
    const SELECTED: &str = "node.machine.sapcloud.io/selected-for-update";
    const RESULT: &str = "node.machine.sapcloud.io/update-result";
    const PODS: &str = "apps";
    let mut world = World::start().await;
    let (versions, recorder) = record_node_versions(&world);
    ready_class(&world, "c1", serde_json::json!({})).await;
    world.start_manager(machine_shell(), &[]).await;
    create_machine(&world, "machine-u1", "c1", serde_json::json!({})).await;
    wait_phase(&world, "machine-u1", MachinePhase::Running).await;

    // A workload pod on the node, which the in-place drain must evict.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(world.target.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": PODS}})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(world.target.clone(), PODS);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "app-1", "namespace": PODS},
            "spec": {
                "nodeName": "machine-u1",
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "busybox"}],
            }
        }))
        .unwrap(),
    )
    .await
    .unwrap();

    // Candidate: the condition appears on the node and is mirrored into the machine.
    label_node(&world, "machine-u1", serde_json::json!({CANDIDATE: "true"})).await;
    wait_node(
        &world,
        "machine-u1",
        "InPlaceUpdate=CandidateForUpdate",
        |n| in_place_reason(n).as_deref() == Some("CandidateForUpdate"),
    )
    .await;
    let candidate = wait_machine(&world, "machine-u1", "condition mirrored", |m| {
        machine_in_place_reason(m).as_deref() == Some("CandidateForUpdate")
    })
    .await;
    assert_eq!(phase(&candidate), Some(MachinePhase::Running));
    // Nothing is drained for a mere candidate.
    assert!(pods.get_opt("app-1").await.unwrap().is_some());

    // Selected: cordon, drain, hand-off.
    label_node(&world, "machine-u1", serde_json::json!({SELECTED: "true"})).await;
    let updating = wait_phase(&world, "machine-u1", MachinePhase::InPlaceUpdating).await;
    assert_eq!(
        description(&updating),
        "Machine machine-u1 is undergoing an in-place update"
    );
    assert_eq!(operation_type(&updating).as_deref(), Some("InPlaceUpdate"));
    assert!(
        pods.get_opt("app-1").await.unwrap().is_none(),
        "the pod was drained before the machine went InPlaceUpdating"
    );
    let handed_over = wait_node(&world, "machine-u1", "InPlaceUpdate=ReadyForUpdate", |n| {
        in_place_reason(n).as_deref() == Some("ReadyForUpdate")
    })
    .await;
    assert_eq!(
        handed_over.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "the node is cordoned"
    );
    for reason in [
        "NodeCandidateForUpdate",
        "NodeSelectedForUpdate",
        "NodeCordoned",
        "InPlaceUpdating",
        "NodeDrainedForUpdate",
        "NodeReadyForUpdate",
    ] {
        wait_event(&world, reason).await;
    }
    // The kubelet keeps posting status (a condition switch forces a post): the hand-off
    // condition survives and the machine stays with the agent.
    world.fleet.set_overrides(
        "machine-u1",
        BTreeMap::from([("NetworkUnavailable".to_owned(), "False".to_owned())]),
    );
    wait_node(
        &world,
        "machine-u1",
        "a kubelet post with NetworkUnavailable",
        |n| {
            node_condition(n, "NetworkUnavailable").is_some()
                && in_place_reason(n).as_deref() == Some("ReadyForUpdate")
        },
    )
    .await;
    world.fleet.set_overrides("machine-u1", BTreeMap::new());
    wait_node(
        &world,
        "machine-u1",
        "a kubelet post without NetworkUnavailable",
        |n| {
            node_condition(n, "NetworkUnavailable").is_none()
                && in_place_reason(n).as_deref() == Some("ReadyForUpdate")
        },
    )
    .await;
    let still = world.machines().get("machine-u1").await.unwrap();
    assert_eq!(phase(&still), Some(MachinePhase::InPlaceUpdating));

    // The agent reports success: UpdateSuccessful, then Running again.
    label_node(
        &world,
        "machine-u1",
        serde_json::json!({SELECTED: null, RESULT: "successful"}),
    )
    .await;
    wait_node(
        &world,
        "machine-u1",
        "InPlaceUpdate=UpdateSuccessful",
        |n| in_place_reason(n).as_deref() == Some("UpdateSuccessful"),
    )
    .await;
    wait_machine(&world, "machine-u1", "Running after the update", |m| {
        phase(m) == Some(MachinePhase::Running)
            && machine_in_place_reason(m).as_deref() == Some("UpdateSuccessful")
    })
    .await;
    let succeeded = eventually("event InPlaceUpdateSuccessful", LIMIT, || async {
        events_with_reason(&world, "InPlaceUpdateSuccessful")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(
        succeeded.message.as_deref(),
        Some("Machine machine-u1 successfully updated dependencies")
    );

    // A new round (the result label removed) that the agent fails.
    label_node(&world, "machine-u1", serde_json::json!({RESULT: null})).await;
    wait_node(
        &world,
        "machine-u1",
        "a new round starts as candidate",
        |n| in_place_reason(n).as_deref() == Some("CandidateForUpdate"),
    )
    .await;
    label_node(&world, "machine-u1", serde_json::json!({SELECTED: "true"})).await;
    wait_phase(&world, "machine-u1", MachinePhase::InPlaceUpdating).await;
    world
        .nodes()
        .patch(
            "machine-u1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {
                "labels": {SELECTED: null, RESULT: "failed"},
                "annotations": {"node.machine.sapcloud.io/update-failed-reason": "kernel mismatch"},
            }})),
        )
        .await
        .unwrap();
    let failed = wait_phase(&world, "machine-u1", MachinePhase::InPlaceUpdateFailed).await;
    assert_eq!(
        description(&failed),
        "Machine machine-u1 failed to update dependencies: kernel mismatch"
    );
    let node = wait_node(&world, "machine-u1", "InPlaceUpdate=UpdateFailed", |n| {
        in_place_reason(n).as_deref() == Some("UpdateFailed")
    })
    .await;
    let message = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "InPlaceUpdate"))
        .and_then(|c| c.message.clone());
    assert_eq!(
        message.as_deref(),
        Some("Node in-place update failed: kernel mismatch")
    );
    wait_event(&world, "InPlaceUpdateFailed").await;
    recorder.abort();
    // The condition writes start from the cached Node (label-driven conditions) or from a live
    // read (the end of an in-place pass): neither may erase what the kubelet reported.
    let versions = versions.lock().unwrap().clone();
    for reason in ["CandidateForUpdate", "ReadyForUpdate", "UpdateFailed"] {
        assert_kept_kubelet_status(&versions, &format!("InPlaceUpdate={reason}"), |n| {
            in_place_reason(n).as_deref() == Some(reason)
        });
    }
    world.stop_manager().await.unwrap();
}

/// docs/behaviour.md#health-check, docs/behaviour.md#in-place-machine: a node handed to the agent that never reports a result: the machine goes from
/// `InPlaceUpdating` to `InPlaceUpdateFailed` after `--machine-inplace-update-timeout`, although
/// the in-place step itself only asks to be run again after MediumRetry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_update_without_a_result_fails_after_the_in_place_timeout() {
    let mut world = World::start().await;
    ready_class(&world, "c1", serde_json::json!({})).await;
    world
        .start_manager(machine_shell(), &["--machine-inplace-update-timeout=3s"])
        .await;
    create_machine(&world, "machine-u2", "c1", serde_json::json!({})).await;
    wait_phase(&world, "machine-u2", MachinePhase::Running).await;
    label_node(
        &world,
        "machine-u2",
        serde_json::json!({"node.machine.sapcloud.io/candidate-for-update": "true"}),
    )
    .await;
    wait_node(
        &world,
        "machine-u2",
        "InPlaceUpdate=CandidateForUpdate",
        |n| in_place_reason(n).as_deref() == Some("CandidateForUpdate"),
    )
    .await;
    label_node(
        &world,
        "machine-u2",
        serde_json::json!({"node.machine.sapcloud.io/selected-for-update": "true"}),
    )
    .await;
    // InPlaceUpdating lasts only the 3s timeout, which a poll on a loaded machine can miss; the
    // failure's description and operation type below show the machine timed out in it.
    let failed = wait_phase(&world, "machine-u2", MachinePhase::InPlaceUpdateFailed).await;
    assert!(
        description(&failed).contains("machine-u2 failed to in-place update in"),
        "{}",
        description(&failed)
    );
    assert_eq!(operation_type(&failed).as_deref(), Some("InPlaceUpdate"));
    // The node is still handed to the agent (no result label): the hand-off completes.
    wait_node(&world, "machine-u2", "InPlaceUpdate=ReadyForUpdate", |n| {
        in_place_reason(n).as_deref() == Some("ReadyForUpdate")
    })
    .await;
    let still = world.machines().get("machine-u2").await.unwrap();
    assert_eq!(phase(&still), Some(MachinePhase::InPlaceUpdateFailed));
    wait_event(&world, "InPlaceUpdateFailed").await;
    world.stop_manager().await.unwrap();
}

/// docs/behaviour.md#q14: a machine whose MachineClass does not exist never got a VM (CreateMachine
/// needs the class with its finalizer), so deleting it (a reverted roll to a missing class) does
/// not wait for the class: the finalizer goes without a driver call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_of_a_missing_class_is_deleted_without_waiting_for_the_class() {
    let mut world = World::start().await;
    world
        .start_manager(
            mcm_controller::manager::compose::named(&["machine", "machinetermination"]),
            &[],
        )
        .await;
    create_machine(&world, "ghost-0", "ghost", serde_json::json!({})).await;
    wait_machine(&world, "ghost-0", "the MCM finalizer", |m| {
        m.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "machine.sapcloud.io/machine-controller-manager")
    })
    .await;
    wait_event(&world, "MachineClassNotFound").await;
    world
        .machines()
        .delete("ghost-0", &Default::default())
        .await
        .unwrap();
    eventually("machine ghost-0 to be gone", LIMIT, || async {
        world
            .machines()
            .get_opt("ghost-0")
            .await
            .ok()
            .and_then(|m| m.is_none().then_some(()))
    })
    .await;
    wait_event(&world, "DeletedWithoutClass").await;
    world.stop_manager().await.expect("clean stop");
}
