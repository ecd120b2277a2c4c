//! Create/read/update/delete of built-in kinds, server-set metadata, and the standard errors
//! (AlreadyExists, NotFound, Conflict, Invalid, BadRequest).

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret,
    Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::common::{
    EVENTUALLY, Target, api_error, assert_status, configmap, raw, rv_number, wait_for,
};

fn from_json<K: DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).expect("test object literal")
}

/// Create, get, list, replace, merge-patch and delete one object, checking server-set fields.
async fn roundtrip<K>(api: Api<K>, obj: K, what: &str)
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    let name = obj.name_any();
    let created = api
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("{what}: create {name}: {e}"));
    let uid = created
        .uid()
        .unwrap_or_else(|| panic!("{what}: create sets metadata.uid"));
    assert!(
        created.meta().creation_timestamp.is_some(),
        "{what}: create sets creationTimestamp"
    );
    let rv_created = rv_number(created.meta().resource_version.as_ref(), what);
    assert!(
        created.meta().generation.is_none_or(|g| g == 1),
        "{what}: generation starts at 1"
    );

    let got = api
        .get(&name)
        .await
        .unwrap_or_else(|e| panic!("{what}: get {name}: {e}"));
    assert_eq!(
        got.uid().as_deref(),
        Some(uid.as_str()),
        "{what}: get returns the created object"
    );
    // A status writer (the disruption controller for a PDB, the deployment controller) may
    // store a newer version between our create and get, here as in kube-apiserver. That version
    // never has an older rv, and a status write leaves the generation as it was.
    let rv_got = rv_number(got.meta().resource_version.as_ref(), what);
    assert!(
        rv_got >= rv_created,
        "{what}: get returns the stored rv or a newer one ({rv_created} -> {rv_got})"
    );
    if rv_got > rv_created {
        assert_eq!(
            got.meta().generation,
            created.meta().generation,
            "{what}: only a status write may come between create and get ({rv_created} -> {rv_got})"
        );
    }

    let list = api
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("{what}: list: {e}"));
    assert!(
        list.items.iter().any(|o| o.name_any() == name),
        "{what}: list contains {name}"
    );
    let list_rv = rv_number(
        list.metadata.resource_version.as_ref(),
        &format!("{what} list"),
    );
    assert!(
        list_rv >= rv_created,
        "{what}: list resourceVersion ({list_rv}) >= object rv ({rv_created})"
    );

    // Controllers (e.g. the PDB or Deployment status writers) may update the object between our
    // read and write; a Conflict then is correct, so re-read and retry a few times.
    let mut current = got.clone();
    let mut attempts = 0;
    let replaced = loop {
        let mut changed = current.clone();
        changed
            .meta_mut()
            .labels
            .get_or_insert_with(Default::default)
            .insert("conformance".into(), "replaced".into());
        match api.replace(&name, &PostParams::default(), &changed).await {
            Ok(o) => break o,
            Err(kube::Error::Api(s)) if s.code == 409 && attempts < 5 => {
                attempts += 1;
                current = api
                    .get(&name)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: re-get {name}: {e}"));
            }
            Err(e) => panic!("{what}: replace {name}: {e}"),
        }
    };
    assert_eq!(
        replaced.labels().get("conformance").map(String::as_str),
        Some("replaced"),
        "{what}: replace stores labels"
    );
    let rv_replaced = rv_number(replaced.meta().resource_version.as_ref(), what);
    assert!(
        rv_replaced > rv_created,
        "{what}: update increases resourceVersion ({rv_created} -> {rv_replaced})"
    );
    assert_eq!(
        replaced.uid().as_deref(),
        Some(uid.as_str()),
        "{what}: update keeps uid"
    );
    assert_eq!(
        replaced.meta().creation_timestamp,
        created.meta().creation_timestamp,
        "{what}: update keeps creationTimestamp"
    );

    let patched = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"conformance/patched": "yes"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{what}: merge patch {name}: {e}"));
    assert_eq!(
        patched
            .annotations()
            .get("conformance/patched")
            .map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        patched.labels().get("conformance").map(String::as_str),
        Some("replaced"),
        "{what}: patch keeps other labels"
    );

    api.delete(&name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{what}: delete {name}: {e}"));
    wait_for(
        &format!("{what} {name} is gone after delete"),
        EVENTUALLY,
        || {
            let api = api.clone();
            let name = name.clone();
            async move {
                match api.get(&name).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
                    _ => None,
                }
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_kinds_roundtrip() {
    let t = Target::sandbox_or_env().await;
    let ns = t.ns.clone();
    roundtrip(
        t.api::<ConfigMap>(),
        configmap("cm1", &[], &[("k", "v")]),
        "ConfigMap",
    )
    .await;
    roundtrip(
        t.api::<Secret>(),
        from_json(json!({"metadata": {"name": "s1"}, "data": {"k": "dmFsdWU="}})),
        "Secret",
    )
    .await;
    roundtrip(
        t.api::<Pod>(),
        from_json(json!({"metadata": {"name": "p1"}, "spec": {
            "schedulingGates": [{"name": "conformance.example.com/hold"}],
            "containers": [{"name": "c", "image": "busybox:1.36"}]}})),
        "Pod",
    )
    .await;
    roundtrip(
        t.api::<Lease>(),
        from_json(json!({"metadata": {"name": "l1"}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}})),
        "Lease",
    )
    .await;
    roundtrip(
        t.api::<Event>(),
        from_json(json!({"metadata": {"name": "e1"},
            "involvedObject": {"kind": "ConfigMap", "name": "cm1", "namespace": ns, "apiVersion": "v1"},
            "reason": "Testing", "message": "conformance", "type": "Normal",
            "source": {"component": "conformance"}})),
        "Event",
    )
    .await;
    roundtrip(
        t.api::<PersistentVolumeClaim>(),
        from_json(
            json!({"metadata": {"name": "pvc1"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        "PersistentVolumeClaim",
    )
    .await;
    roundtrip(
        t.api::<PodDisruptionBudget>(),
        from_json(
            json!({"metadata": {"name": "pdb1"}, "spec": {"minAvailable": 1,
            "selector": {"matchLabels": {"app": "none"}}}}),
        ),
        "PodDisruptionBudget",
    )
    .await;
    roundtrip(
        t.api::<Deployment>(),
        from_json(json!({"metadata": {"name": "d1"}, "spec": {"replicas": 0,
            "selector": {"matchLabels": {"app": "d1"}},
            "template": {"metadata": {"labels": {"app": "d1"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}}})),
        "Deployment",
    )
    .await;
    roundtrip(
        t.api::<Service>(),
        from_json(json!({"metadata": {"name": "svc1"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}})),
        "Service",
    )
    .await;
    roundtrip(
        t.api::<ServiceAccount>(),
        from_json(json!({"metadata": {"name": "sa1"}})),
        "ServiceAccount",
    )
    .await;
    // Cluster-scoped kinds: unique names because real clusters are shared.
    roundtrip(
        Api::<Namespace>::all(t.client.clone()),
        from_json(json!({"metadata": {"name": t.cluster_name("extra")}})),
        "Namespace",
    )
    .await;
    roundtrip(
        Api::<Node>::all(t.client.clone()),
        from_json(json!({"metadata": {"name": t.cluster_name("node")}, "spec": {"providerID": "virtual:///n1"}})),
        "Node",
    )
    .await;
    roundtrip(
        Api::<PersistentVolume>::all(t.client.clone()),
        from_json(json!({"metadata": {"name": t.cluster_name("pv")}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": "csi.example.com", "volumeHandle": "vol-1"}}})),
        "PersistentVolume",
    )
    .await;
    roundtrip(
        Api::<VolumeAttachment>::all(t.client.clone()),
        from_json(json!({"metadata": {"name": t.cluster_name("va")}, "spec": {
            "attacher": "csi.example.com", "nodeName": t.cluster_name("node"),
            "source": {"persistentVolumeName": t.cluster_name("pv")}}})),
        "VolumeAttachment",
    )
    .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_namespaces_exist_and_namespaces_get_name_label() {
    let t = Target::sandbox_or_env().await;
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let ns = namespaces
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("namespace {name} exists in every cluster: {e}"));
        assert_eq!(
            ns.status.and_then(|s| s.phase).as_deref(),
            Some("Active"),
            "{name} is Active"
        );
    }
    let mine = namespaces.get(&t.ns).await.expect("test namespace");
    assert_eq!(
        mine.labels().get("kubernetes.io/metadata.name"),
        Some(&t.ns),
        "kube-apiserver labels every namespace with kubernetes.io/metadata.name=<name>"
    );
    assert_eq!(
        mine.spec.and_then(|s| s.finalizers),
        Some(vec!["kubernetes".to_string()]),
        "new namespaces get spec.finalizers [kubernetes]"
    );
    assert_eq!(mine.status.and_then(|s| s.phase).as_deref(), Some("Active"));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_versions_increase_across_objects() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let secrets = t.api::<Secret>();
    let a = cms
        .create(&PostParams::default(), &configmap("a", &[], &[]))
        .await
        .expect("create a");
    let s: Secret = from_json(json!({"metadata": {"name": "s"}}));
    let s = secrets
        .create(&PostParams::default(), &s)
        .await
        .expect("create s");
    let b = cms
        .create(&PostParams::default(), &configmap("b", &[], &[]))
        .await
        .expect("create b");
    let (ra, rs, rb) = (
        rv_number(a.metadata.resource_version.as_ref(), "a"),
        rv_number(s.metadata.resource_version.as_ref(), "s"),
        rv_number(b.metadata.resource_version.as_ref(), "b"),
    );
    assert!(
        ra < rs && rs < rb,
        "one global revision counter across kinds: {ra} < {rs} < {rb}"
    );
    assert_ne!(a.metadata.uid, b.metadata.uid, "uids are unique");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_name_yields_unique_names() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let mut template = configmap("", &[], &[]);
    template.metadata.name = None;
    template.metadata.generate_name = Some("gen-".into());
    let a = cms
        .create(&PostParams::default(), &template)
        .await
        .expect("create with generateName");
    let b = cms
        .create(&PostParams::default(), &template)
        .await
        .expect("second create with generateName");
    for o in [&a, &b] {
        let name = o.name_any();
        assert!(
            name.starts_with("gen-") && name.len() == 9,
            "generateName appends 5 random chars: {name}"
        );
        assert_eq!(
            o.metadata.generate_name.as_deref(),
            Some("gen-"),
            "generateName is kept"
        );
    }
    assert_ne!(a.name_any(), b.name_any());
    cms.get(&a.name_any())
        .await
        .expect("generated object is stored under its name");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_of_existing_name_is_409_already_exists() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    cms.create(&PostParams::default(), &configmap("dup", &[], &[]))
        .await
        .expect("create");
    let err = api_error(
        cms.create(&PostParams::default(), &configmap("dup", &[], &[]))
            .await,
        "second create",
    );
    assert_status(&err, 409, "AlreadyExists", "create of an existing name");
    assert_eq!(
        err.message, "configmaps \"dup\" already exists",
        "kube-apiserver message"
    );
    let details = err.details.expect("AlreadyExists carries details");
    assert_eq!(details.name, "dup");
    assert_eq!(
        details.kind, "configmaps",
        "details.kind is the resource (plural)"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_of_missing_object_is_404_not_found() {
    let t = Target::sandbox_or_env().await;
    let err = api_error(t.api::<ConfigMap>().get("nope").await, "get missing");
    assert_status(&err, 404, "NotFound", "get of a missing object");
    assert_eq!(err.message, "configmaps \"nope\" not found");
    let details = err.details.expect("NotFound carries details");
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("nope", "configmaps")
    );
    let err = api_error(
        t.api::<ConfigMap>()
            .delete("nope", &DeleteParams::default())
            .await,
        "delete missing",
    );
    assert_status(&err, 404, "NotFound", "delete of a missing object");
    let err = api_error(
        t.api::<ConfigMap>()
            .patch(
                "nope",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"a": "b"}})),
            )
            .await,
        "merge patch of missing",
    );
    assert_status(&err, 404, "NotFound", "merge patch of a missing object");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_in_missing_namespace_is_404() {
    let t = Target::sandbox_or_env().await;
    let missing = format!("{}-missing", t.ns);
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &missing);
    let err = api_error(
        cms.create(&PostParams::default(), &configmap("x", &[], &[]))
            .await,
        "create in missing ns",
    );
    assert_status(
        &err,
        404,
        "NotFound",
        "create in a namespace that does not exist",
    );
    assert_eq!(
        err.message,
        format!("namespaces \"{missing}\" not found"),
        "the missing thing is the namespace"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_resource_version_update_is_409_conflict() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let original = cms
        .create(&PostParams::default(), &configmap("c", &[], &[("v", "1")]))
        .await
        .expect("create");
    let mut first = original.clone();
    first.data = Some([("v".to_string(), "2".to_string())].into());
    cms.replace("c", &PostParams::default(), &first)
        .await
        .expect("first update");
    let mut stale = original.clone();
    stale.data = Some([("v".to_string(), "3".to_string())].into());
    let err = api_error(
        cms.replace("c", &PostParams::default(), &stale).await,
        "update with stale rv",
    );
    assert_status(&err, 409, "Conflict", "update with a stale resourceVersion");
    assert_eq!(
        err.message,
        "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again",
        "kube-apiserver conflict message"
    );
    let stored = cms.get("c").await.expect("get");
    assert_eq!(
        stored.data.and_then(|d| d.get("v").cloned()).as_deref(),
        Some("2"),
        "the stale write changed nothing"
    );
    // A merge patch carrying a stale resourceVersion is a precondition and fails the same way.
    let err = api_error(
        cms.patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": original.metadata.resource_version}, "data": {"v": "4"}})),
        )
        .await,
        "patch with stale rv",
    );
    assert_status(
        &err,
        409,
        "Conflict",
        "patch with a stale metadata.resourceVersion",
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_without_resource_version_is_unconditional() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    cms.create(&PostParams::default(), &configmap("u", &[], &[("v", "1")]))
        .await
        .expect("create");
    let updated = cms
        .replace(
            "u",
            &PostParams::default(),
            &configmap("u", &[], &[("v", "2")]),
        )
        .await
        .expect("ConfigMaps allow unconditional update (no resourceVersion in the body)");
    assert_eq!(
        updated.data.and_then(|d| d.get("v").cloned()).as_deref(),
        Some("2")
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_mismatch_and_name_mismatch_are_400() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let mut other = configmap("m", &[], &[]);
    other.metadata.namespace = Some("default".into());
    let err = api_error(
        cms.create(&PostParams::default(), &other).await,
        "create with other namespace in body",
    );
    assert_status(
        &err,
        400,
        "BadRequest",
        "body namespace differs from the URL namespace",
    );
    assert!(
        err.message.contains("does not match the namespace"),
        "kube: 'the namespace of the provided object does not match the namespace sent on the request': {}",
        err.message
    );
    cms.create(&PostParams::default(), &configmap("m", &[], &[]))
        .await
        .expect("create m");
    let err = api_error(
        cms.replace("m", &PostParams::default(), &configmap("other", &[], &[]))
            .await,
        "update with a different name in the body",
    );
    assert_status(
        &err,
        400,
        "BadRequest",
        "body name differs from the URL name on update",
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_name_is_422_invalid() {
    let t = Target::sandbox_or_env().await;
    let err = api_error(
        t.api::<ConfigMap>()
            .create(&PostParams::default(), &configmap("Bad_Name", &[], &[]))
            .await,
        "create with invalid name",
    );
    assert_status(&err, 422, "Invalid", "a name that is not a DNS subdomain");
    assert!(
        err.message.starts_with(
            "ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\""
        ),
        "kube message names kind, object, field and value: {}",
        err.message
    );
    let causes = err.details.map(|d| d.causes).unwrap_or_default();
    assert!(
        causes
            .iter()
            .any(|c| c.field == "metadata.name" && c.reason == "FieldValueInvalid"),
        "details.causes has metadata.name FieldValueInvalid: {causes:?}"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_configmap_rejects_data_changes() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let mut cm = configmap("imm", &[], &[("a", "1")]);
    cm.immutable = Some(true);
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create immutable");
    let err = api_error(
        cms.patch(
            "imm",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await,
        "change data of an immutable ConfigMap",
    );
    assert_status(&err, 422, "Invalid", "data of an immutable ConfigMap");
    assert!(
        err.message
            .contains("field is immutable when `immutable` is set"),
        "{}",
        err.message
    );
    cms.patch(
        "imm",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await
    .expect("metadata of an immutable ConfigMap can still change");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_string_data_is_merged_into_data() {
    let t = Target::sandbox_or_env().await;
    let secrets = t.api::<Secret>();
    let s: Secret = from_json(
        json!({"metadata": {"name": "sd"}, "data": {"a": "YQ=="}, "stringData": {"b": "bee"}}),
    );
    let created = secrets
        .create(&PostParams::default(), &s)
        .await
        .expect("create secret");
    assert_eq!(
        created.type_.as_deref(),
        Some("Opaque"),
        "type defaults to Opaque"
    );
    assert!(
        created.string_data.is_none(),
        "stringData is write-only: never returned"
    );
    let data = created.data.expect("data");
    assert_eq!(data.get("a").map(|b| b.0.clone()), Some(b"a".to_vec()));
    assert_eq!(
        data.get("b").map(|b| b.0.clone()),
        Some(b"bee".to_vec()),
        "stringData.b ends up in data.b"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_create_applies_defaults() {
    let t = Target::sandbox_or_env().await;
    let pod: Pod = from_json(json!({"metadata": {"name": "pd"}, "spec": {
        "schedulingGates": [{"name": "conformance.example.com/hold"}],
        "containers": [{"name": "c", "image": "busybox:1.36"}]}}));
    let pod = t
        .api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let spec = pod.spec.expect("spec");
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    let c = &spec.containers[0];
    assert_eq!(
        c.image_pull_policy.as_deref(),
        Some("IfNotPresent"),
        "tagged image: IfNotPresent"
    );
    assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
    assert_eq!(
        c.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    let status = pod.status.expect("status");
    assert_eq!(
        status.phase.as_deref(),
        Some("Pending"),
        "new pods are Pending"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_response_has_list_kind_and_resource_version() {
    let t = Target::sandbox_or_env().await;
    t.api::<ConfigMap>()
        .create(&PostParams::default(), &configmap("l", &[], &[]))
        .await
        .expect("create");
    let response = raw(
        &t.client,
        "GET",
        &format!("/api/v1/namespaces/{}/configmaps", t.ns),
        &[],
        vec![],
    )
    .await;
    assert_eq!(response.status, 200);
    let body = response.json();
    assert_eq!(body["kind"], "ConfigMapList");
    assert_eq!(body["apiVersion"], "v1");
    assert!(
        body["metadata"]["resourceVersion"].is_string(),
        "list metadata.resourceVersion: {body}"
    );
    let item = &body["items"][0];
    assert_eq!(item["metadata"]["name"], "l");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_record_managed_fields() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let pp = PostParams {
        field_manager: Some("conformance-writer".into()),
        ..Default::default()
    };
    let created = cms
        .create(&pp, &configmap("mf", &[("a", "b")], &[("k", "v")]))
        .await
        .expect("create");
    let entries = created.metadata.managed_fields.unwrap_or_default();
    let entry = entries
        .iter()
        .find(|m| m.manager.as_deref() == Some("conformance-writer"))
        .unwrap_or_else(|| {
            panic!("create records a managedFields entry for the fieldManager: {entries:?}")
        });
    assert_eq!(
        entry.operation.as_deref(),
        Some("Update"),
        "non-apply writes are operation Update"
    );
    assert_eq!(entry.api_version.as_deref(), Some("v1"));
    assert_eq!(entry.fields_type.as_deref(), Some("FieldsV1"));
    let fields = serde_json::to_value(&entry.fields_v1).expect("fieldsV1 json");
    assert!(
        fields.to_string().contains("f:data") && fields.to_string().contains("f:k"),
        "fieldsV1 lists the written fields: {fields}"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_preconditions_and_delete_collection() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let created = cms
        .create(&PostParams::default(), &configmap("pre", &[], &[]))
        .await
        .expect("create");
    let wrong_uid = DeleteParams::default().preconditions(kube::api::Preconditions {
        uid: Some("00000000-0000-0000-0000-000000000000".into()),
        resource_version: None,
    });
    let err = api_error(
        cms.delete("pre", &wrong_uid).await,
        "delete with wrong uid precondition",
    );
    assert_status(&err, 409, "Conflict", "delete precondition on uid fails");
    let stale = DeleteParams::default().preconditions(kube::api::Preconditions {
        uid: None,
        resource_version: Some("1".into()),
    });
    let err = api_error(
        cms.delete("pre", &stale).await,
        "delete with stale rv precondition",
    );
    assert_status(
        &err,
        409,
        "Conflict",
        "delete precondition on resourceVersion fails",
    );
    let exact = DeleteParams::default().preconditions(kube::api::Preconditions {
        uid: created.metadata.uid.clone(),
        resource_version: created.metadata.resource_version.clone(),
    });
    cms.delete("pre", &exact)
        .await
        .expect("delete with matching preconditions");

    for (name, group) in [("dc1", "x"), ("dc2", "x"), ("dc3", "y")] {
        cms.create(
            &PostParams::default(),
            &configmap(name, &[("group", group)], &[]),
        )
        .await
        .expect("create");
    }
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("group=x"),
    )
    .await
    .expect("DELETE collection with a label selector");
    let left: Vec<String> = cms
        .list(&ListParams::default().labels("group"))
        .await
        .expect("list")
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    assert_eq!(
        left,
        vec!["dc3".to_string()],
        "deletecollection removes only the selected objects"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_status_subresource_separates_spec_and_status() {
    let t = Target::sandbox_or_env().await;
    let pods = t.api::<Pod>();
    let pod: Pod = from_json(json!({"metadata": {"name": "ps"}, "spec": {
        "schedulingGates": [{"name": "conformance.example.com/hold"}],
        "containers": [{"name": "c", "image": "busybox:1.36"}]}}));
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let mut current = pods.get("ps").await.expect("get");
    current.status.get_or_insert_with(Default::default).message = Some("from main resource".into());
    let updated = pods
        .replace("ps", &PostParams::default(), &current)
        .await
        .expect("update main resource");
    assert_ne!(
        updated.status.and_then(|s| s.message).as_deref(),
        Some("from main resource"),
        "status written through the main resource is ignored"
    );
    let mut current = pods.get("ps").await.expect("get");
    current.status.get_or_insert_with(Default::default).message = Some("from status".into());
    current
        .spec
        .get_or_insert_with(Default::default)
        .active_deadline_seconds = Some(99);
    let updated = pods
        .replace_status("ps", &PostParams::default(), &current)
        .await
        .expect("update status");
    assert_eq!(
        updated.status.and_then(|s| s.message).as_deref(),
        Some("from status")
    );
    assert_eq!(
        updated.spec.and_then(|s| s.active_deadline_seconds),
        None,
        "spec written through /status is ignored"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_binding_subresource_assigns_a_node_once() {
    let t = Target::sandbox_or_env().await;
    let pods = t.api::<Pod>();
    // No scheduler serves this name, so a real cluster leaves the pod unbound too.
    let pod: Pod = from_json(json!({"metadata": {"name": "bind"}, "spec": {
        "schedulerName": "conformance-no-such-scheduler",
        "containers": [{"name": "c", "image": "busybox:1.36"}]}}));
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let node = t.cluster_name("bind-node");
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bind"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let path = format!("/api/v1/namespaces/{}/pods/bind/binding", t.ns);
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[("content-type", "application/json")],
        binding.to_string().into_bytes(),
    )
    .await;
    assert_eq!(
        response.status,
        201,
        "binding created: {}",
        String::from_utf8_lossy(&response.body)
    );
    let bound = pods.get("bind").await.expect("get");
    assert_eq!(
        bound.spec.and_then(|s| s.node_name),
        Some(node.clone()),
        "binding sets spec.nodeName"
    );
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[("content-type", "application/json")],
        binding.to_string().into_bytes(),
    )
    .await;
    let status = response.assert_status_object(409, "Conflict", "binding an already bound pod");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or("")
            .contains("is already assigned to node"),
        "kube: 'pod bind is already assigned to node ...': {status}"
    );
    pods.delete("bind", &DeleteParams::default().grace_period(0))
        .await
        .expect("cleanup");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorder_events_are_visible_through_both_event_apis() {
    use k8s_openapi::api::events::v1::Event as NewEvent;
    use kube::runtime::events::{Event as RecordedEvent, EventType, Recorder, Reporter};
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let cm = cms
        .create(&PostParams::default(), &configmap("ev-target", &[], &[]))
        .await
        .expect("create");
    let recorder = Recorder::new(
        t.client.clone(),
        Reporter {
            controller: "conformance-controller".into(),
            instance: Some("i-1".into()),
        },
    );
    let event = RecordedEvent {
        type_: EventType::Warning,
        reason: "Testing".into(),
        note: Some("conformance note".into()),
        action: "Check".into(),
        secondary: None,
    };
    let reference = cm.object_ref(&());
    recorder
        .publish(&event, &reference)
        .await
        .expect("publish events.k8s.io/v1 event");
    recorder
        .publish(&event, &reference)
        .await
        .expect("publish again (series patch)");
    let core: Vec<Event> = t
        .api::<Event>()
        .list(&ListParams::default().fields("involvedObject.name=ev-target"))
        .await
        .expect("core/v1 events by involvedObject.name")
        .items;
    assert_eq!(
        core.len(),
        1,
        "an events.k8s.io/v1 Event is also a core/v1 Event: {core:?}"
    );
    let e = &core[0];
    assert_eq!(e.reason.as_deref(), Some("Testing"));
    assert_eq!(
        e.message.as_deref(),
        Some("conformance note"),
        "core message = events.k8s.io note"
    );
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(
        e.involved_object.uid, cm.metadata.uid,
        "involvedObject = regarding"
    );
    let new: Vec<NewEvent> = t
        .api::<NewEvent>()
        .list(&ListParams::default())
        .await
        .expect("events.k8s.io list")
        .items;
    let ne = new
        .iter()
        .find(|e| e.reason.as_deref() == Some("Testing"))
        .expect("events.k8s.io/v1 view");
    assert_eq!(
        ne.series.as_ref().map(|s| s.count),
        Some(2),
        "the repeated event is a series of 2"
    );
    assert_eq!(
        ne.reporting_controller.as_deref(),
        Some("conformance-controller")
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_generation_and_scale_subresource() {
    let t = Target::sandbox_or_env().await;
    let deployments = t.api::<Deployment>();
    let d: Deployment = from_json(json!({"metadata": {"name": "dep"}, "spec": {"replicas": 0,
        "selector": {"matchLabels": {"app": "dep"}},
        "template": {"metadata": {"labels": {"app": "dep"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}}}));
    let created = deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    let spec = created.spec.clone().expect("spec");
    assert_eq!(
        spec.revision_history_limit,
        Some(10),
        "Deployment defaults: revisionHistoryLimit 10"
    );
    assert_eq!(
        spec.progress_deadline_seconds,
        Some(600),
        "Deployment defaults: progressDeadlineSeconds 600"
    );
    assert_eq!(
        spec.strategy.and_then(|s| s.type_).as_deref(),
        Some("RollingUpdate"),
        "Deployment defaults: strategy RollingUpdate"
    );
    let labelled = deployments
        .patch(
            "dep",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .expect("label");
    assert_eq!(
        labelled.metadata.generation,
        Some(1),
        "metadata changes keep generation"
    );
    let scale = deployments
        .get_scale("dep")
        .await
        .expect("GET deployments/dep/scale");
    assert_eq!(
        scale.spec.and_then(|s| s.replicas),
        None,
        "autoscaling/v1 Scale omits spec.replicas when it is 0 (omitempty)"
    );
    deployments
        .patch_scale(
            "dep",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("no-op scale");
    let image = deployments
        .patch(
            "dep",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}}})),
        )
        .await
        .expect("strategic patch of the pod template");
    assert_eq!(
        image.metadata.generation,
        Some(2),
        "a spec change bumps generation"
    );
    let containers = image
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers)
        .unwrap_or_default();
    assert_eq!(containers.len(), 1, "containers merged by name");
    assert_eq!(containers[0].image.as_deref(), Some("busybox:1.37"));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_with_resource_version_zero_serves_current_objects() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    cms.create(&PostParams::default(), &configmap("rv0", &[], &[]))
        .await
        .expect("create");
    let list = cms
        .list(&ListParams::default().match_any())
        .await
        .expect("list with resourceVersion=0");
    assert!(
        list.items.iter().any(|o| o.name_any() == "rv0"),
        "resourceVersion=0 lists may come from the cache but include the object"
    );
    let exact = cms
        .list(
            &ListParams::default()
                .at(&list.metadata.resource_version.clone().expect("rv"))
                .matching(kube::api::VersionMatch::NotOlderThan),
        )
        .await
        .expect("list NotOlderThan the previous list");
    assert!(exact.items.iter().any(|o| o.name_any() == "rv0"));
    t.finish().await;
}

/// An Event created through events.k8s.io/v1 must leave the deprecated core/v1 fields unset
/// (kube-apiserver's strict validation of that API), and an update through it may change the
/// series but not them. Found by the manager's events being refused on kube-apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_k8s_io_v1_refuses_the_deprecated_fields() {
    use k8s_openapi::api::events::v1::Event as NewEvent;
    let t = Target::sandbox_or_env().await;
    let events = t.api::<NewEvent>();
    let event = |name: &str, deprecated: bool| {
        let mut value = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name},
            "eventTime": "2026-11-28T19:00:00.000000Z",
            "type": "Normal", "reason": "Testing", "action": "Check", "note": "conformance",
            "regarding": {"kind": "ConfigMap", "name": "ev-strict", "namespace": t.ns, "apiVersion": "v1"},
            "reportingController": "conformance-controller", "reportingInstance": "i-1"
        });
        if deprecated {
            value["deprecatedFirstTimestamp"] = json!("2026-11-28T19:00:00Z");
            value["deprecatedLastTimestamp"] = json!("2026-11-28T19:00:00Z");
            value["deprecatedCount"] = json!(1);
        }
        from_json::<NewEvent>(value)
    };
    let status = api_error(
        events
            .create(&PostParams::default(), &event("strict.1", true))
            .await,
        "create with the deprecated fields",
    );
    assert_status(&status, 422, "Invalid", "create with the deprecated fields");
    for field in ["firstTimestamp", "lastTimestamp", "count"] {
        assert!(
            status
                .message
                .contains(&format!("{field}: Invalid value: \"\": needs to be unset")),
            "{field} named: {}",
            status.message
        );
    }
    events
        .create(&PostParams::default(), &event("strict.2", false))
        .await
        .expect("create without the deprecated fields");
    events
        .patch(
            "strict.2",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"series": {"count": 2, "lastObservedTime": "2026-11-28T19:05:00.000000Z"}}),
            ),
        )
        .await
        .expect("a series update");
    let status = api_error(
        events
            .patch(
                "strict.2",
                &PatchParams::default(),
                &Patch::Merge(json!({"deprecatedCount": 2})),
            )
            .await,
        "an update of a deprecated field",
    );
    assert_status(&status, 422, "Invalid", "an update of a deprecated field");
    assert!(status.message.contains("count"), "{}", status.message);
    t.finish().await;
}
