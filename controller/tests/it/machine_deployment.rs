//! Integration tests of the MachineDeployment shell (docs/behaviour.md#machine-deployment) against the sandbox.
//!
//! The deployment shell runs alone; a small stand-in for the MachineSet controller
//! ([`FakeSets`]) writes MachineSet status (replicas follow spec at once, availability grows by
//! one per tick while allowed), so rollouts progress step by step and the strategy bounds can be
//! sampled. The end-to-end path with real machines is the benchmark
//! (`controller/examples/deployment_bench.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use mcm_api::v1alpha1::{Machine, MachineDeployment, MachineSet};
use mcm_controller::manager::compose::{ControllerSpec, named};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::harness::{NAMESPACE, World, eventually, kubectl, scrape};

const LIMIT: Duration = Duration::from_secs(60);

fn shells() -> Vec<ControllerSpec> {
    named(&["machinedeployment"])
}

fn rolling(surge: Value, unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

fn deployment(name: &str, replicas: i32, strategy: Value, class: &str) -> MachineDeployment {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"name": name}},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {"class": {"kind": "MachineClass", "name": class}}
            }
        }
    }))
    .unwrap()
}

/// Stand-in for the MachineSet controller: status.replicas follows spec at once; availability
/// grows by one per tick per set while `available` is true (drops at once on scale-down).
struct FakeSets {
    stop: CancellationToken,
    available: Arc<AtomicBool>,
}

impl FakeSets {
    /// Also creates the classes `small` and `large` the deployments here name: a rollout to a
    /// class that does not exist takes no old machine away (docs/behaviour.md#missing-class).
    async fn start(world: &World) -> FakeSets {
        for class in ["small", "large"] {
            world.create_class(class, json!({})).await;
        }
        let stop = CancellationToken::new();
        let available = Arc::new(AtomicBool::new(true));
        let api = world.machine_sets();
        let (s, a) = (stop.clone(), Arc::clone(&available));
        tokio::spawn(async move {
            while !s.is_cancelled() {
                if let Ok(list) = api.list(&ListParams::default()).await {
                    for ms in list.items {
                        let spec = ms.spec.replicas.unwrap_or(0);
                        let mut st = ms.status.clone().unwrap_or_default();
                        let before = st.clone();
                        let avail = st.available_replicas.unwrap_or(0);
                        let avail = if a.load(Ordering::SeqCst) {
                            (avail + 1).min(spec)
                        } else {
                            avail.min(spec)
                        };
                        st.replicas = Some(spec);
                        st.fully_labeled_replicas = Some(spec);
                        st.ready_replicas = Some(avail);
                        st.available_replicas = Some(avail);
                        st.observed_generation = ms.metadata.generation;
                        if st != before {
                            let mut obj = ms.clone();
                            obj.status = Some(st);
                            let name = obj.metadata.name.clone().unwrap();
                            let _ = api
                                .replace_status(&name, &PostParams::default(), &obj)
                                .await;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        FakeSets { stop, available }
    }

    fn set_available(&self, on: bool) {
        self.available.store(on, Ordering::SeqCst);
    }
}

impl Drop for FakeSets {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn sets_of(world: &World, md: &str) -> Vec<MachineSet> {
    let mut sets: Vec<MachineSet> = world
        .machine_sets()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| {
            s.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.name == md && r.controller == Some(true))
        })
        .collect();
    sets.sort_by_key(|s| s.metadata.name.clone());
    sets
}

fn class_of(ms: &MachineSet) -> String {
    ms.spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.class.as_ref())
        .and_then(|c| c.name.clone())
        .unwrap_or_default()
}

fn spec(ms: &MachineSet) -> i32 {
    ms.spec.replicas.unwrap_or(0)
}

fn available(ms: &MachineSet) -> i32 {
    ms.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

fn annotation<'a>(ms: &'a MachineSet, key: &str) -> Option<&'a str> {
    ms.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn condition(md: &MachineDeployment, type_: &str) -> Option<(String, String)> {
    let conditions = md.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find_map(|c| {
        let v = serde_json::to_value(c).ok()?;
        (v["type"] == type_).then(|| {
            (
                v["status"].as_str().unwrap_or("").to_owned(),
                v["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
    })
}

/// A merge patch (retried on 409: the sandbox may answer one that races with a controller write
/// with a conflict where kube-apiserver retries internally).
async fn patch_md(world: &World, name: &str, patch: Value) {
    eventually(&format!("patch {name}"), LIMIT, || async {
        match world
            .machine_deployments()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Some(()),
            Err(kube::Error::Api(s)) if s.code == 409 => None,
            Err(e) => panic!("patch {name}: {e}"),
        }
    })
    .await;
}

async fn set_class(world: &World, name: &str, class: &str) {
    patch_md(
        world,
        name,
        json!({"spec": {"template": {"spec": {"class": {"name": class}}}}}),
    )
    .await;
}

/// Waits until the rollout to `class` is complete: one active set with that class holding
/// `replicas` available, and the deployment status saying so.
async fn rolled_out(world: &World, name: &str, class: &str, replicas: i32) -> Vec<MachineSet> {
    eventually(&format!("{name} rolled out to {class}"), LIMIT, || async {
        let sets = sets_of(world, name).await;
        let md = world.machine_deployments().get(name).await.ok()?;
        let st = md.status.clone()?;
        let active: Vec<&MachineSet> = sets.iter().filter(|s| spec(s) > 0).collect();
        let done = active.len() == 1
            && class_of(active[0]) == class
            && spec(active[0]) == replicas
            && available(active[0]) == replicas
            && st.updated_replicas == Some(replicas)
            && st.available_replicas == Some(replicas)
            && st.observed_generation >= md.metadata.generation;
        done.then_some(sets)
    })
    .await
}

async fn events_of(world: &World, name: &str) -> Vec<(String, String)> {
    let api: kube::Api<Event> = kube::Api::namespaced(world.control.clone(), NAMESPACE);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// Waits for an Event with `reason` (and a message starting with `message`, if given) on
/// deployment `name` (events are recorded asynchronously; repeats of a reason and action are
/// aggregated into the first event's series by kube's recorder, so later notes are not listed).
async fn event_seen(world: &World, name: &str, reason: &str, message: Option<&str>) {
    eventually(
        &format!("event {reason} {message:?} on {name}"),
        LIMIT,
        || async {
            events_of(world, name)
                .await
                .iter()
                .any(|(r, m)| r == reason && message.is_none_or(|want| m.starts_with(want)))
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_deployment_gets_one_machine_set_with_its_replicas_and_status() {
    let mut world = World::start().await;
    let _fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("web", 3, rolling(json!(1), json!(0)), "small"),
        )
        .await
        .unwrap();
    let sets = rolled_out(&world, "web", "small", 3).await;
    assert_eq!(sets.len(), 1);
    let ms = &sets[0];
    let name = ms.metadata.name.clone().unwrap();
    // docs/behaviour.md#revisions: `<md>-<5 chars>` from the safe alphabet, hash label on set, selector and template.
    let suffix = name
        .strip_prefix("web-")
        .expect("named after the deployment");
    assert_eq!(suffix.len(), 5);
    assert!(
        suffix
            .bytes()
            .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
    );
    let hash = ms.metadata.labels.as_ref().unwrap()["machine-template-hash"].clone();
    assert_eq!(
        ms.spec
            .selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()["machine-template-hash"],
        hash
    );
    assert_eq!(
        annotation(ms, "deployment.kubernetes.io/revision"),
        Some("1")
    );
    assert_eq!(
        annotation(ms, "deployment.kubernetes.io/desired-replicas"),
        Some("3")
    );
    assert_eq!(
        annotation(ms, "deployment.kubernetes.io/max-replicas"),
        Some("4")
    );
    let md = world.machine_deployments().get("web").await.unwrap();
    assert!(
        md.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "machine.sapcloud.io/machine-controller-manager")
    );
    // docs/behaviour.md#deployment-status status and conditions once the set is available.
    let md = eventually("complete conditions", LIMIT, || async {
        let md = world.machine_deployments().get("web").await.ok()?;
        (condition(&md, "Progressing")?.1 == "NewMachineSetAvailable").then_some(md)
    })
    .await;
    let st = md.status.clone().unwrap();
    assert_eq!(st.replicas, Some(3));
    assert_eq!(st.ready_replicas, Some(3));
    assert_eq!(st.unavailable_replicas, Some(0));
    assert_eq!(
        condition(&md, "Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
    assert_eq!(
        md.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "1"
    );
    // docs/behaviour.md#metrics-mcm deployment metrics from the cache at scrape time.
    let metrics = eventually("the deployment metrics", LIMIT, || async {
        let body = scrape(&world).await;
        body.contains("mcm_machine_deployment_status_available_replicas{name=\"web\",namespace=\"default\"} 3")
            .then_some(body)
    })
    .await;
    assert!(
        metrics.contains(
            "mcm_machine_deployment_info_spec_replicas{name=\"web\",namespace=\"default\"} 3"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("mcm_machine_deployment_info_spec_rolling_update_max_surge{name=\"web\",namespace=\"default\"} 1"),
        "{metrics}"
    );
    // The set name is stable: a restart of the manager does not create another set.
    world.stop_manager().await.unwrap();
    world.start_manager(shells(), &[]).await;
    patch_md(
        &world,
        "web",
        json!({"metadata": {"labels": {"touch": "1"}}}),
    )
    .await;
    eventually("a pass after the restart", LIMIT, || async {
        let md = world.machine_deployments().get("web").await.ok()?;
        (md.status?.observed_generation >= md.metadata.generation).then_some(())
    })
    .await;
    let after = sets_of(&world, "web").await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].metadata.name.as_deref(), Some(name.as_str()));
    event_seen(
        &world,
        "web",
        "ScalingMachineSet",
        Some(&format!("Scaled up machine set {name} to 3")),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_stays_within_max_surge_and_max_unavailable() {
    use futures::TryStreamExt as _;
    use kube::api::{WatchEvent, WatchParams};

    let mut world = World::start().await;
    let _fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    // maxSurge 25% of 6 rounds up to 2; maxUnavailable 25% rounds down to 1.
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("roll", 6, rolling(json!("25%"), json!("25%")), "small"),
        )
        .await
        .unwrap();
    let first = rolled_out(&world, "roll", "small", 6).await;
    // The bounds are checked on every state the store goes through during the rollout: a watch
    // from before the template change is replayed here. A poll on a loaded machine could miss
    // every short-lived surged state (each lasts until the next availability tick).
    let api = world.machine_sets();
    let owned = |ms: &MachineSet| {
        ms.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.name == "roll" && r.controller == Some(true))
    };
    let list = api.list(&ListParams::default()).await.unwrap();
    let mut rv = list
        .metadata
        .resource_version
        .clone()
        .expect("list resourceVersion");
    let mut live: BTreeMap<String, MachineSet> = list
        .items
        .into_iter()
        .filter(|ms| owned(ms))
        .filter_map(|ms| Some((ms.metadata.name.clone()?, ms)))
        .collect();
    set_class(&world, "roll", "large").await;
    let mut states = 0;
    let mut saw_surge = false;
    // The note of the latest size change seen ("Scaled up|down machine set <name> to <n>").
    let mut last_scaling: Option<String> = None;
    let deadline = tokio::time::Instant::now() + LIMIT;
    let unfinished = "the rolling update did not finish";
    'rollout: loop {
        let params = WatchParams::default().timeout(30);
        let Ok(stream) = tokio::time::timeout_at(deadline, api.watch(&params, &rv))
            .await
            .expect(unfinished)
        else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        futures::pin_mut!(stream);
        loop {
            let next = tokio::time::timeout_at(deadline, stream.try_next())
                .await
                .expect(unfinished);
            // A closed or broken stream is resumed from the last resourceVersion applied.
            let Ok(Some(event)) = next else {
                continue 'rollout;
            };
            let (ms, deleted) = match event {
                WatchEvent::Added(ms) | WatchEvent::Modified(ms) => (ms, false),
                WatchEvent::Deleted(ms) => (ms, true),
                WatchEvent::Bookmark(bookmark) => {
                    rv = bookmark.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(error) => panic!("MachineSet watch: {error:?}"),
            };
            rv = ms.metadata.resource_version.clone().unwrap_or_default();
            let name = ms.metadata.name.clone().unwrap_or_default();
            if !owned(&ms) {
                continue;
            }
            let before = live.get(&name).map_or(0, spec);
            let after = if deleted { 0 } else { spec(&ms) };
            if after != before {
                let direction = if after > before { "up" } else { "down" };
                last_scaling = Some(format!("Scaled {direction} machine set {name} to {after}"));
            }
            if deleted {
                live.remove(&name);
            } else {
                live.insert(name, ms);
            }
            states += 1;
            let total: i32 = live.values().map(spec).sum();
            let avail: i32 = live.values().map(available).sum();
            assert!(
                total <= 6 + 2,
                "total {total} exceeds replicas + maxSurge: {live:?}"
            );
            assert!(
                avail >= 6 - 1,
                "available {avail} below replicas - maxUnavailable: {live:?}"
            );
            saw_surge |= total == 8;
            let old_total: i32 = live
                .values()
                .filter(|s| class_of(s) == "small")
                .map(spec)
                .sum();
            if live
                .values()
                .any(|s| class_of(s) == "large" && available(s) == 6)
                && old_total == 0
            {
                break 'rollout;
            }
        }
    }
    assert!(states > 1);
    assert!(saw_surge, "the rollout used its surge");
    let sets = rolled_out(&world, "roll", "large", 6).await;
    assert_eq!(sets.len(), 2);
    let old = sets
        .iter()
        .find(|s| s.metadata.name == first[0].metadata.name)
        .unwrap();
    let new = sets.iter().find(|s| class_of(s) == "large").unwrap();
    assert_eq!(
        annotation(new, "deployment.kubernetes.io/revision"),
        Some("2")
    );
    // docs/behaviour.md#rolling-update step 2: the old set is marked for PreferNoSchedule tainting.
    assert_eq!(
        annotation(old, "deployment.machine.sapcloud.io/prefer-no-schedule"),
        Some("True")
    );
    // The rollout ends with the old set scaled down to 0 or, when the new set's availability
    // grew by several steps between two passes, with the new set's last step up to 6.
    let old_name = old.metadata.name.clone().unwrap();
    let new_name = new.metadata.name.clone().unwrap();
    let last_scaling = last_scaling.expect("the rollout scaled its sets");
    assert!(
        [
            format!("Scaled down machine set {old_name} to 0"),
            format!("Scaled up machine set {new_name} to 6"),
        ]
        .contains(&last_scaling),
        "last scaling: {last_scaling}"
    );
    // Normal events of one object and reason are coalesced over a window, the latest note
    // winning, so the notes of a rollout's intermediate steps may never be written (which ones
    // are depends on timing); the latest scaling always is, at once or when its window ends.
    event_seen(&world, "roll", "ScalingMachineSet", Some(&last_scaling)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_empties_the_old_set_before_the_new_one_grows() {
    let mut world = World::start().await;
    let _fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("rec", 3, json!({"type": "Recreate"}), "small"),
        )
        .await
        .unwrap();
    rolled_out(&world, "rec", "small", 3).await;
    set_class(&world, "rec", "large").await;
    eventually("the recreate rollout", LIMIT, || async {
        let sets = sets_of(&world, "rec").await;
        let old_running: i32 = sets
            .iter()
            .filter(|s| class_of(s) == "small")
            .map(|s| {
                s.status
                    .as_ref()
                    .and_then(|st| st.replicas)
                    .unwrap_or(0)
                    .max(spec(s))
            })
            .sum();
        let new = sets.iter().find(|s| class_of(s) == "large");
        if let Some(new) = new {
            assert!(
                old_running == 0 || spec(new) == 0,
                "old and new machines at once: {sets:?}"
            );
        }
        new.filter(|n| available(n) == 3).map(|_| ())
    })
    .await;
    rolled_out(&world, "rec", "large", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_deployment_does_not_roll_and_resumes_later() {
    let mut world = World::start().await;
    let _fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("pause", 2, rolling(json!(1), json!(0)), "small"),
        )
        .await
        .unwrap();
    rolled_out(&world, "pause", "small", 2).await;
    patch_md(&world, "pause", json!({"spec": {"paused": true}})).await;
    eventually("the paused condition", LIMIT, || async {
        let md = world.machine_deployments().get("pause").await.ok()?;
        (condition(&md, "Progressing")? == ("Unknown".into(), "DeploymentPaused".into()))
            .then_some(())
    })
    .await;
    set_class(&world, "pause", "large").await;
    // A paused deployment still scales: the scale also proves the template change was seen.
    patch_md(&world, "pause", json!({"spec": {"replicas": 3}})).await;
    let sets = eventually("the paused deployment to scale", LIMIT, || async {
        let md = world.machine_deployments().get("pause").await.ok()?;
        let sets = sets_of(&world, "pause").await;
        (md.status?.observed_generation >= md.metadata.generation
            && sets.iter().map(spec).sum::<i32>() == 3)
            .then_some(sets)
    })
    .await;
    assert_eq!(sets.len(), 1, "no new set while paused: {sets:?}");
    assert_eq!(class_of(&sets[0]), "small");
    patch_md(&world, "pause", json!({"spec": {"paused": false}})).await;
    rolled_out(&world, "pause", "large", 3).await;
    event_seen(&world, "pause", "ScalingMachineSet", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_restores_the_previous_template() {
    let mut world = World::start().await;
    let _fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("back", 2, rolling(json!(1), json!(1)), "small"),
        )
        .await
        .unwrap();
    let first = rolled_out(&world, "back", "small", 2).await;
    set_class(&world, "back", "large").await;
    rolled_out(&world, "back", "large", 2).await;
    patch_md(
        &world,
        "back",
        json!({"spec": {"rollbackTo": {"revision": 0}}}),
    )
    .await;
    let sets = rolled_out(&world, "back", "small", 2).await;
    let md = world.machine_deployments().get("back").await.unwrap();
    assert!(md.spec.rollback_to.is_none(), "rollbackTo is cleared");
    assert_eq!(
        md.spec
            .template
            .spec
            .as_ref()
            .unwrap()
            .class
            .as_ref()
            .unwrap()
            .name
            .as_deref(),
        Some("small")
    );
    // The first set is the new one again (no third set) with the next revision.
    assert_eq!(sets.len(), 2);
    let again = sets
        .iter()
        .find(|s| s.metadata.name == first[0].metadata.name)
        .unwrap();
    assert_eq!(
        annotation(again, "deployment.kubernetes.io/revision"),
        Some("3")
    );
    assert_eq!(
        annotation(again, "deployment.kubernetes.io/revision-history"),
        Some("1")
    );
    event_seen(
        &world,
        "back",
        "DeploymentRollback",
        Some("Rolled back deployment \"back\" to revision 1"),
    )
    .await;
    // A rollback to a revision that does not exist is refused with a warning and cleared.
    patch_md(
        &world,
        "back",
        json!({"spec": {"rollbackTo": {"revision": 42}}}),
    )
    .await;
    event_seen(
        &world,
        "back",
        "DeploymentRollbackRevisionNotFound",
        Some("Unable to find the revision to rollback to."),
    )
    .await;
    eventually("rollbackTo cleared", LIMIT, || async {
        let md = world.machine_deployments().get("back").await.ok()?;
        md.spec.rollback_to.is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_during_a_rollout_is_proportional() {
    let mut world = World::start().await;
    let fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("prop", 10, rolling(json!(3), json!(0)), "small"),
        )
        .await
        .unwrap();
    rolled_out(&world, "prop", "small", 10).await;
    // Stall the rollout: nothing new becomes available, so old machines stay.
    fake.set_available(false);
    set_class(&world, "prop", "large").await;
    eventually("the surge set", LIMIT, || async {
        let sets = sets_of(&world, "prop").await;
        let new = sets.iter().find(|s| class_of(s) == "large")?;
        let old = sets.iter().find(|s| class_of(s) == "small")?;
        (spec(new) == 3 && spec(old) == 10).then_some(())
    })
    .await;
    // Pause so that only scaling happens from here (a paused deployment still scales).
    patch_md(&world, "prop", json!({"spec": {"paused": true}})).await;
    // Scale in 10 → 5 with the scale subresource: allowed = 5 + 3 = 8, toAdd = -5.
    // Largest first with max-replicas 13: old round(10*8/13) = 6, new round(3*8/13) = 2.
    scale_to(&world, "prop", 5).await;
    let (old, new) = eventually("the proportional scale-in", LIMIT, || async {
        let sets = sets_of(&world, "prop").await;
        let new = sets.iter().find(|s| class_of(s) == "large")?;
        let old = sets.iter().find(|s| class_of(s) == "small")?;
        (annotation(new, "deployment.kubernetes.io/desired-replicas") == Some("5"))
            .then(|| (spec(old), spec(new)))
    })
    .await;
    assert_eq!((old, new), (6, 2));
    // Scale out 5 → 9: only the new set grows (allowed 12, total 8 → +4). The growth waits
    // until the old set's machines beyond its new size are gone (every existing
    // machine counts against replicas + maxSurge), so the sizes are read once the new set has
    // grown, and the old set must not have grown meanwhile.
    patch_md(&world, "prop", json!({"spec": {"replicas": 9}})).await;
    let (old, new) = eventually("the scale-out", LIMIT, || async {
        let sets = sets_of(&world, "prop").await;
        let new = sets.iter().find(|s| class_of(s) == "large")?;
        let old = sets.iter().find(|s| class_of(s) == "small")?;
        (annotation(new, "deployment.kubernetes.io/desired-replicas") == Some("9")
            && spec(new) == 6)
            .then(|| (spec(old), spec(new)))
    })
    .await;
    assert_eq!((old, new), (6, 6));
    patch_md(&world, "prop", json!({"spec": {"paused": false}})).await;
    fake.set_available(true);
    rolled_out(&world, "prop", "large", 9).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_sets_beyond_the_revision_history_limit_are_deleted() {
    let mut world = World::start().await;
    let _fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    let mut md = deployment("hist", 1, rolling(json!(1), json!(0)), "c0");
    md.spec.revision_history_limit = Some(1);
    world
        .machine_deployments()
        .create(&PostParams::default(), &md)
        .await
        .unwrap();
    rolled_out(&world, "hist", "c0", 1).await;
    for class in ["c1", "c2", "c3"] {
        set_class(&world, "hist", class).await;
        rolled_out(&world, "hist", class, 1).await;
    }
    // The cleanup runs once the previous status is complete: new set + 1 old.
    let sets = eventually("the history cleanup", LIMIT, || async {
        let sets = sets_of(&world, "hist").await;
        (sets.len() == 2).then_some(sets)
    })
    .await;
    let mut classes: Vec<String> = sets.iter().map(class_of).collect();
    classes.sort();
    assert_eq!(classes, vec!["c2", "c3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_deadline_and_replica_failure_conditions() {
    let mut world = World::start().await;
    let fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    let mut md = deployment("slow", 2, rolling(json!(1), json!(0)), "small");
    md.spec.progress_deadline_seconds = Some(1);
    world
        .machine_deployments()
        .create(&PostParams::default(), &md)
        .await
        .unwrap();
    rolled_out(&world, "slow", "small", 2).await;
    fake.set_available(false);
    set_class(&world, "slow", "large").await;
    eventually("ProgressDeadlineExceeded", LIMIT, || async {
        let md = world.machine_deployments().get("slow").await.ok()?;
        (condition(&md, "Progressing")? == ("False".into(), "ProgressDeadlineExceeded".into()))
            .then_some(())
    })
    .await;
    // A ReplicaFailure condition of the new set is copied onto the deployment.
    let sets = sets_of(&world, "slow").await;
    let mut new = sets.into_iter().find(|s| class_of(s) == "large").unwrap();
    let mut st = new.status.clone().unwrap_or_default();
    st.conditions = Some(vec![
        serde_json::from_value(json!({
            "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
            "message": "quota exceeded"
        }))
        .unwrap(),
    ]);
    new.status = Some(st);
    let name = new.metadata.name.clone().unwrap();
    eventually("the set's failure condition to be written", LIMIT, || {
        let api = world.machine_sets();
        let mut new = new.clone();
        let name = name.clone();
        async move {
            let latest = api.get(&name).await.ok()?;
            new.metadata.resource_version = latest.metadata.resource_version;
            api.replace_status(&name, &PostParams::default(), &new)
                .await
                .ok()
        }
    })
    .await;
    eventually("ReplicaFailure on the deployment", LIMIT, || async {
        let md = world.machine_deployments().get("slow").await.ok()?;
        (condition(&md, "ReplicaFailure")? == ("True".into(), "FailedCreate".into())).then_some(())
    })
    .await;
    let md = world.machine_deployments().get("slow").await.unwrap();
    assert_eq!(
        condition(&md, "Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_deployment_keeps_its_frozen_condition_and_is_still_reconciled() {
    let mut world = World::start().await;
    let _fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("frz", 2, rolling(json!(1), json!(0)), "small"),
        )
        .await
        .unwrap();
    rolled_out(&world, "frz", "small", 2).await;
    // What the overshooting safety controller writes (docs/behaviour.md#overshooting): label and Frozen condition.
    patch_md(
        &world,
        "frz",
        json!({"metadata": {"labels": {"freeze": "True"}}}),
    )
    .await;
    eventually("the Frozen condition to be written", LIMIT, || async {
        let api = world.machine_deployments();
        let mut md = api.get("frz").await.ok()?;
        let st = md.status.get_or_insert_with(Default::default);
        st.conditions.get_or_insert_with(Vec::new).push(
            serde_json::from_value(json!({
                "type": "Frozen", "status": "True", "reason": "OvershootingReplicaCount",
                "message": "frozen by the test"
            }))
            .unwrap(),
        );
        api.replace_status("frz", &PostParams::default(), &md)
            .await
            .ok()
    })
    .await;
    // docs/behaviour.md#q13: a frozen deployment is reconciled normally; its status writes keep the condition.
    set_class(&world, "frz", "large").await;
    rolled_out(&world, "frz", "large", 2).await;
    let md = world.machine_deployments().get("frz").await.unwrap();
    assert_eq!(
        condition(&md, "Frozen"),
        Some(("True".into(), "OvershootingReplicaCount".into()))
    );
    assert_eq!(
        condition(&md, "Progressing").map(|c| c.1),
        Some("NewMachineSetAvailable".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_and_the_scale_subresource_resize_the_deployment() {
    let mut world = World::start().await;
    let _fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("sc", 1, rolling(json!(1), json!(0)), "small"),
        )
        .await
        .unwrap();
    rolled_out(&world, "sc", "small", 1).await;
    let scale = world.machine_deployments().get_scale("sc").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(1));
    match world.control_sandbox.as_ref() {
        Some(sandbox) if which_kubectl() => {
            let out = kubectl(sandbox)
                .args([
                    "-n",
                    NAMESPACE,
                    "scale",
                    "machinedeployment/sc",
                    "--replicas=4",
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "kubectl scale: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            rolled_out(&world, "sc", "small", 4).await;
        }
        Some(_) => eprintln!("SKIPPED: kubectl not found"),
        None => eprintln!("SKIPPED: kubectl scale needs the sandbox kubeconfig"),
    }
    scale_to(&world, "sc", 2).await;
    rolled_out(&world, "sc", "small", 2).await;
    let scale = world.machine_deployments().get_scale("sc").await.unwrap();
    assert_eq!(scale.status.map(|s| s.replicas), Some(2));
}

/// `PATCH .../scale` (kube's `Api::patch_scale`). The sandbox answers a patch that races with a
/// controller write with 409 (kube-apiserver retries internally), so the test retries too.
async fn scale_to(world: &World, name: &str, replicas: i32) {
    eventually(&format!("scale {name} to {replicas}"), LIMIT, || async {
        world
            .machine_deployments()
            .patch_scale(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
            )
            .await
            .ok()
    })
    .await;
}

fn which_kubectl() -> bool {
    std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_converges_through_write_conflicts() {
    let mut world = World::start().await;
    let Some(faults) = world.control_faults() else {
        eprintln!("SKIPPED: fault injection needs the sandbox");
        return;
    };
    let _fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("conf", 4, rolling(json!(2), json!(1)), "small"),
        )
        .await
        .unwrap();
    rolled_out(&world, "conf", "small", 4).await;
    faults.reset_counters();
    for resource in [
        "machinesets",
        "machinedeployments",
        "machinedeployments/status",
    ] {
        faults.inject_errors(mcm_sandbox::ErrorRule {
            verb: Some(mcm_sandbox::Verb::Update),
            resource: Some(resource.into()),
            status: 409,
            rate: 0.5,
            count: Some(20),
        });
    }
    set_class(&world, "conf", "large").await;
    let sets = rolled_out(&world, "conf", "large", 4).await;
    assert_eq!(sets.len(), 2, "conflicts never create extra sets: {sets:?}");
    let conflicts = faults.counters().by_status(409);
    assert!(conflicts > 0, "conflicts were injected");
    faults.clear_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_nodes_are_tainted_and_autoscaler_annotated_during_a_rollout() {
    let mut world = World::start().await;
    let fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("tnt", 1, rolling(json!(1), json!(0)), "small"),
        )
        .await
        .unwrap();
    let sets = rolled_out(&world, "tnt", "small", 1).await;
    let old = &sets[0];
    // A machine of the old set backed by a node in the target cluster.
    world
        .create_node(json!({"metadata": {"name": "tnt-node"}}))
        .await;
    let mut labels: BTreeMap<String, String> = old
        .spec
        .selector
        .as_ref()
        .unwrap()
        .match_labels
        .clone()
        .unwrap();
    labels.insert("node".into(), "tnt-node".into());
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {
            "name": "tnt-m1", "namespace": NAMESPACE, "labels": labels,
            "ownerReferences": [{
                "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
                "name": old.metadata.name, "uid": old.metadata.uid,
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {"class": {"kind": "MachineClass", "name": "small"}}
    }))
    .unwrap();
    world
        .machines()
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    // Hold the rollout so the annotations can be observed before it completes.
    fake.set_available(false);
    set_class(&world, "tnt", "large").await;
    eventually(
        "the old node to be tainted and annotated",
        LIMIT,
        || async {
            let node = world.nodes().get("tnt-node").await.ok()?;
            let tainted = node.spec.as_ref()?.taints.as_ref()?.iter().any(|t| {
                t.key == "deployment.machine.sapcloud.io/prefer-no-schedule"
                    && t.effect == "PreferNoSchedule"
                    && t.value.as_deref() == Some("True")
            });
            let a = node.metadata.annotations.unwrap_or_default();
            (tainted
                && a.get("cluster-autoscaler.kubernetes.io/scale-down-disabled")
                    .map(String::as_str)
                    == Some("true")
                && a.get("cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm")
                    .map(String::as_str)
                    == Some("true"))
            .then_some(())
        },
    )
    .await;
    // docs/behaviour.md#autoscaler-deletion: the autoscaler asks MCM to delete this machine first.
    patch_md(
        &world,
        "tnt",
        json!({"metadata": {"annotations": {"node.machine.sapcloud.io/trigger-deletion-by-mcm": "tnt-m1"}}}),
    )
    .await;
    let m = eventually("the machine to be marked for deletion", LIMIT, || async {
        let m = world.machines().get("tnt-m1").await.ok()?;
        let a = m.metadata.annotations.clone()?;
        (a.get("machinepriority.machine.sapcloud.io")
            .map(String::as_str)
            == Some("1"))
        .then_some(m)
    })
    .await;
    let marked =
        m.metadata.annotations.unwrap()["machine.sapcloud.io/marked-for-deletion-time"].clone();
    let md = world.machine_deployments().get("tnt").await.unwrap();
    let a = md.metadata.annotations.unwrap();
    assert_eq!(
        a["node.machine.sapcloud.io/trigger-deletion-by-mcm"],
        format!("tnt-m1~{marked}")
    );
    assert!(a.contains_key("machine.sapcloud.io/last-deployment-replica-change-by-scaler-time"));
    // Completion removes the autoscaler annotations MCM added.
    fake.set_available(true);
    rolled_out(&world, "tnt", "large", 1).await;
    eventually("the autoscaler annotations to go", LIMIT, || async {
        let node = world.nodes().get("tnt-node").await.ok()?;
        let a = node.metadata.annotations.unwrap_or_default();
        (!a.contains_key("cluster-autoscaler.kubernetes.io/scale-down-disabled")).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_deletes_its_sets_then_releases_the_finalizer() {
    let mut world = World::start().await;
    let _fake = FakeSets::start(&world).await;
    world.start_manager(shells(), &[]).await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("del", 1, rolling(json!(1), json!(0)), "small"),
        )
        .await
        .unwrap();
    rolled_out(&world, "del", "small", 1).await;
    eventually("the finalizer", LIMIT, || async {
        let md = world.machine_deployments().get("del").await.ok()?;
        md.metadata.finalizers.filter(|f| !f.is_empty()).map(|_| ())
    })
    .await;
    world
        .machine_deployments()
        .delete("del", &Default::default())
        .await
        .unwrap();
    eventually("the deployment and its sets to go", LIMIT, || async {
        let gone = world
            .machine_deployments()
            .get_opt("del")
            .await
            .ok()?
            .is_none();
        (gone && sets_of(&world, "del").await.is_empty()).then_some(())
    })
    .await;
}

/// End to end with every shell and provider-virtual: real machines join as nodes, the machine
/// set controller reports availability, and a class change rolls them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_to_end_rollout_with_every_controller() {
    let mut world = World::start().await;
    world.create_class("e2e-a", json!({})).await;
    world.create_class("e2e-b", json!({})).await;
    world
        .start_manager(mcm_controller::manager::compose::registry(), &[])
        .await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("e2e", 2, rolling(json!(1), json!(0)), "e2e-a"),
        )
        .await
        .unwrap();
    let running = |class: &'static str| {
        let world = &world;
        async move {
            eventually(&format!("2 Running machines of {class}"), LIMIT, || async {
                let md = world.machine_deployments().get("e2e").await.ok()?;
                let st = md.status.clone()?;
                let machines = world.machines().list(&ListParams::default()).await.ok()?;
                let of_class = machines
                    .items
                    .iter()
                    .filter(|m| {
                        m.spec.class.as_ref().and_then(|c| c.name.as_deref()) == Some(class)
                    })
                    .count();
                (st.available_replicas == Some(2)
                    && st.updated_replicas == Some(2)
                    && machines.items.len() == 2
                    && of_class == 2)
                    .then_some(())
            })
            .await;
        }
    };
    running("e2e-a").await;
    set_class(&world, "e2e", "e2e-b").await;
    running("e2e-b").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_machine_sets_are_migrated_to_the_hash_label() {
    let mut world = World::start().await;
    let _fake = FakeSets::start(&world).await;
    // A deployment with a set (and machines) from before the hash label existed.
    let md = world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("leg", 2, rolling(json!(1), json!(0)), "small"),
        )
        .await
        .unwrap();
    let owner = |kind: &str, name: &str, uid: &str| {
        json!([{
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": kind, "name": name,
            "uid": uid, "controller": true, "blockOwnerDeletion": true
        }])
    };
    let legacy: MachineSet = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {
            "name": "leg-legacy", "namespace": NAMESPACE, "labels": {"name": "leg"},
            "annotations": {"deployment.kubernetes.io/revision": "1"},
            "ownerReferences": owner("MachineDeployment", "leg", md.metadata.uid.as_deref().unwrap())
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"name": "leg"}},
            "template": {
                "metadata": {"labels": {"name": "leg"}},
                "spec": {"class": {"kind": "MachineClass", "name": "small"}}
            }
        }
    }))
    .unwrap();
    let legacy = world
        .machine_sets()
        .create(&PostParams::default(), &legacy)
        .await
        .unwrap();
    for name in ["leg-m1", "leg-m2"] {
        let m: Machine = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {
                "name": name, "namespace": NAMESPACE, "labels": {"name": "leg"},
                "ownerReferences": owner("MachineSet", "leg-legacy", legacy.metadata.uid.as_deref().unwrap())
            },
            "spec": {"class": {"kind": "MachineClass", "name": "small"}}
        }))
        .unwrap();
        world
            .machines()
            .create(&PostParams::default(), &m)
            .await
            .unwrap();
    }
    world.start_manager(shells(), &[]).await;
    let hash = eventually(
        "the legacy set's selector to get the hash",
        LIMIT,
        || async {
            let ms = world.machine_sets().get("leg-legacy").await.ok()?;
            ms.spec
                .selector?
                .match_labels?
                .get("machine-template-hash")
                .cloned()
        },
    )
    .await;
    let ms = world.machine_sets().get("leg-legacy").await.unwrap();
    assert_eq!(ms.metadata.labels.unwrap()["machine-template-hash"], hash);
    let template_labels = ms.spec.template.unwrap().metadata.unwrap().labels.unwrap();
    assert_eq!(template_labels["machine-template-hash"], hash);
    for name in ["leg-m1", "leg-m2"] {
        let m = world.machines().get(name).await.unwrap();
        assert_eq!(m.metadata.labels.unwrap()["machine-template-hash"], hash);
    }
    // The migrated set is the deployment's current set: no rollout, no second set.
    rolled_out(&world, "leg", "small", 2).await;
    let sets = sets_of(&world, "leg").await;
    assert_eq!(sets.len(), 1, "{sets:?}");
}

/// Counting every Machine object that exists (terminating ones included), a rolling
/// update by the whole stack never goes above `replicas + maxSurge` Machines nor below
/// `replicas − maxUnavailable` Running ones, while the controllers' watches lag 300 ms behind,
/// 10 % of their Machine and MachineSet writes conflict and every old VM's deletion fails once
/// (so old machines stay Terminating while the new set wants to grow).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollout_never_exceeds_its_surge_counting_terminating_machines() {
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    use mcm_sandbox::{ErrorRule, Verb};

    const REPLICAS: usize = 16;
    const SURGE: usize = 3;
    const UNAVAILABLE: usize = 1;
    const ROLLOUT_LIMIT: Duration = Duration::from_secs(300);
    let mut world = World::start().await;
    let Some(faults) = world.control_faults() else {
        eprintln!("SKIPPED: the live surge sampler needs the sandbox's watch delay and conflicts");
        return;
    };
    world
        .create_class(
            "live-a",
            json!({"failures": {"delete": {"code": "Unavailable", "times": 1}}}),
        )
        .await;
    world.create_class("live-b", json!({})).await;
    world
        .start_manager(mcm_controller::manager::compose::registry(), &[])
        .await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment(
                "live",
                i32::try_from(REPLICAS).unwrap(),
                rolling(json!(SURGE), json!(UNAVAILABLE)),
                "live-a",
            ),
        )
        .await
        .unwrap();
    let all_running = |class: &'static str| {
        let world = &world;
        async move {
            eventually(
                &format!("{REPLICAS} Running machines of {class} and no other"),
                ROLLOUT_LIMIT,
                || async {
                    let machines = world.machines().list(&ListParams::default()).await.ok()?;
                    let ok = machines.items.len() == REPLICAS
                        && machines.items.iter().all(|m| {
                            m.spec.class.as_ref().and_then(|c| c.name.as_deref()) == Some(class)
                                && m.phase().map(ToString::to_string).as_deref() == Some("Running")
                                && m.metadata.deletion_timestamp.is_none()
                        });
                    ok.then_some(())
                },
            )
            .await;
        }
    };
    all_running("live-a").await;

    // The sampler: a watch of every Machine, (Running, terminating) by name.
    #[derive(Default)]
    struct Sample {
        live: BTreeMap<String, (bool, bool)>,
        max_total: usize,
        min_running: usize,
        max_terminating: usize,
    }
    let sample = Arc::new(std::sync::Mutex::new(Sample {
        min_running: usize::MAX,
        ..Sample::default()
    }));
    let sampler = {
        let sample = Arc::clone(&sample);
        let mut stream = watcher(world.machines(), watcher::Config::default()).boxed();
        tokio::spawn(async move {
            let mut relist: BTreeMap<String, (bool, bool)> = BTreeMap::new();
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                let state = |m: &Machine| {
                    (
                        m.phase().map(ToString::to_string).as_deref() == Some("Running"),
                        m.metadata.deletion_timestamp.is_some(),
                    )
                };
                let mut s = sample.lock().unwrap();
                match event {
                    watcher::Event::Apply(m) => {
                        let st = state(&m);
                        s.live.insert(m.metadata.name.unwrap_or_default(), st);
                    }
                    watcher::Event::Delete(m) => {
                        s.live.remove(&m.metadata.name.unwrap_or_default());
                    }
                    watcher::Event::Init => relist.clear(),
                    watcher::Event::InitApply(m) => {
                        relist.insert(m.metadata.name.clone().unwrap_or_default(), state(&m));
                    }
                    watcher::Event::InitDone => s.live = std::mem::take(&mut relist),
                }
                let total = s.live.len();
                let running = s.live.values().filter(|(r, t)| *r && !*t).count();
                let terminating = s.live.values().filter(|(_, t)| *t).count();
                s.max_total = s.max_total.max(total);
                s.max_terminating = s.max_terminating.max(terminating);
                if total > 0 {
                    s.min_running = s.min_running.min(running);
                }
            }
        })
    };
    // Let the sampler list the fleet before anything moves.
    eventually("the sampler sees the fleet", LIMIT, || async {
        (sample.lock().unwrap().live.len() == REPLICAS).then_some(())
    })
    .await;

    faults.set_watch_delay(Duration::from_millis(300));
    for (verb, resource) in [
        (Verb::Update, "machinesets"),
        (Verb::Update, "machinesets/status"),
        (Verb::Update, "machines"),
        (Verb::Update, "machines/status"),
        (Verb::Patch, "machines"),
    ] {
        faults.inject_errors(ErrorRule {
            verb: Some(verb),
            resource: Some(resource.into()),
            status: 409,
            rate: 0.1,
            count: None,
        });
    }
    set_class(&world, "live", "live-b").await;
    all_running("live-b").await;
    faults.clear_errors();
    faults.set_watch_delay(Duration::ZERO);
    sampler.abort();

    let s = sample.lock().unwrap();
    assert!(
        s.max_terminating > 0,
        "the rollout had machines terminating (VM deletions fail once)"
    );
    assert!(
        s.max_total <= REPLICAS + SURGE,
        "{} Machine objects existed at once; replicas + maxSurge is {}",
        s.max_total,
        REPLICAS + SURGE
    );
    assert!(
        s.min_running >= REPLICAS - UNAVAILABLE,
        "only {} machines were Running at one point; replicas − maxUnavailable is {}",
        s.min_running,
        REPLICAS - UNAVAILABLE
    );
    eprintln!(
        "live sampler: at most {} machines (bound {}), at least {} Running (floor {}), up to {} terminating",
        s.max_total,
        REPLICAS + SURGE,
        s.min_running,
        REPLICAS - UNAVAILABLE,
        s.max_terminating
    );
}

/// Three of five nodes of a deployment go NotReady at once (provider-virtual's
/// node overrides). With `--machine-meltdown-threshold=0.3` no machine is marked Failed or
/// replaced, the deployment says why (condition and event); when enough nodes recover the guard
/// is lifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mass_failure_trips_the_meltdown_guard_and_nothing_is_replaced() {
    let mut world = World::start().await;
    world.create_class("melt", json!({})).await;
    world
        .start_manager(
            mcm_controller::manager::compose::registry(),
            &[
                "--machine-health-timeout=2s",
                "--machine-meltdown-threshold=0.3",
            ],
        )
        .await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment("melt", 5, rolling(json!(1), json!(0)), "melt"),
        )
        .await
        .unwrap();
    let names = eventually("5 Running machines", LIMIT, || async {
        let machines = world.machines().list(&ListParams::default()).await.ok()?;
        let running: Vec<String> = machines
            .items
            .iter()
            .filter(|m| {
                m.status
                    .as_ref()
                    .and_then(|s| s.current_status.as_ref())
                    .and_then(|c| c.phase.as_ref())
                    .is_some_and(|p| p.as_str() == "Running")
            })
            .filter_map(|m| m.metadata.name.clone())
            .collect();
        (running.len() == 5 && machines.items.len() == 5).then_some(running)
    })
    .await;
    for name in &names[..3] {
        world.fleet.set_overrides(
            name,
            BTreeMap::from([("Ready".to_owned(), "False".to_owned())]),
        );
    }
    let (status, reason) = eventually("the MeltdownProtection condition", LIMIT, || async {
        let md = world.machine_deployments().get("melt").await.ok()?;
        condition(&md, "MeltdownProtection")
    })
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "TooManyUnhealthyMachines")
    );
    event_seen(&world, "melt", "MeltdownProtection", Some("3 of 5 (60%)")).await;
    // Several health timeouts later: nothing Failed, nothing replaced.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let machines = world.machines().list(&ListParams::default()).await.unwrap();
    let phases: Vec<String> = machines
        .items
        .iter()
        .map(|m| {
            m.status
                .as_ref()
                .and_then(|s| s.current_status.as_ref())
                .and_then(|c| c.phase.as_ref())
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(machines.items.len(), 5, "no replacement storm: {phases:?}");
    assert!(!phases.iter().any(|p| p == "Failed"), "{phases:?}");
    assert_eq!(
        phases.iter().filter(|p| *p == "Unknown").count(),
        3,
        "{phases:?}"
    );
    // The held machines say the guard holds them, not that they "are Failed at" a past time.
    eventually(
        "the held machines' Blocked conditions name the guard",
        LIMIT,
        || async {
            let machines = world.machines().list(&ListParams::default()).await.ok()?;
            let held: Vec<String> = machines
                .items
                .iter()
                .filter_map(|m| m.status.as_ref()?.conditions.as_ref())
                .filter_map(|conditions| conditions.iter().find(|c| c.type_ == "Blocked"))
                .filter_map(|c| c.message.clone())
                .filter(|message| message.contains("meltdown guard"))
                .collect();
            (held.len() == 3).then_some(())
        },
    )
    .await;
    // Two nodes recover: 1 of 5 is under the threshold, the guard is lifted.
    for name in &names[..2] {
        world.fleet.set_overrides(name, BTreeMap::new());
    }
    eventually("the guard lifted", LIMIT, || async {
        let md = world.machine_deployments().get("melt").await.ok()?;
        condition(&md, "MeltdownProtection").is_none().then_some(())
    })
    .await;
    event_seen(&world, "melt", "MeltdownProtectionLifted", None).await;
}

/// The longest name a real cluster takes for a deployment whose machines join as
/// nodes. The sandbox enforces kube-apiserver's rules (generateName cut to 58 + 5, label values
/// ≤ 63), so every machine name, Node name and `node` label the controllers and the provider
/// produce must fit them, and the machines must come up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_with_a_63_character_name_brings_up_machines_and_nodes() {
    let name = format!("long-{}", "x".repeat(58));
    assert_eq!(name.len(), 63);
    let mut world = World::start().await;
    world.create_class("long", json!({})).await;
    world
        .start_manager(mcm_controller::manager::compose::registry(), &[])
        .await;
    world
        .machine_deployments()
        .create(
            &PostParams::default(),
            &deployment(&name, 2, rolling(json!(1), json!(0)), "long"),
        )
        .await
        .unwrap();
    let machines = eventually("2 Running machines with Ready nodes", LIMIT, || async {
        let md = world.machine_deployments().get(&name).await.ok()?;
        let machines = world.machines().list(&ListParams::default()).await.ok()?;
        let running = machines
            .items
            .iter()
            .filter(|m| {
                m.status
                    .as_ref()
                    .and_then(|s| s.current_status.as_ref())
                    .and_then(|c| c.phase.as_ref())
                    == Some(&mcm_api::v1alpha1::MachinePhase::Running)
            })
            .count();
        (md.status?.available_replicas == Some(2) && running == 2).then_some(machines.items)
    })
    .await;
    for machine in &machines {
        let machine_name = machine.metadata.name.clone().unwrap_or_default();
        assert!(
            machine_name.len() <= 63,
            "machine name of {} characters: {machine_name}",
            machine_name.len()
        );
        let node = machine
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get("node"))
            .cloned()
            .unwrap_or_default();
        assert!(!node.is_empty() && node.len() <= 63, "node label {node:?}");
        let registered = world.nodes().get(&node).await.unwrap();
        let ready = registered
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        assert!(ready, "node {node} Ready");
    }
}
