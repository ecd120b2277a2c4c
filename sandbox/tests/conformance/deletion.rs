//! Finalizers, deletionTimestamp, owner-reference garbage collection (Background, Foreground,
//! Orphan) and namespace deletion.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use serde_json::json;

use crate::common::{EVENTUALLY, Target, api_error, assert_status, configmap, wait_for};

const HOLD: &str = "conformance.example.com/hold";

fn owner_ref(owner: &ConfigMap, block: bool) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.metadata.name.clone().expect("owner name"),
        uid: owner.metadata.uid.clone().expect("owner uid"),
        block_owner_deletion: Some(block),
        controller: Some(false),
    }
}

fn dependent(name: &str, owner: &ConfigMap, block: bool, finalizers: &[&str]) -> ConfigMap {
    let mut cm = configmap(name, &[], &[]);
    cm.metadata.owner_references = Some(vec![owner_ref(owner, block)]);
    if !finalizers.is_empty() {
        cm.metadata.finalizers = Some(finalizers.iter().map(|s| s.to_string()).collect());
    }
    cm
}

async fn wait_gone(api: &Api<ConfigMap>, name: &str, what: &str) {
    wait_for(what, EVENTUALLY, || {
        let api = api.clone();
        let name = name.to_string();
        async move {
            matches!(api.get(&name).await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_keeps_object_until_removed() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let mut cm = configmap("fin", &[], &[]);
    cm.metadata.finalizers = Some(vec![HOLD.into()]);
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let deleted = cms
        .delete("fin", &DeleteParams::default())
        .await
        .expect("delete");
    let left = deleted
        .left()
        .expect("a delete blocked by finalizers returns the object, not a Status");
    assert!(
        left.metadata.deletion_timestamp.is_some(),
        "delete sets deletionTimestamp"
    );
    assert_eq!(
        left.metadata.deletion_grace_period_seconds,
        Some(0),
        "deletionGracePeriodSeconds is 0 for non-pods"
    );
    let still = cms
        .get("fin")
        .await
        .expect("the object stays while a finalizer is present");
    assert!(still.metadata.deletion_timestamp.is_some());
    let again = cms
        .delete("fin", &DeleteParams::default())
        .await
        .expect("a second delete is accepted");
    assert_eq!(
        again.left().and_then(|o| o.metadata.deletion_timestamp),
        still.metadata.deletion_timestamp.clone(),
        "a second delete keeps the first deletionTimestamp"
    );
    let err = api_error(
        cms.patch(
            "fin",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": [HOLD, "conformance.example.com/new"]}}),
            ),
        )
        .await,
        "add finalizer while terminating",
    );
    assert_status(
        &err,
        422,
        "Invalid",
        "adding a finalizer to an object being deleted",
    );
    assert!(
        err.message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        err.message
    );
    cms.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"late": "write"}})),
    )
    .await
    .expect("other updates of a terminating object are allowed");
    cms.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    wait_gone(
        &cms,
        "fin",
        "object removed once its last finalizer is gone",
    )
    .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_propagation_deletes_dependents() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let owner = cms
        .create(&PostParams::default(), &configmap("owner", &[], &[]))
        .await
        .expect("owner");
    cms.create(
        &PostParams::default(),
        &dependent("dep1", &owner, false, &[]),
    )
    .await
    .expect("dep1");
    cms.create(
        &PostParams::default(),
        &dependent("dep2", &owner, true, &[]),
    )
    .await
    .expect("dep2");
    cms.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    wait_gone(&cms, "owner", "owner removed at once with Background").await;
    wait_gone(&cms, "dep1", "garbage collector deletes dependent dep1").await;
    wait_gone(&cms, "dep2", "garbage collector deletes dependent dep2").await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_propagation_removes_owner_references() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let owner = cms
        .create(&PostParams::default(), &configmap("owner", &[], &[]))
        .await
        .expect("owner");
    let other = cms
        .create(&PostParams::default(), &configmap("other", &[], &[]))
        .await
        .expect("other owner");
    let mut dep = dependent("dep", &owner, false, &[]);
    dep.metadata
        .owner_references
        .get_or_insert_with(Vec::new)
        .push(owner_ref(&other, false));
    cms.create(&PostParams::default(), &dep).await.expect("dep");
    cms.delete("owner", &DeleteParams::orphan())
        .await
        .expect("delete owner with Orphan");
    wait_gone(&cms, "owner", "owner removed after orphaning").await;
    let dep = cms.get("dep").await.expect("orphaned dependent survives");
    let refs = dep.metadata.owner_references.unwrap_or_default();
    assert_eq!(
        refs.len(),
        1,
        "only the deleted owner's reference is removed: {refs:?}"
    );
    assert_eq!(refs[0].name, "other");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_propagation_keeps_owner_until_dependents_are_gone() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let owner = cms
        .create(&PostParams::default(), &configmap("owner", &[], &[]))
        .await
        .expect("owner");
    cms.create(
        &PostParams::default(),
        &dependent("blocker", &owner, true, &[HOLD]),
    )
    .await
    .expect("blocker");
    cms.create(
        &PostParams::default(),
        &dependent("plain", &owner, true, &[]),
    )
    .await
    .expect("plain");
    let deleted = cms
        .delete("owner", &DeleteParams::foreground())
        .await
        .expect("delete owner Foreground");
    let owner_now = deleted
        .left()
        .expect("foreground delete returns the terminating owner");
    assert!(owner_now.metadata.deletion_timestamp.is_some());
    assert!(
        owner_now
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == "foregroundDeletion"),
        "Foreground adds the foregroundDeletion finalizer to the owner"
    );
    wait_gone(&cms, "plain", "GC deletes the unblocked dependent").await;
    wait_for(
        "blocking dependent gets a deletionTimestamp",
        EVENTUALLY,
        || {
            let cms = cms.clone();
            async move {
                cms.get("blocker")
                    .await
                    .ok()?
                    .metadata
                    .deletion_timestamp
                    .map(|_| ())
            }
        },
    )
    .await;
    let owner_still = cms
        .get("owner")
        .await
        .expect("owner stays while a blocking dependent exists");
    assert!(owner_still.metadata.deletion_timestamp.is_some());
    cms.patch(
        "blocker",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release blocker");
    wait_gone(&cms, "blocker", "blocker removed once released").await;
    wait_gone(&cms, "owner", "owner removed once its dependents are gone").await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependent_of_a_missing_owner_is_collected() {
    let t = Target::sandbox_or_env().await;
    let cms = t.api::<ConfigMap>();
    let mut cm = configmap("stray", &[], &[]);
    cm.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "never-existed".into(),
        uid: "00000000-0000-0000-0000-000000000001".into(),
        ..Default::default()
    }]);
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create dependent of a missing owner");
    wait_gone(
        &cms,
        "stray",
        "GC deletes an object whose only owner does not exist",
    )
    .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_deletion_cascades_to_its_objects() {
    let t = Target::sandbox_or_env().await;
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    let name = t.cluster_name("doomed");
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("create namespace");
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &name);
    for i in 0..3 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("c{i}"), &[], &[]),
        )
        .await
        .expect("create cm");
    }
    let mut held = configmap("held", &[], &[]);
    held.metadata.finalizers = Some(vec![HOLD.into()]);
    cms.create(&PostParams::default(), &held)
        .await
        .expect("create held cm");
    namespaces
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete namespace");
    let ns = namespaces
        .get(&name)
        .await
        .expect("namespace is Terminating, not gone, while content remains");
    assert!(ns.metadata.deletion_timestamp.is_some());
    wait_for("namespace phase Terminating", EVENTUALLY, || {
        let namespaces = namespaces.clone();
        let name = name.clone();
        async move {
            let phase = namespaces.get(&name).await.ok()?.status?.phase?;
            (phase == "Terminating").then_some(())
        }
    })
    .await;
    let err = api_error(
        cms.create(&PostParams::default(), &configmap("late", &[], &[]))
            .await,
        "create in terminating namespace",
    );
    assert_status(
        &err,
        403,
        "Forbidden",
        "creating in a terminating namespace",
    );
    assert!(
        err.message.contains("because it is being terminated"),
        "{}",
        err.message
    );
    for i in 0..3 {
        wait_gone(
            &cms,
            &format!("c{i}"),
            "namespace deletion deletes its objects",
        )
        .await;
    }
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release held");
    wait_for(
        "namespace removed after its content is gone",
        EVENTUALLY * 3,
        || {
            let namespaces = namespaces.clone();
            let name = name.clone();
            async move {
                matches!(namespaces.get(&name).await, Err(kube::Error::Api(s)) if s.code == 404)
                    .then_some(())
            }
        },
    )
    .await;
    t.finish().await;
}
