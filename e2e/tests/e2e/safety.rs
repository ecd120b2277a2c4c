//! Safety controllers: an orphan VM (no Machine object) is deleted; a MachineSet with more
//! machines than replicas + surge + safety-up is frozen and unfrozen once the surplus is gone;
//! while the API server is unreachable the machine controller freezes and replaces nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mcm_e2e::admin_http::metric_value;
use mcm_e2e::objects::{
    HOLD_FINALIZER, Kind, create, create_class, delete, delete_deployment_and_wait, deployment,
    frozen, machine_of_set, machines, must_get, name, names, of_deployment, phase, release_hold,
    wait_frozen, wait_running,
};
use mcm_e2e::{E2eError, Probe, Result, System, ensure, eventually};
use mcm_provider_proto::{DriverClient, Endpoint};
use serde_json::json;

use crate::harness::Outcome;

/// A VM created directly through the driver (as if its Machine object was lost) is collected.
pub async fn orphan_vm_collected(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    let ns = s.namespace().to_owned();
    create_class(s, "or-class", json!({"bootDelay": "1s"}), "2").await?;
    let class_json = must_get(s, Kind::MachineClass, "or-class").await?;
    let class: mcm_api::v1alpha1::MachineClass =
        serde_json::from_value(class_json).map_err(E2eError::decode("MachineClass or-class"))?;
    let machine: mcm_api::v1alpha1::Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "or-ghost", "namespace": ns},
        "spec": {"class": {"kind": "MachineClass", "name": "or-class"}}
    }))
    .map_err(E2eError::decode("Machine or-ghost"))?;
    let socket = s
        .driver_socket()
        .ok_or_else(|| E2eError::Assertion("no driver socket".to_owned()))?;
    let driver = DriverClient::connect(
        &Endpoint::Unix(socket.to_path_buf()),
        Duration::from_secs(20),
    )
    .await
    .map_err(|e| E2eError::Driver {
        call: "connect".to_owned(),
        message: e.to_string(),
    })?;
    let secret: BTreeMap<String, Vec<u8>> =
        BTreeMap::from([("userData".to_owned(), b"#cloud-config\n".to_vec())]);
    let created = driver
        .create_machine(&machine, &class, &secret)
        .await
        .map_err(|e| E2eError::Driver {
            call: "CreateMachine or-ghost".to_owned(),
            message: e.to_string(),
        })?;
    println!("orphan VM created: {created:?}");
    let vms = s.vms().await?;
    ensure(vms.iter().any(|vm| vm["machineName"] == "or-ghost"), || {
        "the orphan VM is not listed by provider-virtual".to_owned()
    })?;
    eventually(
        "the orphan VM or-ghost is deleted by the orphan collector",
        120,
        || async move {
            let vms = s.vms().await?;
            Ok(if vms.iter().any(|vm| vm["machineName"] == "or-ghost") {
                Probe::Waiting("or-ghost still runs".to_owned())
            } else {
                Probe::Done(())
            })
        },
    )
    .await?;
    delete(s, Kind::MachineClass, "or-class").await?;
    Ok(Outcome::Passed)
}

/// Three extra machines owned by the MachineSet of a 1-replica deployment (maxSurge 1,
/// safety-up 2: limit 4) freeze the MachineSet and deployment; they are unfrozen when the
/// surplus is gone (the extras carry [`HOLD_FINALIZER`] until the freeze is seen).
pub async fn overshoot_freeze(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "os-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "os-md", 1, "os-class", json!({})),
    )
    .await?;
    wait_running(s, "os-md", 1, 180).await?;
    let sets = of_deployment(s, Kind::MachineSet, "os-md").await?;
    let set = sets
        .first()
        .ok_or_else(|| E2eError::Assertion("os-md has no MachineSet".to_owned()))?
        .clone();
    let set_name = name(&set).to_owned();
    for i in 0..3 {
        create(
            s,
            Kind::Machine,
            machine_of_set(s, &set, &format!("os-md-extra-{i}"), &[HOLD_FINALIZER]),
        )
        .await?;
    }
    let set_ref = set_name.as_str();
    wait_frozen(s, set_ref, 90).await?;
    for i in 0..3 {
        release_hold(s, &format!("os-md-extra-{i}")).await?;
    }
    eventually("os-md back to 1 machine and unfrozen", 180, || async move {
        let set = must_get(s, Kind::MachineSet, set_ref).await?;
        let md = must_get(s, Kind::MachineDeployment, "os-md").await?;
        let current = machines(s, "os-md").await?;
        Ok(
            if !frozen(&set)
                && !frozen(&md)
                && current.len() == 1
                && phase(&current[0]) == "Running"
            {
                Probe::Done(())
            } else {
                Probe::Waiting(format!(
                    "set frozen {}, deployment frozen {}, machines {:?}",
                    frozen(&set),
                    frozen(&md),
                    names(&current)
                ))
            },
        )
    })
    .await?;
    delete_deployment_and_wait(s, "os-md").await?;
    delete(s, Kind::MachineClass, "os-class").await?;
    Ok(Outcome::Passed)
}

/// The sandbox answers 503 to everything for 20s: the manager reports the freeze
/// (`mcm_machine_controller_frozen 1`), unfreezes afterwards, and no machine was replaced.
pub async fn freeze_when_api_server_unreachable(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "fz-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "fz-md", 2, "fz-class", json!({})),
    )
    .await?;
    let before = names(&wait_running(s, "fz-md", 2, 180).await?);
    let frozen = || async move {
        let text = s.manager_metrics().await?;
        Ok::<_, E2eError>(metric_value(&text, "mcm_machine_controller_frozen", None))
    };
    ensure(frozen().await? == Some(0.0), || {
        "frozen before the outage".to_owned()
    })?;
    s.sandbox_admin(
        http::Method::POST,
        "unavailable",
        Some(json!({"seconds": 20, "mode": "ServiceUnavailable"})),
    )
    .await?;
    let result = eventually(
        "the manager freezes while the API server is unreachable",
        18,
        || async move {
            Ok(match frozen().await? {
                Some(1.0) => Probe::Done(()),
                other => Probe::Waiting(format!("mcm_machine_controller_frozen = {other:?}")),
            })
        },
    )
    .await;
    s.sandbox_admin(http::Method::DELETE, "unavailable", None)
        .await?;
    result?;
    eventually(
        "the manager unfreezes once the API server is back",
        120,
        || async move {
            Ok(match frozen().await? {
                Some(0.0) => Probe::Done(()),
                other => Probe::Waiting(format!("mcm_machine_controller_frozen = {other:?}")),
            })
        },
    )
    .await?;
    let after = wait_running(s, "fz-md", 2, 120).await?;
    ensure(names(&after) == before, || {
        format!(
            "machines were replaced around the outage: {before:?} → {:?}",
            names(&after)
        )
    })?;
    delete_deployment_and_wait(s, "fz-md").await?;
    delete(s, Kind::MachineClass, "fz-class").await?;
    Ok(Outcome::Passed)
}
