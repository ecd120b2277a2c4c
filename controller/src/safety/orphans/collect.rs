//! Shell of the orphan collection (docs/behaviour.md#machine-safety): per MachineClass, `ListMachines` through the driver,
//! [`mcm_decisions::safety::orphans::orphan_vms`] against the machine cache, `DeleteMachine` with a synthetic machine
//! for each orphan; then (with a target cluster) [`mcm_decisions::safety::orphans::orphan_nodes`] and its node
//! patches.
//!
//! Unlike upstream, a class whose secret or `ListMachines` call fails is skipped and the other
//! classes are still checked (upstream aborts the whole run): one broken class must not keep the
//! VMs of every other class leaking.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use mcm_api::keys::annotation;
use mcm_api::v1alpha1::{Machine, MachineClass, MachineSpec};
use mcm_provider_proto::{MachineError, SecretData};

use crate::platform::error::ApiError;
use crate::platform::queue::{Action, Pass};
use crate::safety::context::OrphanContext;
use crate::safety::period::period;
use mcm_decisions::safety::orphans::{
    NOT_MANAGED_VALUE, OrphanNodeAction, OrphanVm, orphan_nodes, orphan_vms,
};
use mcm_decisions::vocabulary::Retry;

/// Extra requeue bound after a failed run (upstream's LongRetry).
const RETRY_AFTER_ERROR: Retry = Retry::Long;

/// The result of one collection run (for logs and tests).
#[derive(Debug, Default)]
pub struct CollectionReport {
    /// VMs deleted through the driver.
    pub deleted: Vec<OrphanVm>,
    /// Problems met (each skipped one class, VM or node).
    pub errors: Vec<ApiError>,
}

/// One orphan collection run; requeues after `--machine-safety-orphan-vms-period`.
pub async fn run_once(context: &OrphanContext) -> Pass {
    let report = collect(context).await;
    let period = Retry::After(period(context.config.safety.orphan_vms_period));
    for error in &report.errors {
        tracing::warn!(%error, "orphan collection");
    }
    if report.errors.is_empty() {
        tracing::debug!(deleted = report.deleted.len(), "orphan collection done");
        Ok(Action::Requeue(period))
    } else {
        Ok(Action::Requeue(period.min(RETRY_AFTER_ERROR)))
    }
}

/// Collects orphan VMs of every MachineClass, then marks orphan nodes.
pub async fn collect(context: &OrphanContext) -> CollectionReport {
    let mut report = CollectionReport::default();
    let mut classes = context.machine_classes.list();
    classes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for class in classes {
        collect_class(context, &class, &mut report).await;
    }
    if let Some(target) = &context.target {
        mark_orphan_nodes(context, target, &mut report).await;
    }
    if !report.deleted.is_empty() {
        context
            .metrics
            .stale_machines_deleted(u64::try_from(report.deleted.len()).unwrap_or(u64::MAX));
    }
    report
}

async fn collect_class(
    context: &OrphanContext,
    class: &MachineClass,
    report: &mut CollectionReport,
) {
    let class_name = class.metadata.name.clone().unwrap_or_default();
    let secret = match secret_data(context, class).await {
        Ok(secret) => secret,
        Err(error) => {
            report.errors.push(error);
            return;
        }
    };
    let provider = class.provider.clone().unwrap_or_default();
    let started = Instant::now();
    let listed = context.driver.list_machines(class, &secret).await;
    record_call(context, &provider, "ListMachines", &listed, started);
    let listed = match listed {
        Ok(listed) => listed,
        Err(source) => {
            context.event(
                class,
                true,
                "OrphanCollectionFailed",
                "ListMachines",
                format!("Cannot list the VMs of this class to collect orphans: {source}"),
            );
            report.errors.push(ApiError::Driver {
                method: "ListMachines",
                class: class_name,
                source,
            });
            return;
        }
    };
    if listed.is_empty() {
        return;
    }
    // The cache is read after the listing: a machine created before its VM is then always seen.
    let machines = context.machines.list();
    for orphan in orphan_vms(&listed, &machines) {
        let synthetic = synthetic_machine(&orphan, class);
        let started = Instant::now();
        let deleted = context
            .driver
            .delete_machine(&synthetic, class, &secret)
            .await;
        record_call(context, &provider, "DeleteMachine", &deleted, started);
        match deleted {
            Ok(_) => {
                tracing::info!(
                    class = %class_name,
                    machine = %orphan.machine_name,
                    provider_id = %orphan.provider_id,
                    "deleted orphan VM"
                );
                context.event(
                    class,
                    false,
                    "OrphanVMDeleted",
                    "DeleteMachine",
                    format!(
                        "Deleted VM {} (reported for machine {}): no Machine accounts for it",
                        orphan.provider_id, orphan.machine_name
                    ),
                );
                report.deleted.push(orphan);
            }
            Err(source) => report.errors.push(ApiError::Driver {
                method: "DeleteMachine",
                class: class_name.clone(),
                source,
            }),
        }
    }
}

fn record_call<T>(
    context: &OrphanContext,
    provider: &str,
    method: &str,
    result: &Result<T, MachineError>,
    started: Instant,
) {
    let code = match result {
        Ok(_) => "OK".to_owned(),
        Err(error) => error.code.name().to_owned(),
    };
    context
        .metrics
        .driver_call(provider, method, &code, started.elapsed());
}

/// `{name, namespace = class namespace, spec.providerID}`, as upstream sends for orphans.
fn synthetic_machine(orphan: &OrphanVm, class: &MachineClass) -> Machine {
    let mut machine = Machine::new(
        &orphan.machine_name,
        MachineSpec {
            provider_id: Some(orphan.provider_id.clone()),
            ..MachineSpec::default()
        },
    );
    machine.metadata.namespace = class.metadata.namespace.clone();
    machine
}

/// The class's Secret data (read through the shell's short-lived Secret reuse).
async fn secret_data(
    context: &OrphanContext,
    class: &MachineClass,
) -> Result<SecretData, ApiError> {
    context
        .class_secret_data(class)
        .await
        .map_err(|error| ApiError::Api {
            action: "get",
            kind: "Secret",
            name: format!("{}/{}", error.namespace, error.name),
            source: error.source,
        })
}

async fn mark_orphan_nodes(
    context: &OrphanContext,
    target: &kube::Client,
    report: &mut CollectionReport,
) {
    let nodes = context.nodes.list();
    let machines = context.machines.list();
    let resource_versions: BTreeMap<String, Option<String>> = nodes
        .iter()
        .filter_map(|n| {
            n.metadata
                .name
                .clone()
                .map(|name| (name, n.metadata.resource_version.clone()))
        })
        .collect();
    let actions = orphan_nodes(
        &nodes,
        &machines,
        context.config.machine.creation_timeout,
        jiff::Timestamp::now(),
    );
    let api: Api<Node> = Api::all(target.clone());
    for action in actions {
        let (name, patch) = match &action {
            OrphanNodeAction::MarkUnmanaged {
                node,
                finalizers,
                annotate,
            } => {
                let mut metadata = serde_json::Map::new();
                // The resourceVersion makes the finalizer list replacement safe against a
                // concurrent change (409 ⇒ next run).
                if let Some(Some(version)) = resource_versions.get(node) {
                    metadata.insert("resourceVersion".into(), version.clone().into());
                }
                if let Some(finalizers) = finalizers {
                    metadata.insert("finalizers".into(), serde_json::json!(finalizers));
                }
                if *annotate {
                    metadata.insert(
                        "annotations".into(),
                        serde_json::json!({ annotation::NOT_MANAGED_BY_MCM: NOT_MANAGED_VALUE }),
                    );
                }
                (node, serde_json::json!({ "metadata": metadata }))
            }
            OrphanNodeAction::RemoveUnmanagedAnnotation { node } => (
                node,
                serde_json::json!({
                    "metadata": {"annotations": {annotation::NOT_MANAGED_BY_MCM: null}}
                }),
            ),
        };
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => tracing::info!(node = %name, ?action, "orphan node handled"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => report.errors.push(ApiError::Api {
                action: "patch",
                kind: "Node",
                name: name.clone(),
                source,
            }),
        }
    }
}
