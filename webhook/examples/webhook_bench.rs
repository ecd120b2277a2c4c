//! Benchmark: admission and conversion webhooks over loopback TLS.
//!
//! Method:
//! - **Server** as in the `machine-webhook` binary: a multi-thread tokio runtime with the default
//!   worker count (one per core, as `#[tokio::main]` builds it), the same router, rustls server
//!   configuration (ring, TLS 1.3/1.2, ALPN `http/1.1`) and accept loop, and a `tracing`
//!   subscriber at `info` (written to a sink, so filtering costs what it costs in production
//!   without the terminal in the measurement).
//! - **Load generator** outside the server runtime, as a kube-apiserver would be: a schedule
//!   thread that sleeps with `std::thread::sleep` (nanosecond timer, not tokio's 1 ms wheel) to
//!   each request's scheduled instant, and a client thread with a current-thread tokio runtime
//!   that owns 16 keep-alive HTTP/1.1 TLS connections and sends each scheduled request on the
//!   next free connection. Both threads compete with the server for the same cores (the
//!   machine's, usually 2), as another process would.
//! - **Open loop without coordinated omission**: requests are scheduled at a fixed rate
//!   (default 500/s) whatever the server does, and every latency is measured from the request's
//!   *scheduled* instant to the end of its response body, so time spent waiting for a free
//!   connection, for a late schedule thread or behind a slow request counts.
//! - Endpoints: validate MachineDeployment (CREATE, allowed), mutate MachineDeployment (CREATE,
//!   patch returned), convert one MachineDeployment v1alpha1 → v1beta1. Each answer's shape is
//!   checked once before measuring. Per endpoint: a 1 s warm-up, then 3 runs of `<seconds>`
//!   (default 10); each run prints p50/p90/p99/max, then the median of the three p99s (and of
//!   the p50s) is printed.
//! - **Conversion throughput**: closed loop, batches of 100 MachineDeployments v1alpha1 →
//!   v1beta1 over 4 keep-alive connections for 5 s; 3 runs, median printed.
//!
//! Run: `cargo run --release -p mcm-webhook --example webhook_bench [-- <rate> <seconds>]`.
//! The machine load (`uptime`) matters: quote it with the figures.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use jiff::Timestamp;
use mcm_webhook::self_managed::{self, Policy};
use mcm_webhook::server::{self, AppState};
use mcm_webhook::tls::{CertStore, server_config};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

type Sender = SendRequest<Full<Bytes>>;

const HOST: &str = "mcm-webhook.mcm.svc";
const CONNECTIONS: usize = 16;
const RUNS: usize = 3;

fn machine_deployment(name: &str) -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": { "name": name, "namespace": "shoot--bench", "uid": "u", "resourceVersion": "1",
            "labels": { "worker.gardener.cloud/pool": "a" }, "annotations": { "deployment.kubernetes.io/revision": "3" } },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "name": name } },
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 0 } },
            "minReadySeconds": 500,
            "template": {
                "metadata": { "labels": { "name": name } },
                "spec": {
                    "class": { "kind": "MachineClass", "name": "class-a" },
                    "drainTimeout": "2h0m0s", "healthTimeout": "10m0s", "creationTimeout": "20m0s", "maxEvictRetries": 10,
                    "nodeTemplate": { "metadata": { "labels": { "pool": "a" } }, "spec": { "taints": [{ "key": "dedicated", "value": "a", "effect": "NoSchedule" }] } },
                },
            },
        },
        "status": { "replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "availableReplicas": 3 },
    })
}

fn admission_body(object: &Value) -> Bytes {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": { "group": "machine.sapcloud.io", "version": "v1alpha1", "kind": "MachineDeployment" },
            "resource": { "group": "machine.sapcloud.io", "version": "v1alpha1", "resource": "machinedeployments" },
            "operation": "CREATE", "userInfo": { "username": "bench" }, "object": object,
        },
    }))
    .unwrap()
    .into()
}

fn conversion_body(count: usize) -> Bytes {
    let objects: Vec<Value> = (0..count)
        .map(|i| machine_deployment(&format!("md-{i}")))
        .collect();
    serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": { "uid": "c", "desiredAPIVersion": "machine.sapcloud.io/v1beta1", "objects": objects },
    }))
    .unwrap()
    .into()
}

async fn connect(addr: SocketAddr, ca_pem: &str) -> Sender {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .unwrap();
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::task::spawn_local(connection);
    sender
}

async fn send(sender: &mut Sender, path: &str, body: &Bytes) -> Bytes {
    sender.ready().await.unwrap();
    let request = http::Request::post(path)
        .header("host", HOST)
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    response.into_body().collect().await.unwrap().to_bytes()
}

/// The client side: a current-thread runtime on its own OS thread. `work` runs inside a
/// `LocalSet`, so connections and their tasks stay on this thread.
fn on_client_thread<T, F>(work: impl FnOnce() -> F + Send + 'static) -> T
where
    T: Send + 'static,
    F: Future<Output = T> + 'static,
{
    std::thread::Builder::new()
        .name("bench-client".to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, work())
        })
        .unwrap()
        .join()
        .unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Open-loop load at `rate` requests/s for `seconds`; returns sorted latencies measured from
/// each request's scheduled instant.
fn open_loop(
    addr: SocketAddr,
    ca: Arc<str>,
    path: &'static str,
    body: Bytes,
    rate: u32,
    seconds: u32,
) -> Vec<Duration> {
    on_client_thread(move || async move {
        let (jobs_tx, jobs_rx) = jobs_channel();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Duration>();
        for _ in 0..CONNECTIONS {
            let mut sender = connect(addr, &ca).await;
            let jobs = jobs_rx.clone();
            let done = done_tx.clone();
            let body = body.clone();
            tokio::task::spawn_local(async move {
                loop {
                    // The next scheduled request goes to whichever connection is free first.
                    let scheduled = { jobs.lock().await.recv().await };
                    let Some(scheduled) = scheduled else { break };
                    send(&mut sender, path, &body).await;
                    let _ = done.send(scheduled.elapsed());
                }
            });
        }
        drop(done_tx);
        // The schedule runs on its own OS thread with a precise sleep, independent of the
        // client runtime's progress (open loop).
        let total = rate * seconds;
        let period = Duration::from_secs_f64(1.0 / f64::from(rate));
        let scheduler = std::thread::spawn(move || {
            let start = Instant::now() + Duration::from_millis(5);
            for i in 0..total {
                let at = start + period * i;
                if let Some(wait) = at.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                jobs_tx.send(at).unwrap();
            }
        });
        let mut latencies = Vec::with_capacity(total as usize);
        while let Some(latency) = done_rx.recv().await {
            latencies.push(latency);
        }
        scheduler.join().unwrap();
        latencies.sort();
        latencies
    })
}

type Jobs = Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Instant>>>;

fn jobs_channel() -> (tokio::sync::mpsc::UnboundedSender<Instant>, Jobs) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (tx, Arc::new(tokio::sync::Mutex::new(rx)))
}

/// Sends `body` once and checks the answer is the one the endpoint is meant to give.
fn check_answer(addr: SocketAddr, ca: Arc<str>, path: &'static str, body: Bytes) {
    let answer = on_client_thread(move || async move {
        let mut sender = connect(addr, &ca).await;
        send(&mut sender, path, &body).await
    });
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    if path == "/convert" {
        let response = &answer["response"];
        assert_eq!(response["result"]["status"], "Success", "{answer}");
        assert!(response["convertedObjects"][0]["apiVersion"] == "machine.sapcloud.io/v1beta1");
    } else {
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
        let patched = answer["response"].get("patch").is_some();
        assert_eq!(patched, path.starts_with("/mutate"), "{answer}");
    }
}

/// Closed loop: batches of 100 objects over 4 connections for 5 s; objects/s.
fn conversion_throughput(addr: SocketAddr, ca: Arc<str>, body: Bytes) -> (f64, f64) {
    on_client_thread(move || async move {
        let mut senders = Vec::new();
        for _ in 0..4 {
            senders.push(connect(addr, &ca).await);
        }
        let started = Instant::now();
        let deadline = started + Duration::from_secs(5);
        let mut tasks = Vec::new();
        for mut sender in senders {
            let body = body.clone();
            tasks.push(tokio::task::spawn_local(async move {
                let mut batches = 0u64;
                while Instant::now() < deadline {
                    send(&mut sender, "/convert", &body).await;
                    batches += 1;
                }
                batches
            }));
        }
        let mut batches = 0;
        for task in tasks {
            batches += task.await.unwrap();
        }
        let elapsed = started.elapsed().as_secs_f64();
        (
            (batches * 100) as f64 / elapsed,
            elapsed * 1e3 / batches as f64 * 4.0,
        )
    })
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // As the binary: info level, text format (to a sink: the bench measures the filter, not a
    // terminal).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rate: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(500);
    let seconds: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10);

    // The server runtime exactly as `#[tokio::main]` builds it for the binary.
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let workers = server_runtime.metrics().num_workers();
    let certs = self_managed::rotate(
        None,
        Timestamp::now(),
        &Policy::default(),
        "bench-ca",
        &[HOST.to_owned()],
    )
    .unwrap();
    let store = Arc::new(CertStore::default());
    store
        .set_pem(certs.tls_cert.as_bytes(), certs.tls_key.as_bytes())
        .unwrap();
    let state = AppState::new(store.clone());
    let listener = server_runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    server_runtime.spawn(server::serve_tls(
        listener,
        server::router(state),
        server_config(store),
    ));
    let ca: Arc<str> = certs.ca_cert.into();

    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "webhook_bench: loopback TLS, server runtime {workers} workers on {cores} cores, client on its own thread; \
         open loop {rate} req/s, {RUNS} runs of {seconds} s per endpoint"
    );
    let mut md = machine_deployment("md-bench");
    let validate_body = admission_body(&md);
    md["spec"].as_object_mut().unwrap().remove("strategy");
    let mutate_body = admission_body(&md);
    let endpoints: [(&str, &'static str, Bytes); 3] = [
        (
            "validate MachineDeployment",
            "/validate-machine-sapcloud-io-machinedeployment",
            validate_body,
        ),
        (
            "mutate MachineDeployment",
            "/mutate-machine-sapcloud-io-machinedeployment",
            mutate_body,
        ),
        ("convert 1 object", "/convert", conversion_body(1)),
    ];
    let mut summary = Vec::new();
    for (name, path, body) in endpoints {
        check_answer(addr, ca.clone(), path, body.clone());
        // Warm-up (connections, allocator, caches).
        let _ = open_loop(addr, ca.clone(), path, body.clone(), rate, 1);
        let mut p50s = Vec::new();
        let mut p99s = Vec::new();
        for run in 1..=RUNS {
            let latencies = open_loop(addr, ca.clone(), path, body.clone(), rate, seconds);
            let (p50, p90, p99) = (
                percentile(&latencies, 0.50),
                percentile(&latencies, 0.90),
                percentile(&latencies, 0.99),
            );
            println!(
                "{name:<28} run {run}  n={:<6} p50={:>7.3} ms  p90={:>7.3} ms  p99={:>7.3} ms  max={:>8.3} ms",
                latencies.len(),
                ms(p50),
                ms(p90),
                ms(p99),
                ms(*latencies.last().unwrap()),
            );
            p50s.push(ms(p50));
            p99s.push(ms(p99));
        }
        summary.push((name, median(p50s), median(p99s)));
    }

    let body = conversion_body(100);
    check_answer(addr, ca.clone(), "/convert", body.clone());
    let mut rates = Vec::new();
    for run in 1..=RUNS {
        let (objects_per_second, ms_per_batch) =
            conversion_throughput(addr, ca.clone(), body.clone());
        println!(
            "convert batches of 100       run {run}  {objects_per_second:.0} objects/s ({ms_per_batch:.2} ms per batch per connection)"
        );
        rates.push(objects_per_second);
    }

    println!("--- medians of {RUNS} runs ---");
    for (name, p50, p99) in summary {
        println!("{name:<28} p50={p50:>7.3} ms  p99={p99:>7.3} ms (target p99 < 2 ms)");
    }
    println!(
        "convert batches of 100       {:.0} objects/s (target >= 20000)",
        median(rates)
    );
}
