//! Label selectors, field selectors and paginated lists.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{Target, api_error, assert_status, configmap};

async fn names(api: &Api<ConfigMap>, lp: &ListParams) -> BTreeSet<String> {
    api.list(lp)
        .await
        .unwrap_or_else(|e| panic!("list with {lp:?}: {e}"))
        .items
        .iter()
        .map(|o| o.name_any())
        // Real clusters publish kube-root-ca.crt into every namespace.
        .filter(|n| n != "kube-root-ca.crt")
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selector_operators() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    for (name, labels) in [
        ("a", vec![("env", "prod"), ("tier", "web")]),
        ("b", vec![("env", "dev")]),
        ("c", vec![("env", "prod")]),
        ("d", vec![]),
    ] {
        cms.create(&PostParams::default(), &configmap(name, &labels, &[]))
            .await
            .expect("create");
    }
    let cases: &[(&str, &[&str])] = &[
        ("env=prod", &["a", "c"]),
        ("env==prod", &["a", "c"]),
        ("env!=prod", &["b", "d"]),
        ("env in (prod,dev)", &["a", "b", "c"]),
        ("env notin (prod)", &["b", "d"]),
        ("tier", &["a"]),
        ("!tier", &["b", "c", "d"]),
        ("env=prod,!tier", &["c"]),
        ("env=prod,tier=web", &["a"]),
        ("env", &["a", "b", "c"]),
        ("env=staging", &[]),
    ];
    for (selector, expected) in cases {
        let got = names(&cms, &ListParams::default().labels(selector)).await;
        assert_eq!(got, set(expected), "labelSelector {selector:?}");
    }
    let err = api_error(
        cms.list(&ListParams::default().labels("env in prod")).await,
        "bad selector",
    );
    assert_status(&err, 400, "BadRequest", "an unparsable label selector");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selectors_on_metadata() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    for name in ["x", "y", "z"] {
        cms.create(&PostParams::default(), &configmap(name, &[], &[]))
            .await
            .expect("create");
    }
    assert_eq!(
        names(&cms, &ListParams::default().fields("metadata.name=y")).await,
        set(&["y"])
    );
    assert_eq!(
        names(&cms, &ListParams::default().fields("metadata.name!=y")).await,
        set(&["x", "z"])
    );
    let all: Api<ConfigMap> = Api::all(t.client.clone());
    let across = all
        .list(&ListParams::default().fields(&format!("metadata.namespace={}", t.ns)))
        .await
        .expect("cluster-wide list by namespace");
    assert!(
        across
            .items
            .iter()
            .all(|o| o.namespace().as_deref() == Some(t.ns.as_str())),
        "metadata.namespace selects one namespace"
    );
    assert!(
        across.items.len() >= 3,
        "the test objects are listed cluster-wide"
    );
    let err = api_error(
        cms.list(&ListParams::default().fields("spec.foo=bar"))
            .await,
        "unsupported field",
    );
    assert_status(
        &err,
        400,
        "BadRequest",
        "a field selector on an unsupported field",
    );
    assert!(
        err.message.contains(
            "\"spec.foo\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        ),
        "{}",
        err.message
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_field_selectors_node_name_and_phase() {
    let t = Target::sandbox_or_env().await;
    let pods = t.api::<Pod>();
    let mk = |name: &str, node: Option<&str>| -> Pod {
        let mut spec = json!({"containers": [{"name": "c", "image": "busybox:1.36"}]});
        match node {
            Some(n) => spec["nodeName"] = json!(n),
            None => spec["schedulingGates"] = json!([{"name": "conformance.example.com/hold"}]),
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))
            .expect("pod literal")
    };
    let node_a = t.cluster_name("node-a");
    pods.create(&PostParams::default(), &mk("p1", Some(&node_a)))
        .await
        .expect("p1");
    pods.create(&PostParams::default(), &mk("p2", Some(&node_a)))
        .await
        .expect("p2");
    pods.create(&PostParams::default(), &mk("p3", None))
        .await
        .expect("p3");
    pods.patch_status(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .expect("p1 Running");
    let list = |fs: String| {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default().fields(&fs))
                .await
                .unwrap_or_else(|e| panic!("list pods {fs}: {e}"))
                .items
                .iter()
                .map(|p| p.name_any())
                .collect::<BTreeSet<_>>()
        }
    };
    assert_eq!(
        list(format!("spec.nodeName={node_a}")).await,
        set(&["p1", "p2"])
    );
    assert_eq!(
        list("spec.nodeName=".to_string()).await,
        set(&["p3"]),
        "empty nodeName selects unbound pods"
    );
    assert_eq!(list("status.phase=Running".to_string()).await, set(&["p1"]));
    assert_eq!(
        list("status.phase!=Running".to_string()).await,
        set(&["p2", "p3"])
    );
    assert_eq!(
        list(format!("spec.nodeName={node_a},status.phase=Pending")).await,
        set(&["p2"])
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_field_selector_involved_object_name() {
    let t = Target::sandbox_or_env().await;
    let events = t.api::<Event>();
    for (name, target) in [("e1", "alpha"), ("e2", "beta"), ("e3", "alpha")] {
        let ev: Event = serde_json::from_value(json!({
            "metadata": {"name": name},
            "involvedObject": {"kind": "ConfigMap", "name": target, "namespace": t.ns, "apiVersion": "v1"},
            "reason": "Test", "message": "m", "type": "Normal", "source": {"component": "conformance"}
        }))
        .expect("event literal");
        events
            .create(&PostParams::default(), &ev)
            .await
            .expect("create event");
    }
    let got: BTreeSet<String> = events
        .list(&ListParams::default().fields("involvedObject.name=alpha"))
        .await
        .expect("list events by involvedObject.name")
        .items
        .iter()
        .map(|e| e.name_any())
        .collect();
    assert_eq!(got, set(&["e1", "e3"]));
    let got = events
        .list(
            &ListParams::default().fields("involvedObject.kind=ConfigMap,reason=Test,type=Normal"),
        )
        .await
        .expect("list events by kind/reason/type");
    assert_eq!(got.items.len(), 3);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_with_limit_and_continue() {
    let t = Target::sandbox_or_env().await;
    // Secrets, not ConfigMaps: real clusters add kube-root-ca.crt ConfigMaps to every namespace.
    let cms = t.api::<Secret>();
    let secret = |name: &str| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"set": "paged"}}}))
            .expect("secret literal")
    };
    let total = 25;
    for i in 0..total {
        cms.create(&PostParams::default(), &secret(&format!("page-{i:02}")))
            .await
            .expect("create");
    }
    let first = cms
        .list(&ListParams::default().limit(10))
        .await
        .expect("first page");
    assert_eq!(first.items.len(), 10, "limit=10 returns 10 items");
    let token = first
        .metadata
        .continue_
        .clone()
        .expect("a continue token while more items remain");
    assert!(!token.is_empty());
    assert_eq!(
        first.metadata.remaining_item_count,
        Some(15),
        "remainingItemCount counts what is left"
    );
    let mut seen: Vec<String> = first.items.iter().map(|o| o.name_any()).collect();
    let mut next = Some(token);
    let mut pages = 1;
    while let Some(token) = next.take() {
        let page = cms
            .list(&ListParams::default().limit(10).continue_token(&token))
            .await
            .expect("next page");
        assert_eq!(
            page.metadata.resource_version, first.metadata.resource_version,
            "all pages are served at the first page's resourceVersion"
        );
        seen.extend(page.items.iter().map(|o| o.name_any()));
        next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        pages += 1;
        assert!(pages <= 5, "pagination must terminate");
    }
    assert_eq!(pages, 3, "25 items in pages of 10");
    let expected: Vec<String> = (0..total).map(|i| format!("page-{i:02}")).collect();
    assert_eq!(
        seen, expected,
        "pages are disjoint, complete and ordered by name"
    );

    // Objects created after the first page do not appear in later pages (consistent snapshot).
    let first = cms
        .list(&ListParams::default().limit(20))
        .await
        .expect("page");
    cms.create(&PostParams::default(), &secret("page-99"))
        .await
        .expect("late");
    let rest = cms
        .list(
            &ListParams::default()
                .limit(20)
                .continue_token(first.metadata.continue_.as_deref().expect("token")),
        )
        .await
        .expect("second page");
    assert!(
        rest.items.iter().all(|o| o.name_any() != "page-99"),
        "continue serves the snapshot of the first request"
    );

    let selected = cms
        .list(&ListParams::default().labels("set=paged").limit(100))
        .await
        .expect("selector list");
    assert_eq!(selected.items.len(), total + 1);
    assert!(
        selected
            .metadata
            .continue_
            .as_deref()
            .unwrap_or("")
            .is_empty(),
        "no token on the last page"
    );

    let err = api_error(
        cms.list(
            &ListParams::default()
                .limit(10)
                .continue_token("not-a-token"),
        )
        .await,
        "garbage continue",
    );
    assert_status(&err, 400, "BadRequest", "an invalid continue token");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_pages_are_a_true_snapshot() {
    let t = Target::sandbox_or_env().await;
    let secrets = t.api::<Secret>();
    for i in 0..20 {
        let s: Secret =
            serde_json::from_value(json!({"metadata": {"name": format!("snap-{i:02}")}}))
                .expect("secret");
        secrets
            .create(&PostParams::default(), &s)
            .await
            .expect("create");
    }
    let first = secrets
        .list(&ListParams::default().limit(10))
        .await
        .expect("page 1");
    let token = first.metadata.continue_.clone().expect("continue token");
    secrets
        .delete("snap-15", &kube::api::DeleteParams::default())
        .await
        .expect("delete after page 1");
    secrets
        .patch(
            "snap-16",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"changed": "yes"}}})),
        )
        .await
        .expect("modify after page 1");
    let rest = secrets
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .expect("page 2");
    let names: Vec<String> = rest.items.iter().map(|o| o.name_any()).collect();
    assert!(
        names.contains(&"snap-15".to_string()),
        "kube serves continue pages from the first page's snapshot (etcd revision): an object deleted \
         afterwards is still listed: {names:?}"
    );
    let sixteen = rest
        .items
        .iter()
        .find(|o| o.name_any() == "snap-16")
        .expect("snap-16");
    assert!(
        sixteen
            .metadata
            .labels
            .as_ref()
            .is_none_or(|l| !l.contains_key("changed")),
        "later modifications are not visible in continue pages"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_at_exact_resource_version_serves_the_past() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let a = cms
        .create(
            &PostParams::default(),
            &configmap("past-a", &[("era", "x")], &[]),
        )
        .await
        .expect("create a");
    cms.create(
        &PostParams::default(),
        &configmap("past-b", &[("era", "x")], &[]),
    )
    .await
    .expect("create b");
    let rv = a.resource_version().expect("rv");
    let list = cms
        .list(
            &ListParams::default()
                .labels("era=x")
                .at(&rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .expect("list resourceVersionMatch=Exact");
    let names: Vec<String> = list.items.iter().map(|o| o.name_any()).collect();
    assert_eq!(
        names,
        vec!["past-a".to_string()],
        "an Exact list shows the state at that revision"
    );
    assert_eq!(list.metadata.resource_version.as_deref(), Some(rv.as_str()));
    t.finish().await;
}
