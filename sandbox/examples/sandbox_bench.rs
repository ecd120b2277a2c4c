//! Sandbox benchmark: creates 10,000 Machine-sized objects (about 2 KB of JSON each) while five
//! watches are open, then reads them back, and prints creates/s, gets/s, watch fan-out latency
//! (time from a create's response to each watcher seeing the ADDED event) and process RSS.
//!
//! Run: `cargo run --release -p mcm-sandbox --example sandbox_bench [-- --objects N --rounds R]`.
//! With `--authz` every round runs twice, with authorization off (the admin, as before) and on
//! (a ServiceAccount token bound by a Role among 100 other bindings), and the ratios are printed.
//! Figures are medians over the rounds; each round uses a fresh sandbox. Compare with the
//! targets: >= 1,000 creates/s, >= 2,000 gets/s, fan-out p99 < 50 ms, < 300 MiB RSS.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use mcm_sandbox::{Sandbox, SandboxConfig};
use serde_json::json;

const NAMESPACE: &str = "bench";
const WATCHERS: usize = 5;
const CLIENTS: usize = 8;

struct Args {
    objects: usize,
    rounds: usize,
    authz: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        objects: 10_000,
        rounds: 3,
        authz: false,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let value = argv.get(i + 1).and_then(|v| v.parse().ok());
        if argv[i] == "--authz" {
            args.authz = true;
            i += 1;
            continue;
        }
        match (argv[i].as_str(), value) {
            ("--objects", Some(v)) => args.objects = v,
            ("--rounds", Some(v)) => args.rounds = v,
            (other, _) => eprintln!("ignoring argument {other}"),
        }
        i += 2;
    }
    args
}

/// The machines CRD: the generated chart CRD when present, else a minimal stand-in with the
/// same names (the benchmark then says so).
fn machines_crd() -> (CustomResourceDefinition, &'static str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/machine-controller-manager/files/crds/v1alpha1/machine.sapcloud.io_machines.yaml");
    if let Ok(text) = std::fs::read_to_string(&path)
        && let Ok(crd) = serde_saphyr::from_str::<CustomResourceDefinition>(&text)
    {
        return (crd, "chart machines CRD");
    }
    let crd = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "machines.machine.sapcloud.io"},
        "spec": {
            "group": "machine.sapcloud.io",
            "names": {"kind": "Machine", "listKind": "MachineList", "plural": "machines", "singular": "machine", "shortNames": ["mc"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    }))
    .expect("inline machines CRD");
    (
        crd,
        "inline stand-in machines CRD (chart CRD not generated yet)",
    )
}

/// A Machine of roughly 2 KB in JSON, shaped like the ones the controllers create.
fn machine(resource: &ApiResource, i: usize) -> DynamicObject {
    let name = format!("shoot--bench--worker-z1-7d9f8c6b5-{i:05}");
    let mut node_labels = serde_json::Map::new();
    for (k, v) in [
        ("node.kubernetes.io/instance-type", "m5.large"),
        ("topology.kubernetes.io/region", "eu-central-1"),
        ("topology.kubernetes.io/zone", "eu-central-1a"),
        ("worker.gardener.cloud/pool", "worker-z1"),
        ("worker.garden.sapcloud.io/group", "worker-z1"),
        ("networking.gardener.cloud/node-local-dns-enabled", "true"),
        ("node.kubernetes.io/role", "node"),
        ("worker.gardener.cloud/system-components", "true"),
        ("worker.gardener.cloud/cri-name", "containerd"),
        ("worker.gardener.cloud/kubernetes-version", "1.33.2"),
    ] {
        node_labels.insert(k.to_string(), json!(v));
    }
    let body = json!({
        "apiVersion": resource.api_version,
        "kind": "Machine",
        "metadata": {
            "name": name,
            "labels": {
                "name": "shoot--bench--worker-z1",
                "machine-template-hash": "7d9f8c6b5",
                "worker.gardener.cloud/pool": "worker-z1",
                "node": format!("ip-10-250-{}-{}.eu-central-1.compute.internal", i / 250, i % 250),
            },
            "annotations": {
                "machinepriority.machine.sapcloud.io": "3",
                // Brings the object to about 2 KB, like a Machine with its usual annotations.
                "bench.machine.sapcloud.io/padding": "p".repeat(440),
                "node.machine.sapcloud.io/last-applied-anno-labels-taints":
                    "{\"metadata\":{\"creationTimestamp\":null,\"labels\":{\"worker.gardener.cloud/pool\":\"worker-z1\"}},\"spec\":{}}"
            },
            "finalizers": ["machine.sapcloud.io/machine-controller-manager"]
        },
        "spec": {
            "class": {"kind": "MachineClass", "name": "shoot--bench--worker-z1-z1-5a9c2"},
            "providerID": format!("aws:///eu-central-1/i-0{i:016x}"),
            "nodeTemplate": {
                "metadata": {"labels": node_labels},
                "spec": {"taints": [
                    {"key": "node.gardener.cloud/critical-components-not-ready", "effect": "NoSchedule"},
                    {"key": "dedicated", "value": "bench", "effect": "NoExecute"}
                ]}
            },
            "creationTimeout": "20m0s",
            "drainTimeout": "2h0m0s",
            "healthTimeout": "10m0s",
            "maxEvictRetries": 10,
            "nodeConditions": "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable"
        }
    });
    serde_json::from_value(body).expect("machine literal")
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    percentile(&values, 0.5)
}

struct Round {
    creates_per_s: f64,
    gets_per_s: f64,
    fanout_p50_ms: f64,
    fanout_p99_ms: f64,
    rss_mib: f64,
    events_missing: usize,
    object_bytes: usize,
}

/// With authorization on: a ServiceAccount allowed to work on machines in the bench namespace by
/// a Role, among 100 unrelated bindings (so RBAC evaluation walks a cluster-sized policy), and a
/// client with its token. Without: the admin client.
async fn workload_client(sb: &Sandbox, authz: bool) -> kube::Client {
    if !authz {
        return sb.client();
    }
    let admin = sb.client();
    let post = |path: String, body: serde_json::Value| {
        let admin = admin.clone();
        async move {
            let req = http::Request::post(path)
                .header("content-type", "application/json")
                .body(body.to_string().into_bytes())
                .expect("request");
            admin
                .request::<serde_json::Value>(req)
                .await
                .expect("setup request")
        }
    };
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    for i in 0..100 {
        post(format!("{rbac}/clusterrolebindings"), json!({"metadata": {"name": format!("other-{i}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": format!("someone-{i}")}]})).await;
    }
    post(
        format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts"),
        json!({"metadata": {"name": "bench"}}),
    )
    .await;
    post(format!("{rbac}/namespaces/{NAMESPACE}/roles"), json!({"metadata": {"name": "bench"},
        "rules": [{"apiGroups": ["machine.sapcloud.io"], "resources": ["machines"], "verbs": ["*"]}]})).await;
    post(
        format!("{rbac}/namespaces/{NAMESPACE}/rolebindings"),
        json!({"metadata": {"name": "bench"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bench"},
        "subjects": [{"kind": "ServiceAccount", "name": "bench", "namespace": NAMESPACE}]}),
    )
    .await;
    let tr = post(
        format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/bench/token"),
        json!({"spec": {}}),
    )
    .await;
    let token = tr["status"]["token"].as_str().expect("token");
    Sandbox::client_from_kubeconfig(&sb.kubeconfig_for_token("bench", token))
        .await
        .expect("token client")
}

async fn round(objects: usize, crd_source: &mut &'static str, authz: bool) -> Round {
    let sb = Sandbox::start(SandboxConfig {
        authorization: authz,
        ..Default::default()
    })
    .await
    .expect("start sandbox");
    let client = sb.client();
    let (crd, source) = machines_crd();
    *crd_source = source;
    let crd_name = crd.metadata.name.clone().expect("crd name");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create machines CRD");
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .expect("storage version")
        .name
        .clone();
    let resource = ApiResource {
        group: crd.spec.group.clone(),
        version: version.clone(),
        api_version: format!("{}/{}", crd.spec.group, version),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("ns"),
        )
        .await
        .expect("create namespace");
    let client = workload_client(&sb, authz).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource);
    let start_rv = loop {
        match api.list(&ListParams::default().limit(1)).await {
            Ok(list) => break list.metadata.resource_version.unwrap_or_default(),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let _ = crd_name;
    let object_bytes = serde_json::to_vec(&machine(&resource, 0))
        .expect("json")
        .len();

    // Watchers record when they see each ADDED event.
    let seen: Arc<Vec<Mutex<HashMap<String, Instant>>>> = Arc::new(
        (0..WATCHERS)
            .map(|_| Mutex::new(HashMap::with_capacity(objects)))
            .collect(),
    );
    let mut watcher_tasks = Vec::new();
    for w in 0..WATCHERS {
        let api = api.clone();
        let seen = seen.clone();
        let rv = start_rv.clone();
        watcher_tasks.push(tokio::spawn(async move {
            let mut stream = api
                .watch(&WatchParams::default().timeout(3600), &rv)
                .await
                .expect("open watch")
                .boxed();
            let mut count = 0;
            while let Some(Ok(event)) = stream.next().await {
                if let WatchEvent::Added(o) = event {
                    let now = Instant::now();
                    seen[w]
                        .lock()
                        .expect("lock")
                        .insert(o.metadata.name.unwrap_or_default(), now);
                    count += 1;
                    if count == objects {
                        break;
                    }
                }
            }
        }));
    }

    // Creates from several concurrent clients.
    let created: Arc<Mutex<HashMap<String, Instant>>> =
        Arc::new(Mutex::new(HashMap::with_capacity(objects)));
    let started = Instant::now();
    let mut creators = Vec::new();
    for c in 0..CLIENTS {
        let api = api.clone();
        let resource = resource.clone();
        let created = created.clone();
        creators.push(tokio::spawn(async move {
            let mut i = c;
            while i < objects {
                let obj = machine(&resource, i);
                let name = obj.metadata.name.clone().unwrap_or_default();
                api.create(&PostParams::default(), &obj)
                    .await
                    .expect("create machine");
                created.lock().expect("lock").insert(name, Instant::now());
                i += CLIENTS;
            }
        }));
    }
    for c in creators {
        c.await.expect("creator");
    }
    let create_secs = started.elapsed().as_secs_f64();
    let wait_deadline = Instant::now() + Duration::from_secs(60);
    for task in watcher_tasks {
        let remaining = wait_deadline.saturating_duration_since(Instant::now());
        let _ = tokio::time::timeout(remaining, task).await;
    }
    let rss = rss_mib();

    // Gets from several concurrent clients.
    let started = Instant::now();
    let mut getters = Vec::new();
    for c in 0..CLIENTS {
        let api = api.clone();
        getters.push(tokio::spawn(async move {
            let mut i = c;
            while i < objects {
                api.get(&format!("shoot--bench--worker-z1-7d9f8c6b5-{i:05}"))
                    .await
                    .expect("get machine");
                i += CLIENTS;
            }
        }));
    }
    for g in getters {
        g.await.expect("getter");
    }
    let get_secs = started.elapsed().as_secs_f64();

    let (latencies, missing) = {
        let created = created.lock().expect("lock");
        let mut latencies = Vec::with_capacity(objects * WATCHERS);
        let mut missing = 0;
        for w in seen.iter() {
            let w = w.lock().expect("lock");
            for (name, at) in created.iter() {
                match w.get(name) {
                    // The event may arrive before the create response: count that as zero.
                    Some(seen_at) => latencies
                        .push(seen_at.saturating_duration_since(*at).as_secs_f64() * 1000.0),
                    None => missing += 1,
                }
            }
        }
        (latencies, missing)
    };
    let mut latencies = latencies;
    latencies.sort_by(|a, b| a.total_cmp(b));
    sb.shutdown().await;
    Round {
        creates_per_s: objects as f64 / create_secs,
        gets_per_s: objects as f64 / get_secs,
        fanout_p50_ms: percentile(&latencies, 0.5),
        fanout_p99_ms: percentile(&latencies, 0.99),
        rss_mib: rss,
        events_missing: missing,
        object_bytes,
    }
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = parse_args();
    let mut rounds = Vec::new();
    let mut crd_source = "";
    println!(
        "sandbox_bench: {} objects, {WATCHERS} watches, {CLIENTS} concurrent clients, {} rounds",
        args.objects, args.rounds
    );
    if args.authz {
        compare_authz(&args).await;
        return;
    }
    for r in 0..args.rounds {
        let result = round(args.objects, &mut crd_source, false).await;
        println!(
            "round {}: creates/s {:.0}, gets/s {:.0}, fan-out p50 {:.2} ms p99 {:.2} ms, RSS {:.1} MiB, object {} B, missing events {}",
            r + 1,
            result.creates_per_s,
            result.gets_per_s,
            result.fanout_p50_ms,
            result.fanout_p99_ms,
            result.rss_mib,
            result.object_bytes,
            result.events_missing
        );
        rounds.push(result);
    }
    println!("CRD: {crd_source}");
    let first_rss = rounds.first().map(|r| r.rss_mib).unwrap_or(f64::NAN);
    let creates = median(rounds.iter().map(|r| r.creates_per_s).collect());
    let gets = median(rounds.iter().map(|r| r.gets_per_s).collect());
    let p50 = median(rounds.iter().map(|r| r.fanout_p50_ms).collect());
    let p99 = median(rounds.iter().map(|r| r.fanout_p99_ms).collect());
    println!(
        "median creates/s        {creates:>10.0}   (target >= 1000, ratio {:.2})",
        creates / 1000.0
    );
    println!(
        "median gets/s           {gets:>10.0}   (target >= 2000, ratio {:.2})",
        gets / 2000.0
    );
    println!("median fan-out p50 ms   {p50:>10.2}");
    println!(
        "median fan-out p99 ms   {p99:>10.2}   (target < 50, ratio {:.2})",
        p99 / 50.0
    );
    println!(
        "RSS after loading (round 1, whole process incl. clients and watchers) {first_rss:.1} MiB   (target < 300, ratio {:.2})",
        first_rss / 300.0
    );
}

/// Rounds alternating authorization off and on; medians of each and their ratio.
async fn compare_authz(args: &Args) {
    let mut crd_source = "";
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for r in 0..args.rounds {
        for (authz, into) in [(false, &mut off), (true, &mut on)] {
            let result = round(args.objects, &mut crd_source, authz).await;
            println!(
                "round {} authorization {}: creates/s {:.0}, gets/s {:.0}, missing events {}",
                r + 1,
                if authz { "on " } else { "off" },
                result.creates_per_s,
                result.gets_per_s,
                result.events_missing
            );
            into.push(result);
        }
    }
    let med = |rs: &[Round], f: fn(&Round) -> f64| median(rs.iter().map(f).collect());
    for (what, f) in [
        (
            "creates/s",
            (|r: &Round| r.creates_per_s) as fn(&Round) -> f64,
        ),
        ("gets/s", |r: &Round| r.gets_per_s),
    ] {
        let (a, b) = (med(&off, f), med(&on, f));
        println!(
            "median {what:<10} authorization off {a:>8.0}   on {b:>8.0}   on/off {:.2}",
            b / a
        );
    }
}
