//! The world the controller integration tests run in: a control sandbox (Machine* objects), a
//! separate target sandbox (Nodes, Pods), provider-virtual in-process (driver over TCP and its
//! kubelet loop against the target), and the manager started and stopped at will with a chosen
//! set of shells.
//!
//! With `MCM_IT_CONTROL_KUBECONFIG` (and optionally `MCM_IT_TARGET_KUBECONFIG`) set, the tests use
//! those clusters instead of starting sandboxes (fault injection tests then skip loudly).

#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser as _;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt as _};
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachineSet};
use mcm_controller::manager::compose::{ControllerSet, ControllerSpec};
use mcm_controller::manager::{self, Controller, ManagerError, RunOptions};
use mcm_controller::platform::config::{Args, Config, validate};
use mcm_provider_proto::{DriverClient, Endpoint};
use mcm_provider_virtual::driver::{Fleet, VirtualDriver};
use mcm_provider_virtual::kubelet::{Kubelet, KubeletConfig};
use mcm_provider_virtual::metrics::Metrics as ProviderMetrics;
use mcm_sandbox::{Faults, Sandbox, SandboxConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The control namespace of every test world.
pub const NAMESPACE: &str = "default";

/// A running manager.
pub struct RunningManager {
    shutdown: CancellationToken,
    handle: JoinHandle<Result<(), ManagerError>>,
    /// Its admin address (`/healthz`, `/readyz`, `/metrics`).
    pub admin: std::net::SocketAddr,
    /// Its machine metrics address (served only when a machine-controller controller runs).
    pub machine_metrics: std::net::SocketAddr,
}

/// Control and target clusters, the virtual provider and (when started) the manager.
pub struct World {
    /// The control sandbox (`None` when an external cluster is used).
    pub control_sandbox: Option<Sandbox>,
    /// The target sandbox (`None` when an external cluster is used).
    pub target_sandbox: Option<Sandbox>,
    control_kubeconfig: PathBuf,
    target_kubeconfig: PathBuf,
    /// Control cluster client.
    pub control: Client,
    /// Target cluster client.
    pub target: Client,
    /// provider-virtual's VMs (inspect, or set node condition overrides).
    pub fleet: Arc<Fleet>,
    /// Where the driver listens.
    pub driver_endpoint: Endpoint,
    provider_stop: CancellationToken,
    manager: Option<RunningManager>,
}

async fn client_for(path: &PathBuf) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("readable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("valid kubeconfig");
    Client::try_from(config).expect("client")
}

impl World {
    /// Starts two sandboxes (or uses `MCM_IT_*_KUBECONFIG`), installs the CRDs and starts
    /// provider-virtual with a fast kubelet tick.
    pub async fn start() -> World {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (control_sandbox, target_sandbox, control_kubeconfig, target_kubeconfig) =
            match std::env::var_os("MCM_IT_CONTROL_KUBECONFIG") {
                Some(control) => {
                    let control = PathBuf::from(control);
                    let target = std::env::var_os("MCM_IT_TARGET_KUBECONFIG")
                        .map(PathBuf::from)
                        .unwrap_or_else(|| control.clone());
                    (None, None, control, target)
                }
                None => {
                    let control = Sandbox::start(SandboxConfig {
                        name: "control".into(),
                        ..SandboxConfig::default()
                    })
                    .await
                    .expect("control sandbox");
                    let target = Sandbox::start(SandboxConfig {
                        name: "target".into(),
                        ..SandboxConfig::default()
                    })
                    .await
                    .expect("target sandbox");
                    let control_path = control.kubeconfig_path().to_path_buf();
                    let target_path = target.kubeconfig_path().to_path_buf();
                    (Some(control), Some(target), control_path, target_path)
                }
            };
        let control = client_for(&control_kubeconfig).await;
        let target = client_for(&target_kubeconfig).await;
        install_crds(&control).await;
        ensure_namespace(&control, NAMESPACE).await;

        let fleet = Arc::new(Fleet::in_memory());
        let provider_stop = CancellationToken::new();
        let kubelet = Kubelet::new(
            target.clone(),
            Arc::clone(&fleet),
            KubeletConfig {
                tick: Duration::from_millis(100),
                ..KubeletConfig::default()
            },
            Arc::new(ProviderMetrics::new()),
        );
        tokio::spawn(kubelet.run(provider_stop.clone()));
        let bound = mcm_provider_proto::BoundServer::bind(&Endpoint::Tcp(
            "127.0.0.1:0".parse().expect("address"),
        ))
        .await
        .expect("driver listener");
        let driver_endpoint = bound.local_endpoint().clone();
        let driver = VirtualDriver::new(Arc::clone(&fleet));
        let stop = provider_stop.clone();
        tokio::spawn(async move {
            let _ = bound.serve(Arc::new(driver), stop.cancelled_owned()).await;
        });
        World {
            control_sandbox,
            target_sandbox,
            control_kubeconfig,
            target_kubeconfig,
            control,
            target,
            fleet,
            driver_endpoint,
            provider_stop,
            manager: None,
        }
    }

    /// The manager's configuration for this world plus `extra` flags (`--flag=value`).
    pub fn config(&self, extra: &[&str]) -> Config {
        let driver = format!("--driver-endpoint={}", self.driver_endpoint);
        let mut flags = vec![driver.as_str()];
        flags.extend_from_slice(extra);
        self.config_without_driver(&flags)
    }

    /// As [`World::config`] without `--driver-endpoint` (upstream's machine-controller-manager
    /// share unless `extra` says otherwise).
    pub fn config_without_driver(&self, extra: &[&str]) -> Config {
        let control = format!("--control-kubeconfig={}", self.control_kubeconfig.display());
        let target = format!("--target-kubeconfig={}", self.target_kubeconfig.display());
        let namespace = format!("--namespace={NAMESPACE}");
        let mut argv = vec![
            "machine-controller-manager",
            control.as_str(),
            target.as_str(),
            namespace.as_str(),
        ];
        // One replica, nothing to elect, unless the test elects a leader itself.
        if !extra.iter().any(|flag| flag.starts_with("--leader-elect=")) {
            argv.push("--leader-elect=false");
        }
        // Tests are not about client throttling unless they say so.
        if !extra.iter().any(|flag| flag.starts_with("--kube-api-")) {
            argv.extend(["--kube-api-qps=5000", "--kube-api-burst=10000"]);
        }
        argv.extend_from_slice(extra);
        let args = Args::try_parse_from(argv).expect("valid flags");
        validate(&args).expect("flags pass validation")
    }

    /// Starts the manager with `shells` (e.g. `mcm_controller::manager::compose::registry()` or a subset)
    /// and `extra` flags; returns once it is ready (caches synced).
    pub async fn start_manager(&mut self, shells: Vec<ControllerSpec>, extra: &[&str]) {
        let config = self.config(extra);
        let driver = DriverClient::connect(&self.driver_endpoint, Duration::from_secs(10))
            .await
            .expect("driver client");
        let set: Box<dyn Controller> =
            Box::new(ControllerSet::with(shells).with_driver_client(driver));
        self.start_manager_with(set, config).await;
    }

    /// Starts the manager with a prepared controller set and configuration; returns once it is
    /// ready.
    pub async fn start_manager_with(&mut self, set: Box<dyn Controller>, config: Config) {
        assert!(self.manager.is_none(), "a manager is already running");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("admin listener");
        let admin = listener.local_addr().expect("admin address");
        let mut options = RunOptions::new("integration-test");
        options.admin_listener = Some(listener);
        let machine_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("machine metrics listener");
        let machine_metrics = machine_listener
            .local_addr()
            .expect("machine metrics address");
        options.machine_metrics_listener = Some(machine_listener);
        options.api_wait = Duration::from_secs(30);
        options.api_poll = Duration::from_millis(100);
        options.shutdown_grace = Duration::from_secs(10);
        let health = options.health.clone();
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(manager::run(config, vec![set], options, shutdown.clone()));
        eventually(
            "the manager to become ready",
            Duration::from_secs(60),
            || {
                let health = health.clone();
                async move { health.is_ready().then_some(()) }
            },
        )
        .await;
        self.manager = Some(RunningManager {
            shutdown,
            handle,
            admin,
            machine_metrics,
        });
    }

    /// Stops the manager gracefully (as SIGTERM would) and returns how it ended.
    pub async fn stop_manager(&mut self) -> Result<(), ManagerError> {
        let running = self.manager.take().expect("a running manager");
        running.shutdown.cancel();
        running.handle.await.expect("manager task")
    }

    /// Kills the manager at once (no graceful shutdown), as a crash would.
    pub async fn kill_manager(&mut self) {
        let running = self.manager.take().expect("a running manager");
        running.handle.abort();
        let _ = running.handle.await;
        // Tasks the manager spawned stop with its token.
        running.shutdown.cancel();
    }

    /// The running manager, if any.
    pub fn manager(&self) -> Option<&RunningManager> {
        self.manager.as_ref()
    }

    /// Machines of the control namespace.
    pub fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.control.clone(), NAMESPACE)
    }

    /// MachineSets of the control namespace.
    pub fn machine_sets(&self) -> Api<MachineSet> {
        Api::namespaced(self.control.clone(), NAMESPACE)
    }

    /// MachineDeployments of the control namespace.
    pub fn machine_deployments(&self) -> Api<MachineDeployment> {
        Api::namespaced(self.control.clone(), NAMESPACE)
    }

    /// MachineClasses of the control namespace.
    pub fn machine_classes(&self) -> Api<MachineClass> {
        Api::namespaced(self.control.clone(), NAMESPACE)
    }

    /// Fault injection and request counters of the control sandbox (`None` against an external
    /// cluster: a test that needs them skips, and says so).
    pub fn control_faults(&self) -> Option<Arc<Faults>> {
        self.control_sandbox
            .as_ref()
            .map(|sandbox| Arc::clone(sandbox.faults()))
    }

    /// Fault injection and request counters of the target sandbox (`None` against an external
    /// cluster).
    pub fn target_faults(&self) -> Option<Arc<Faults>> {
        self.target_sandbox
            .as_ref()
            .map(|sandbox| Arc::clone(sandbox.faults()))
    }

    /// Nodes of the target cluster.
    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.target.clone())
    }

    /// Creates a Node in the target cluster from `node` (a JSON object: metadata, spec), as a
    /// kubelet registering it would, and returns it as stored.
    pub async fn create_node(&self, node: serde_json::Value) -> Node {
        let mut node = node;
        if let Some(object) = node.as_object_mut() {
            object.insert("apiVersion".into(), "v1".into());
            object.insert("kind".into(), "Node".into());
        }
        let node: Node = serde_json::from_value(node).expect("a Node");
        self.nodes()
            .create(&PostParams::default(), &node)
            .await
            .expect("create node")
    }

    /// Creates the Secret `name` and a provider-virtual MachineClass `name` using it, with the
    /// given providerSpec (a JSON object; `{}` boots at once).
    pub async fn create_class(&self, name: &str, provider_spec: serde_json::Value) -> MachineClass {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "stringData": {"userData": "#!/bin/sh\necho <<MACHINE_NAME>>\n"}
        }))
        .expect("secret");
        let secrets: Api<Secret> = Api::namespaced(self.control.clone(), NAMESPACE);
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
        let class: MachineClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "provider": "virtual",
            "providerSpec": provider_spec,
            "secretRef": {"name": name, "namespace": NAMESPACE},
            "credentialsSecretRef": {"name": name, "namespace": NAMESPACE}
        }))
        .expect("class");
        self.machine_classes()
            .create(&PostParams::default(), &class)
            .await
            .expect("create class")
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(running) = self.manager.take() {
            running.shutdown.cancel();
            running.handle.abort();
        }
        self.provider_stop.cancel();
    }
}

async fn install_crds(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in mcm_api::crd::all().expect("CRDs").into_values() {
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => panic!("cannot install CRD {}: {error}", crd.name_any()),
        }
    }
    eventually("the CRDs to be served", Duration::from_secs(30), || {
        let client = client.clone();
        async move {
            let machines: Api<Machine> = Api::namespaced(client, NAMESPACE);
            machines.list(&Default::default()).await.ok().map(|_| ())
        }
    })
    .await;
}

async fn ensure_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))
    .expect("namespace");
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("cannot create namespace {name}: {error}"),
    }
}

/// `kubectl` against `sandbox`, with a discovery cache of that sandbox's own: kubectl's default
/// cache is keyed by host:port, and an earlier sandbox on the same port (a target cluster, without
/// the machine API) made it answer "the server could not find the requested resource".
pub fn kubectl(sandbox: &Sandbox) -> std::process::Command {
    let mut command = std::process::Command::new("kubectl");
    command
        .arg("--kubeconfig")
        .arg(sandbox.kubeconfig_path())
        .arg("--cache-dir")
        .arg(sandbox.kubeconfig_path().with_file_name("kubectl-cache"));
    command
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after `limit` saying what was
/// awaited. A liveness bound, not a performance assertion: keep limits generous.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_warms_up_every_shell_and_stops_cleanly() {
    let mut world = World::start().await;
    world
        .start_manager(mcm_controller::manager::compose::registry(), &[])
        .await;
    let admin = world.manager().expect("running").admin;
    let stream = tokio::net::TcpStream::connect(admin).await;
    assert!(stream.is_ok(), "the admin port answers");
    world
        .stop_manager()
        .await
        .expect("a requested stop is not an error");
}

/// Raw `GET /metrics` responses of the running manager's admin port and, when it serves one,
/// its machine metrics port, one after the other (empty without a manager).
pub async fn scrape(world: &World) -> String {
    let Some(manager) = world.manager() else {
        return String::new();
    };
    let mut text = scrape_port(manager.admin)
        .await
        .expect("connect to the admin port");
    if let Some(machine) = scrape_port(manager.machine_metrics).await {
        text.push_str(&machine);
    }
    text
}

/// A raw `GET /metrics` response of `address`; `None` if nothing listens there.
pub async fn scrape_port(address: std::net::SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("send the scrape");
    let mut body = String::new();
    stream
        .read_to_string(&mut body)
        .await
        .expect("read the scrape");
    Some(body)
}

/// The Events of the control namespace with `reason` (none if the list fails).
pub async fn events_with_reason(
    world: &World,
    reason: &str,
) -> Vec<k8s_openapi::api::core::v1::Event> {
    let api: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(world.control.clone(), NAMESPACE);
    api.list(&Default::default())
        .await
        .map(|list| {
            list.items
                .into_iter()
                .filter(|event| event.reason.as_deref() == Some(reason))
                .collect()
        })
        .unwrap_or_default()
}
