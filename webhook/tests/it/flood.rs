//! One client must not take the webhook down: while a client holds 2,000 connections (TLS
//! connections left idle, TCP connections that never start TLS, and connections that sent part
//! of a ClientHello and stall), every admission and conversion of another client succeeds; and
//! while a flood opens about 2,000 connections a second and opens each one again as soon as the
//! webhook closes it, an API server's admissions and conversions succeed at least 99 % of the
//! time, whether the flood comes from ten other addresses or from the API server's own.
//!
//! On loopback every address of 127.0.0.0/8 is local, so the clients are told apart by binding
//! their sockets to different source addresses. In the first two tests the flooding client uses
//! 127.0.0.1 (one peer) or ten addresses (a client that gets around the per-peer limit, so the
//! global cap is reached and connections must be given up), the well-behaved one 127.0.0.2; the
//! flood keeps its connections, and one the server closes is opened again after a pause. The
//! well-behaved client's requests are bounded by generous timeouts only (no latency is
//! asserted); each one opens a fresh connection, as an API server does when its idle ones are
//! gone, and one more connection is kept alive across requests.
//!
//! The hostile runs ([`hostile_run`]) put the webhook on its own runtime (so its CPU time can
//! be read from its threads) and the API server (127.0.0.1) on another, calling in a loop for a
//! fixed time while the flood reconnects at once; they print the success rate, the flood's
//! connection rate and the webhook's CPU use (of this debug build, including the API server's
//! own TLS handshakes). Every test uses the default limits, which is what a deployment runs
//! with, and the floods run one at a time.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use mcm_webhook::limits::ConnectionLimits;
use mcm_webhook::metrics::{CloseLabels, ConnectionMetrics};
use mcm_webhook::server::{self, AppState};
use mcm_webhook::tls::server_config;
use rustls_pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;

use crate::common::{admission_review, client_config, machine_deployment, serving_certificate};

const HOST: &str = "mcm-webhook.mcm.svc";
/// Connections the flooding client holds.
const FLOOD: usize = 2000;
/// Admissions and conversions the well-behaved client makes (each).
const REQUESTS: usize = 10;
/// Bound on one request of the well-behaved client (a loaded 2-core machine is slow, and TLS
/// handshakes of the flood compete for it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on waiting for the flood to be in place.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause before a flooding connection closed by the server is opened again.
const RECONNECT_PAUSE: Duration = Duration::from_secs(5);
/// Address of the well-behaved client.
const GOOD: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// Open files the test needs: the flood's sockets, the server's side of the admitted ones, and
/// room for the rest.
const FDS_NEEDED: u64 = 2 * FLOOD as u64 + 4000;

/// Raises the soft limit of open files to what the test needs, if the hard limit allows.
fn ensure_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if soft >= FDS_NEEDED {
        return;
    }
    let hard = limit.maximum.unwrap_or(u64::MAX);
    assert!(
        hard >= FDS_NEEDED,
        "this test needs {FDS_NEEDED} open files; the hard limit is {hard} (raise `ulimit -Hn`)"
    );
    let mut raised = limit;
    raised.current = Some(FDS_NEEDED);
    setrlimit(Resource::Nofile, raised).unwrap();
}

struct Server {
    addr: SocketAddr,
    ca_pem: String,
    metrics: ConnectionMetrics,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    fn closed(&self, reason: &'static str) -> u64 {
        self.metrics
            .closed
            .get_or_create(&CloseLabels { reason })
            .get()
    }
}

async fn start() -> Server {
    let (store, ca_pem) = serving_certificate("flood-ca", HOST);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = ConnectionMetrics::default();
    let task = tokio::spawn(server::serve_tls_with_limits(
        listener,
        server::router(AppState::new(store.clone())),
        server_config(store),
        ConnectionLimits::default(),
        metrics.clone(),
    ));
    Server {
        addr,
        ca_pem,
        metrics,
        task,
    }
}

async fn connect_from(local: IpAddr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(local, 0))?;
    socket.connect(server).await
}

/// How a flooding connection misbehaves.
#[derive(Clone, Copy, Debug)]
enum Misbehaviour {
    /// Completes the TLS handshake, then sends nothing.
    IdleTls,
    /// Never sends a byte.
    Silent,
    /// Sends the start of a ClientHello and stalls.
    PartialHello,
}

/// The start of a TLS 1.2 record carrying a ClientHello that announces 512 bytes and brings 6.
const PARTIAL_HELLO: &[u8] = &[
    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
];

struct Flood {
    stop: Arc<AtomicBool>,
    /// Connections that have been opened (and misbehaved) at least once.
    in_place: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Flood {
    /// Starts `FLOOD` connections from `sources` (spread evenly) to `server`.
    fn start(server: &Server, sources: &[IpAddr]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let in_place = Arc::new(AtomicUsize::new(0));
        let tls =
            tokio_rustls::TlsConnector::from(Arc::new(client_config(&server.ca_pem).unwrap()));
        let tasks = (0..FLOOD)
            .map(|i| {
                let misbehaviour = match i % 3 {
                    0 => Misbehaviour::IdleTls,
                    1 => Misbehaviour::Silent,
                    _ => Misbehaviour::PartialHello,
                };
                let source = sources[i % sources.len()];
                let (stop, in_place, tls, addr) =
                    (stop.clone(), in_place.clone(), tls.clone(), server.addr);
                tokio::spawn(async move {
                    let mut counted = false;
                    while !stop.load(Ordering::Relaxed) {
                        hold_one(source, addr, misbehaviour, &tls, &stop, &mut || {
                            if !counted {
                                counted = true;
                                in_place.fetch_add(1, Ordering::Relaxed);
                            }
                        })
                        .await;
                        tokio::time::sleep(RECONNECT_PAUSE).await;
                    }
                })
            })
            .collect();
        Self {
            stop,
            in_place,
            tasks,
        }
    }

    /// Waits until every flooding connection has been opened at least once.
    async fn in_place(&self) {
        let placed = tokio::time::timeout(SETUP_TIMEOUT, async {
            while self.in_place.load(Ordering::Relaxed) < FLOOD {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(
            placed.is_ok(),
            "only {} of {FLOOD} flooding connections were opened",
            self.in_place.load(Ordering::Relaxed)
        );
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.abort();
            let _ = task.await;
        }
    }
}

/// Opens one connection, misbehaves, and holds it until the server closes it or the flood stops.
async fn hold_one(
    source: IpAddr,
    server: SocketAddr,
    misbehaviour: Misbehaviour,
    tls: &tokio_rustls::TlsConnector,
    stop: &AtomicBool,
    placed: &mut (dyn FnMut() + Send),
) {
    let Ok(mut tcp) = connect_from(source, server).await else {
        return;
    };
    match misbehaviour {
        Misbehaviour::Silent => {
            placed();
            wait_closed(&mut tcp, stop).await;
        }
        Misbehaviour::PartialHello => {
            let _ = tcp.write_all(PARTIAL_HELLO).await;
            placed();
            wait_closed(&mut tcp, stop).await;
        }
        Misbehaviour::IdleTls => {
            let connected = tls.connect(ServerName::try_from(HOST).unwrap(), tcp).await;
            placed();
            if let Ok(mut stream) = connected {
                let mut buf = [0_u8; 256];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(Ok(0) | Err(_)) =
                        tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf))
                            .await
                    {
                        return;
                    }
                }
            }
        }
    }
}

async fn wait_closed(tcp: &mut TcpStream, stop: &AtomicBool) {
    let mut buf = [0_u8; 256];
    while !stop.load(Ordering::Relaxed) {
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut buf)).await
        {
            return;
        }
    }
}

/// An HTTP/1.1 connection of the well-behaved client.
type Sender = hyper::client::conn::http1::SendRequest<Full<axum::body::Bytes>>;

async fn good_connection(server: &Server) -> Result<Sender, String> {
    connection_from(GOOD, server.addr, &server.ca_pem).await
}

/// A TLS connection from `source` to `server`, trusting `ca_pem`, with HTTP/1.1 on top.
async fn connection_from(
    source: IpAddr,
    server: SocketAddr,
    ca_pem: &str,
) -> Result<Sender, String> {
    let tcp = connect_from(source, server)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca_pem)?))
        .connect(ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

async fn post(sender: &mut Sender, path: &str, body: &Value) -> Result<Value, String> {
    let request = http::Request::post(path)
        .header("host", HOST)
        .header("content-type", "application/json")
        .body(Full::new(axum::body::Bytes::from(
            serde_json::to_vec(body).unwrap(),
        )))
        .unwrap();
    sender
        .ready()
        .await
        .map_err(|e| format!("connection not ready: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    if status != 200 {
        return Err(format!("status {status}"));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("JSON: {e}"))
}

fn admission() -> (&'static str, Value) {
    let review = admission_review(
        "MachineDeployment",
        "v1alpha1",
        "CREATE",
        &machine_deployment(),
        None,
        false,
    );
    (
        "/validate-machine-sapcloud-io-machinedeployment",
        serde_json::from_slice(&review).unwrap(),
    )
}

fn conversion() -> (&'static str, Value) {
    (
        "/convert",
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": { "uid": "c-1", "desiredAPIVersion": "machine.sapcloud.io/v1beta1", "objects": [machine_deployment()] },
        }),
    )
}

/// Whether the webhook's answer is the success a valid object gets.
fn succeeded(path: &str, answer: &Value) -> bool {
    if path == "/convert" {
        answer["response"]["result"]["status"] == "Success"
            && answer["response"]["convertedObjects"][0]["apiVersion"]
                == "machine.sapcloud.io/v1beta1"
    } else {
        answer["response"]["allowed"] == true
    }
}

/// One request on a fresh connection.
async fn fresh_request(server: &Server, path: &str, body: &Value) -> Result<(), String> {
    let attempt = async {
        let mut sender = good_connection(server).await?;
        let answer = post(&mut sender, path, body).await?;
        if succeeded(path, &answer) {
            Ok(())
        } else {
            Err(format!("unexpected answer {answer}"))
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| Err("timed out".to_owned()))
}

/// Makes `REQUESTS` admissions and `REQUESTS` conversions, each on a fresh connection, and as
/// many again on one kept-alive connection; returns (succeeded, failures).
async fn good_client(server: &Server) -> (usize, Vec<String>) {
    let mut ok = 0;
    let mut failures = Vec::new();
    for i in 0..2 * REQUESTS {
        let (path, body) = if i % 2 == 0 {
            admission()
        } else {
            conversion()
        };
        match fresh_request(server, path, &body).await {
            Ok(()) => ok += 1,
            Err(e) => failures.push(format!("fresh {path}: {e}")),
        }
    }
    let kept = tokio::time::timeout(REQUEST_TIMEOUT, good_connection(server))
        .await
        .unwrap_or_else(|_| Err("timed out".to_owned()));
    match kept {
        Ok(mut sender) => {
            for i in 0..2 * REQUESTS {
                let (path, body) = if i % 2 == 0 {
                    admission()
                } else {
                    conversion()
                };
                let answer = tokio::time::timeout(REQUEST_TIMEOUT, post(&mut sender, path, &body))
                    .await
                    .unwrap_or_else(|_| Err("timed out".to_owned()));
                match answer {
                    Ok(answer) if succeeded(path, &answer) => ok += 1,
                    Ok(answer) => failures.push(format!("kept {path}: {answer}")),
                    Err(e) => failures.push(format!("kept {path}: {e}")),
                }
            }
        }
        Err(e) => failures.extend((0..2 * REQUESTS).map(|_| format!("kept connection: {e}"))),
    }
    (ok, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_holding_2000_connections_does_not_starve_another() {
    let _alone = ONE_FLOOD_AT_A_TIME.lock().await;
    ensure_file_limit();
    let server = start().await;
    let flood = Flood::start(&server, &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    flood.in_place().await;
    let (ok, failures) = good_client(&server).await;
    let refused = server.closed("per_peer_limit");
    let evicted = server.closed("per_peer_limit_evicted");
    flood.stop().await;
    eprintln!(
        "one peer, {FLOOD} connections: {ok} of {} requests succeeded; per_peer_limit {refused}, \
         per_peer_limit_evicted {evicted}",
        4 * REQUESTS
    );
    assert!(
        failures.is_empty(),
        "{} requests failed: {failures:?}",
        failures.len()
    );
    assert_eq!(ok, 4 * REQUESTS);
    // The flood was held off by the per-peer limit (its new connections took the place of its
    // own stuck ones, or were refused), not by luck.
    assert!(
        refused + evicted > 0,
        "the per-peer limit did not act on the flood"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_listener_gives_up_idle_connections_for_new_ones() {
    let _alone = ONE_FLOOD_AT_A_TIME.lock().await;
    ensure_file_limit();
    let server = start().await;
    // Ten addresses, 200 connections each: within the per-peer limit, twice the global cap.
    let sources: Vec<IpAddr> = (1..=10)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 1, i)))
        .collect();
    let flood = Flood::start(&server, &sources);
    flood.in_place().await;
    let (ok, failures) = good_client(&server).await;
    let evicted = server.closed("global_limit_evicted_idle");
    flood.stop().await;
    eprintln!(
        "ten peers, {FLOOD} connections: {ok} of {} requests succeeded; global_limit_evicted_idle {evicted}",
        4 * REQUESTS
    );
    assert!(
        failures.is_empty(),
        "{} requests failed: {failures:?}",
        failures.len()
    );
    assert_eq!(ok, 4 * REQUESTS);
    assert!(evicted > 0, "no idle connection was given up");
}

// Hostile runs: floods that reconnect at once, for a fixed time, while a legitimate client (an
// API server) makes admission and conversion requests in a loop from its own runtime.

/// How long each hostile run lasts.
const HOSTILE_RUN: Duration = Duration::from_secs(8);
/// New connections per second the attacker aims for (it reconnects at once when a connection
/// is closed, within this budget).
const ATTACK_RATE: usize = 2000;
/// Connections the attacker tries to hold at once.
const ATTACKERS: usize = 2000;
/// Bound on one request of the legitimate client in a hostile run.
const HOSTILE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two requests of the legitimate client.
const LEGITIMATE_PACE: Duration = Duration::from_millis(20);
/// The share of the legitimate client's requests that must succeed.
const REQUIRED_SUCCESS: f64 = 0.99;
/// Name of the threads of the webhook's own runtime (at most 15 bytes: the kernel's limit), so
/// its CPU time can be told from the attacker's and the client's.
const SERVER_THREAD: &str = "webhook-server";
/// The API server's address in the hostile runs.
const API_SERVER: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Floods are not run at the same time: each one measures what a client gets while one attacker
/// has the machine.
static ONE_FLOOD_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A webhook on its own runtime (two worker threads named [`SERVER_THREAD`]), as in its own
/// process.
struct Isolated {
    addr: SocketAddr,
    ca_pem: String,
    metrics: ConnectionMetrics,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Isolated {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Isolated {
    async fn start() -> Self {
        let (store, ca_pem) = serving_certificate("hostile-ca", HOST);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(SERVER_THREAD)
            .enable_all()
            .build()
            .unwrap();
        let metrics = ConnectionMetrics::default();
        let (bound, address) = tokio::sync::oneshot::channel();
        let served = metrics.clone();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let _ = bound.send(listener.local_addr().unwrap());
            server::serve_tls_with_limits(
                listener,
                server::router(AppState::new(store.clone())),
                server_config(store),
                ConnectionLimits::default(),
                served,
            )
            .await;
        });
        Self {
            addr: address.await.unwrap(),
            ca_pem,
            metrics,
            runtime: Some(runtime),
        }
    }

    fn closed(&self, reason: &'static str) -> u64 {
        self.metrics
            .closed
            .get_or_create(&CloseLabels { reason })
            .get()
    }

    /// Every close reason with a count above 0, for the report.
    fn closes(&self) -> String {
        mcm_webhook::limits::CloseReason::ALL
            .iter()
            .map(|reason| (reason.label(), self.closed(reason.label())))
            .filter(|(_, count)| *count > 0)
            .map(|(label, count)| format!("{label} {count}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// CPU time (user and system, in clock ticks of 1/100 s: the kernel's `USER_HZ`) of this
/// process's threads named [`SERVER_THREAD`]; `None` where `/proc` cannot tell.
fn server_cpu_ticks() -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let path = task.path();
        // A thread may end while it is being read: skip it.
        let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
            continue;
        };
        if comm.trim_end() != SERVER_THREAD {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // The fields after the command's closing parenthesis start at field 3 (state); utime
        // and stime are fields 14 and 15.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        total += fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// An attacker: [`ATTACKERS`] tasks, each opening a connection from its source address,
/// misbehaving on it until the server closes it, and opening the next one at once, all within a
/// budget of [`ATTACK_RATE`] new connections a second.
struct Attack {
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
    started: tokio::time::Instant,
    tasks: Vec<JoinHandle<()>>,
}

impl Attack {
    fn start(
        server: SocketAddr,
        ca_pem: &str,
        sources: &[IpAddr],
        misbehaviours: &[Misbehaviour],
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(AtomicUsize::new(0));
        let budget = Arc::new(tokio::sync::Semaphore::new(0));
        let tls = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca_pem).unwrap()));
        // The budget is topped up every 5 ms; unused budget does not pile up beyond one top-up.
        const TICK: Duration = Duration::from_millis(5);
        let per_tick = ATTACK_RATE * 5 / 1000;
        let refill = budget.clone();
        let mut tasks = vec![tokio::spawn(async move {
            let mut ticker = tokio::time::interval(TICK);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                ticker.tick().await;
                let available = refill.available_permits();
                if available < per_tick {
                    refill.add_permits(per_tick - available);
                }
            }
        })];
        tasks.extend((0..ATTACKERS).map(|i| {
            let source = sources[i % sources.len()];
            let misbehaviour = misbehaviours[i % misbehaviours.len()];
            let (stop, opened, budget, tls) =
                (stop.clone(), opened.clone(), budget.clone(), tls.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match budget.acquire().await {
                        Ok(permit) => permit.forget(),
                        Err(_) => return,
                    }
                    hold_one(source, server, misbehaviour, &tls, &stop, &mut || {
                        opened.fetch_add(1, Ordering::Relaxed);
                    })
                    .await;
                }
            })
        }));
        Self {
            stop,
            opened,
            started: tokio::time::Instant::now(),
            tasks,
        }
    }

    /// Stops the attack; returns the connections it opened per second.
    async fn stop(self) -> f64 {
        let rate =
            self.opened.load(Ordering::Relaxed) as f64 / self.started.elapsed().as_secs_f64();
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.abort();
            let _ = task.await;
        }
        rate
    }
}

/// What the legitimate client got.
#[derive(Debug, Default)]
struct Tally {
    admissions: (usize, usize),
    conversions: (usize, usize),
    /// The first failures, for the report.
    failures: Vec<String>,
}

impl Tally {
    fn record(&mut self, what: &str, path: &str, result: Result<(), String>) {
        let counts = if path == "/convert" {
            &mut self.conversions
        } else {
            &mut self.admissions
        };
        counts.0 += 1;
        match result {
            Ok(()) => counts.1 += 1,
            Err(e) if self.failures.len() < 20 => self.failures.push(format!("{what} {path}: {e}")),
            Err(_) => {}
        }
    }

    fn attempts(&self) -> usize {
        self.admissions.0 + self.conversions.0
    }

    fn succeeded(&self) -> usize {
        self.admissions.1 + self.conversions.1
    }

    fn rate(&self) -> f64 {
        self.succeeded() as f64 / self.attempts().max(1) as f64
    }
}

/// The legitimate client, on its own thread and runtime (as in its own process): for
/// [`HOSTILE_RUN`], admissions and v1beta1 conversions in turn, each on a fresh connection (as
/// when an API server has no idle one) and on one kept-alive connection (opened again when it
/// breaks; the break counts as a failure).
fn legitimate_client(
    source: IpAddr,
    server: SocketAddr,
    ca_pem: String,
) -> std::thread::JoinHandle<Tally> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut tally = Tally::default();
            let mut kept: Option<Sender> = None;
            let deadline = tokio::time::Instant::now() + HOSTILE_RUN;
            let mut step = 0_usize;
            while tokio::time::Instant::now() < deadline {
                let (path, body) = if step.is_multiple_of(2) {
                    admission()
                } else {
                    conversion()
                };
                let fresh = step % 4 < 2;
                let attempt = async {
                    let mut sender = match kept.take() {
                        Some(sender) if !fresh => sender,
                        _ => connection_from(source, server, &ca_pem).await?,
                    };
                    let answer = post(&mut sender, path, &body).await?;
                    if !fresh {
                        kept = Some(sender);
                    }
                    if succeeded(path, &answer) {
                        Ok(())
                    } else {
                        Err(format!("unexpected answer {answer}"))
                    }
                };
                let result = tokio::time::timeout(HOSTILE_REQUEST_TIMEOUT, attempt)
                    .await
                    .unwrap_or_else(|_| Err("timed out".to_owned()));
                tally.record(if fresh { "fresh" } else { "kept" }, path, result);
                step += 1;
                tokio::time::sleep(LEGITIMATE_PACE).await;
            }
            tally
        })
    })
}

/// Runs `attack` against a webhook with the default limits while the legitimate client calls it
/// from `legitimate`; prints and returns what the client got.
async fn hostile_run(
    name: &str,
    attackers: &[IpAddr],
    misbehaviours: &[Misbehaviour],
    legitimate: IpAddr,
) -> (Tally, Isolated) {
    ensure_file_limit();
    let server = Isolated::start().await;
    let attack = Attack::start(server.addr, &server.ca_pem, attackers, misbehaviours);
    // Let the flood fill the listener before the client starts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu_before = server_cpu_ticks();
    let wall = tokio::time::Instant::now();
    let client = legitimate_client(legitimate, server.addr, server.ca_pem.clone());
    let tally = tokio::task::spawn_blocking(move || client.join().unwrap())
        .await
        .unwrap();
    let cpu = server_cpu_ticks()
        .zip(cpu_before)
        .map(|(after, before)| (after - before) as f64 / 100.0 / wall.elapsed().as_secs_f64());
    let rate = attack.stop().await;
    eprintln!(
        "{name}: {} of {} requests succeeded ({:.1} %; admissions {}/{}, conversions {}/{}); \
         attacker opened {rate:.0} connections/s; webhook CPU {}; closed: {}",
        tally.succeeded(),
        tally.attempts(),
        100.0 * tally.rate(),
        tally.admissions.1,
        tally.admissions.0,
        tally.conversions.1,
        tally.conversions.0,
        cpu.map_or("unknown".to_owned(), |share| format!(
            "{:.0} % of a core",
            100.0 * share
        )),
        server.closes(),
    );
    (tally, server)
}

fn assert_served(tally: &Tally) {
    assert!(
        tally.admissions.0 > 0 && tally.conversions.0 > 0,
        "the client made no requests of a kind: {tally:?}"
    );
    assert!(
        tally.rate() >= REQUIRED_SUCCESS,
        "only {} of {} requests succeeded; first failures: {:#?}",
        tally.succeeded(),
        tally.attempts(),
        tally.failures
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_tcp_floods_from_ten_addresses_do_not_starve_the_api_server() {
    let _alone = ONE_FLOOD_AT_A_TIME.lock().await;
    let attackers: Vec<IpAddr> = (2..=11)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)))
        .collect();
    let (tally, _server) = hostile_run(
        "ten addresses, bare TCP",
        &attackers,
        &[Misbehaviour::Silent],
        API_SERVER,
    )
    .await;
    assert_served(&tally);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_the_api_servers_own_address_does_not_lock_it_out() {
    let _alone = ONE_FLOOD_AT_A_TIME.lock().await;
    // Connections that never start TLS or stall in the ClientHello, and one in twenty that
    // completes TLS and then sends nothing.
    let misbehaviours: Vec<Misbehaviour> = (0_u32..20)
        .map(|i| match i {
            0 => Misbehaviour::IdleTls,
            i if i.is_multiple_of(2) => Misbehaviour::Silent,
            _ => Misbehaviour::PartialHello,
        })
        .collect();
    let (tally, _server) =
        hostile_run("shared address", &[API_SERVER], &misbehaviours, API_SERVER).await;
    assert_served(&tally);
}
