//! Watches: replay from a resourceVersion, expiry (410), bookmarks, selector enter/leave,
//! timeouts, and kube-runtime's watcher, reflector and Controller on top.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use mcm_sandbox::SandboxConfig;
use serde_json::json;

use crate::common::{EVENTUALLY, Target, configmap, wait_for};

type EventStream = Pin<Box<dyn Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Send>>;

async fn open_watch(api: &Api<ConfigMap>, wp: &WatchParams, rv: &str) -> EventStream {
    api.watch(wp, rv)
        .await
        .unwrap_or_else(|e| panic!("opening watch from rv {rv:?}: {e}"))
        .boxed()
}

/// Next event that is not a bookmark, or None when the stream ends; panics after 20 s.
async fn next_change(stream: &mut EventStream, what: &str) -> Option<WatchEvent<ConfigMap>> {
    loop {
        let item = tokio::time::timeout(EVENTUALLY, stream.next())
            .await
            .unwrap_or_else(|_| panic!("no watch event within {EVENTUALLY:?}: expected {what}"));
        match item {
            None => return None,
            Some(Ok(WatchEvent::Bookmark(_))) => continue,
            Some(Ok(ev)) => return Some(ev),
            Some(Err(e)) => panic!("watch stream error while expecting {what}: {e}"),
        }
    }
}

fn describe(ev: &WatchEvent<ConfigMap>) -> String {
    match ev {
        WatchEvent::Added(o) => format!("ADDED {}", o.name_any()),
        WatchEvent::Modified(o) => format!("MODIFIED {}", o.name_any()),
        WatchEvent::Deleted(o) => format!("DELETED {}", o.name_any()),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
        WatchEvent::Error(s) => format!("ERROR {} {}", s.code, s.reason),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_resource_version_replays_missed_events() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let first = cms
        .create(&PostParams::default(), &configmap("w1", &[], &[]))
        .await
        .expect("create w1");
    let rv = first.resource_version().expect("rv");
    cms.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .expect("update w1");
    cms.create(&PostParams::default(), &configmap("w2", &[], &[]))
        .await
        .expect("create w2");
    cms.delete("w1", &DeleteParams::default())
        .await
        .expect("delete w1");
    let mut stream = open_watch(&cms, &WatchParams::default().timeout(30), &rv).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let ev = next_change(&mut stream, "replayed event")
            .await
            .expect("stream open");
        seen.push(describe(&ev));
    }
    assert_eq!(
        seen,
        vec!["MODIFIED w1", "ADDED w2", "DELETED w1"],
        "a watch from resourceVersion R replays every change after R, in order"
    );
    cms.create(&PostParams::default(), &configmap("w3", &[], &[]))
        .await
        .expect("create w3");
    let live = next_change(&mut stream, "live ADDED w3")
        .await
        .expect("stream open");
    assert_eq!(
        describe(&live),
        "ADDED w3",
        "then continues with live events"
    );
    if let WatchEvent::Added(o) = live {
        let got = cms.get("w3").await.expect("get w3");
        assert_eq!(
            o.resource_version(),
            got.resource_version(),
            "event object carries the stored rv"
        );
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_with_rv_zero_or_empty_starts_with_synthetic_added_events() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    for n in ["s1", "s2"] {
        cms.create(&PostParams::default(), &configmap(n, &[], &[]))
            .await
            .expect("create");
    }
    let mut stream = open_watch(&cms, &WatchParams::default().timeout(30), "0").await;
    let mut names = Vec::new();
    for _ in 0..2 {
        match next_change(&mut stream, "synthetic ADDED").await {
            Some(WatchEvent::Added(o)) => names.push(o.name_any()),
            other => panic!(
                "watch from rv 0 starts with ADDED for existing objects; got {:?}",
                other.as_ref().map(describe)
            ),
        }
    }
    names.sort();
    assert_eq!(names, vec!["s1", "s2"]);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_too_old_resource_version_is_410_expired() {
    let t = Target::with_config(SandboxConfig {
        watch_history: 5,
        ..Default::default()
    })
    .await;
    let cms = t.api::<ConfigMap>();
    let first = cms
        .create(&PostParams::default(), &configmap("old0", &[], &[]))
        .await
        .expect("create");
    for i in 1..30 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("old{i}"), &[], &[]),
        )
        .await
        .expect("create");
    }
    // In the sandbox the history is 5 events long, so the first create's revision is gone. On a
    // real cluster revision 1 is gone once kube-apiserver has compacted etcd past it (every
    // --etcd-compaction-interval: 5 min by default, 10 s on scripts/control-plane.sh's cluster),
    // so a young cluster may still serve it for a while.
    let rv = if t.is_real() {
        "1".to_string()
    } else {
        first.resource_version().expect("rv")
    };
    let real = t.is_real();
    let expired = || async {
        match cms.watch(&WatchParams::default().timeout(10), &rv).await {
            Err(kube::Error::Api(s)) => Some(*s),
            Err(e) => panic!("expected 410 Expired, got client error {e}"),
            Ok(stream) => {
                let mut stream = stream.boxed();
                match tokio::time::timeout(EVENTUALLY, stream.next()).await {
                    Ok(Some(Ok(WatchEvent::Error(s)))) => Some(*s),
                    Ok(Some(Err(kube::Error::Api(s)))) => Some(*s),
                    Ok(_) if real => None,
                    Ok(other) => panic!(
                        "a watch from a compacted resourceVersion must fail with 410 Expired; first item: {:?}",
                        other.map(|r| r.map(|e| describe(&e)))
                    ),
                    Err(_) => {
                        panic!(
                            "a watch from a compacted resourceVersion must fail at once, not hang"
                        )
                    }
                }
            }
        }
    };
    let outcome = if real {
        wait_for(
            "kube-apiserver compacts etcd past revision 1",
            Duration::from_secs(120),
            expired,
        )
        .await
    } else {
        expired()
            .await
            .expect("the sandbox forgets revisions beyond its watch history")
    };
    assert_eq!(
        outcome.code, 410,
        "too old resourceVersion: code 410 (Gone): {outcome:?}"
    );
    assert_eq!(outcome.reason, "Expired", "reason Expired: {outcome:?}");
    assert!(
        outcome.message.contains("too old resource version"),
        "kube message: {outcome:?}"
    );

    // kube's watcher recovers from 410 by relisting: a store still converges.
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(writer, watcher(cms.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let driver = tokio::spawn(stream.for_each(|_| async {}));
    wait_for("store sees all 30 objects", EVENTUALLY, || {
        let reader = reader.clone();
        async move {
            let ours = reader
                .state()
                .iter()
                .filter(|o| o.name_any().starts_with("old"))
                .count();
            (ours == 30).then_some(())
        }
    })
    .await;
    driver.abort();
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_are_sent_when_allowed() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let created = cms
        .create(&PostParams::default(), &configmap("bm", &[], &[]))
        .await
        .expect("create");
    // kube-apiserver sends a bookmark about 2 s before a watch's timeout (and every minute).
    let wp = WatchParams {
        bookmarks: true,
        ..WatchParams::default().timeout(10)
    };
    let mut stream = open_watch(&cms, &wp, &created.resource_version().expect("rv")).await;
    let mut bookmark = None;
    while let Some(item) = tokio::time::timeout(Duration::from_secs(40), stream.next())
        .await
        .expect("the watch ends by its timeout")
    {
        if let Ok(WatchEvent::Bookmark(b)) = item {
            bookmark = Some(b);
            break;
        }
    }
    let bookmark =
        bookmark.expect("allowWatchBookmarks=true yields a BOOKMARK before the watch times out");
    assert!(
        !bookmark.metadata.resource_version.is_empty(),
        "bookmarks carry a resourceVersion"
    );
    assert_eq!(
        bookmark.types.kind, "ConfigMap",
        "bookmark object has the watched kind"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_ends_initial_events_with_bookmark() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    for n in ["i1", "i2", "i3"] {
        cms.create(&PostParams::default(), &configmap(n, &[], &[]))
            .await
            .expect("create");
    }
    let mut stream = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        let ev = tokio::time::timeout(EVENTUALLY, stream.next())
            .await
            .expect("sendInitialEvents watch ends its initial events with a k8s.io/initial-events-end bookmark")
            .expect("stream open")
            .expect("no watcher error");
        match ev {
            watcher::Event::Init => {}
            watcher::Event::InitApply(o) => initial.push(o.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected event before InitDone: {other:?}"),
        }
    }
    // kube-rs asks for the initial events from resourceVersion 0 ("any"): kube-apiserver may
    // serve them from a watch cache a few writes behind, and the rest follows as ordinary events.
    let mut seen = initial.clone();
    while seen.len() < 3 {
        match tokio::time::timeout(EVENTUALLY, stream.next())
            .await
            .expect("the writes the initial events missed follow as events")
            .expect("stream open")
            .expect("no watcher error")
        {
            watcher::Event::Apply(o) => seen.push(o.name_any()),
            other => panic!("unexpected event after InitDone: {other:?}"),
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen, vec!["i1", "i2", "i3"]);
    if t.sandbox().is_some() {
        // The sandbox has no watch cache: its initial events are always complete.
        initial.sort();
        assert_eq!(initial, vec!["i1", "i2", "i3"]);
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selector_watch_sees_objects_enter_and_leave() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let start = cms
        .create(&PostParams::default(), &configmap("sel", &[], &[]))
        .await
        .expect("create unlabelled");
    let mut stream = open_watch(
        &cms,
        &WatchParams::default().labels("team=blue").timeout(30),
        &start.resource_version().expect("rv"),
    )
    .await;
    cms.create(
        &PostParams::default(),
        &configmap("other", &[("team", "red")], &[]),
    )
    .await
    .expect("non-matching");
    cms.patch(
        "sel",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "blue"}}})),
    )
    .await
    .expect("enter");
    cms.patch(
        "sel",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .expect("modify");
    cms.patch(
        "sel",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "red"}}})),
    )
    .await
    .expect("leave");
    cms.delete("sel", &DeleteParams::default())
        .await
        .expect("delete while outside");
    cms.create(
        &PostParams::default(),
        &configmap("marker", &[("team", "blue")], &[]),
    )
    .await
    .expect("marker");
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(describe(
            &next_change(&mut stream, "selector event")
                .await
                .expect("open"),
        ));
    }
    assert_eq!(
        seen,
        vec!["ADDED sel", "MODIFIED sel", "DELETED sel", "ADDED marker"],
        "entering the selector is ADDED, leaving it is DELETED, changes outside are invisible"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selector_watch_filters_by_name() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let start = cms
        .create(&PostParams::default(), &configmap("start", &[], &[]))
        .await
        .expect("create");
    let mut stream = open_watch(
        &cms,
        &WatchParams::default()
            .fields("metadata.name=target")
            .timeout(30),
        &start.resource_version().expect("rv"),
    )
    .await;
    cms.create(&PostParams::default(), &configmap("noise", &[], &[]))
        .await
        .expect("noise");
    cms.create(&PostParams::default(), &configmap("target", &[], &[]))
        .await
        .expect("target");
    let ev = next_change(&mut stream, "ADDED target")
        .await
        .expect("open");
    assert_eq!(describe(&ev), "ADDED target");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_seconds_ends_the_stream() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let mut stream = open_watch(
        &cms,
        &WatchParams::default().timeout(2).disable_bookmarks(),
        "0",
    )
    .await;
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                panic!("timed-out watch ends cleanly, not with {e}");
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "timeoutSeconds=2 closes the watch stream (waited 60 s)"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_store_converges_and_survives_dropped_watches() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    for i in 0..5 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("pre{i}"), &[], &[]),
        )
        .await
        .expect("create");
    }
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(writer, watcher(cms.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let driver = tokio::spawn(stream.for_each(|_| async {}));
    reader
        .wait_until_ready()
        .await
        .expect("store becomes ready");

    let converge = |what: &'static str| {
        let reader = reader.clone();
        let cms = cms.clone();
        async move {
            wait_for(what, EVENTUALLY, || {
                let reader = reader.clone();
                let cms = cms.clone();
                async move {
                    let server: BTreeMap<String, Option<String>> = cms
                        .list(&ListParams::default())
                        .await
                        .ok()?
                        .items
                        .into_iter()
                        .map(|o| (o.name_any(), o.resource_version()))
                        .collect();
                    let local: BTreeMap<String, Option<String>> = reader
                        .state()
                        .iter()
                        .map(|o| (o.name_any(), o.resource_version()))
                        .collect();
                    (server == local).then_some(())
                }
            })
            .await
        }
    };
    converge("store equals the server after the initial list").await;
    for i in 0..5 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("new{i}"), &[], &[]),
        )
        .await
        .expect("create");
    }
    for i in 0..3 {
        cms.patch(
            &format!("pre{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .expect("update");
    }
    cms.delete("pre4", &DeleteParams::default())
        .await
        .expect("delete");
    cms.delete("new0", &DeleteParams::default())
        .await
        .expect("delete");
    converge("store follows creates, updates and deletes").await;

    if let Some(sb) = t.sandbox() {
        sb.faults().close_all_watches();
        cms.create(&PostParams::default(), &configmap("after-drop", &[], &[]))
            .await
            .expect("create");
        cms.delete("pre3", &DeleteParams::default())
            .await
            .expect("delete");
        converge("store converges again after the server drops every watch").await;
        sb.faults().close_all_watches();
        sb.faults().close_all_watches();
        cms.patch(
            "after-drop",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "3"}})),
        )
        .await
        .expect("update");
        converge("store converges after repeated drops").await;
    } else {
        eprintln!("SKIPPED (real cluster): close_all_watches part of reflector test");
    }
    driver.abort();
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_all_watches_ends_open_streams() {
    let t = Target::sandbox_or_env().await;
    let Some(sb) = t.sandbox_only(
        "close_all_watches_ends_open_streams",
        "fault injection is sandbox-only",
    ) else {
        return t.finish().await;
    };
    let cms = t.api::<ConfigMap>();
    let mut stream = open_watch(&cms, &WatchParams::default().timeout(300), "0").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    sb.faults().close_all_watches();
    let ended = tokio::time::timeout(EVENTUALLY, async {
        while let Some(item) = stream.next().await {
            if item.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "close_all_watches() ends every open watch stream"
    );
    t.finish().await;
}

#[derive(Debug, thiserror::Error)]
#[error("reconcile failed: {0}")]
struct ReconcileError(#[from] kube::Error);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_reconciles_every_configmap() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    for i in 0..5 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("before{i}"), &[], &[]),
        )
        .await
        .expect("create");
    }
    let ctx = Arc::new(cms.clone());
    let controller = Controller::new(cms.clone(), watcher::Config::default())
        .run(
            |obj: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>| async move {
                if obj.annotations().get("conformance/reconciled").is_none() {
                    api.patch(
                        &obj.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"annotations": {"conformance/reconciled": "true"}}})),
                    )
                    .await?;
                }
                Ok::<_, ReconcileError>(Action::await_change())
            },
            |_obj, _err, _ctx| Action::requeue(Duration::from_millis(200)),
            ctx,
        )
        .try_for_each(|_| async { Ok(()) });
    let driver = tokio::spawn(controller);
    for i in 0..3 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("after{i}"), &[], &[]),
        )
        .await
        .expect("create");
    }
    wait_for(
        "the controller annotates all 8 ConfigMaps",
        EVENTUALLY,
        || {
            let cms = cms.clone();
            async move {
                let list = cms.list(&ListParams::default()).await.ok()?;
                // Real clusters also publish kube-root-ca.crt here; it gets reconciled too.
                let ours: Vec<_> = list
                    .items
                    .iter()
                    .filter(|o| o.name_any() != "kube-root-ca.crt")
                    .collect();
                let done = ours
                    .iter()
                    .filter(|o| {
                        o.annotations()
                            .get("conformance/reconciled")
                            .map(String::as_str)
                            == Some("true")
                    })
                    .count();
                (done == 8 && ours.len() == 8).then_some(())
            }
        },
    )
    .await;
    driver.abort();
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_deletion_is_modified_then_deleted() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let mut cm = configmap("graceful", &[], &[]);
    cm.metadata.finalizers = Some(vec!["conformance.example.com/hold".into()]);
    let created = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let mut stream = open_watch(
        &cms,
        &WatchParams::default()
            .fields("metadata.name=graceful")
            .timeout(30),
        &created.resource_version().expect("rv"),
    )
    .await;
    cms.delete("graceful", &DeleteParams::default())
        .await
        .expect("delete");
    let marked = match next_change(&mut stream, "MODIFIED with deletionTimestamp").await {
        Some(WatchEvent::Modified(o)) => o,
        other => panic!(
            "delete of an object with finalizers is a MODIFIED event; got {:?}",
            other.as_ref().map(describe)
        ),
    };
    assert!(
        marked.metadata.deletion_timestamp.is_some(),
        "the MODIFIED object carries deletionTimestamp"
    );
    cms.patch(
        "graceful",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    let deleted = match next_change(&mut stream, "DELETED").await {
        Some(WatchEvent::Deleted(o)) => o,
        other => panic!(
            "removing the last finalizer yields DELETED; got {:?}",
            other.as_ref().map(describe)
        ),
    };
    let rv = |o: &ConfigMap| {
        o.resource_version()
            .and_then(|r| r.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(
        rv(&deleted) > rv(&marked),
        "the DELETED event carries the deletion's (newer) resourceVersion: {} > {}",
        rv(&deleted),
        rv(&marked)
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_wide_watch_sees_every_namespace() {
    let t = Target::sandbox_or_env().await;
    let other = t.cluster_name("second");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(t.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": other}})).expect("ns literal"),
        )
        .await
        .expect("create second namespace");
    let all: Api<ConfigMap> = Api::all(t.client.clone());
    let start = all
        .list(&ListParams::default().limit(1))
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut stream = all
        .watch(
            &WatchParams::default()
                .labels("conformance-wide=yes")
                .timeout(30),
            &start,
        )
        .await
        .expect("cluster-wide watch")
        .boxed();
    let here = t.api::<ConfigMap>();
    let there: Api<ConfigMap> = Api::namespaced(t.client.clone(), &other);
    here.create(
        &PostParams::default(),
        &configmap("a", &[("conformance-wide", "yes")], &[]),
    )
    .await
    .expect("create");
    there
        .create(
            &PostParams::default(),
            &configmap("b", &[("conformance-wide", "yes")], &[]),
        )
        .await
        .expect("create");
    let mut seen = Vec::new();
    for _ in 0..2 {
        match next_change(&mut stream, "ADDED from either namespace").await {
            Some(WatchEvent::Added(o)) => seen.push(format!(
                "{}/{}",
                o.namespace().unwrap_or_default(),
                o.name_any()
            )),
            other => panic!("expected ADDED; got {:?}", other.as_ref().map(describe)),
        }
    }
    assert_eq!(seen, vec![format!("{}/a", t.ns), format!("{other}/b")]);
    namespaces
        .delete(&other, &DeleteParams::default())
        .await
        .expect("delete second namespace");
    t.finish().await;
}

/// `kubectl get -w` asks for `as=Table`: kube-apiserver answers every watch event with a Table of
/// one row (the printer columns), so updates show all columns, not just NAME and AGE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_as_table_sends_one_row_tables() {
    let t = Target::sandbox_or_env().await;
    let api: Api<ConfigMap> = t.api();
    api.create(
        &PostParams::default(),
        &configmap("tabled", &[], &[("a", "1"), ("b", "2")]),
    )
    .await
    .expect("create");
    let path = format!(
        "/api/v1/namespaces/{}/configmaps?watch=true&timeoutSeconds=1",
        t.ns
    );
    let answer = crate::common::raw(
        &t.client,
        "GET",
        &path,
        &[(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )],
        Vec::new(),
    )
    .await;
    assert_eq!(answer.status, 200);
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    let event: serde_json::Value = serde_json::from_str(
        text.lines()
            .find(|line| line.contains("tabled"))
            .unwrap_or_else(|| panic!("an event about the ConfigMap: {text}")),
    )
    .expect("one JSON event per line");
    let object = &event["object"];
    assert_eq!(object["kind"], "Table", "{event}");
    let names: Vec<&str> = object["columnDefinitions"]
        .as_array()
        .map(|c| c.iter().filter_map(|d| d["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["Name", "Data", "Age"], "{event}");
    let cells = &object["rows"][0]["cells"];
    assert_eq!(cells[0], "tabled");
    assert_eq!(cells[1], 2, "the Data column is filled: {event}");
    t.finish().await;
}
