//! v1beta1 reads, watches and writes go through the conversion webhook: objects stored as
//! v1alpha1 are served and watched in the v1beta1 shape and v1beta1 writes land in v1alpha1,
//! losslessly.

use std::sync::Arc;

use mcm_e2e::objects::{Kind, delete, must_get};
use mcm_e2e::{Result, System, ensure};
use serde_json::{Value, json};

use crate::harness::Outcome;
use crate::support::{kubectl, temp_file};

/// A v1alpha1 MachineClass and MachineDeployment (0 replicas: no machines) read and written as
/// v1beta1 with kubectl.
pub async fn v1beta1_reads_and_writes(system: Arc<System>) -> Result<Outcome> {
    let kubectl = match kubectl(&system) {
        Ok(k) => k,
        Err(skip) => return Ok(skip),
    };
    let ns = system.namespace().to_owned();
    // A class written as v1beta1 (fields under spec) is stored as v1alpha1 (fields at the top).
    let beta_class = json!({
        "apiVersion": "machine.sapcloud.io/v1beta1",
        "kind": "MachineClass",
        "metadata": {"name": "cv-class", "namespace": ns},
        "spec": {
            "provider": "virtual",
            "providerSpec": {"bootDelay": "1s", "tags": {"team": "conversion"}},
            "nodeTemplate": {"capacity": {"cpu": "2", "gpu": "0", "memory": "4Gi"}, "instanceType": "v.small", "region": "virt-1", "zone": "virt-1a"},
            "secretRef": {"name": mcm_e2e::system::USERDATA_SECRET, "namespace": ns}
        }
    });
    let (_d1, class_file) = temp_file("class-v1beta1.json", &beta_class.to_string());
    let out = kubectl
        .transcript(&["apply", "-f", &class_file.display().to_string()])
        .await?;
    ensure(out.success, || {
        format!("apply v1beta1 MachineClass: {}", out.text())
    })?;
    let stored = must_get(&system, Kind::MachineClass, "cv-class").await?;
    ensure(
        stored["providerSpec"]["tags"]["team"] == "conversion",
        || format!("v1alpha1 view of a v1beta1 class lacks top-level providerSpec: {stored}"),
    )?;
    ensure(stored["provider"] == "virtual", || {
        format!("provider lost: {stored}")
    })?;

    // A deployment written as v1alpha1 with the deprecated rollbackTo, read as v1beta1.
    let alpha_md = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": "cv-md", "namespace": ns},
        "spec": {
            "replicas": 0,
            "paused": true,
            "selector": {"matchLabels": {"name": "cv-md"}},
            "template": {
                "metadata": {"labels": {"name": "cv-md"}},
                "spec": {"class": {"kind": "MachineClass", "name": "cv-class"}, "drainTimeout": "2h0m0s", "maxEvictRetries": 7}
            }
        }
    });
    let (_d2, md_file) = temp_file("md-v1alpha1.json", &alpha_md.to_string());
    let out = kubectl
        .transcript(&["apply", "-f", &md_file.display().to_string()])
        .await?;
    ensure(out.success, || {
        format!("apply v1alpha1 MachineDeployment: {}", out.text())
    })?;
    let out = kubectl
        .ok(&[
            "get",
            "machinedeployments.v1beta1.machine.sapcloud.io",
            "cv-md",
            "-n",
            &ns,
            "-o",
            "json",
        ])
        .await?;
    let beta: Value = serde_json::from_str(&out.stdout).map_err(mcm_e2e::E2eError::decode(
        "kubectl get v1beta1 MachineDeployment",
    ))?;
    ensure(beta["apiVersion"] == "machine.sapcloud.io/v1beta1", || {
        format!("served as {}", beta["apiVersion"])
    })?;
    ensure(
        beta["spec"]["template"]["spec"]["configuration"]["drainTimeout"] == "2h0m0s",
        || format!("v1beta1 nests the machine configuration: {}", beta["spec"]),
    )?;
    let beta_class_read = kubectl
        .ok(&[
            "get",
            "machineclasses.v1beta1.machine.sapcloud.io",
            "cv-class",
            "-n",
            &ns,
            "-o",
            "json",
        ])
        .await?;
    let beta_class_read: Value = serde_json::from_str(&beta_class_read.stdout).map_err(
        mcm_e2e::E2eError::decode("kubectl get v1beta1 MachineClass"),
    )?;
    ensure(
        beta_class_read["spec"]["providerSpec"]["tags"]["team"] == "conversion",
        || format!("v1beta1 class has providerSpec under spec: {beta_class_read}"),
    )?;

    // A watch at v1beta1 sees a v1alpha1 write converted (the API server converts each event
    // through the webhook).
    let beta_classes: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        system.client(),
        &ns,
        &kube::api::ApiResource {
            group: "machine.sapcloud.io".into(),
            version: "v1beta1".into(),
            api_version: "machine.sapcloud.io/v1beta1".into(),
            kind: "MachineClass".into(),
            plural: "machineclasses".into(),
        },
    );
    let rv = beta_class_read["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let events = beta_classes
        .watch(
            &kube::api::WatchParams::default()
                .fields("metadata.name=cv-class")
                .timeout(60),
            &rv,
        )
        .await
        .map_err(mcm_e2e::E2eError::kube("watch v1beta1 MachineClasses"))?;
    mcm_e2e::objects::merge_patch(
        &system,
        Kind::MachineClass,
        "cv-class",
        json!({"providerSpec": {"tags": {"team": "watched"}}}),
    )
    .await?;
    let mut events = Box::pin(events);
    let seen = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        use futures::StreamExt as _;
        while let Some(event) = events.next().await {
            if let Ok(kube::api::WatchEvent::Modified(object)) = event {
                return Some(serde_json::to_value(object).unwrap_or_default());
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    ensure(
        seen.as_ref().is_some_and(|o| {
            o["apiVersion"] == "machine.sapcloud.io/v1beta1"
                && o["spec"]["providerSpec"]["tags"]["team"] == "watched"
        }),
        || format!("no v1beta1 MODIFIED event with the new tags: {seen:?}"),
    )?;

    // Write through v1beta1; the v1alpha1 object keeps what v1beta1 does not show.
    let mut edited = beta.clone();
    edited["spec"]["template"]["spec"]["configuration"]["drainTimeout"] = json!("1h0m0s");
    for key in [
        "resourceVersion",
        "managedFields",
        "uid",
        "creationTimestamp",
        "generation",
    ] {
        if let Some(meta) = edited["metadata"].as_object_mut() {
            meta.remove(key);
        }
    }
    edited.as_object_mut().map(|o| o.remove("status"));
    let (_d3, beta_file) = temp_file("md-v1beta1.json", &edited.to_string());
    let out = kubectl
        .transcript(&["apply", "-f", &beta_file.display().to_string()])
        .await?;
    ensure(out.success, || {
        format!("apply v1beta1 MachineDeployment: {}", out.text())
    })?;
    let stored = must_get(&system, Kind::MachineDeployment, "cv-md").await?;
    ensure(
        stored["spec"]["template"]["spec"]["drainTimeout"] == "1h0m0s",
        || format!("v1beta1 write not stored as v1alpha1: {}", stored["spec"]),
    )?;
    ensure(
        stored["spec"]["template"]["spec"]["maxEvictRetries"] == 7,
        || format!("maxEvictRetries lost in the round trip: {}", stored["spec"]),
    )?;
    ensure(stored["spec"]["paused"] == true, || {
        format!("paused lost: {}", stored["spec"])
    })?;

    delete(&system, Kind::MachineDeployment, "cv-md").await?;
    delete(&system, Kind::MachineClass, "cv-class").await?;
    Ok(Outcome::Passed)
}
