//! One client must not take the webhook down (issue 26): while a client holds 2,000 connections
//! (TLS connections left idle, TCP connections that never start TLS, and connections that sent
//! part of a ClientHello and stall), every admission and conversion of another client succeeds.
//!
//! On loopback every address of 127.0.0.0/8 is local, so the clients are told apart by binding
//! their sockets to different source addresses: the flooding client uses 127.0.0.1 (one peer) or
//! ten addresses (a client that gets around the per-peer limit, so the global cap is reached and
//! idle connections must be given up), the well-behaved one 127.0.0.2. Both tests use the
//! default limits, which is what a deployment runs with.
//!
//! The flood keeps its connections: a connection the server closes is opened again after a
//! pause. The well-behaved client's requests are bounded by generous timeouts only (no latency
//! is asserted); each one opens a fresh connection, as an API server does when its idle ones are
//! gone, and one more connection is kept alive across requests.

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
const FDS_NEEDED: u64 = 2 * FLOOD as u64 + 1000;

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
    let tcp = connect_from(GOOD, server.addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(client_config(&server.ca_pem)?))
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
    ensure_file_limit();
    let server = start().await;
    let flood = Flood::start(&server, &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    flood.in_place().await;
    let (ok, failures) = good_client(&server).await;
    let per_peer = server.closed("per_peer_limit");
    flood.stop().await;
    eprintln!(
        "one peer, {FLOOD} connections: {ok} of {} requests succeeded; per_peer_limit {per_peer}",
        4 * REQUESTS
    );
    assert!(
        failures.is_empty(),
        "{} requests failed: {failures:?}",
        failures.len()
    );
    assert_eq!(ok, 4 * REQUESTS);
    // The flood was held off by the per-peer limit, not by luck.
    assert!(
        per_peer > 0,
        "no connection was refused by the per-peer limit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_listener_gives_up_idle_connections_for_new_ones() {
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
