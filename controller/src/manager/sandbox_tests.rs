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

use super::config::{Args, validate};
use super::leader::{LeaderElector, LeaderError, LeaderSettings, LeaderState};
use super::*;

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

/// A controller that reports when it warmed up and started, and runs until shutdown.
struct Probe {
    warmed: Option<oneshot::Sender<()>>,
    started: Option<oneshot::Sender<()>>,
    stopped: Option<oneshot::Sender<()>>,
    fail_after_start: bool,
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

    fn run(
        mut self: Box<Self>,
        context: ControllerContext,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move {
            if let Some(started) = self.started.take() {
                let _ = started.send(());
            }
            if self.fail_after_start {
                return Err("probe failure".into());
            }
            context.shutdown.cancelled().await;
            if let Some(stopped) = self.stopped.take() {
                let _ = stopped.send(());
            }
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_becomes_leader_serves_health_and_stops_cleanly() {
    let sandbox = sandbox().await;
    install_machine_crd(&sandbox.client()).await;
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
    let shutdown = CancellationToken::new();
    let manager = tokio::spawn(run(
        config,
        vec![Box::new(probe)],
        options,
        shutdown.clone(),
    ));

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

    shutdown.cancel();
    guarded("manager stop", manager).await.unwrap().unwrap();
    guarded("controller stop", stopped_rx).await.unwrap();
    assert_eq!(holder(&sandbox.client()).await, None, "lease released");
    // The admin server stopped with the manager.
    assert!(tokio::net::TcpStream::connect(address).await.is_err());
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_stops_is_fatal_and_fails_healthz() {
    let sandbox = sandbox().await;
    install_machine_crd(&sandbox.client()).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_stops_the_manager_with_an_error() {
    let sandbox = sandbox().await;
    install_machine_crd(&sandbox.client()).await;
    let config = config_for(&sandbox, &[]);
    let (options, _address) = options("victim-replica").await;
    let (started_tx, started_rx) = oneshot::channel();
    let probe = Probe {
        warmed: None,
        started: Some(started_tx),
        stopped: None,
        fail_after_start: false,
    };
    let manager = tokio::spawn(run(
        config,
        vec![Box::new(probe)],
        options,
        CancellationToken::new(),
    ));
    guarded("controller start", started_rx).await.unwrap();
    Api::<Lease>::namespaced(sandbox.client(), "default")
        .patch(
            "machine-controller-manager",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"holderIdentity": "intruder"}})),
        )
        .await
        .unwrap();
    let result = guarded("manager exit", manager).await.unwrap();
    assert!(
        matches!(result, Err(ManagerError::Leader(LeaderError::Lost(_)))),
        "{result:?}"
    );
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
