//! kube-apiserver's name and label rules: `generateName` leaves room for the 5-character suffix
//! within 63 characters, label keys and values follow `IsQualifiedName`/`IsValidLabelValue`, and
//! namespace names are RFC 1123 labels. Refusals are 422 Invalid with the field path.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{Target, api_error, assert_status, configmap};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_name_is_cut_to_58_characters_before_the_random_suffix() {
    let t = Target::sandbox_or_env().await;
    let base = format!("{}-", "g".repeat(69));
    let cm = ConfigMap {
        metadata: ObjectMeta {
            generate_name: Some(base.clone()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let created = t
        .api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await
        .expect("a long generateName is accepted");
    let name = created.metadata.name.clone().unwrap_or_default();
    assert_eq!(
        name.len(),
        63,
        "58 characters of the base and 5 random: {name}"
    );
    assert!(name.starts_with(&"g".repeat(58)), "{name}");
    assert_eq!(
        created.metadata.generate_name.as_deref(),
        Some(base.as_str()),
        "the generateName field itself is kept as written"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_value_over_63_characters_is_422_with_the_labels_path() {
    let t = Target::sandbox_or_env().await;
    let long = "v".repeat(64);
    let err = api_error(
        t.api::<ConfigMap>()
            .create(
                &PostParams::default(),
                &configmap("long-label", &[("node", &long)], &[]),
            )
            .await,
        "create with a 64-character label value",
    );
    assert_status(&err, 422, "Invalid", "a label value over 63 characters");
    assert_eq!(
        err.message,
        format!(
            "ConfigMap \"long-label\" is invalid: metadata.labels: Invalid value: \"{long}\": must be no more than 63 bytes"
        )
    );
    let causes = err.details.map(|d| d.causes).unwrap_or_default();
    assert!(
        causes
            .iter()
            .any(|c| c.field == "metadata.labels" && c.reason == "FieldValueInvalid"),
        "{causes:?}"
    );
    // The 63-character value fits; an update to a bad one is refused too.
    t.api::<ConfigMap>()
        .create(
            &PostParams::default(),
            &configmap("long-label", &[("node", &"v".repeat(63))], &[]),
        )
        .await
        .expect("63 characters are allowed");
    let err = api_error(
        t.api::<ConfigMap>()
            .patch(
                "long-label",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"node": "-bad"}}})),
            )
            .await,
        "patch to a label value starting with '-'",
    );
    assert_status(&err, 422, "Invalid", "a label value of bad shape");
    assert!(
        err.message.contains(
            "metadata.labels: Invalid value: \"-bad\": a valid label must be an empty string or consist of alphanumeric characters"
        ),
        "{}",
        err.message
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_keys_are_qualified_names() {
    let t = Target::sandbox_or_env().await;
    let err = api_error(
        t.api::<ConfigMap>()
            .create(
                &PostParams::default(),
                &configmap("bad-key", &[("a/b/c", "x")], &[]),
            )
            .await,
        "create with label key a/b/c",
    );
    assert_status(&err, 422, "Invalid", "a label key with two slashes");
    assert!(
        err.message.contains(
            "metadata.labels: Invalid value: \"a/b/c\": a valid label key must consist of"
        ),
        "{}",
        err.message
    );
    let long_name = format!("example.com/{}", "n".repeat(64));
    let err = api_error(
        t.api::<ConfigMap>()
            .create(
                &PostParams::default(),
                &configmap("bad-key", &[(&long_name, "x")], &[]),
            )
            .await,
        "create with a 64-character key name part",
    );
    assert!(
        err.message
            .contains("name part must be no more than 63 bytes"),
        "{}",
        err.message
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_names_are_rfc1123_labels() {
    let t = Target::sandbox_or_env().await;
    let long = "n".repeat(64);
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(long.clone()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let err = api_error(
        kube::Api::<Namespace>::all(t.client.clone())
            .create(&PostParams::default(), &namespace)
            .await,
        "create a 64-character namespace",
    );
    assert_status(&err, 422, "Invalid", "a namespace name over 63 characters");
    // kube labels the namespace `kubernetes.io/metadata.name: <name>` before validating, so the
    // label value is refused too.
    assert_eq!(
        err.message,
        format!(
            "Namespace \"{long}\" is invalid: [metadata.name: Invalid value: \"{long}\": must be no more than 63 characters, metadata.labels: Invalid value: \"{long}\": must be no more than 63 bytes]"
        ),
    );
    t.finish().await;
}
