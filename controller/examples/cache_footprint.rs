//! Bytes per machine of what the manager keeps for each machine (docs/performance.md#memory-per-machine):
//! the Machine cache, the Node cache, the indexes over them, the Machine shell's overlay of its
//! own writes (per entry, as kept now and whole as it was kept before), and the snapshot a scrape
//! of the per-machine series takes. Each is built for N copies of a Running Machine and its Node
//! as the benchmark's sandbox stores them (written by a benchmark run with `BENCH_DUMP_OBJECTS`),
//! in this process with the manager's allocator, and measured as the growth of the process's RSS;
//! it prints the median of three processes at each N, and asserts nothing.
//!
//! ```text
//! BENCH_DUMP_OBJECTS=/tmp/bench-objects BENCH_MACHINES=100 make bench
//! MIMALLOC_PURGE_DELAY=0 cargo run --release -p mcm-controller --example cache_footprint -- \
//!     --objects /tmp/bench-objects [--machines 100,1000,5000] [--runs 3]
//! ```
//!
//! The copies differ in their names, uids, resourceVersions, provider IDs and node names, with the
//! lengths of the originals; a real fleet's objects differ in the same strings.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use mcm_api::v1alpha1::Machine;
use mcm_controller::platform::index::Index;
use mcm_controller::platform::informer::Informer;
use mcm_controller::platform::metrics::MachineSample;
use mcm_controller::platform::node_cache;
use mcm_controller::platform::overlay::Overlay;
use mcm_decisions::machine::node_sync::machine_name_label;

/// As the manager: mimalloc (its RSS, not the heap's bytes, is what the budget is about).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The Machine and the Node copied, as JSON.
struct Objects {
    machine: String,
    node: String,
}

impl Objects {
    fn read() -> Self {
        let dir = std::path::PathBuf::from(
            arg("--objects").unwrap_or_else(|| "/tmp/bench-objects".into()),
        );
        let read = |file: &str| {
            std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (write it with BENCH_DUMP_OBJECTS)",
                    dir.join(file).display()
                )
            })
        };
        Self {
            machine: read("machine.json"),
            node: read("node.json"),
        }
    }
}

/// What is measured, in the order it is built (each part stays alive while the next is built).
const PARTS: [&str; 7] = [
    "Machine cache",
    "machines-by-node index",
    "Node cache",
    "Node indexes (by name, by machine-name label)",
    "overlay entry, whole answer (as kept before)",
    "overlay entry, as kept now",
    "scrape snapshot of the machine series",
];

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `original` with its last `digits.len()` characters replaced by `digits` (same length).
fn numbered(original: &str, i: usize) -> String {
    let digits = format!("{i:05}");
    let keep = original.len().saturating_sub(digits.len());
    format!("{}{digits}", &original[..keep])
}

fn machine(objects: &Objects, i: usize) -> Machine {
    let mut machine: Machine = serde_json::from_str(&objects.machine).unwrap();
    let meta = &mut machine.metadata;
    meta.name = meta.name.as_deref().map(|n| numbered(n, i));
    meta.uid = meta.uid.as_deref().map(|u| numbered(u, i));
    meta.resource_version = Some(format!("{}", 100_000 + i));
    if let Some(node) = meta.labels.as_mut().and_then(|l| l.get_mut("node")) {
        *node = numbered(node, i);
    }
    machine.spec.provider_id = machine.spec.provider_id.as_deref().map(|p| numbered(p, i));
    machine
}

fn node(objects: &Objects, i: usize) -> Node {
    let mut node: Node = serde_json::from_str(&objects.node).unwrap();
    let meta = &mut node.metadata;
    meta.name = meta.name.as_deref().map(|n| numbered(n, i));
    meta.uid = meta.uid.as_deref().map(|u| numbered(u, i));
    meta.resource_version = Some(format!("{}", 100_000 + i));
    if let Some(labels) = meta.labels.as_mut() {
        for value in labels.values_mut() {
            if value.len() >= 5 {
                *value = numbered(value, i);
            }
        }
    }
    if let Some(spec) = node.spec.as_mut() {
        spec.provider_id = spec.provider_id.as_deref().map(|p| numbered(p, i));
    }
    node
}

fn own_name(node: &Node) -> Option<&str> {
    node.metadata.name.as_deref()
}

/// One measurement in this process: the RSS growth of each part, in KiB.
fn child(n: usize) {
    let objects = Objects::read();
    let machine = |i| machine(&objects, i);
    let node = |i| node(&objects, i);
    let mut grew = Vec::new();
    let mut last = rss_kib();
    let mut step = |grew: &mut Vec<u64>| {
        let now = rss_kib();
        grew.push(now.saturating_sub(last));
        last = now;
    };
    let machines = Informer::<Machine>::new("machines");
    for i in 0..n {
        machines.apply(machine(i));
    }
    step(&mut grew);
    let by_node = Index::subscribe(&machines, Machine::node_name);
    step(&mut grew);
    let nodes = Informer::pruning("nodes", node_cache::prune);
    for i in 0..n {
        nodes.apply(node(i));
    }
    step(&mut grew);
    let node_names = Index::subscribe(&nodes, own_name);
    let by_label = Index::subscribe(&nodes, machine_name_label);
    step(&mut grew);
    let whole: HashMap<String, (Arc<Machine>, Instant)> = (0..n)
        .map(|i| {
            let m = machine(i);
            (
                m.metadata.name.clone().unwrap(),
                (Arc::new(m), Instant::now()),
            )
        })
        .collect();
    step(&mut grew);
    let written = Overlay::default();
    for i in 0..n {
        written.remember(machine(i), None);
    }
    step(&mut grew);
    let samples: Vec<MachineSample> = machines
        .list()
        .iter()
        .map(|m| MachineSample::from_machine(m))
        .collect();
    step(&mut grew);
    // The copies are distinct objects, not one name overwritten N times.
    assert_eq!((machines.len(), nodes.len()), (n, n));
    drop((
        by_node, node_names, by_label, whole, written, samples, nodes,
    ));
    println!(
        "{}",
        grew.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    if let Some(n) = arg("--child") {
        child(n.parse().unwrap());
        return;
    }
    let sizes: Vec<usize> = arg("--machines")
        .unwrap_or_else(|| "100,1000,5000".into())
        .split(',')
        .map(|n| n.trim().parse().unwrap())
        .collect();
    let runs: usize = arg("--runs").map_or(3, |r| r.parse().unwrap());
    let objects = Objects::read();
    let me = std::env::current_exe().unwrap();
    // Bytes per machine, by part and size: the median over the runs.
    let mut table: Vec<Vec<f64>> = vec![Vec::new(); PARTS.len()];
    for &n in &sizes {
        let mut per_part: Vec<Vec<f64>> = vec![Vec::new(); PARTS.len()];
        for _ in 0..runs {
            let out = Command::new(&me)
                .args(std::env::args().skip(1))
                .args(["--child", &n.to_string()])
                .output()
                .unwrap();
            let line = String::from_utf8_lossy(&out.stdout);
            for (part, kib) in line.split_whitespace().enumerate() {
                let kib: f64 = kib.parse().unwrap();
                per_part[part].push(kib * 1024.0 / n as f64);
            }
        }
        for (part, values) in per_part.into_iter().enumerate() {
            table[part].push(median(values));
        }
    }
    println!(
        "bytes per machine (RSS growth / N, median of {runs} processes; the Machine {} B and the Node {} B as JSON):",
        objects.machine.len(),
        objects.node.len()
    );
    print!("{:<48}", "part");
    for n in &sizes {
        print!(" {:>10}", format!("N = {n}"));
    }
    println!();
    for (part, row) in PARTS.iter().zip(&table) {
        print!("{part:<48}");
        for bytes in row {
            print!(" {bytes:>10.0}");
        }
        println!();
    }
}
