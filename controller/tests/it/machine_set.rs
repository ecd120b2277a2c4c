//! Integration tests of the MachineSet shell against the sandbox. Only the "machineset" shell
//! runs: machines are plain objects whose phases the tests set themselves.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::TryStreamExt as _;
use kube::ResourceExt as _;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use mcm_api::v1alpha1::{Machine, MachineSet};
use mcm_sandbox::{ErrorRule, Verb};
use serde_json::{Value, json};

use crate::harness::{NAMESPACE, World, eventually};

const LIMIT: Duration = Duration::from_secs(60);
const FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";

async fn world() -> World {
    let mut world = World::start().await;
    world
        .start_manager(
            mcm_controller::manager::compose::named(&["machineset"]),
            &[],
        )
        .await;
    world
}

fn machine_set(name: &str, replicas: i32, extra: Value) -> MachineSet {
    let mut object = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"set": name}},
            "template": {
                "metadata": {"labels": {"set": name}},
                "spec": {
                    "class": {"kind": "MachineClass", "name": "cls"},
                    "nodeTemplate": {"metadata": {"labels": {"tier": "one"}}},
                },
            },
        },
    });
    merge(&mut object, extra);
    serde_json::from_value(object).expect("machine set literal")
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p,
    }
}

async fn create_set(world: &World, ms: &MachineSet) {
    world
        .machine_sets()
        .create(&PostParams::default(), ms)
        .await
        .expect("create machine set");
}

/// Live machines (no deletion timestamp) selected by `set=<name>`.
async fn machines_of(api: &Api<Machine>, set: &str) -> Vec<Machine> {
    api.list(&ListParams::default().labels(&format!("set={set}")))
        .await
        .expect("list machines")
        .items
        .into_iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .collect()
}

async fn wait_count(world: &World, set: &str, count: usize) -> Vec<Machine> {
    let api = world.machines();
    eventually(&format!("{count} machines of {set}"), LIMIT, || {
        let api = api.clone();
        async move {
            let machines = machines_of(&api, set).await;
            (machines.len() == count).then_some(machines)
        }
    })
    .await
}

async fn get_set(world: &World, name: &str) -> MachineSet {
    world
        .machine_sets()
        .get(name)
        .await
        .expect("get machine set")
}

/// Waits until the controller has written a status for the current generation.
async fn wait_observed(world: &World, name: &str) -> MachineSet {
    let api = world.machine_sets();
    eventually(&format!("{name} status observed"), LIMIT, || {
        let api = api.clone();
        async move {
            let ms = api.get(name).await.ok()?;
            let observed = ms.status.as_ref()?.observed_generation;
            (observed.is_some() && observed == ms.metadata.generation).then_some(ms)
        }
    })
    .await
}

/// Patches a MachineSet, retrying the conflicts some tests inject on purpose.
async fn patch_set(world: &World, name: &str, patch: Value) {
    let api = world.machine_sets();
    for _ in 0..50 {
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("patch machine set {name}: {e}"),
        }
    }
    panic!("patch machine set {name}: conflicts never stopped");
}

async fn set_phase(world: &World, machine: &str, status: Value) {
    world
        .machines()
        .patch_status(
            machine,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .expect("patch machine status");
}

fn phase(m: &Machine) -> Option<String> {
    m.phase().map(|p| p.as_str().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scale_up_3_to_1000_never_overshoots_with_watch_delay_and_conflicts() {
    let world = world().await;
    let Some(faults) = world.control_faults() else {
        eprintln!("SKIPPED: scale_up_3_to_1000 needs the sandbox's watch delay and conflicts");
        return;
    };
    let name = "big";
    create_set(&world, &machine_set(name, 3, json!({}))).await;
    wait_count(&world, name, 3).await;

    // The controller's cache lags its own writes, and writes conflict.
    faults.set_watch_delay(Duration::from_millis(300));
    for (verb, resource, rate) in [
        (Verb::Update, "machinesets/status", 0.3),
        (Verb::Create, "machines", 0.05),
        (Verb::Update, "machines", 0.3),
        (Verb::Patch, "machines", 0.3),
    ] {
        faults.inject_errors(ErrorRule {
            verb: Some(verb),
            resource: Some(resource.into()),
            status: 409,
            rate,
            count: None,
        });
    }

    // Two independent samplers: a watch keeping the set of live names, and a list loop.
    let stop = Arc::new(AtomicBool::new(false));
    let max_watched = Arc::new(AtomicUsize::new(0));
    let max_listed = Arc::new(AtomicUsize::new(0));
    let api = world.machines();
    let rv = api
        .list(&ListParams::default().labels(&format!("set={name}")))
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("list resourceVersion");
    let initial: BTreeSet<String> = machines_of(&api, name)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    let watcher = {
        let api = api.clone();
        let stop = stop.clone();
        let max = max_watched.clone();
        tokio::spawn(async move {
            let mut live = initial;
            let mut rv = rv;
            while !stop.load(Ordering::SeqCst) {
                let params = WatchParams::default()
                    .labels(&format!("set={name}"))
                    .timeout(30);
                let Ok(stream) = api.watch(&params, &rv).await else {
                    continue;
                };
                futures::pin_mut!(stream);
                while let Ok(Some(event)) = stream.try_next().await {
                    match event {
                        WatchEvent::Added(m) | WatchEvent::Modified(m) => {
                            rv = m.resource_version().unwrap_or_default();
                            if m.metadata.deletion_timestamp.is_none() {
                                live.insert(m.name_any());
                            } else {
                                live.remove(&m.name_any());
                            }
                        }
                        WatchEvent::Deleted(m) => {
                            rv = m.resource_version().unwrap_or_default();
                            live.remove(&m.name_any());
                        }
                        WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                        WatchEvent::Error(e) => panic!("sampler watch error {e:?}"),
                    }
                    max.fetch_max(live.len(), Ordering::SeqCst);
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                }
            }
        })
    };
    let lister = {
        let api = api.clone();
        let stop = stop.clone();
        let max = max_listed.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let n = machines_of(&api, name).await.len();
                max.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    patch_set(&world, name, json!({"spec": {"replicas": 1000}})).await;
    eventually(
        "1000 machines and status.replicas 1000",
        Duration::from_secs(180),
        || {
            let api = api.clone();
            let sets = world.machine_sets();
            async move {
                let n = machines_of(&api, name).await.len();
                let ms = sets.get(name).await.ok()?;
                let replicas = ms.status.as_ref()?.replicas;
                (n == 1000 && replicas == Some(1000)).then_some(())
            }
        },
    )
    .await;
    // Let any late (overshooting) creation and every held watch event arrive before judging.
    faults.set_watch_delay(Duration::ZERO);
    faults.clear_errors();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    lister.await.expect("lister");
    watcher.abort();
    let final_count = machines_of(&api, name).await.len();
    let watched = max_watched.load(Ordering::SeqCst);
    let listed = max_listed.load(Ordering::SeqCst);
    println!(
        "3 -> 1000: max machines seen by watch {watched}, by list {listed}, final {final_count}"
    );
    let conflicts = faults.counters().by_status(409);
    println!("3 -> 1000: {conflicts} requests answered 409");
    assert!(conflicts > 0, "the test must have injected conflicts");
    assert_eq!(final_count, 1000);
    assert!(
        watched <= 1000,
        "overshoot seen by the watch: {watched} > 1000"
    );
    assert!(listed <= 1000, "overshoot seen by list: {listed} > 1000");
    assert!(
        watched >= 1000,
        "the watch sampler must have seen the whole scale-up ({watched})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopts_matching_orphan_and_release_really_removes_the_owner_reference() {
    let world = world().await;
    let name = "adopter";
    let orphan: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "orphan", "namespace": NAMESPACE, "labels": {"set": name}},
        "spec": {"class": {"kind": "MachineClass", "name": "cls"}},
    }))
    .expect("machine literal");
    world
        .machines()
        .create(&PostParams::default(), &orphan)
        .await
        .expect("create orphan");
    create_set(&world, &machine_set(name, 2, json!({}))).await;
    let machines = wait_count(&world, name, 2).await;
    let ms = get_set(&world, name).await;
    let uid = ms.metadata.uid.clone().expect("uid");
    assert!(
        machines.iter().any(|m| m.name_any() == "orphan"),
        "the orphan counts towards the replicas: only one machine was created"
    );
    let api = world.machines();
    let adopted = eventually("orphan adopted", LIMIT, || {
        let api = api.clone();
        let uid = uid.clone();
        async move {
            let m = api.get("orphan").await.ok()?;
            let refs = m.metadata.owner_references.clone().unwrap_or_default();
            refs.iter()
                .any(|r| r.uid == uid && r.controller == Some(true) && r.kind == "MachineSet")
                .then_some(m)
        }
    })
    .await;
    assert_eq!(adopted.owner_references().len(), 1);

    // The orphan stops matching: it is released (reference removed) and replaced.
    api.patch(
        "orphan",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"set": "elsewhere"}}})),
    )
    .await
    .expect("relabel");
    eventually("orphan released", LIMIT, || {
        let api = api.clone();
        async move {
            let m = api.get("orphan").await.ok()?;
            m.metadata
                .owner_references
                .as_ref()
                .is_none_or(|r| r.is_empty())
                .then_some(())
        }
    })
    .await;
    let machines = wait_count(&world, name, 2).await;
    assert!(machines.iter().all(|m| m.name_any() != "orphan"));
    assert!(
        machines
            .iter()
            .all(|m| m.owner_references().iter().any(|r| r.uid == uid))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_deletes_by_priority_and_preserved_machines_last() {
    let world = world().await;
    let name = "shrink";
    create_set(&world, &machine_set(name, 4, json!({}))).await;
    let machines = wait_count(&world, name, 4).await;
    let names: Vec<String> = machines.iter().map(|m| m.name_any()).collect();
    let running = json!({"currentStatus": {"phase": "Running"}});
    for n in &names {
        set_phase(&world, n, running.clone()).await;
    }
    let (preserved, first, second, kept) = (&names[0], &names[1], &names[2], &names[3]);
    // The preserved machine has the lowest priority of all, yet must be kept.
    let annotate = |prio: &str| json!({"metadata": {"annotations": {"machinepriority.machine.sapcloud.io": prio}}});
    let api = world.machines();
    for (n, prio) in [(preserved, "1"), (first, "1"), (second, "2")] {
        api.patch(n, &PatchParams::default(), &Patch::Merge(&annotate(prio)))
            .await
            .expect("annotate");
    }
    let expiry = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
    set_phase(
        &world,
        preserved,
        json!({"currentStatus": {"phase": "Running", "preserveExpiryTime": expiry}}),
    )
    .await;
    patch_set(&world, name, json!({"spec": {"replicas": 2}})).await;
    let left = wait_count(&world, name, 2).await;
    let left: BTreeSet<String> = left.iter().map(|m| m.name_any()).collect();
    assert_eq!(left, BTreeSet::from([preserved.clone(), kept.clone()]));
    assert!(
        crate::harness::events_with_reason(&world, "PreservedMachineDeleted")
            .await
            .is_empty(),
        "the preserved machine was kept"
    );
    // Last, but not never: scaled to 0, the preserved machine goes too, and the set says so.
    patch_set(&world, name, json!({"spec": {"replicas": 0}})).await;
    wait_count(&world, name, 0).await;
    let warned = crate::harness::eventually("a PreservedMachineDeleted event", LIMIT, || async {
        let events = crate::harness::events_with_reason(&world, "PreservedMachineDeleted").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert!(
        warned[0]
            .message
            .as_deref()
            .is_some_and(|m| m.contains(&format!(
                "Deleted machine {preserved} although it was preserved until"
            ))),
        "{:?}",
        warned[0].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_machines_are_replaced_within_the_auto_preservation_limit() {
    let world = world().await;
    let name = "healer";
    create_set(
        &world,
        &machine_set(
            name,
            3,
            json!({"spec": {"autoPreserveFailedMachineMax": 1}}),
        ),
    )
    .await;
    let machines = wait_count(&world, name, 3).await;
    let failed = json!({
        "currentStatus": {"phase": "Failed"},
        "lastOperation": {"state": "Failed", "type": "HealthCheck", "description": "unhealthy"},
    });
    let broken: BTreeSet<String> = machines[..2].iter().map(|m| m.name_any()).collect();
    for n in &broken {
        set_phase(&world, n, failed.clone()).await;
    }
    let api = world.machines();
    let outcome = eventually(
        "one failed machine auto-preserved, the other replaced",
        LIMIT,
        || {
            let api = api.clone();
            let broken = broken.clone();
            async move {
                let all = machines_of(&api, name).await;
                let kept: Vec<&Machine> = all
                    .iter()
                    .filter(|m| broken.contains(&m.name_any()))
                    .collect();
                (all.len() == 3 && kept.len() == 1).then(|| kept[0].clone())
            }
        },
    )
    .await;
    assert_eq!(
        outcome
            .annotations()
            .get("node.machine.sapcloud.io/preserve")
            .map(String::as_str),
        Some("auto-preserved")
    );
    assert_eq!(phase(&outcome).as_deref(), Some("Failed"));
    let ms = wait_observed(&world, name).await;
    let status = ms.status.expect("status");
    assert_eq!(status.auto_preserve_failed_machine_count, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freeze_and_scale_up_disabled_block_only_scale_up() {
    let world = world().await;
    let name = "frozen";
    create_set(&world, &machine_set(name, 2, json!({}))).await;
    wait_count(&world, name, 2).await;

    patch_set(
        &world,
        name,
        json!({"metadata": {"labels": {"freeze": "True"}}}),
    )
    .await;
    patch_set(&world, name, json!({"spec": {"replicas": 4}})).await;
    wait_observed(&world, name).await;
    assert_eq!(
        machines_of(&world.machines(), name).await.len(),
        2,
        "frozen: no scale-up"
    );
    patch_set(&world, name, json!({"spec": {"replicas": 1}})).await;
    wait_count(&world, name, 1).await;

    patch_set(
        &world,
        name,
        json!({"metadata": {"labels": {"freeze": null, "node.machine.sapcloud.io/scale-up-disabled": "true"}}}),
    )
    .await;
    patch_set(&world, name, json!({"spec": {"replicas": 3}})).await;
    wait_observed(&world, name).await;
    assert_eq!(
        machines_of(&world.machines(), name).await.len(),
        1,
        "scale-up disabled"
    );
    patch_set(
        &world,
        name,
        json!({"metadata": {"labels": {"node.machine.sapcloud.io/scale-up-disabled": null}}}),
    )
    .await;
    wait_count(&world, name, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_template_and_class_kind_reach_existing_machines_in_place() {
    let world = world().await;
    let name = "propagate";
    create_set(&world, &machine_set(name, 2, json!({}))).await;
    let before: BTreeMap<String, String> = wait_count(&world, name, 2)
        .await
        .iter()
        .map(|m| (m.name_any(), m.uid().unwrap_or_default()))
        .collect();
    patch_set(
        &world,
        name,
        json!({"spec": {"template": {"spec": {
            "nodeTemplate": {"metadata": {"labels": {"tier": "two"}}},
            "class": {"kind": "AWSMachineClass"},
        }}}}),
    )
    .await;
    let api = world.machines();
    let after = eventually("node template and class kind propagated", LIMIT, || {
        let api = api.clone();
        async move {
            let all = machines_of(&api, name).await;
            let done = all.len() == 2
                && all.iter().all(|m| {
                    let tier = m
                        .spec
                        .node_template
                        .as_ref()
                        .and_then(|t| t.metadata.as_ref())
                        .and_then(|md| md.labels.as_ref())
                        .and_then(|l| l.get("tier").cloned());
                    let kind = m.spec.class.as_ref().and_then(|c| c.kind.clone());
                    tier.as_deref() == Some("two") && kind.as_deref() == Some("AWSMachineClass")
                });
            done.then_some(all)
        }
    })
    .await;
    let after: BTreeMap<String, String> = after
        .iter()
        .map(|m| (m.name_any(), m.uid().unwrap_or_default()))
        .collect();
    assert_eq!(after, before, "machines were updated, not recreated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_phases_and_failed_machines() {
    let world = world().await;
    let name = "status";
    create_set(&world, &machine_set(name, 3, json!({}))).await;
    let machines = wait_count(&world, name, 3).await;
    let names: Vec<String> = machines.iter().map(|m| m.name_any()).collect();
    set_phase(
        &world,
        &names[0],
        json!({"currentStatus": {"phase": "Running"}}),
    )
    .await;
    set_phase(
        &world,
        &names[1],
        json!({"currentStatus": {"phase": "Available"}}),
    )
    .await;
    set_phase(
        &world,
        &names[2],
        json!({
            "currentStatus": {"phase": "Pending"},
            "lastOperation": {"state": "Failed", "type": "Create", "description": "quota"},
        }),
    )
    .await;
    let api = world.machine_sets();
    let status = eventually("status reflects the phases", LIMIT, || {
        let api = api.clone();
        async move {
            let status = api.get(name).await.ok()?.status?;
            let settled = status.ready_replicas == Some(1)
                && status.available_replicas == Some(2)
                && status
                    .failed_machines
                    .as_ref()
                    .is_some_and(|f| !f.is_empty());
            settled.then_some(status)
        }
    })
    .await;
    assert_eq!(status.replicas, Some(3));
    assert_eq!(status.fully_labeled_replicas, Some(3));
    let failed = status.failed_machines.unwrap_or_default();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].name.as_deref(), Some(names[2].as_str()));
    assert_eq!(failed[0].owner_ref.as_deref(), Some(name));
    let ms = get_set(&world, name).await;
    assert!(
        ms.finalizers().iter().any(|f| f == FINALIZER),
        "finalizer added"
    );

    // Events: SuccessfulCreate on the MachineSet (the recorder folds repeats into a series).
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(world.control.clone(), NAMESPACE);
    // One event per pass: upstream's wording for a single machine, a count and names for more.
    let single = format!("Created Machine: {name}-");
    let many = format!(" machines: {name}-");
    eventually("a SuccessfulCreate event on the MachineSet", LIMIT, || {
        let events = events.clone();
        let (single, many) = (single.clone(), many.clone());
        async move {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("SuccessfulCreate")
                        && e.involved_object.name.as_deref() == Some(name)
                        && e.message.as_deref().is_some_and(|m| {
                            m.starts_with(&single)
                                || (m.starts_with("Created ") && m.contains(&many))
                        })
                })
                .then_some(())
        }
    })
    .await;

    // docs/behaviour.md#metrics-mcm gauges from the MachineSet cache at scrape time.
    let admin = world.manager().expect("manager").admin;
    let gauge = |text: &str, metric: &str, value: &str| {
        text.lines().any(|l| {
            l.starts_with(&format!("{metric}{{"))
                && l.contains(&format!("name=\"{name}\""))
                && l.ends_with(&format!(" {value}"))
        })
    };
    let metrics = eventually("MachineSet gauges exposed", LIMIT, || async move {
        let text = scrape(admin).await;
        gauge(&text, "mcm_machine_set_status_ready_replicas", "1").then_some(text)
    })
    .await;
    assert!(
        gauge(&metrics, "mcm_machine_set_info_spec_replicas", "3"),
        "{metrics}"
    );
}

/// A raw `GET /metrics` of the manager's admin port.
async fn scrape(admin: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(admin)
        .await
        .expect("connect to admin port");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("send scrape");
    let mut body = String::new();
    stream.read_to_string(&mut body).await.expect("read scrape");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_on_status_and_machine_writes_converge() {
    let world = world().await;
    let Some(faults) = world.control_faults() else {
        eprintln!("SKIPPED: conflicts test needs the sandbox's fault injection");
        return;
    };
    let name = "contended";
    create_set(&world, &machine_set(name, 2, json!({}))).await;
    wait_count(&world, name, 2).await;
    for (verb, resource) in [
        (Verb::Update, "machinesets/status"),
        (Verb::Update, "machines"),
        (Verb::Patch, "machinesets"),
    ] {
        faults.inject_errors(ErrorRule {
            verb: Some(verb),
            resource: Some(resource.into()),
            status: 409,
            rate: 1.0,
            count: Some(6),
        });
    }
    patch_set(
        &world,
        name,
        json!({"spec": {"replicas": 4, "template": {"spec": {"nodeTemplate": {"metadata": {"labels": {"tier": "three"}}}}}}}),
    )
    .await;
    wait_count(&world, name, 4).await;
    let api = world.machines();
    eventually("template propagated despite conflicts", LIMIT, || {
        let api = api.clone();
        async move {
            machines_of(&api, name)
                .await
                .iter()
                .all(|m| {
                    m.spec
                        .node_template
                        .as_ref()
                        .and_then(|t| t.metadata.as_ref())
                        .and_then(|md| md.labels.as_ref())
                        .and_then(|l| l.get("tier"))
                        .map(String::as_str)
                        == Some("three")
                })
                .then_some(())
        }
    })
    .await;
    let ms = wait_observed(&world, name).await;
    assert_eq!(ms.status.and_then(|s| s.replicas), Some(4));
    let counters = faults.counters();
    assert!(
        counters.get(Verb::Update, "machinesets/status", 409) > 0,
        "status conflicts were injected and answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_machine_set_deletes_its_machines_then_drops_the_finalizer() {
    let world = world().await;
    let name = "doomed";
    create_set(&world, &machine_set(name, 2, json!({}))).await;
    wait_count(&world, name, 2).await;
    wait_observed(&world, name).await;
    world
        .machine_sets()
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete machine set");
    let sets = world.machine_sets();
    let api = world.machines();
    eventually("machine set and machines gone", LIMIT, || {
        let sets = sets.clone();
        let api = api.clone();
        async move {
            let set_gone = sets.get_opt(name).await.ok()?.is_none();
            let machines = api
                .list(&ListParams::default().labels(&format!("set={name}")))
                .await
                .ok()?;
            (set_gone && machines.items.is_empty()).then_some(())
        }
    })
    .await;
}

/// Waits until the sandbox has answered `at_least` machine DELETEs with 500, or until a machine
/// of `set` shows the Terminating phase (what must not happen; the caller's assertions say so).
async fn failed_deletions(world: &World, set: &str, at_least: u64) {
    let faults = world.control_faults().expect("sandbox");
    let api = world.machines();
    eventually(
        &format!("{at_least} failed machine deletions"),
        LIMIT,
        || {
            let (faults, api) = (faults.clone(), api.clone());
            async move {
                let failed = faults.counters().get(Verb::Delete, "machines", 500) >= at_least;
                let terminating = machines_of(&api, set)
                    .await
                    .iter()
                    .any(|m| phase(m).as_deref() == Some("Terminating"));
                (failed || terminating).then_some(())
            }
        },
    )
    .await;
}

/// Upstream `machineset_test.go` `#terminateMachines` "should not mark a machine as terminating
/// when deletion fails.": a Failed and a Running machine, every machine DELETE answered 500; the
/// scale-down to 0 tries both, and neither gets a deletion timestamp nor the Terminating phase
/// (the status is written only after a successful delete).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_terminate_machines_does_not_mark_terminating_when_deletion_fails() {
    let world = world().await;
    let Some(faults) = world.control_faults() else {
        eprintln!("SKIPPED: the deletion-failure test needs the sandbox's fault injection");
        return;
    };
    let name = "undeletable";
    create_set(&world, &machine_set(name, 2, json!({}))).await;
    let machines = wait_count(&world, name, 2).await;
    let names: Vec<String> = machines.iter().map(|m| m.name_any()).collect();
    // Faults first: a Failed machine is otherwise replaced (deleted) before the scale-down.
    faults.inject_errors(ErrorRule {
        verb: Some(Verb::Delete),
        resource: Some("machines".into()),
        status: 500,
        rate: 1.0,
        count: None,
    });
    set_phase(
        &world,
        &names[0],
        json!({"currentStatus": {"phase": "Failed"}}),
    )
    .await;
    set_phase(
        &world,
        &names[1],
        json!({"currentStatus": {"phase": "Running"}}),
    )
    .await;
    let before = faults.counters().get(Verb::Delete, "machines", 500);
    patch_set(&world, name, json!({"spec": {"replicas": 0}})).await;
    failed_deletions(&world, name, before + 2).await;
    // Termination errors are only logged (upstream `manageReplicas`), so nothing retries by
    // itself: a nudge starts a second pass, which runs only after the first one (and any status
    // write it would make after its deletions) is over.
    patch_set(
        &world,
        name,
        json!({"metadata": {"annotations": {"test.mcm/nudge": "1"}}}),
    )
    .await;
    failed_deletions(&world, name, before + 4).await;
    let api = world.machines();
    for n in &names {
        let m = api.get(n).await.expect("machine still exists");
        assert!(
            m.metadata.deletion_timestamp.is_none(),
            "{n}: no deletion timestamp"
        );
        assert_ne!(
            phase(&m).as_deref(),
            Some("Terminating"),
            "{n}: not marked Terminating"
        );
    }
    // Once deletions succeed, a nudged pass removes both machines.
    faults.clear_errors();
    patch_set(
        &world,
        name,
        json!({"metadata": {"annotations": {"test.mcm/nudge": "2"}}}),
    )
    .await;
    wait_count(&world, name, 0).await;
}
