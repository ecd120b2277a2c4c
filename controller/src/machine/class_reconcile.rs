//! The MachineClass and Secret controllers (docs/behaviour.md#class-and-secret-controllers), one queue `machineclass` with keys
//! `class/<name>` and `secret/<namespace>/<name>`.
//!
//! - A MachineClass carries finalizer `machine.sapcloud.io/machine-controller-manager` while at
//!   least one Machine references it; it is removed when none does. A class being deleted while
//!   machines still use it stays (Warning event `DeletionBlocked`, retried).
//! - A Secret in the control namespace referenced by name by some MachineClass (`secretRef` or
//!   `credentialsSecretRef`) carries finalizer `machine.sapcloud.io/machine-controller`; it is
//!   removed when no class references it. Secrets are read and written on demand (GET + Update
//!   with the read resourceVersion): no Secret cache, so memory does not grow with unrelated
//!   Secrets.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::{Machine, MachineClass};
use tokio_util::sync::CancellationToken;

use crate::machine::context::MachineClassContext;
use crate::platform::BoxError;
use crate::platform::caches::CacheGate;
use crate::platform::informer::Change;
use crate::platform::queue::{Outcome, WorkQueue};
use mcm_decisions::machine::class::{ClassStep, plan_class, plan_secret, secret_is_referenced};
use mcm_decisions::machine::routing::class_key_for_machine;
use mcm_decisions::vocabulary::Retry;

/// Name of the queue.
pub const QUEUE: &str = "machineclass";
/// Upstream re-checks every Secret every 10 minutes.
const SECRET_RESYNC: Retry = Retry::After(mcm_api::duration::Duration::from_secs(600));

/// What can go wrong in one pass (logged; the key is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ClassError {
    /// A Kubernetes API call failed.
    #[error("{what} of {object} failed: {source}")]
    Api {
        /// The call.
        what: &'static str,
        /// `kind namespace/name`.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

fn class_key(name: &str) -> String {
    format!("class/{name}")
}

fn secret_keys(class: &MachineClass, default_namespace: &str) -> Vec<String> {
    [&class.secret_ref, &class.credentials_secret_ref]
        .into_iter()
        .flatten()
        .filter_map(|reference| {
            let name = reference.name.as_deref()?;
            let namespace = reference.namespace.as_deref().unwrap_or(default_namespace);
            Some(format!("secret/{namespace}/{name}"))
        })
        .collect()
}

/// Runs the MachineClass/Secret controller until `shutdown`.
pub fn run(
    context: Arc<MachineClassContext>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, Result<(), BoxError>> {
    Box::pin(async move {
        let queue = WorkQueue::new(QUEUE, Some(context.metrics.clone()));
        let classes_queue = queue.clone();
        let namespace = context.namespace.clone();
        context
            .machine_classes
            .subscribe(move |change: &Change<MachineClass>| {
                let class = change.object();
                if let Some(name) = class.metadata.name.as_deref() {
                    classes_queue.add(class_key(name));
                }
                for key in secret_keys(class, &namespace) {
                    classes_queue.add(key);
                }
                if let Change::Updated { old, .. } = change {
                    for key in secret_keys(old, &namespace) {
                        classes_queue.add(key);
                    }
                }
            });
        let machines_queue = queue.clone();
        context.machines.subscribe(move |change: &Change<Machine>| {
            let keys = match change {
                Change::Added(machine) | Change::Deleted(machine) => {
                    vec![class_key_for_machine(machine)]
                }
                Change::Updated { old, new } => {
                    let (before, after) = (class_key_for_machine(old), class_key_for_machine(new));
                    if before == after {
                        Vec::new()
                    } else {
                        vec![before, after]
                    }
                }
            };
            for name in keys.into_iter().flatten() {
                machines_queue.add(class_key(&name));
            }
        });
        let workers = context.config.concurrent_syncs.max(1);
        let worker_context = Arc::clone(&context);
        let gate = CacheGate::new(QUEUE)
            .with(&context.machines)
            .with(&context.machine_classes);
        queue
            .run_gated(workers, shutdown, Some(gate), move |key| {
                let context = Arc::clone(&worker_context);
                async move {
                    let result = if let Some(name) = key.strip_prefix("class/") {
                        reconcile_class(&context, name).await
                    } else if let Some(rest) = key.strip_prefix("secret/") {
                        let (namespace, name) = rest.split_once('/').unwrap_or(("", rest));
                        reconcile_secret(&context, namespace, name).await
                    } else {
                        Ok(Outcome::Done)
                    };
                    result.unwrap_or_else(|error| {
                        tracing::warn!(key, %error, "machine class/secret reconcile failed");
                        Outcome::Retry
                    })
                }
            })
            .await;
        Ok(())
    })
}

async fn reconcile_class(context: &MachineClassContext, name: &str) -> Result<Outcome, ClassError> {
    let api = context.namespaced::<MachineClass>();
    let object = format!("MachineClass {}/{name}", context.namespace);
    let Some(class) = api.get_opt(name).await.map_err(|source| ClassError::Api {
        what: "GET",
        object: object.clone(),
        source,
    })?
    else {
        return Ok(Outcome::Done);
    };
    let users = context
        .machines
        .filter(|machine| class_key_for_machine(machine).as_deref() == Some(name));
    let deleting = class.metadata.deletion_timestamp.is_some();
    let current = class.metadata.finalizers.clone().unwrap_or_default();
    let (finalizers, wanted) = match plan_class(deleting, users.len(), &current) {
        ClassStep::Nothing => return Ok(Outcome::RequeueAfter(Retry::Long)),
        ClassStep::SetFinalizers(finalizers, wanted) => (finalizers, wanted),
        ClassStep::DeletionBlocked => {
            let reason = format!(
                "Retry as machine objects are still referring the machineclass ({} machine(s), e.g. {})",
                users.len(),
                users[0].metadata.name.as_deref().unwrap_or("")
            );
            tracing::info!(class = name, reason, "machine class deletion blocked");
            context.event(&class, true, "DeletionBlocked", "Delete", reason);
            return Ok(Outcome::RequeueAfter(Retry::Short));
        }
    };
    let mut updated = class.clone();
    updated.metadata.finalizers = Some(finalizers);
    match api.replace(name, &PostParams::default(), &updated).await {
        Ok(_) => {
            tracing::info!(
                class = name,
                finalizer = wanted,
                "machine class finalizer updated"
            );
            let (reason, note) = if wanted {
                (
                    "FinalizerAdded",
                    format!("{} machine(s) use this class", users.len()),
                )
            } else {
                (
                    "FinalizerRemoved",
                    "No machine uses this class any more".to_owned(),
                )
            };
            context.event(&class, false, reason, "Update", note);
        }
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
            return Ok(Outcome::RequeueAfter(Retry::Conflict));
        }
        Err(source) => {
            return Err(ClassError::Api {
                what: "UPDATE finalizers",
                object,
                source,
            });
        }
    }
    Ok(Outcome::RequeueAfter(Retry::Long))
}

async fn reconcile_secret(
    context: &MachineClassContext,
    namespace: &str,
    name: &str,
) -> Result<Outcome, ClassError> {
    if namespace != context.namespace {
        return Ok(Outcome::Done);
    }
    let api: Api<Secret> = Api::namespaced(context.control.clone(), namespace);
    let object = format!("Secret {namespace}/{name}");
    let Some(secret) = api.get_opt(name).await.map_err(|source| ClassError::Api {
        what: "GET",
        object: object.clone(),
        source,
    })?
    else {
        return Ok(Outcome::Done);
    };
    let referenced = secret_is_referenced(name, &context.machine_classes.list());
    let current = secret.metadata.finalizers.clone().unwrap_or_default();
    let deleting = secret.metadata.deletion_timestamp.is_some();
    if let Some(finalizers) = plan_secret(referenced, deleting, &current) {
        let wanted = finalizers
            .iter()
            .any(|f| f == finalizer::MACHINE_CONTROLLER);
        let mut updated = secret.clone();
        updated.metadata.finalizers = Some(finalizers);
        match api.replace(name, &PostParams::default(), &updated).await {
            Ok(_) => {
                tracing::info!(
                    secret = name,
                    finalizer = wanted,
                    "secret finalizer updated"
                );
            }
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                return Ok(Outcome::RequeueAfter(Retry::Conflict));
            }
            Err(source) => {
                return Err(ClassError::Api {
                    what: "UPDATE finalizers",
                    object,
                    source,
                });
            }
        }
    }
    Ok(Outcome::RequeueAfter(SECRET_RESYNC))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_names_the_queue_keys_of_both_its_secrets() {
        let class: MachineClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {"name": "c", "namespace": "ns"},
            "providerSpec": {},
            "secretRef": {"name": "s1", "namespace": "ns"},
            "credentialsSecretRef": {"name": "s2"},
        }))
        .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            secret_keys(&class, "ns"),
            vec!["secret/ns/s1".to_owned(), "secret/ns/s2".to_owned()]
        );
    }
}
