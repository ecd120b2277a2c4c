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
//! - When the driver validates classes (ValidateMachineClass), a class whose provider,
//!   providerSpec or Secret data changed is validated once and the verdict recorded in the
//!   `machine.sapcloud.io/class-validation` annotation, with a Warning event `MachineClassInvalid`
//!   when it is newly invalid (docs/operations.md#a-machineclass-marked-invalid). A resync with the
//!   same inputs does not call the driver again.

use std::collections::BTreeMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, PoisonError};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mcm_api::keys::annotation::CLASS_VALIDATION;
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::{Machine, MachineClass};
use tokio_util::sync::CancellationToken;

use crate::machine::context::MachineClassContext;
use crate::platform::BoxError;
use crate::platform::caches::CacheGate;
use crate::platform::informer::Change;
use crate::platform::queue::{Action, Failed, WorkQueue};
use mcm_decisions::machine::class::{ClassStep, plan_class, plan_secret, secret_is_referenced};
use mcm_decisions::machine::class_validation::{
    RecordWrite, ValidationAnswer, plan_validation, serves,
};
use mcm_decisions::machine::routing::class_key_for_machine;
use mcm_decisions::vocabulary::Retry;
use mcm_decisions::vocabulary::event::EventType;
use mcm_provider_proto::Code;

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
                        Ok(Action::AwaitChange)
                    };
                    result.map_err(|error| {
                        tracing::warn!(key, %error, "machine class/secret reconcile failed");
                        Failed
                    })
                }
            })
            .await;
        Ok(())
    })
}

async fn reconcile_class(context: &MachineClassContext, name: &str) -> Result<Action, ClassError> {
    let api = context.namespaced::<MachineClass>();
    let object = format!("MachineClass {}/{name}", context.namespace);
    let Some(class) = api.get_opt(name).await.map_err(|source| ClassError::Api {
        what: "GET",
        object: object.clone(),
        source,
    })?
    else {
        forget_validation(context, name);
        return Ok(Action::AwaitChange);
    };
    let outcome = reconcile_finalizers(context, &api, &class, name, &object).await?;
    if class.metadata.deletion_timestamp.is_some() {
        return Ok(outcome);
    }
    let settled = validate_class(context, &api, &class, name, &object).await?;
    Ok(match outcome {
        // A failed validation (driver unavailable, Secret unreadable) is retried sooner than the
        // steady-state resync.
        Action::Requeue(Retry::Long) if !settled => Action::Requeue(Retry::Medium),
        other => other,
    })
}

async fn reconcile_finalizers(
    context: &MachineClassContext,
    api: &Api<MachineClass>,
    class: &MachineClass,
    name: &str,
    object: &str,
) -> Result<Action, ClassError> {
    let users = context
        .machines
        .filter(|machine| class_key_for_machine(machine).as_deref() == Some(name));
    let deleting = class.metadata.deletion_timestamp.is_some();
    let current = class.metadata.finalizers.clone().unwrap_or_default();
    let (finalizers, wanted) = match plan_class(deleting, users.len(), &current) {
        ClassStep::Nothing => return Ok(Action::Requeue(Retry::Long)),
        ClassStep::SetFinalizers(finalizers, wanted) => (finalizers, wanted),
        ClassStep::DeletionBlocked => {
            let reason = format!(
                "Retry as machine objects are still referring the machineclass ({} machine(s), e.g. {})",
                users.len(),
                users[0].metadata.name.as_deref().unwrap_or("")
            );
            tracing::info!(class = name, reason, "machine class deletion blocked");
            context.event(class, true, "DeletionBlocked", "Delete", reason);
            return Ok(Action::Requeue(Retry::Short));
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
            context.event(class, false, reason, "Update", note);
        }
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
            return Ok(Action::Requeue(Retry::Conflict));
        }
        Err(source) => {
            return Err(ClassError::Api {
                what: "UPDATE finalizers",
                object: object.to_owned(),
                source,
            });
        }
    }
    Ok(Action::Requeue(Retry::Long))
}

/// A fingerprint of what a validation depends on: the class without its metadata (provider,
/// providerSpec, Secret references, node template) and the Secret data.
fn validation_fingerprint(class: &MachineClass, secret: &BTreeMap<String, Vec<u8>>) -> u64 {
    let mut inputs = class.clone();
    inputs.metadata = Default::default();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&inputs)
        .unwrap_or_default()
        .hash(&mut hasher);
    secret.hash(&mut hasher);
    hasher.finish()
}

fn forget_validation(context: &MachineClassContext, name: &str) {
    context
        .validated
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(name);
}

async fn ask_driver(
    driver: &mcm_provider_proto::DriverClient,
    class: &MachineClass,
    secret: &BTreeMap<String, Vec<u8>>,
    name: &str,
) -> ValidationAnswer {
    match driver.validate_machine_class(class, secret).await {
        Ok(errors) => ValidationAnswer::Checked(errors),
        Err(error) if error.code == Code::Unimplemented => {
            tracing::debug!(class = name, "the driver does not validate machine classes");
            ValidationAnswer::Unimplemented
        }
        Err(error) => {
            tracing::info!(class = name, %error, "ValidateMachineClass failed; retrying later");
            ValidationAnswer::Failed
        }
    }
}

/// Validates the class through the driver when its inputs changed since the last settled
/// validation, and executes the decision (annotation write, Warning event). Returns whether the
/// class counts as validated (false: retry).
async fn validate_class(
    context: &MachineClassContext,
    api: &Api<MachineClass>,
    class: &MachineClass,
    name: &str,
    object: &str,
) -> Result<bool, ClassError> {
    let Some(driver) = &context.driver else {
        return Ok(true);
    };
    let secret = match context.secrets.class_secret_data(class).await {
        Ok(secret) => secret,
        Err(error) => {
            tracing::info!(class = name, %error, "machine class not validated: its Secret is unreadable");
            return Ok(false);
        }
    };
    let fingerprint = validation_fingerprint(class, &secret);
    let remembered = context
        .validated
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .copied();
    if remembered == Some(fingerprint) {
        return Ok(true);
    }
    let provider = context
        .driver_provider
        .get_or_try_init(|| async {
            driver
                .get_capabilities()
                .await
                .map(|capabilities| capabilities.provider_name)
        })
        .await;
    let answer = match provider {
        Err(error) => {
            tracing::info!(class = name, %error, "GetCapabilities failed; validating later");
            ValidationAnswer::Failed
        }
        Ok(provider) if !serves(provider, class.provider.as_deref()) => {
            ValidationAnswer::OtherProvider
        }
        Ok(_) => ask_driver(driver, class, &secret, name).await,
    };
    let recorded = class
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(CLASS_VALIDATION))
        .map(String::as_str);
    let step = plan_validation(&answer, recorded);
    let value = match &step.write {
        RecordWrite::Keep => None,
        RecordWrite::Set(value) => Some(serde_json::Value::from(value.as_str())),
        RecordWrite::Remove => Some(serde_json::Value::Null),
    };
    if let Some(value) = value {
        let patch = serde_json::json!({"metadata": {"annotations": {CLASS_VALIDATION: value}}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(class = name, record = ?step.write, "machine class validation recorded");
            }
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(true),
            Err(source) => {
                return Err(ClassError::Api {
                    what: "PATCH validation annotation",
                    object: object.to_owned(),
                    source,
                });
            }
        }
    }
    if let Some(event) = step.event {
        context.event(
            class,
            event.type_ == EventType::Warning,
            &event.reason,
            "Validate",
            event.message,
        );
    }
    if step.settled {
        context
            .validated
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), fingerprint);
    }
    Ok(step.settled)
}

async fn reconcile_secret(
    context: &MachineClassContext,
    namespace: &str,
    name: &str,
) -> Result<Action, ClassError> {
    if namespace != context.namespace {
        return Ok(Action::AwaitChange);
    }
    let api: Api<Secret> = Api::namespaced(context.control.clone(), namespace);
    let object = format!("Secret {namespace}/{name}");
    let Some(secret) = api.get_opt(name).await.map_err(|source| ClassError::Api {
        what: "GET",
        object: object.clone(),
        source,
    })?
    else {
        return Ok(Action::AwaitChange);
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
                return Ok(Action::Requeue(Retry::Conflict));
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
    Ok(Action::Requeue(SECRET_RESYNC))
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
