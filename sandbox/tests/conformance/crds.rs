//! CustomResourceDefinitions: establishment, generation, status and scale subresources,
//! validation, defaulting, pruning, printer columns (Table), version conversion, and the MCM CRDs.

use std::time::Duration;

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use serde_json::{Value, json};

use crate::common::{
    EVENTUALLY, Target, api_error, assert_status, crd_resource, install_mcm_crds,
    install_widget_crd, raw, wait_for, warning_texts, widget, widget_crd, widget_group,
    widget_resource,
};

fn causes(status: &Status) -> Vec<(String, String, String)> {
    status
        .details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| (c.field.clone(), c.reason.clone(), c.message.clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_is_established_with_accepted_names() {
    let t = Target::sandbox_or_env().await;
    install_widget_crd(&t).await;
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let crd = crds
        .get(&format!("widgets.{}", widget_group(&t)))
        .await
        .expect("get CRD");
    let status = crd.status.expect("CRD status");
    let conditions = status.conditions.unwrap_or_default();
    for ty in ["Established", "NamesAccepted"] {
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == ty && c.status == "True"),
            "CRD condition {ty}=True: {conditions:?}"
        );
    }
    let accepted = status.accepted_names.expect("status.acceptedNames");
    assert_eq!(accepted.kind, "Widget");
    assert_eq!(accepted.plural, "widgets");
    assert_eq!(accepted.short_names, Some(vec!["wg".to_string()]));
    assert_eq!(
        status.stored_versions,
        Some(vec!["v1".to_string()]),
        "status.storedVersions"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_bumps_on_spec_change_only() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    let created = api
        .create(
            &PostParams::default(),
            &widget(&resource, "g", json!({"replicas": 1})),
        )
        .await
        .expect("create");
    assert_eq!(
        created.metadata.generation,
        Some(1),
        "generation starts at 1"
    );
    let patched = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("spec patch");
    assert_eq!(
        patched.metadata.generation,
        Some(2),
        "a spec change bumps generation"
    );
    let same = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("no-op spec patch");
    assert_eq!(
        same.metadata.generation,
        Some(2),
        "a no-op write does not bump generation"
    );
    let labelled = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}, "annotations": {"c": "d"}}})),
        )
        .await
        .expect("metadata patch");
    assert_eq!(
        labelled.metadata.generation,
        Some(2),
        "label/annotation changes do not bump generation"
    );
    let status = api
        .patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .expect("status patch");
    assert_eq!(
        status.metadata.generation,
        Some(2),
        "status changes do not bump generation"
    );
    let finalized = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["conformance.example.com/x"]}})),
        )
        .await
        .expect("finalizer patch");
    assert_eq!(
        finalized.metadata.generation,
        Some(2),
        "finalizer changes do not bump generation"
    );
    api.patch(
        "g",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("drop finalizer");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_subresource_separates_spec_and_status_writes() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    let mut w = widget(&resource, "s", json!({"replicas": 1}));
    w.data["status"] = json!({"phase": "Set-on-create"});
    let created = api
        .create(&PostParams::default(), &w)
        .await
        .expect("create");
    assert!(
        created
            .data
            .get("status")
            .is_none_or(|s| s.get("phase").is_none()),
        "with a status subresource, status in a create body is dropped: {:?}",
        created.data
    );
    let status = api
        .patch_status(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready", "replicas": 1}})),
        )
        .await
        .expect("status patch");
    assert_eq!(status.data["status"]["phase"], "Ready");

    // Main resource writes ignore status changes.
    let mut current = api.get("s").await.expect("get");
    current.data["status"]["phase"] = json!("Hacked");
    current.data["spec"]["replicas"] = json!(4);
    let updated = api
        .replace("s", &PostParams::default(), &current)
        .await
        .expect("replace main resource");
    assert_eq!(
        updated.data["spec"]["replicas"], 4,
        "spec change through the main resource is stored"
    );
    assert_eq!(
        updated.data["status"]["phase"], "Ready",
        "status change through the main resource is ignored"
    );

    // Status writes ignore spec (and metadata other than a few fields).
    let mut current = api.get("s").await.expect("get");
    current.data["status"]["phase"] = json!("Degraded");
    current.data["spec"]["replicas"] = json!(9);
    let updated = api
        .replace_status("s", &PostParams::default(), &current)
        .await
        .expect("replace status");
    assert_eq!(
        updated.data["status"]["phase"], "Degraded",
        "status write stores status"
    );
    assert_eq!(
        updated.data["spec"]["replicas"], 4,
        "spec change through /status is ignored"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_subresource_get_replace_patch() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    api.create(
        &PostParams::default(),
        &widget(&resource, "sc", json!({"replicas": 2})),
    )
    .await
    .expect("create");
    api.patch_status(
        "sc",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"replicas": 1, "labelSelector": "app=sc"}})),
    )
    .await
    .expect("status");
    let scale = api.get_scale("sc").await.expect("GET widgets/sc/scale");
    assert_eq!(
        scale.spec.as_ref().and_then(|s| s.replicas),
        Some(2),
        "scale.spec.replicas from .spec.replicas"
    );
    let st = scale.status.clone().expect("scale.status");
    assert_eq!(
        st.replicas, 1,
        "scale.status.replicas from .status.replicas"
    );
    assert_eq!(
        st.selector.as_deref(),
        Some("app=sc"),
        "scale.status.selector from labelSelectorPath"
    );
    assert_eq!(scale.metadata.name.as_deref(), Some("sc"));
    let raw_scale = raw(
        &t.client,
        "GET",
        &format!(
            "/apis/{}/v1/namespaces/{}/widgets/sc/scale",
            resource.group, t.ns
        ),
        &[],
        vec![],
    )
    .await
    .json();
    assert_eq!(
        raw_scale["apiVersion"], "autoscaling/v1",
        "scale is served as autoscaling/v1: {raw_scale}"
    );
    assert_eq!(raw_scale["kind"], "Scale");

    let mut new_scale: Scale = scale.clone();
    new_scale.spec.get_or_insert_with(Default::default).replicas = Some(5);
    let replaced = api
        .replace_scale("sc", &PostParams::default(), &new_scale)
        .await
        .expect("PUT scale");
    assert_eq!(replaced.spec.and_then(|s| s.replicas), Some(5));
    let obj = api.get("sc").await.expect("get");
    assert_eq!(
        obj.data["spec"]["replicas"], 5,
        "scale writes go to .spec.replicas"
    );
    assert_eq!(
        obj.metadata.generation,
        Some(2),
        "a scale change is a spec change"
    );

    let patched = api
        .patch_scale(
            "sc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 7}})),
        )
        .await
        .expect("PATCH scale");
    assert_eq!(patched.spec.and_then(|s| s.replicas), Some(7));
    assert_eq!(
        api.get("sc").await.expect("get").data["spec"]["replicas"],
        7
    );

    let mut stale = scale;
    stale.spec.get_or_insert_with(Default::default).replicas = Some(3);
    let err = api_error(
        api.replace_scale("sc", &PostParams::default(), &stale)
            .await,
        "scale with stale rv",
    );
    assert_status(
        &err,
        409,
        "Conflict",
        "PUT scale with a stale resourceVersion",
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_violations_are_422_invalid_with_field_causes() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    let group = widget_group(&t);

    let err = api_error(
        api.create(
            &PostParams::default(),
            &widget(&resource, "bad", json!({"replicas": "three"})),
        )
        .await,
        "wrong type",
    );
    assert_status(&err, 422, "Invalid", "spec.replicas of the wrong type");
    assert!(
        err.message
            .starts_with(&format!("Widget.{group} \"bad\" is invalid: ")),
        "message starts with '<Kind>.<group> \"<name>\" is invalid: ': {}",
        err.message
    );
    let c = causes(&err);
    assert!(
        c.iter().any(|(field, reason, msg)| field == "spec.replicas"
            && reason == "FieldValueTypeInvalid"
            && msg.contains("must be of type integer")),
        "cause for spec.replicas (FieldValueTypeInvalid, 'must be of type integer'): {c:?}"
    );
    let d = err.details.expect("details");
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("bad", group.as_str(), "Widget")
    );

    let err = api_error(
        api.create(
            &PostParams::default(),
            &widget(
                &resource,
                "bad",
                json!({"replicas": -1, "size": "huge", "color": "a-very-long-color"}),
            ),
        )
        .await,
        "three violations",
    );
    assert_status(&err, 422, "Invalid", "several schema violations");
    let c = causes(&err);
    let fields: Vec<&str> = c.iter().map(|(f, _, _)| f.as_str()).collect();
    for (field, reason) in [
        ("spec.replicas", "FieldValueInvalid"),
        ("spec.size", "FieldValueNotSupported"),
        ("spec.color", "FieldValueTooLong"),
    ] {
        assert!(
            c.iter().any(|(f, r, _)| f == field && r == reason),
            "one cause per violation: {field} {reason}; got {fields:?} / {c:?}"
        );
    }
    assert!(
        c.iter()
            .any(|(f, _, m)| f == "spec.size"
                && m.contains("supported values: \"small\", \"large\"")),
        "enum violation lists supported values: {c:?}"
    );

    api.create(
        &PostParams::default(),
        &widget(&resource, "good", json!({"replicas": 1})),
    )
    .await
    .expect("valid object");
    let err = api_error(
        api.patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": -5}})),
        )
        .await,
        "invalid patch",
    );
    assert_status(&err, 422, "Invalid", "a patch producing an invalid object");
    let err = api_error(
        api.patch_status(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": "x"}})),
        )
        .await,
        "invalid status patch",
    );
    assert_status(&err, 422, "Invalid", "status writes are validated too");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_defaults_are_applied() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    let created = api
        .create(&PostParams::default(), &widget(&resource, "d", json!({})))
        .await
        .expect("create");
    assert_eq!(
        created.data["spec"]["replicas"], 1,
        "default replicas=1 applied on create"
    );
    assert_eq!(
        created.data["spec"]["size"], "small",
        "default size=small applied on create"
    );
    let stored = api.get("d").await.expect("get");
    assert_eq!(
        stored.data["spec"]["size"], "small",
        "defaults are persisted"
    );
    let patched = api
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": null}})),
        )
        .await
        .expect("remove size");
    assert_eq!(
        patched.data["spec"]["size"], "small",
        "defaulting also runs on update"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_are_pruned_except_preserved_subtrees() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    let mut w = widget(
        &resource,
        "p",
        json!({"replicas": 1, "unknownField": "x", "free": {"anything": {"nested": [1, 2]}}}),
    );
    w.data["topLevelUnknown"] = json!(true);
    let created = api
        .create(&PostParams::default(), &w)
        .await
        .expect("create with unknown fields");
    assert!(
        created.data["spec"].get("unknownField").is_none(),
        "unknown spec field pruned: {:?}",
        created.data
    );
    assert!(
        created.data.get("topLevelUnknown").is_none(),
        "unknown top-level field pruned"
    );
    assert_eq!(
        created.data["spec"]["free"]["anything"]["nested"],
        json!([1, 2]),
        "x-kubernetes-preserve-unknown-fields keeps the subtree"
    );
    let stored = api.get("p").await.expect("get");
    assert!(
        stored.data["spec"].get("unknownField").is_none(),
        "pruned fields are not stored"
    );

    // fieldValidation=Strict rejects unknown fields with 400 instead of pruning them.
    let body = json!({"apiVersion": resource.api_version, "kind": "Widget",
        "metadata": {"name": "strict"}, "spec": {"replicas": 1, "unknownField": "x"}});
    let path = format!(
        "/apis/{}/v1/namespaces/{}/widgets?fieldValidation=Strict",
        resource.group, t.ns
    );
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[("content-type", "application/json")],
        body.to_string().into_bytes(),
    )
    .await;
    let status = response.assert_status_object(
        400,
        "BadRequest",
        "fieldValidation=Strict with an unknown field",
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap_or("")
            .contains("unknown field \"spec.unknownField\""),
        "strict decoding error names the field: {status}"
    );
    // fieldValidation=Warn accepts and warns.
    let path = format!(
        "/apis/{}/v1/namespaces/{}/widgets?fieldValidation=Warn",
        resource.group, t.ns
    );
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[("content-type", "application/json")],
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(
        response.status, 201,
        "fieldValidation=Warn creates the object"
    );
    let warnings = warning_texts(&response.headers);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("unknown field \"spec.unknownField\"")),
        "Warning header names the unknown field: {warnings:?}"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_output_uses_printer_columns() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    api.create(
        &PostParams::default(),
        &widget(&resource, "tbl", json!({"replicas": 3, "size": "large"})),
    )
    .await
    .expect("create");
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let path = format!("/apis/{}/v1/namespaces/{}/widgets", resource.group, t.ns);
    let response = raw(&t.client, "GET", &path, &[("accept", accept)], vec![]).await;
    assert_eq!(response.status, 200);
    let table = response.json();
    assert_eq!(
        table["kind"], "Table",
        "Accept as=Table returns a Table: {table}"
    );
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("columnDefinitions")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        vec!["Name", "Replicas", "Size", "Phase", "Age"],
        "Name first, then the printer columns"
    );
    assert_eq!(table["columnDefinitions"][0]["format"], "name");
    assert_eq!(table["columnDefinitions"][1]["type"], "integer");
    assert_eq!(
        table["columnDefinitions"][1]["description"],
        "desired replicas"
    );
    let rows = table["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1);
    let cells = rows[0]["cells"].as_array().expect("cells");
    assert_eq!(cells[0], "tbl");
    assert_eq!(cells[1], 3, "integer column is a JSON number");
    assert_eq!(cells[2], "large");
    assert_eq!(cells[3], Value::Null, "a missing value is null");
    assert!(
        cells[4]
            .as_str()
            .is_some_and(|s| s.ends_with('s') || s.ends_with('m')),
        "Age is a human duration like 5s: {}",
        cells[4]
    );
    let object = &rows[0]["object"];
    assert_eq!(
        object["kind"], "PartialObjectMetadata",
        "rows carry object metadata by default: {object}"
    );
    assert_eq!(object["metadata"]["name"], "tbl");

    // A single object as a Table.
    let response = raw(
        &t.client,
        "GET",
        &format!("{path}/tbl"),
        &[("accept", accept)],
        vec![],
    )
    .await;
    let single = response.json();
    assert_eq!(single["kind"], "Table");
    assert_eq!(single["rows"].as_array().map(Vec::len), Some(1));

    // Built-in kinds have their own columns (ConfigMap: Name, Data, Age).
    let response = raw(
        &t.client,
        "GET",
        &format!("/api/v1/namespaces/{}/configmaps", t.ns),
        &[("accept", accept)],
        vec![],
    )
    .await;
    let cm_table = response.json();
    assert_eq!(cm_table["kind"], "Table");
    let names: Vec<&str> = cm_table["columnDefinitions"]
        .as_array()
        .expect("columnDefinitions")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        vec!["Name", "Data", "Age"],
        "ConfigMap table columns"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_none_rewrites_api_version() {
    let t = Target::sandbox_or_env().await;
    let v1 = install_widget_crd(&t).await;
    let v1beta1 = widget_resource(&v1.group, "v1beta1");
    let api_v1 = t.dyn_api(&v1);
    let api_beta = t.dyn_api(&v1beta1);
    api_v1
        .create(
            &PostParams::default(),
            &widget(&v1, "cv", json!({"replicas": 2})),
        )
        .await
        .expect("create through v1");
    let through_beta = api_beta.get("cv").await.expect("get through v1beta1");
    assert_eq!(
        through_beta.types.as_ref().map(|t| t.api_version.clone()),
        Some(format!("{}/v1beta1", v1.group)),
        "strategy None: only apiVersion changes"
    );
    assert_eq!(through_beta.data["spec"]["replicas"], 2);
    api_beta
        .create(
            &PostParams::default(),
            &widget(&v1beta1, "cb", json!({"replicas": 3})),
        )
        .await
        .expect("create through v1beta1");
    let list = api_v1
        .list(&ListParams::default())
        .await
        .expect("list through v1");
    let cb = list
        .items
        .iter()
        .find(|o| o.metadata.name.as_deref() == Some("cb"))
        .expect("cb listed via v1");
    assert_eq!(cb.data["spec"]["replicas"], 3);
    let raw_list = raw(
        &t.client,
        "GET",
        &format!("/apis/{}/v1/namespaces/{}/widgets", v1.group, t.ns),
        &[],
        vec![],
    )
    .await
    .json();
    for item in raw_list["items"].as_array().expect("items") {
        assert_eq!(
            item["apiVersion"],
            format!("{}/v1", v1.group),
            "every listed item is served at v1: {item}"
        );
    }
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let crd = crds
        .get(&format!("widgets.{}", v1.group))
        .await
        .expect("crd");
    assert_eq!(
        crd.status.and_then(|s| s.stored_versions),
        Some(vec!["v1".to_string()]),
        "objects are stored at the storage version only"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_patch_on_custom_resource_is_415() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    api.create(&PostParams::default(), &widget(&resource, "smp", json!({})))
        .await
        .expect("create");
    let err = api_error(
        api.patch(
            "smp",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"replicas": 2}})),
        )
        .await,
        "SMP on a CR",
    );
    assert_status(
        &err,
        415,
        "UnsupportedMediaType",
        "strategic merge patch on a custom resource",
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_crd_removes_its_objects_and_endpoint() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    api.create(&PostParams::default(), &widget(&resource, "x", json!({})))
        .await
        .expect("create");
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    crds.delete(
        &format!("widgets.{}", resource.group),
        &DeleteParams::default(),
    )
    .await
    .expect("delete CRD");
    wait_for("CRD and its endpoint disappear", EVENTUALLY, || {
        let api = api.clone();
        let crds = crds.clone();
        let name = format!("widgets.{}", resource.group);
        async move {
            let crd_gone = matches!(crds.get(&name).await, Err(kube::Error::Api(s)) if s.code == 404);
            let endpoint_gone = matches!(api.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 404);
            (crd_gone && endpoint_gone).then_some(())
        }
    })
    .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcm_crds_install_and_serve_objects() {
    let t = Target::sandbox_or_env().await;
    let crds = install_mcm_crds(&t.client).await;
    let by_kind = |kind: &str| {
        crds.iter()
            .find(|c| c.spec.names.kind == kind)
            .unwrap_or_else(|| panic!("MCM CRD for {kind} installed"))
    };
    let md_crd = by_kind("MachineDeployment");
    let class = crd_resource(by_kind("MachineClass"));
    let md = crd_resource(md_crd);
    let classes: Api<DynamicObject> = t.dyn_api(&class);
    let mds: Api<DynamicObject> = t.dyn_api(&md);
    let mc: DynamicObject = serde_json::from_value(json!({
        "apiVersion": class.api_version, "kind": "MachineClass",
        "metadata": {"name": "mc1"},
        "providerSpec": {"anything": {"goes": true}},
        "secretRef": {"name": "cloud", "namespace": t.ns},
        "provider": "virtual"
    }))
    .expect("MachineClass literal");
    let created = classes
        .create(&PostParams::default(), &mc)
        .await
        .expect("create MachineClass");
    assert_eq!(
        created.data["providerSpec"]["anything"]["goes"], true,
        "providerSpec is preserved (x-kubernetes-preserve-unknown-fields)"
    );
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": md.api_version, "kind": "MachineDeployment",
        "metadata": {"name": "md1"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"name": "md1"}},
            "template": {
                "metadata": {"labels": {"name": "md1"}},
                "spec": {"class": {"kind": "MachineClass", "name": "mc1"}}
            }
        }
    }))
    .expect("MachineDeployment literal");
    mds.create(&PostParams::default(), &obj)
        .await
        .expect("create MachineDeployment");
    let scale = mds
        .get_scale("md1")
        .await
        .expect("machinedeployments/scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    mds.patch_scale(
        "md1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .expect("scale to 3");
    mds.patch_status(
        "md1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"replicas": 3}})),
    )
    .await
    .expect("machinedeployments/status");
    let got = mds.get("md1").await.expect("get");
    assert_eq!(got.data["spec"]["replicas"], 3);
    assert_eq!(got.data["status"]["replicas"], 3);
    let err = api_error(
        mds.patch(
            "md1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": "many"}})),
        )
        .await,
        "invalid MachineDeployment",
    );
    assert_status(&err, 422, "Invalid", "MCM CRD schema is enforced");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_schema_changes_take_effect() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    api.create(
        &PostParams::default(),
        &widget(&resource, "before", json!({"color": "blue"})),
    )
    .await
    .expect("maxLength 10 accepts blue");
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let name = format!("widgets.{}", resource.group);
    let patch = json!([
        {"op": "replace", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/color/maxLength", "value": 3},
        {"op": "add", "path": "/spec/versions/0/additionalPrinterColumns/-",
         "value": {"name": "Color", "type": "string", "jsonPath": ".spec.color"}}
    ]);
    crds.patch(
        &name,
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(patch).expect("patch")),
    )
    .await
    .expect("patch CRD schema");
    let err = wait_for("the new maxLength is enforced", EVENTUALLY, || {
        let api = api.clone();
        let resource = resource.clone();
        async move {
            match api
                .create(
                    &PostParams::default(),
                    &widget(&resource, "after", json!({"color": "blue"})),
                )
                .await
            {
                Err(kube::Error::Api(s)) => Some(*s),
                Ok(_) => {
                    let _ = api.delete("after", &DeleteParams::default()).await;
                    None
                }
                Err(_) => None,
            }
        }
    })
    .await;
    assert_status(&err, 422, "Invalid", "a value over the updated maxLength");
    // kube-apiserver swaps a CRD's validation and its table convertor without promising that
    // both change at once: the printer column is waited for like the maxLength above.
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let path = format!("/apis/{}/v1/namespaces/{}/widgets", resource.group, t.ns);
    wait_for("an added printer column shows up", EVENTUALLY, || {
        let client = t.client.clone();
        let path = path.clone();
        async move {
            let table = raw(&client, "GET", &path, &[("accept", accept)], vec![])
                .await
                .json();
            let names: Vec<String> = table["columnDefinitions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|c| c["name"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            names.iter().any(|n| n == "Color").then_some(())
        }
    })
    .await;
    let stored = api
        .get("before")
        .await
        .expect("existing objects stay readable");
    assert_eq!(
        stored.data["spec"]["color"], "blue",
        "existing objects are not rewritten"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_mcm_api_objects_roundtrip() {
    use mcm_api::v1alpha1::{ClassSpec, Machine, MachineDeployment, MachinePhase, MachineSpec};
    let t = Target::sandbox_or_env().await;
    install_mcm_crds(&t.client).await;
    let machines: Api<Machine> = Api::namespaced(t.client.clone(), &t.ns);
    let spec = MachineSpec {
        class: Some(ClassSpec {
            kind: Some("MachineClass".into()),
            name: Some("mc1".into()),
            ..Default::default()
        }),
        provider_id: Some("virtual:///m1".into()),
        ..Default::default()
    };
    let machine = Machine::new("m1", spec.clone());
    let created = machines
        .create(&PostParams::default(), &machine)
        .await
        .expect("create typed Machine");
    assert_eq!(
        created.spec, spec,
        "a typed Machine round-trips unchanged through the CRD schema"
    );
    let status = json!({"status": {"currentStatus": {"phase": "Running", "timeoutActive": false,
        "lastUpdateTime": "2026-01-01T00:00:00Z"},
        "lastOperation": {"description": "Machine m1 successfully joined the cluster", "state": "Successful",
            "type": "Create", "lastUpdateTime": "2026-01-01T00:00:00Z"}}});
    let patched = machines
        .patch_status("m1", &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("patch typed Machine status");
    assert_eq!(
        patched
            .status
            .and_then(|s| s.current_status)
            .and_then(|c| c.phase),
        Some(MachinePhase::Running),
        "status round-trips into the typed MachineStatus"
    );
    let mds: Api<MachineDeployment> = Api::namespaced(t.client.clone(), &t.ns);
    let md: MachineDeployment = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": "md1"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"name": "md1"}},
            "template": {"metadata": {"labels": {"name": "md1"}},
                "spec": {"class": {"kind": "MachineClass", "name": "mc1"}}}}
    }))
    .expect("typed MachineDeployment");
    let created = mds
        .create(&PostParams::default(), &md)
        .await
        .expect("create typed MachineDeployment");
    assert_eq!(created.spec.replicas, Some(2));
    let listed = mds.list(&ListParams::default()).await.expect("typed list");
    assert_eq!(listed.items.len(), 1);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_support_metadata_field_selectors_only() {
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    for name in ["f1", "f2"] {
        api.create(
            &PostParams::default(),
            &widget(&resource, name, json!({"size": "large"})),
        )
        .await
        .expect("create");
    }
    let names: Vec<String> = api
        .list(&ListParams::default().fields("metadata.name=f2"))
        .await
        .expect("metadata.name field selector on a CR")
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    assert_eq!(names, vec!["f2".to_string()]);
    let err = api_error(
        api.list(&ListParams::default().fields("spec.size=large"))
            .await,
        "field selector on a spec field of a CR",
    );
    assert_status(
        &err,
        400,
        "BadRequest",
        "CRs only support metadata.name/metadata.namespace field selectors (without selectableFields)",
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_across_custom_and_builtin_kinds() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let api = t.dyn_api(&resource);
    let owner = api
        .create(
            &PostParams::default(),
            &widget(&resource, "owner", json!({})),
        )
        .await
        .expect("owner");
    let owner_ref = json!([{"apiVersion": resource.api_version, "kind": "Widget", "name": "owner",
        "uid": owner.metadata.uid, "controller": true, "blockOwnerDeletion": true}]);
    let mut child = widget(&resource, "child", json!({}));
    child.metadata.owner_references = serde_json::from_value(owner_ref.clone()).expect("refs");
    api.create(&PostParams::default(), &child)
        .await
        .expect("child widget");
    let cms = t.api::<ConfigMap>();
    let mut cm = crate::common::configmap("child-cm", &[], &[]);
    cm.metadata.owner_references = serde_json::from_value(owner_ref).expect("refs");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("child configmap");
    api.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    // kube's garbage collector learns of a new kind by rediscovering the API every 30 s, so on
    // a real cluster the cascade for a freshly created CRD may wait that long first.
    let limit = if t.is_real() {
        Duration::from_secs(90)
    } else {
        EVENTUALLY
    };
    wait_for(
        "GC deletes a CR owned by a CR and a ConfigMap owned by a CR",
        limit,
        || {
            let api = api.clone();
            let cms = cms.clone();
            async move {
                let widget_gone =
                    matches!(api.get("child").await, Err(kube::Error::Api(s)) if s.code == 404);
                let cm_gone =
                    matches!(cms.get("child-cm").await, Err(kube::Error::Api(s)) if s.code == 404);
                (widget_gone && cm_gone).then_some(())
            }
        },
    )
    .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_deletion_removes_custom_resources() {
    use k8s_openapi::api::core::v1::Namespace;
    let t = Target::sandbox_or_env().await;
    let resource = install_widget_crd(&t).await;
    let ns = t.cluster_name("crs");
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
        )
        .await
        .expect("create namespace");
    let api: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &ns, &resource);
    api.create(&PostParams::default(), &widget(&resource, "w", json!({})))
        .await
        .expect("create widget");
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    wait_for(
        "namespace and its custom resources are gone",
        EVENTUALLY * 3,
        || {
            let namespaces = namespaces.clone();
            let api = api.clone();
            let ns = ns.clone();
            async move {
                let ns_gone =
                    matches!(namespaces.get(&ns).await, Err(kube::Error::Api(s)) if s.code == 404);
                let widget_gone =
                    matches!(api.get("w").await, Err(kube::Error::Api(s)) if s.code == 404);
                (ns_gone && widget_gone).then_some(())
            }
        },
    )
    .await;
    t.finish().await;
}

/// The API server owns object metadata: a CRD whose root `metadata` schema says more than
/// `type: object` (here only a description, as generators write it) is refused, for the shared
/// schema of every version and for one version's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_root_metadata_schema_may_only_name_name_and_generate_name() {
    let t = Target::sandbox_or_env().await;
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let group = widget_group(&t);
    let mut crd = serde_json::to_value(widget_crd(&group)).expect("CRD as JSON");
    let versions = crd["spec"]["versions"]
        .as_array_mut()
        .expect("widget CRD has versions");
    for version in versions.iter_mut() {
        version["schema"]["openAPIV3Schema"]["properties"]["metadata"] =
            json!({"type": "object", "description": "Standard object metadata."});
    }
    let shared: CustomResourceDefinition = serde_json::from_value(crd.clone()).expect("typed CRD");
    let err = api_error(
        crds.create(&PostParams::default(), &shared).await,
        "a CRD with a described root metadata",
    );
    assert_status(&err, 422, "Invalid", "a CRD with a described root metadata");
    let forbidden = (
        "spec.validation.openAPIV3Schema.properties[metadata]".to_string(),
        "FieldValueForbidden".to_string(),
        "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified".to_string(),
    );
    assert_eq!(causes(&err), vec![forbidden]);

    // One version differs: kube names that version's schema.
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] =
        json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}});
    let one: CustomResourceDefinition = serde_json::from_value(crd).expect("typed CRD");
    let err = api_error(
        crds.create(&PostParams::default(), &one).await,
        "a CRD whose second version describes its root metadata",
    );
    let fields: Vec<String> = causes(&err).into_iter().map(|(f, _, _)| f).collect();
    assert_eq!(
        fields,
        vec!["spec.versions[1].schema.openAPIV3Schema.properties[metadata]".to_string()],
        "a name constraint is allowed; the described metadata of version 1 is not"
    );
    t.finish().await;
}

/// A custom resource with a scale subresource is checked by kube-apiserver itself before any
/// validating webhook: a negative `specReplicasPath` value is refused at the path as written
/// (`.spec.replicas`), even when the schema sets no minimum (as the MCM CRDs, like upstream's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_replicas_of_a_scalable_custom_resource_are_422() {
    let t = Target::sandbox_or_env().await;
    let crds = install_mcm_crds(&t.client).await;
    let md_crd = crds
        .iter()
        .find(|c| c.spec.names.kind == "MachineDeployment")
        .expect("MachineDeployment CRD installed");
    let md = crd_resource(md_crd);
    let mds: Api<DynamicObject> = t.dyn_api(&md);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": md.api_version, "kind": "MachineDeployment",
        "metadata": {"name": "negative"},
        "spec": {
            "replicas": -1,
            "selector": {"matchLabels": {"name": "negative"}},
            "template": {
                "metadata": {"labels": {"name": "negative"}},
                "spec": {"class": {"kind": "MachineClass", "name": "mc1"}}
            }
        }
    }))
    .expect("MachineDeployment literal");
    let err = api_error(
        mds.create(&PostParams::default(), &obj).await,
        "a MachineDeployment with replicas -1",
    );
    assert_status(&err, 422, "Invalid", "replicas -1 of a scalable resource");
    assert_eq!(
        err.message,
        "MachineDeployment.machine.sapcloud.io \"negative\" is invalid: .spec.replicas: Invalid value: -1: should be a non-negative integer"
    );
    t.finish().await;
}

/// Groups that Kubernetes reserves (`*.k8s.io`, `*.kubernetes.io`) take a CRD only with the
/// `api-approved.kubernetes.io` annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_of_protected_groups_need_the_approval_annotation() {
    let t = Target::sandbox_or_env().await;
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let group = format!("{}.k8s.io", t.ns);
    let mut crd = serde_json::to_value(widget_crd(&group)).expect("CRD as JSON");
    let err = api_error(
        crds.create(
            &PostParams::default(),
            &serde_json::from_value(crd.clone()).expect("typed CRD"),
        )
        .await,
        "a CRD in a *.k8s.io group without approval",
    );
    assert_status(&err, 422, "Invalid", "a CRD in a protected group");
    assert_eq!(
        causes(&err),
        vec![(
            "metadata.annotations[api-approved.kubernetes.io]".to_string(),
            "FieldValueRequired".to_string(),
            "Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111".to_string(),
        )]
    );
    crd["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/kubernetes/pull/63797"});
    let approved: CustomResourceDefinition = serde_json::from_value(crd).expect("typed CRD");
    crds.create(&PostParams::default(), &approved)
        .await
        .expect("an approved CRD in a protected group is accepted");
    t.delete_at_end(
        kube::api::ApiResource::erase::<CustomResourceDefinition>(&()),
        &format!("widgets.{group}"),
    );
    t.finish().await;
}
