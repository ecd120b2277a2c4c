//! JSON merge patch, JSON patch, strategic merge patch, server-side apply and dryRun.

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{Target, api_error, assert_status, configmap};

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {
            "schedulingGates": [{"name": "conformance.example.com/hold"}],
            "containers": [
                {"name": "a", "image": "busybox:1.35", "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": "busybox:1.35"}
            ],
            "tolerations": [{"key": "k1", "operator": "Exists"}]
        }
    }))
    .expect("pod literal")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_merge_patch_adds_replaces_and_deletes_keys() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    cms.create(
        &PostParams::default(),
        &configmap(
            "m",
            &[("keep", "1"), ("drop", "1")],
            &[("a", "1"), ("b", "2")],
        ),
    )
    .await
    .expect("create");
    let patched = cms
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"drop": null, "new": "1"}}, "data": {"a": "10", "b": null, "c": "3"}})),
        )
        .await
        .expect("merge patch");
    let labels = patched.metadata.labels.expect("labels");
    assert_eq!(labels.get("keep").map(String::as_str), Some("1"));
    assert_eq!(labels.get("new").map(String::as_str), Some("1"));
    assert!(!labels.contains_key("drop"), "null deletes a key");
    let data = patched.data.expect("data");
    assert_eq!(data.get("a").map(String::as_str), Some("10"));
    assert!(!data.contains_key("b"));
    assert_eq!(data.get("c").map(String::as_str), Some("3"));
    // Merge patch replaces lists wholesale.
    cms.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["x.example.com/a", "x.example.com/b"]}})),
    )
    .await
    .expect("set finalizers");
    let patched = cms
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["x.example.com/c"]}})),
        )
        .await
        .expect("merge patch of a list");
    assert_eq!(
        patched.metadata.finalizers.unwrap_or_default(),
        vec!["x.example.com/c".to_string()],
        "merge patch replaces lists"
    );
    cms.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("clear finalizers");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patch_operations_and_failed_test_op() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    cms.create(
        &PostParams::default(),
        &configmap("j", &[], &[("a", "1"), ("b", "2")]),
    )
    .await
    .expect("create");
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "one"},
        {"op": "remove", "path": "/data/b"},
        {"op": "add", "path": "/data/c", "value": "3"},
        {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}},
        {"op": "copy", "from": "/data/c", "path": "/data/d"},
        {"op": "move", "from": "/data/d", "path": "/data/e"}
    ]))
    .expect("json patch literal");
    let patched = cms
        .patch("j", &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .expect("json patch");
    let data = patched.data.expect("data");
    assert_eq!(data.get("a").map(String::as_str), Some("one"));
    assert!(!data.contains_key("b"));
    assert_eq!(data.get("c").map(String::as_str), Some("3"));
    assert!(!data.contains_key("d"));
    assert_eq!(data.get("e").map(String::as_str), Some("3"));
    assert_eq!(
        patched
            .metadata
            .labels
            .and_then(|l| l.get("x").cloned())
            .as_deref(),
        Some("y")
    );

    let rv_before = cms.get("j").await.expect("get").metadata.resource_version;
    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/a", "value": "not-one"},
        {"op": "replace", "path": "/data/a", "value": "changed"}
    ]))
    .expect("json patch literal");
    let err = api_error(
        cms.patch("j", &PatchParams::default(), &Patch::Json::<()>(failing))
            .await,
        "failing test op",
    );
    assert_status(
        &err,
        422,
        "Invalid",
        "a JSON patch whose test op fails (kube: NewGenericServerResponse 422)",
    );
    let after = cms.get("j").await.expect("get");
    assert_eq!(
        after.metadata.resource_version, rv_before,
        "a failed patch writes nothing"
    );
    assert_eq!(
        after.data.and_then(|d| d.get("a").cloned()).as_deref(),
        Some("one")
    );

    let missing_path: json_patch::Patch =
        serde_json::from_value(json!([{"op": "remove", "path": "/data/nope"}])).expect("literal");
    let err = api_error(
        cms.patch(
            "j",
            &PatchParams::default(),
            &Patch::Json::<()>(missing_path),
        )
        .await,
        "remove of a missing path",
    );
    assert_status(&err, 422, "Invalid", "a JSON patch removing a missing path");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_patch_merges_pod_lists_by_key() {
    let t = Target::sandbox_or_env().await;
    let pods = t.api::<Pod>();
    pods.create(&PostParams::default(), &pod("smp"))
        .await
        .expect("create");
    let patched = pods
        .patch(
            "smp",
            &PatchParams::default(),
            &Patch::Strategic(json!({
                "metadata": {"labels": {"extra": "1"}, "finalizers": ["conformance.example.com/a"]},
                "spec": {"containers": [{"name": "a", "image": "busybox:1.36"}]}
            })),
        )
        .await
        .expect("strategic merge patch");
    let spec = patched.spec.clone().expect("spec");
    let images: Vec<(String, Option<String>)> = spec
        .containers
        .iter()
        .map(|c| (c.name.clone(), c.image.clone()))
        .collect();
    assert_eq!(
        images,
        vec![
            ("a".into(), Some("busybox:1.36".into())),
            ("b".into(), Some("busybox:1.35".into()))
        ],
        "containers merge by name: a is updated, b is kept"
    );
    assert_eq!(
        spec.containers[0].env.as_ref().map(Vec::len),
        Some(1),
        "fields of a merged container that the patch does not mention are kept"
    );
    let labels = patched.metadata.labels.clone().expect("labels");
    assert_eq!(
        (
            labels.get("app").map(String::as_str),
            labels.get("extra").map(String::as_str)
        ),
        (Some("web"), Some("1"))
    );
    // Finalizers are a set-like list ($patch merge of primitives): a second patch adds, not
    // replaces, and without $setElementOrder kube puts the items the patch names first.
    let patched = pods
        .patch(
            "smp",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"finalizers": ["conformance.example.com/b"]}})),
        )
        .await
        .expect("finalizers smp");
    assert_eq!(
        patched.metadata.finalizers.clone().unwrap_or_default(),
        vec![
            "conformance.example.com/b".to_string(),
            "conformance.example.com/a".to_string()
        ],
        "metadata.finalizers merge under SMP"
    );
    // Status conditions merge by type.
    pods.patch_status(
        "smp",
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}})),
    )
    .await
    .expect("status smp 1");
    let patched = pods
        .patch_status(
            "smp",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            ),
        )
        .await
        .expect("status smp 2");
    let types: Vec<String> = patched
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert!(
        types.contains(&"PodScheduled".to_string()) && types.contains(&"Ready".to_string()),
        "pod status conditions merge by type: {types:?}"
    );
    // $patch: delete removes one element of a merged list.
    let patched = pods
        .patch(
            "smp",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["conformance.example.com/a"]}})),
        )
        .await
        .expect("delete from primitive list");
    assert_eq!(
        patched.metadata.finalizers.unwrap_or_default(),
        vec!["conformance.example.com/b".to_string()]
    );
    pods.patch(
        "smp",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("clear finalizers");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_patch_on_nodes() {
    let t = Target::sandbox_or_env().await;
    let nodes: Api<Node> = Api::all(t.client.clone());
    let name = t.cluster_name("smp-node");
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"a": "1"}},
        "spec": {"taints": [{"key": "t1", "effect": "NoSchedule"}]}
    }))
    .expect("node literal");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
    t.delete_at_end(kube::api::ApiResource::erase::<Node>(&()), &name);
    nodes
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {
                "conditions": [{"type": "MemoryPressure", "status": "False"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]
            }})),
        )
        .await
        .expect("status smp 1");
    let patched = nodes
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "True"}],
                "addresses": [{"type": "Hostname", "address": "n1"}]
            }})),
        )
        .await
        .expect("status smp 2");
    let status = patched.status.expect("status");
    let conds: Vec<(String, String)> = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert!(
        conds.contains(&("Ready".into(), "True".into())),
        "Ready added: {conds:?}"
    );
    assert!(
        conds.contains(&("MemoryPressure".into(), "True".into())),
        "MemoryPressure updated in place: {conds:?}"
    );
    assert_eq!(
        conds.len(),
        2,
        "conditions merge by type (no duplicates): {conds:?}"
    );
    let addrs: Vec<String> = status
        .addresses
        .unwrap_or_default()
        .into_iter()
        .map(|a| a.type_)
        .collect();
    assert_eq!(addrs.len(), 2, "addresses merge by type: {addrs:?}");
    // Node taints carry no patch strategy: a strategic patch replaces the list.
    let patched = nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"b": "2"}}, "spec": {"taints": [{"key": "t2", "effect": "NoExecute"}]}})),
        )
        .await
        .expect("spec smp");
    let taints: Vec<String> = patched
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert_eq!(
        taints,
        vec!["t2".to_string()],
        "spec.taints is replaced by SMP"
    );
    let labels = patched.metadata.labels.unwrap_or_default();
    assert!(
        labels.contains_key("a") && labels.contains_key("b"),
        "labels merge: {labels:?}"
    );
    nodes
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete node");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_creates_and_updates() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let params = PatchParams::apply("conformance-a");
    let created = cms
        .patch(
            "ssa",
            &params,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1"}})),
        )
        .await
        .expect("apply creates a missing object");
    assert!(created.metadata.uid.is_some());
    assert_eq!(
        created
            .data
            .as_ref()
            .and_then(|d| d.get("a"))
            .map(String::as_str),
        Some("1")
    );
    let managers: Vec<(String, String)> = created
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("conformance-a".into(), "Apply".into())),
        "managedFields records the applier: {managers:?}"
    );
    let updated = cms
        .patch(
            "ssa",
            &params,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "labels": {"l": "v"}}, "data": {"a": "1", "b": "2"}})),
        )
        .await
        .expect("apply updates");
    let data = updated.data.expect("data");
    assert_eq!(
        (
            data.get("a").map(String::as_str),
            data.get("b").map(String::as_str)
        ),
        (Some("1"), Some("2"))
    );
    assert_eq!(
        updated
            .metadata
            .labels
            .and_then(|l| l.get("l").cloned())
            .as_deref(),
        Some("v")
    );
    let err = api_error(
        cms.patch(
            "ssa",
            &PatchParams::default(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}}),
            ),
        )
        .await,
        "apply without fieldManager",
    );
    assert_status(
        &err,
        422,
        "Invalid",
        "server-side apply requires fieldManager",
    );
    assert_eq!(
        err.message,
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_conflicts_and_removes_unapplied_fields() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let body = |data: serde_json::Value| {
        Patch::Apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "own"}, "data": data}),
        )
    };
    cms.patch(
        "own",
        &PatchParams::apply("owner-a"),
        &body(json!({"a": "1", "b": "2"})),
    )
    .await
    .expect("apply by a");
    let err = api_error(
        cms.patch(
            "own",
            &PatchParams::apply("owner-b"),
            &body(json!({"a": "other"})),
        )
        .await,
        "conflicting apply",
    );
    assert_status(
        &err,
        409,
        "Conflict",
        "applying a field owned by another manager",
    );
    assert!(
        err.message.contains("conflict with \"owner-a\""),
        "message names the owner: {}",
        err.message
    );
    cms.patch(
        "own",
        &PatchParams::apply("owner-b").force(),
        &body(json!({"a": "other"})),
    )
    .await
    .expect("force takes ownership");
    let removed = cms
        .patch("own", &PatchParams::apply("owner-a"), &body(json!({})))
        .await
        .expect("apply without b");
    let data = removed.data.unwrap_or_default();
    assert!(
        !data.contains_key("b"),
        "a field the applier stops applying is removed: {data:?}"
    );
    assert_eq!(
        data.get("a").map(String::as_str),
        Some("other"),
        "fields owned by others stay"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_all_writes_nothing() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let created = cms
        .create(&dry, &configmap("dry", &[], &[("a", "1")]))
        .await
        .expect("dry-run create");
    assert_eq!(
        created.metadata.name.as_deref(),
        Some("dry"),
        "dry-run create returns the would-be object"
    );
    assert!(
        created.metadata.creation_timestamp.is_some(),
        "dry-run create fills server fields"
    );
    let err = api_error(cms.get("dry").await, "get after dry-run create");
    assert_status(&err, 404, "NotFound", "a dry-run create stores nothing");

    let real = cms
        .create(
            &PostParams::default(),
            &configmap("real", &[], &[("a", "1")]),
        )
        .await
        .expect("create");
    let rv = real.metadata.resource_version.clone();
    let mut changed = real.clone();
    changed.data = Some([("a".to_string(), "2".to_string())].into());
    let replaced = cms
        .replace("real", &dry, &changed)
        .await
        .expect("dry-run update");
    assert_eq!(
        replaced.data.and_then(|d| d.get("a").cloned()).as_deref(),
        Some("2"),
        "the response shows the change"
    );
    let patched = cms
        .patch(
            "real",
            &PatchParams::default().dry_run(),
            &Patch::Merge(json!({"data": {"a": "3"}})),
        )
        .await
        .expect("dry-run patch");
    assert_eq!(
        patched.data.and_then(|d| d.get("a").cloned()).as_deref(),
        Some("3")
    );
    cms.delete("real", &DeleteParams::default().dry_run())
        .await
        .expect("dry-run delete");
    let stored = cms
        .get("real")
        .await
        .expect("still there after dry-run delete");
    assert_eq!(
        stored.metadata.resource_version, rv,
        "nothing was written by dry-run update/patch/delete"
    );
    assert_eq!(
        stored.data.and_then(|d| d.get("a").cloned()).as_deref(),
        Some("1")
    );
    let err = api_error(
        cms.create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &configmap("real", &[], &[]),
        )
        .await,
        "dry-run create of existing",
    );
    assert_status(
        &err,
        409,
        "AlreadyExists",
        "dry-run create still reports conflicts",
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_conflicts_with_update_managers() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let pp = PostParams {
        field_manager: Some("plain-updater".into()),
        ..Default::default()
    };
    cms.create(&pp, &configmap("mixed", &[], &[("a", "1")]))
        .await
        .expect("create by an Update manager");
    let err = api_error(
        cms.patch(
            "mixed",
            &PatchParams::apply("applier"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mixed"}, "data": {"a": "2"}})),
        )
        .await,
        "apply over a field owned by an Update manager",
    );
    assert_status(
        &err,
        409,
        "Conflict",
        "kube: apply conflicts with any other manager, Update managers included",
    );
    assert!(
        err.message.contains("conflict with \"plain-updater\""),
        "{}",
        err.message
    );
    t.finish().await;
}
