//! Benchmark: admission and conversion over loopback TLS.
//!
//! - Latency: open loop at a sustained rate (default 500 requests/s for 10 s per endpoint);
//!   each latency is measured from the request's scheduled send time, so queueing behind a slow
//!   request counts (no coordinated omission). Endpoints: validate MachineDeployment (CREATE),
//!   mutate MachineDeployment (CREATE, patch returned), convert one object.
//! - Conversion throughput: closed loop, batches of 100 MachineDeployments v1alpha1 → v1beta1
//!   over 4 keep-alive connections for 5 s.
//!
//! Everything runs on a 2-worker tokio runtime (server and client share it).
//! Run: `cargo run --release -p mcm-webhook --example webhook_bench [-- <rate> <seconds>]`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use jiff::Timestamp;
use mcm_webhook::self_managed::{self, Policy};
use mcm_webhook::server::{self, AppState};
use mcm_webhook::tls::{CertStore, server_config};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::sync::Mutex;

type Sender = SendRequest<Full<axum::body::Bytes>>;

const HOST: &str = "mcm-webhook.mcm.svc";

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

fn admission_body(object: &Value) -> Vec<u8> {
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
}

fn conversion_body(count: usize) -> Vec<u8> {
    let objects: Vec<Value> = (0..count)
        .map(|i| machine_deployment(&format!("md-{i}")))
        .collect();
    serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": { "uid": "c", "desiredAPIVersion": "machine.sapcloud.io/v1beta1", "objects": objects },
    }))
    .unwrap()
}

async fn connect(addr: std::net::SocketAddr, ca_pem: &str) -> Sender {
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
    tokio::spawn(connection);
    sender
}

async fn send(sender: &mut Sender, path: &str, body: &[u8]) {
    sender.ready().await.unwrap();
    let request = http::Request::post(path)
        .header("host", HOST)
        .header("content-type", "application/json")
        .body(Full::new(axum::body::Bytes::copy_from_slice(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert!(bytes.len() > 10);
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

/// Open-loop load at `rate` requests/s for `seconds`; returns sorted latencies.
async fn open_loop(
    addr: std::net::SocketAddr,
    ca: &str,
    path: &'static str,
    body: Vec<u8>,
    rate: u32,
    seconds: u32,
) -> Vec<Duration> {
    let connections = 16;
    let (jobs_tx, jobs_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let jobs_rx = Arc::new(Mutex::new(jobs_rx));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Duration>();
    let body = Arc::new(body);
    for _ in 0..connections {
        let mut sender = connect(addr, ca).await;
        let jobs = jobs_rx.clone();
        let done = done_tx.clone();
        let body = body.clone();
        tokio::spawn(async move {
            loop {
                let scheduled = { jobs.lock().await.recv().await };
                let Some(scheduled) = scheduled else { break };
                send(&mut sender, path, &body).await;
                let _ = done.send(scheduled.elapsed());
            }
        });
    }
    drop(done_tx);
    let total = rate * seconds;
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let start = Instant::now();
    for i in 0..total {
        let at = start + period * i;
        tokio::time::sleep_until(at.into()).await;
        jobs_tx.send(at).unwrap();
    }
    drop(jobs_tx);
    let mut latencies = Vec::with_capacity(total as usize);
    while let Some(latency) = done_rx.recv().await {
        latencies.push(latency);
    }
    latencies.sort();
    latencies
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rate: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(500);
    let seconds: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let certs = self_managed::rotate(None, Timestamp::now(), &Policy::default(), "bench-ca", &[HOST.to_owned()]).unwrap();
        let store = Arc::new(CertStore::default());
        store.set_pem(certs.tls_cert.as_bytes(), certs.tls_key.as_bytes()).unwrap();
        let state = AppState::new(store.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(server::serve_tls(listener, server::router(state), server_config(store)));

        println!("webhook_bench: loopback TLS 1.3, 2 tokio workers, open loop {rate} req/s for {seconds} s per endpoint");
        let mut md = machine_deployment("md-bench");
        let endpoints: [(&str, &'static str, Vec<u8>); 3] = [
            ("validate MachineDeployment", "/validate-machine-sapcloud-io-machinedeployment", admission_body(&md)),
            ("mutate MachineDeployment", "/mutate-machine-sapcloud-io-machinedeployment", {
                md["spec"].as_object_mut().unwrap().remove("strategy");
                admission_body(&md)
            }),
            ("convert 1 object", "/convert", conversion_body(1)),
        ];
        for (name, path, body) in endpoints {
            // Warm-up (connections, caches).
            let _ = open_loop(addr, &certs.ca_cert, path, body.clone(), rate, 1).await;
            let latencies = open_loop(addr, &certs.ca_cert, path, body, rate, seconds).await;
            println!(
                "{name:<28} n={:<6} p50={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms",
                latencies.len(),
                percentile(&latencies, 0.50).as_secs_f64() * 1e3,
                percentile(&latencies, 0.99).as_secs_f64() * 1e3,
                latencies.last().unwrap().as_secs_f64() * 1e3,
            );
        }

        // Conversion throughput, batches of 100.
        let body = Arc::new(conversion_body(100));
        let deadline = Instant::now() + Duration::from_secs(5);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let mut sender = connect(addr, &certs.ca_cert).await;
            let body = body.clone();
            tasks.push(tokio::spawn(async move {
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
        println!(
            "convert batches of 100       {batches} batches in {elapsed:.2} s = {:.0} objects/s ({:.2} ms per batch)",
            (batches * 100) as f64 / elapsed,
            elapsed * 1e3 / batches as f64 * 4.0,
        );
    });
}
