//! Leader election and the manager skeleton against an in-process sandbox API server.
//!
//! Waits are bounded by generous guards (a hang fails the test instead of blocking CI); nothing
//! asserts how long anything took.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use clap::Parser as _;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use mcm_sandbox::{Sandbox, SandboxConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::leader::{LeaderElector, LeaderError, LeaderSettings, LeaderState};
use super::*;
use crate::platform::BoxError;
use crate::platform::config::{Args, validate};

/// Upper bound for any wait; only reached when something hangs.
const GUARD: Duration = Duration::from_secs(60);

async fn guarded<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(GUARD, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {GUARD:?}"))
}

async fn sandbox() -> Sandbox {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Sandbox::start(SandboxConfig::default()).await.unwrap()
}

/// Short timings: lease 4 s, renew deadline 3 s, retry 1 s. The deadline leaves room for two late
/// renewals on a busy machine, so a slow renewal does not end the leadership spuriously.
fn settings(identity: &str) -> LeaderSettings {
    LeaderSettings {
        lease_name: "machine-controller-manager".to_owned(),
        namespace: "default".to_owned(),
        identity: identity.to_owned(),
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_secs(1),
    }
}

/// A tower service that fails every request while `off` is set: a replica cut off from the API.
#[derive(Clone)]
struct Switch<S> {
    inner: S,
    off: Arc<AtomicBool>,
}

impl<S, R> tower::Service<axum::http::Request<Body>> for Switch<S>
where
    S: tower::Service<axum::http::Request<Body>, Response = R, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = R;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<R, BoxError>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: axum::http::Request<Body>) -> Self::Future {
        if self.off.load(Ordering::SeqCst) {
            Box::pin(async { Err::<R, BoxError>("cut off from the API server".into()) })
        } else {
            Box::pin(self.inner.call(request))
        }
    }
}

async fn switchable_client(sandbox: &Sandbox, off: Arc<AtomicBool>) -> Client {
    let kubeconfig = Kubeconfig::read_from(sandbox.kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&tower::layer::layer_fn(move |inner| Switch {
            inner,
            off: off.clone(),
        }))
        .build()
}

async fn holder(client: &Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), "default")
        .get("machine-controller-manager")
        .await
        .unwrap();
    lease.spec.and_then(|spec| spec.holder_identity)
}

async fn renew_time(client: &Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), "default")
        .get("machine-controller-manager")
        .await
        .unwrap();
    lease
        .spec
        .and_then(|spec| spec.renew_time)
        .map(|time| format!("{:?}", time.0))
}

/// Starts `a` (switchable) and `b`; returns once `a` leads and has renewed twice while `b` waited.
async fn two_electors(sandbox: &Sandbox) -> (LeaderElector, LeaderElector, Arc<AtomicBool>) {
    let observer = sandbox.client();
    let a_off = Arc::new(AtomicBool::new(false));
    let a_client = switchable_client(sandbox, a_off.clone()).await;
    let mut a = LeaderElector::start(a_client, settings("replica-a"))
        .await
        .unwrap();
    guarded("a becoming leader", a.became_leader())
        .await
        .unwrap();
    assert_eq!(holder(&observer).await.as_deref(), Some("replica-a"));

    let b = LeaderElector::start(sandbox.client(), settings("replica-b"))
        .await
        .unwrap();
    // While a keeps renewing (observed twice), b stays a candidate.
    for _ in 0..2 {
        let before = renew_time(&observer).await;
        guarded("a renewing", async {
            while renew_time(&observer).await == before {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
    }
    assert_eq!(*b.state().borrow(), LeaderState::Candidate);
    assert_eq!(*a.state().borrow(), LeaderState::Leader);
    assert_eq!(holder(&observer).await.as_deref(), Some("replica-a"));
    (a, b, a_off)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_elector_leads_and_a_leader_cut_off_reports_the_loss() {
    let sandbox = sandbox().await;
    let (mut a, b, a_off) = two_electors(&sandbox).await;

    // Cut a off: its renewals fail and its renew deadline passes.
    a_off.store(true, Ordering::SeqCst);
    let reason = guarded("a noticing the loss", a.lost()).await;
    assert!(reason.contains("renew deadline"), "{reason}");
    assert!(matches!(&*a.state().borrow(), LeaderState::Lost(_)));
    b.stop().await;
    a.stop().await;
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_when_the_leader_stops_renewing() {
    let sandbox = sandbox().await;
    let observer = sandbox.client();
    let (mut a, mut b, a_off) = two_electors(&sandbox).await;
    a_off.store(true, Ordering::SeqCst);
    guarded("a noticing the loss", a.lost()).await;
    guarded("b becoming leader", b.became_leader())
        .await
        .unwrap();
    assert_eq!(holder(&observer).await.as_deref(), Some("replica-b"));

    // A stopped leader releases the lease.
    b.stop().await;
    assert_eq!(holder(&observer).await, None);
    a.stop().await;
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_taken_over_reports_the_loss() {
    let sandbox = sandbox().await;
    let mut elector = LeaderElector::start(sandbox.client(), settings("replica-a"))
        .await
        .unwrap();
    guarded("becoming leader", elector.became_leader())
        .await
        .unwrap();
    Api::<Lease>::namespaced(sandbox.client(), "default")
        .patch(
            "machine-controller-manager",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"holderIdentity": "intruder"}})),
        )
        .await
        .unwrap();
    let reason = guarded("noticing the takeover", elector.lost()).await;
    assert!(
        reason.contains("intruder") || reason.contains("another replica"),
        "{reason}"
    );
    // A lost elector cannot become leader again.
    assert!(matches!(
        elector.became_leader().await,
        Err(LeaderError::Lost(_))
    ));
    elector.stop().await;
    sandbox.shutdown().await;
}

/// Gardener's Role grants Leases create, get, watch and update, never patch: the whole life of an
/// election (create, renewals, a take-over, the release) must stay within those verbs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_uses_get_create_and_update_only() {
    let sandbox = sandbox().await;
    sandbox.faults().reset_counters();
    let (mut a, mut b, a_off) = two_electors(&sandbox).await;
    a_off.store(true, Ordering::SeqCst);
    guarded("a noticing the loss", a.lost()).await;
    guarded("b taking over", b.became_leader()).await.unwrap();
    b.stop().await;
    a.stop().await;
    let counters = sandbox.faults().counters();
    let verbs: std::collections::BTreeMap<mcm_sandbox::Verb, u64> = counters
        .counts
        .iter()
        .filter(|((_, resource, _), _)| resource == "leases")
        .fold(Default::default(), |mut verbs, ((verb, _, _), count)| {
            *verbs.entry(*verb).or_default() += count;
            verbs
        });
    println!("lease requests by verb: {verbs:?}");
    let allowed = [
        mcm_sandbox::Verb::Get,
        mcm_sandbox::Verb::Create,
        mcm_sandbox::Verb::Update,
        mcm_sandbox::Verb::Watch,
    ];
    for verb in verbs.keys() {
        assert!(
            allowed.contains(verb),
            "a lease request used {verb}: {verbs:?}"
        );
    }
    // The election really ran through the sandbox: created once, renewed and taken over by PUT.
    assert!(
        verbs
            .get(&mcm_sandbox::Verb::Create)
            .is_some_and(|count| *count >= 1),
        "{verbs:?}"
    );
    assert!(
        verbs
            .get(&mcm_sandbox::Verb::Update)
            .is_some_and(|count| *count >= 3),
        "{verbs:?}"
    );
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_timings_are_an_error_not_a_panic() {
    let sandbox = sandbox().await;
    let mut bad = settings("replica-a");
    bad.lease_duration = Duration::from_millis(900);
    bad.retry_period = Duration::from_millis(500);
    assert!(matches!(
        LeaderElector::start(sandbox.client(), bad).await,
        Err(LeaderError::InvalidTiming { .. })
    ));
    sandbox.shutdown().await;
}

// ----- run() -------------------------------------------------------------------------------------

async fn install_machine_crd(client: &Client) {
    let crd = mcm_api::crd::machine().unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
}

fn config_for(sandbox: &Sandbox, extra: &[&str]) -> Config {
    let control = format!(
        "--control-kubeconfig={}",
        sandbox.kubeconfig_path().display()
    );
    let mut argv = vec![
        "machine-controller-manager",
        "--target-kubeconfig=none",
        &control,
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
    ];
    argv.extend_from_slice(extra);
    validate(&Args::try_parse_from(argv).unwrap()).unwrap()
}

async fn options(identity: &str) -> (RunOptions, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let mut options = RunOptions::new(identity);
    options.admin_listener = Some(listener);
    options.api_wait = Duration::from_secs(20);
    options.api_poll = Duration::from_millis(100);
    (options, address)
}

/// `GET path` over plain HTTP/1.1: (status code, body).
async fn http_get(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A sandbox serving the Machine CRD, as every manager run needs.
async fn sandbox_with_machine_crd() -> Sandbox {
    let sandbox = sandbox().await;
    install_machine_crd(&sandbox.client()).await;
    sandbox
}

/// A manager running in a task, with what the tests look at.
struct Manager {
    /// Its admin server's address.
    address: std::net::SocketAddr,
    /// Cancels the run.
    shutdown: CancellationToken,
    /// The run.
    task: tokio::task::JoinHandle<Result<(), ManagerError>>,
}

impl Manager {
    /// Runs `controllers` with `config` and `options` (admin server on `address`) in a task.
    fn spawn(
        config: Config,
        controllers: Vec<Box<dyn Controller>>,
        options: RunOptions,
        address: std::net::SocketAddr,
    ) -> Self {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(config, controllers, options, shutdown.clone()));
        Self {
            address,
            shutdown,
            task,
        }
    }

    /// A manager of identity `identity` against `sandbox` (flags of [`config_for`] plus `extra`).
    async fn start(
        sandbox: &Sandbox,
        identity: &str,
        extra: &[&str],
        controllers: Vec<Box<dyn Controller>>,
    ) -> Self {
        let config = config_for(sandbox, extra);
        let (options, address) = options(identity).await;
        Self::spawn(config, controllers, options, address)
    }

    /// Cancels the run and waits until it ended without an error.
    async fn stop(self) {
        self.shutdown.cancel();
        guarded("manager stop", self.task).await.unwrap().unwrap();
    }
}

/// A controller that reports when it warmed up and started, and runs until shutdown.
struct Probe {
    warmed: Option<oneshot::Sender<()>>,
    started: Option<oneshot::Sender<()>>,
    stopped: Option<oneshot::Sender<()>>,
    fail_after_start: bool,
}

impl Probe {
    /// A probe that only reports its start, and the receiver of that report.
    fn reporting_start() -> (Self, oneshot::Receiver<()>) {
        let (started_tx, started_rx) = oneshot::channel();
        let probe = Probe {
            warmed: None,
            started: Some(started_tx),
            stopped: None,
            fail_after_start: false,
        };
        (probe, started_rx)
    }
}

impl Controller for Probe {
    fn name(&self) -> &str {
        "probe"
    }

    fn warm_up<'a>(
        &'a mut self,
        _context: &'a ControllerContext,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        if let Some(warmed) = self.warmed.take() {
            let _ = warmed.send(());
        }
        Box::pin(async { Ok(()) })
    }

    fn run(&mut self, context: ControllerContext) -> BoxFuture<'static, Result<(), BoxError>> {
        let started = self.started.take();
        let stopped = self.stopped.take();
        let fail = self.fail_after_start;
        Box::pin(async move {
            if let Some(started) = started {
                let _ = started.send(());
            }
            if fail {
                return Err("probe failure".into());
            }
            context.shutdown.cancelled().await;
            if let Some(stopped) = stopped {
                let _ = stopped.send(());
            }
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_becomes_leader_serves_health_and_stops_cleanly() {
    let sandbox = sandbox_with_machine_crd().await;
    let config = config_for(&sandbox, &[]);
    let (options, address) = options("smoke-replica").await;
    let health = options.health.clone();
    let (warmed_tx, warmed_rx) = oneshot::channel();
    let (started_tx, started_rx) = oneshot::channel();
    let (stopped_tx, stopped_rx) = oneshot::channel();
    let probe = Probe {
        warmed: Some(warmed_tx),
        started: Some(started_tx),
        stopped: Some(stopped_tx),
        fail_after_start: false,
    };
    let manager = Manager::spawn(config, vec![Box::new(probe)], options, address);

    guarded("warm-up", warmed_rx).await.unwrap();
    guarded("controller start", started_rx).await.unwrap();
    assert_eq!(
        holder(&sandbox.client()).await.as_deref(),
        Some("smoke-replica")
    );
    assert!(health.is_ready());
    assert_eq!(http_get(address, "/healthz").await, (200, "ok".to_owned()));
    assert_eq!(http_get(address, "/readyz").await, (200, "ok".to_owned()));
    let (status, metrics) = http_get(address, "/metrics").await;
    assert_eq!(status, 200);
    // No --driver-endpoint: upstream machine-controller-manager's share and its series only.
    assert!(metrics.contains("mcm_machine_set_items_total"), "{metrics}");
    assert!(!metrics.contains("mcm_machine_items_total"), "{metrics}");

    manager.stop().await;
    guarded("controller stop", stopped_rx).await.unwrap();
    assert_eq!(holder(&sandbox.client()).await, None, "lease released");
    // The admin server stopped with the manager.
    assert!(tokio::net::TcpStream::connect(address).await.is_err());
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_stops_is_fatal_and_fails_healthz() {
    let sandbox = sandbox_with_machine_crd().await;
    let config = config_for(&sandbox, &["--leader-elect=false"]);
    let (options, _address) = options("fatal-replica").await;
    let health = options.health.clone();
    let probe = Probe {
        warmed: None,
        started: None,
        stopped: None,
        fail_after_start: true,
    };
    let result = guarded(
        "manager exit",
        run(
            config,
            vec![Box::new(probe)],
            options,
            CancellationToken::new(),
        ),
    )
    .await;
    match result {
        Err(ManagerError::ControllerStopped { name, reason }) => {
            assert_eq!(name, "probe");
            assert_eq!(reason, "probe failure");
        }
        other => panic!("expected ControllerStopped, got {other:?}"),
    }
    assert!(!health.is_healthy());
    sandbox.shutdown().await;
}

/// What [`Terms`] reports.
#[derive(Debug, PartialEq)]
enum TermEvent {
    Started(u32),
    Stopped(u32),
}

/// A controller that reports every term, and on its first term spawns a writer that outlives the
/// term (as an in-flight creation would): it creates a ConfigMap every 50 ms through the
/// controllers' client and reports each result.
struct Terms {
    terms: u32,
    events: tokio::sync::mpsc::UnboundedSender<TermEvent>,
    writes: Option<tokio::sync::mpsc::UnboundedSender<Result<(), String>>>,
}

impl Controller for Terms {
    fn name(&self) -> &str {
        "terms"
    }

    fn run(&mut self, context: ControllerContext) -> BoxFuture<'static, Result<(), BoxError>> {
        self.terms += 1;
        let term = self.terms;
        let events = self.events.clone();
        if let Some(writes) = self.writes.take() {
            let api = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
                context.control.clone(),
                "default",
            );
            tokio::spawn(async move {
                for index in 0u32.. {
                    let map: k8s_openapi::api::core::v1::ConfigMap =
                        serde_json::from_value(serde_json::json!({
                            "metadata": {"name": format!("write-{index}")}
                        }))
                        .unwrap();
                    let result = api
                        .create(&PostParams::default(), &map)
                        .await
                        .map(|_| ())
                        .map_err(|error| error.to_string());
                    if writes.send(result).is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
        }
        Box::pin(async move {
            let _ = events.send(TermEvent::Started(term));
            // Reports the end of the term whether the future finishes or is dropped (aborted).
            let _ended = Ended { events, term };
            context.shutdown.cancelled().await;
            Ok(())
        })
    }
}

struct Ended {
    events: tokio::sync::mpsc::UnboundedSender<TermEvent>,
    term: u32,
}

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.events.send(TermEvent::Stopped(self.term));
    }
}

fn leader_gauge(metrics: &str) -> Option<&str> {
    metrics
        .lines()
        .find(|line| {
            line.starts_with("leader_election_master_status{name=\"machine-controller-manager\"}")
        })
        .and_then(|line| line.rsplit(' ').next())
}

/// A lost Lease stops the controllers at once, no write leaves the process after
/// the loss (even from a task that outlives the term), and the manager campaigns again in-process
/// and runs its controllers again once it holds the Lease, without exiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_controllers_gates_writes_and_is_won_back_in_process() {
    let sandbox = sandbox_with_machine_crd().await;
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let (writes_tx, mut writes) = tokio::sync::mpsc::unbounded_channel();
    let controller = Terms {
        terms: 0,
        events: events_tx,
        writes: Some(writes_tx),
    };
    let manager = Manager::start(&sandbox, "term-replica", &[], vec![Box::new(controller)]).await;
    let address = manager.address;
    assert_eq!(
        guarded("first term", events.recv()).await,
        Some(TermEvent::Started(1))
    );
    // The writer writes while we lead.
    guarded("a write while leading", async {
        while writes.recv().await.unwrap().is_err() {}
    })
    .await;
    let (_, metrics) = http_get(address, "/metrics").await;
    assert_eq!(leader_gauge(&metrics), Some("1"), "{metrics}");

    // Someone else takes the Lease: the manager must stop its controllers.
    Api::<Lease>::namespaced(sandbox.client(), "default")
        .patch(
            "machine-controller-manager",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"holderIdentity": "intruder"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        guarded("the term ends on the loss", events.recv()).await,
        Some(TermEvent::Stopped(1))
    );
    // From the loss on, every write of the surviving writer is refused in the client (one sent
    // just before the loss may still answer: skip what is in flight).
    while writes.try_recv().is_ok() {}
    tokio::time::sleep(Duration::from_millis(300)).await;
    while writes.try_recv().is_ok() {}
    for _ in 0..5 {
        let result = guarded("a write after the loss", writes.recv())
            .await
            .unwrap();
        let error = result.expect_err("a write went through after the Lease was lost");
        assert!(error.contains("write gate closed"), "{error}");
    }
    let (_, metrics) = http_get(address, "/metrics").await;
    assert_eq!(leader_gauge(&metrics), Some("0"), "{metrics}");
    assert!(
        !manager.task.is_finished(),
        "the manager exited on a lost Lease"
    );

    // The intruder never renews: once its Lease expires the manager leads again, in-process.
    assert_eq!(
        guarded("second term", events.recv()).await,
        Some(TermEvent::Started(2))
    );
    assert_eq!(
        holder(&sandbox.client()).await.as_deref(),
        Some("term-replica")
    );
    guarded("a write after winning the Lease back", async {
        while writes.recv().await.unwrap().is_err() {}
    })
    .await;
    assert!(!manager.task.is_finished());

    manager.stop().await;
    assert_eq!(
        guarded("the second term stops", events.recv()).await,
        Some(TermEvent::Stopped(2))
    );
    sandbox.shutdown().await;
}

/// An API server that does not answer at start-up is waited for (not-ready on
/// `/readyz`, no exit, however long), and the manager leads as soon as it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_at_start_up_is_waited_for_while_not_ready() {
    let sandbox = sandbox_with_machine_crd().await;
    sandbox.faults().set_unavailable(
        Duration::from_secs(600),
        mcm_sandbox::UnavailableMode::ServiceUnavailable,
    );
    let config = config_for(&sandbox, &[]);
    let (mut options, address) = options("patient-replica").await;
    // Upstream gives up after 10 s; this wait only bounds 404s of a missing machine API.
    options.api_wait = Duration::from_millis(300);
    let (probe, started_rx) = Probe::reporting_start();
    let mut manager = Manager::spawn(config, vec![Box::new(probe)], options, address);
    guarded("readyz answers", async {
        loop {
            if tokio::net::TcpStream::connect(address).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // Several retries later (the old wait gave up after `api_wait`), still waiting, not ready.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !manager.task.is_finished(),
        "the manager gave up: {:?}",
        (&mut manager.task).await
    );
    let (status, body) = http_get(address, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("connecting to the control API server"),
        "{body}"
    );
    assert_eq!(http_get(address, "/healthz").await.0, 200);

    sandbox.faults().clear_unavailable();
    guarded("leading once the API is back", started_rx)
        .await
        .unwrap();
    assert_eq!(http_get(address, "/readyz").await.0, 200);
    manager.stop().await;
    sandbox.shutdown().await;
}

/// A restarted manager (same identity, `leader::default_identity`) finds the Lease naming it and
/// takes it at once: here the Lease promises an hour, so waiting for it to expire would never end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_manager_takes_its_own_lease_at_once() {
    let sandbox = sandbox_with_machine_crd().await;
    let now = jiff::Timestamp::now();
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "machine-controller-manager", "namespace": "default"},
        "spec": {
            "holderIdentity": "restarted-replica",
            "leaseDurationSeconds": 3600,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0
        }
    }))
    .unwrap();
    Api::<Lease>::namespaced(sandbox.client(), "default")
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let (probe, started_rx) = Probe::reporting_start();
    let manager = Manager::start(&sandbox, "restarted-replica", &[], vec![Box::new(probe)]).await;
    guarded("leading on its own Lease", started_rx)
        .await
        .unwrap();
    manager.stop().await;
    sandbox.shutdown().await;
}

/// A freshly started manager exports every counter family with a sample (0 for
/// the label values known at start), so rates and alerts work from the first scrape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_manager_exports_every_counter_family() {
    let sandbox = sandbox_with_machine_crd().await;
    let (probe, started_rx) = Probe::reporting_start();
    // Both shares' controllers and their series on --port (no machine metrics port).
    let manager = Manager::start(
        &sandbox,
        "counting-replica",
        &[
            "--leader-elect=false",
            "--machine-metrics-port=0",
            // Selects the machine controllers (the Probe runs in their place; nothing connects).
            "--driver-endpoint=unix:///nonexistent/driver.sock",
        ],
        vec![Box::new(probe)],
    )
    .await;
    guarded("controller start", started_rx).await.unwrap();
    let (status, metrics) = http_get(manager.address, "/metrics").await;
    assert_eq!(status, 200);
    let counters: Vec<&str> = metrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    assert!(counters.contains(&"mcm_workqueue_retries"), "{metrics}");
    // Its labels name the provider and the error code: nothing to export before a failure.
    let unknown_labels = ["mcm_cloud_api_driver_requests_failed"];
    let missing: Vec<&str> = counters
        .iter()
        .copied()
        .filter(|family| !unknown_labels.contains(family))
        .filter(|family| {
            !metrics.lines().any(|line| {
                line.starts_with(&format!("{family}_total "))
                    || line.starts_with(&format!("{family}_total{{"))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "counter families without a series: {missing:?}\n{metrics}"
    );
    // One series per queue of the selected controllers (upstream's queue names).
    for queue in [
        "machineset",
        "machinedeployment",
        "machine",
        "machinesafetyapiserver",
    ] {
        let series = format!("mcm_workqueue_retries_total{{name=\"{queue}\",queue=\"{queue}\"}} 0");
        assert!(metrics.contains(&series), "no {series}\n{metrics}");
    }
    manager.stop().await;
    sandbox.shutdown().await;
}

/// The manager's requests name it in their User-Agent (client-go's form), as the
/// sandbox's request record shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_managers_requests_carry_its_user_agent() {
    let sandbox = sandbox_with_machine_crd().await;
    sandbox.faults().requesters.reset();
    let (probe, started_rx) = Probe::reporting_start();
    let manager = Manager::start(&sandbox, "agent-replica", &[], vec![Box::new(probe)]).await;
    guarded("controller start", started_rx).await.unwrap();
    manager.stop().await;
    let records = sandbox.faults().requesters.snapshot();
    let leases: Vec<_> = records
        .iter()
        .filter(|record| record.resource == "leases")
        .collect();
    assert!(!leases.is_empty(), "{records:?}");
    let expected = format!("machine-controller-manager/{} (", env!("CARGO_PKG_VERSION"));
    for record in leases {
        assert!(
            record.user_agent.starts_with(&expected) && record.user_agent.ends_with(')'),
            "{record:?}"
        );
    }
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_cluster_without_machine_crds_fails_clearly() {
    let sandbox = sandbox().await;
    let config = config_for(&sandbox, &["--leader-elect=false"]);
    let (mut options, _address) = options("no-crd-replica").await;
    options.api_wait = Duration::from_millis(500);
    let result = guarded(
        "manager exit",
        run(config, Vec::new(), options, CancellationToken::new()),
    )
    .await;
    let error = result.expect_err("must fail without the Machine CRD");
    assert!(
        matches!(
            error,
            ManagerError::Client(ClientError::MachinesNotServed { .. })
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("install the machine.sapcloud.io CRDs"),
        "{error}"
    );
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_kubeconfig_fails_with_its_path() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("missing-kubeconfig");
    let argv = [
        "machine-controller-manager".to_owned(),
        "--target-kubeconfig=none".to_owned(),
        format!("--control-kubeconfig={}", path.display()),
    ];
    let config = validate(&Args::try_parse_from(argv).unwrap()).unwrap();
    let (options, _address) = options("no-kubeconfig").await;
    let error = run(config, Vec::new(), options, CancellationToken::new())
        .await
        .expect_err("must fail");
    let message = error.to_string();
    assert!(message.contains("control kubeconfig"), "{message}");
    assert!(message.contains("missing-kubeconfig"), "{message}");
}
