//! Invalid objects are rejected by the admission webhook, and kubectl prints one line per bad
//! field; nothing is stored. Negative replicas never reach the webhook: kube-apiserver checks the
//! scale subresource's replicas path first and answers with that one error.

use std::sync::Arc;

use mcm_e2e::objects::{Kind, get};
use mcm_e2e::{E2eError, Result, System, ensure};

use crate::harness::Outcome;
use crate::support::{kubectl, temp_file};

fn invalid_deployment(namespace: &str, replicas: i32) -> String {
    format!(
        "apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineDeployment
metadata:
  name: adm-invalid
  namespace: {namespace}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      name: adm-a
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 0
      maxUnavailable: 0%
  template:
    metadata:
      labels:
        name: adm-b
    spec:
      class:
        kind: AWSMachineClass
        name: adm-class
      drainTimeout: 0s
"
    )
}

fn invalid_machine_set(namespace: &str, replicas: i32) -> String {
    format!(
        "apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineSet
metadata:
  name: adm-invalid-set
  namespace: {namespace}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      name: adm-set
  template:
    metadata:
      labels:
        name: adm-set
    spec:
      class:
        kind: MachineClass
        name: adm-class
      healthTimeout: 0s
      drainTimeout: 0s
"
    )
}

/// kubectl apply (server dry run and real) of an invalid MachineDeployment and MachineSet.
pub async fn invalid_objects_rejected(system: Arc<System>) -> Result<Outcome> {
    let kubectl = match kubectl(&system) {
        Ok(k) => k,
        Err(skip) => return Ok(skip),
    };
    let ns = system.namespace();
    for (kind, name, manifest) in [
        (
            "MachineDeployment",
            "adm-invalid",
            invalid_deployment(ns, -1),
        ),
        ("MachineSet", "adm-invalid-set", invalid_machine_set(ns, -2)),
    ] {
        let (_dir, file) = temp_file("negative.yaml", &manifest);
        let output = kubectl
            .transcript(&["apply", "-f", &file.display().to_string()])
            .await?;
        let replicas = if kind == "MachineSet" { -2 } else { -1 };
        let line = format!(
            "The {kind} \"{name}\" is invalid: .spec.replicas: Invalid value: {replicas}: should be a non-negative integer"
        );
        ensure(!output.success && output.stderr.contains(&line), || {
            format!(
                "negative replicas: expected kube-apiserver's own error {line:?}, got: {}",
                output.text()
            )
        })?;
    }
    let (_dir, md_file) = temp_file("invalid-md.yaml", &invalid_deployment(ns, 1));
    let md_path = md_file.display().to_string();
    for dry_run in [true, false] {
        let mut args = vec!["apply", "-f", md_path.as_str()];
        if dry_run {
            args.push("--dry-run=server");
        }
        let output = kubectl.transcript(&args).await?;
        ensure(!output.success, || {
            format!(
                "kubectl apply of an invalid MachineDeployment succeeded: {}",
                output.text()
            )
        })?;
        ensure(
            output
                .stderr
                .contains("The MachineDeployment \"adm-invalid\" is invalid:"),
            || format!("no 'is invalid' headline in: {}", output.stderr),
        )?;
        for line in [
            "* spec.template.metadata.labels: Invalid value: {\"name\":\"adm-b\"}: `selector` does not match template `labels`",
            "* spec.strategy.rollingUpdate.maxUnavailable: Invalid value: \"0%\": may not be 0 when `maxSurge` is 0",
            "* spec.template.spec.class.kind: Unsupported value: \"AWSMachineClass\": supported values: \"MachineClass\"",
            "* spec.template.spec.drainTimeout: Invalid value: \"0s\": must be greater than 0",
        ] {
            ensure(output.stderr.contains(line), || {
                format!("missing per-field error {line:?} in:\n{}", output.stderr)
            })?;
        }
    }
    let (_dir2, ms_file) = temp_file("invalid-ms.yaml", &invalid_machine_set(ns, 2));
    let output = kubectl
        .transcript(&["apply", "-f", &ms_file.display().to_string()])
        .await?;
    ensure(!output.success, || "invalid MachineSet accepted".to_owned())?;
    for line in [
        "The MachineSet \"adm-invalid-set\" is invalid:",
        "* spec.template.spec.healthTimeout: Invalid value: \"0s\": must be greater than 0",
        "* spec.template.spec.drainTimeout: Invalid value: \"0s\": must be greater than 0",
    ] {
        ensure(output.stderr.contains(line), || {
            format!("missing {line:?} in:\n{}", output.stderr)
        })?;
    }
    for (kind, name) in [
        (Kind::MachineDeployment, "adm-invalid"),
        (Kind::MachineSet, "adm-invalid-set"),
    ] {
        if get(&system, kind, name).await?.is_some() {
            return Err(E2eError::Assertion(format!(
                "{kind:?} {name} was stored although it was rejected"
            )));
        }
    }
    Ok(Outcome::Passed)
}
