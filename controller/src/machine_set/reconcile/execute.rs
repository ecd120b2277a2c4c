//! Execution of the plan's actions against the control cluster: finalizer, adopt, release,
//! in-place machine updates, slow-start creations and deletions, with the expectations recorded
//! before every create and delete.

use futures::StreamExt as _;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachinePhase, MachineSet};
use serde_json::json;
use std::sync::Arc;

use super::Controller;
use crate::platform::error::ApiError;
use crate::platform::finalizers;
use mcm_decisions::machine_set::plan::{
    self, MachineRef, MachineUpdate, ReplicaError, events, is_preserved,
};
use mcm_decisions::vocabulary::{Event, EventType, preserve_expiry_of};

/// Read-modify-write attempts on one machine before giving up for this pass.
const UPDATE_ATTEMPTS: u32 = 5;
/// Concurrent deletions of one pass.
const DELETE_CONCURRENCY: usize = 16;

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// How the outcome of one create request is known.
enum Created {
    Yes(String),
    /// Timeout or transport error: the machine may exist; the expectation stays until it shows.
    Unknown(String),
    No(String),
}

impl Controller {
    fn record(&self, ms: &MachineSet, event: &Event, action: &str) {
        let warning = event.type_ == EventType::Warning;
        self.context
            .event(ms, warning, &event.reason, action, event.message.clone());
    }

    /// Adds or removes the MachineSet finalizer (merge patch guarded by the resourceVersion).
    pub(super) async fn set_finalizer(
        &self,
        ms: &MachineSet,
        present: bool,
    ) -> Result<MachineSet, ApiError> {
        let name = ms.metadata.name.clone().unwrap_or_default();
        let Some(patch) =
            finalizers::patch(&ms.metadata, finalizer::MACHINE_CONTROLLER_MANAGER, present)
        else {
            return Ok(ms.clone());
        };
        self.context
            .namespaced::<MachineSet>()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                let action = if present {
                    "add finalizer to"
                } else {
                    "remove finalizer from"
                };
                ApiError::api(action, "MachineSet", &name, e)
            })
    }

    /// Sets the controller reference on an orphan (guarded by the cached resourceVersion, so a
    /// concurrent adopter or label change makes it fail and the pass retry).
    pub(super) async fn adopt(
        &self,
        ms: &MachineSet,
        cache: &[Arc<Machine>],
        machine: &MachineRef,
        owner: OwnerReference,
    ) -> Result<(), ApiError> {
        let Some(cached) = find(cache, machine) else {
            return Ok(());
        };
        let mut refs = cached.metadata.owner_references.clone().unwrap_or_default();
        refs.push(owner);
        self.patch_owner_refs(cached, refs, "adopt").await?;
        tracing::info!(machine_set = ?ms.metadata.name, machine = %machine.name, "adopted machine");
        self.context.event(
            ms,
            false,
            "Adopted",
            "Adopt",
            format!("Adopted machine {}", machine.name),
        );
        Ok(())
    }

    /// Removes this MachineSet's controller reference from a machine it no longer selects (a
    /// real removal, unlike upstream's merge patch, quirk docs/behaviour.md#q9).
    pub(super) async fn release(
        &self,
        ms: &MachineSet,
        cache: &[Arc<Machine>],
        machine: &MachineRef,
    ) -> Result<(), ApiError> {
        let Some(cached) = find(cache, machine) else {
            return Ok(());
        };
        let uid = ms.metadata.uid.clone().unwrap_or_default();
        let refs: Vec<OwnerReference> = cached
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|r| r.uid != uid)
            .cloned()
            .collect();
        self.patch_owner_refs(cached, refs, "release").await?;
        tracing::info!(machine_set = ?ms.metadata.name, machine = %machine.name, "released machine");
        self.context.event(
            ms,
            false,
            "Released",
            "Release",
            format!("Released machine {}", machine.name),
        );
        Ok(())
    }

    async fn patch_owner_refs(
        &self,
        cached: &Machine,
        refs: Vec<OwnerReference>,
        action: &'static str,
    ) -> Result<(), ApiError> {
        let name = cached.metadata.name.clone().unwrap_or_default();
        // The whole list is replaced; the resourceVersion makes it a compare-and-swap.
        let refs = if refs.is_empty() {
            serde_json::Value::Null
        } else {
            json!(refs)
        };
        let patch = json!({"metadata": {
            "ownerReferences": refs,
            "resourceVersion": cached.metadata.resource_version,
        }});
        match self
            .context
            .namespaced::<Machine>()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(ApiError::api(action, "Machine", &name, e)),
        }
    }

    /// Propagates template fields / preserve annotations onto an existing machine (docs/behaviour.md#machine-set-reconcile steps
    /// 6–9): read, apply, replace; a conflict reads again.
    pub(super) async fn update_machine(
        &self,
        ms: &MachineSet,
        machine: &MachineRef,
        update: &MachineUpdate,
    ) -> Result<(), ApiError> {
        let api = self.context.namespaced::<Machine>();
        for _ in 0..UPDATE_ATTEMPTS {
            let Some(mut live) = api
                .get_opt(&machine.name)
                .await
                .map_err(|e| ApiError::api("get", "Machine", &machine.name, e))?
            else {
                return Ok(());
            };
            if !machine.uid.is_empty() && live.metadata.uid.as_deref() != Some(&machine.uid) {
                return Ok(());
            }
            let before = live.clone();
            plan::apply_update(&mut live, update);
            if live == before {
                return Ok(());
            }
            match api
                .replace(&machine.name, &PostParams::default(), &live)
                .await
            {
                Ok(_) => {
                    tracing::debug!(machine_set = ?ms.metadata.name, machine = %machine.name, "updated machine in place");
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) => return Err(ApiError::api("update", "Machine", &machine.name, e)),
            }
        }
        Err(ApiError::Conflicts {
            action: "update",
            kind: "Machine",
            name: machine.name.clone(),
            attempts: UPDATE_ATTEMPTS,
        })
    }

    /// Creates `count` machines in slow-start `batches` (docs/behaviour.md#manage-replicas), the expectations recorded
    /// first. Returns the first error.
    pub(super) async fn create_machines(
        &self,
        ms: &MachineSet,
        machine: &Machine,
        count: usize,
        batches: &[usize],
    ) -> Option<ReplicaError> {
        let key = ms.metadata.name.clone().unwrap_or_default();
        let expected = u32::try_from(count).unwrap_or(u32::MAX);
        self.expectations()
            .expect_creations(&key, expected, Timestamp::now());
        tracing::info!(machine_set = %key, namespace = %self.context.namespace, count, "creating machines");
        let api = self.context.namespaced::<Machine>();
        let mut first_error: Option<ReplicaError> = None;
        let mut created: Vec<String> = Vec::new();
        let attempt = || {
            let api = api.clone();
            async move {
                match api.create(&PostParams::default(), machine).await {
                    Ok(created) => Created::Yes(created.metadata.name.unwrap_or_default()),
                    Err(kube::Error::Api(s)) if s.code == 504 || s.reason == "Timeout" => {
                        Created::Unknown(s.message)
                    }
                    Err(kube::Error::Api(s)) => Created::No(s.message),
                    Err(e) => Created::Unknown(e.to_string()),
                }
            }
        };
        let issued = slow_start(batches, attempt, |result| match result {
            Created::Yes(name) => {
                self.expectations()
                    .creation_succeeded(&key, &name, Timestamp::now());
                created.push(name);
                true
            }
            Created::Unknown(message) => {
                // The machine may exist: the expectation waits for it to show up (or to
                // expire), and the slow start stops as after any error.
                self.expectations().creation_outcome_unknown(&key);
                self.record(ms, &events::create_failed(&message), "Create");
                tracing::warn!(machine_set = %key, error = %message, "machine creation outcome unknown");
                first_error.get_or_insert(ReplicaError { message });
                false
            }
            Created::No(message) => {
                self.expectations().creation_skipped(&key, 1);
                self.record(ms, &events::create_failed(&message), "Create");
                tracing::warn!(machine_set = %key, error = %message, "machine creation failed");
                first_error.get_or_insert(ReplicaError { message });
                false
            }
        })
        .await;
        if !created.is_empty() {
            self.record(ms, &events::created(&created), "Create");
        }
        let skipped = count.saturating_sub(issued);
        if skipped > 0 {
            self.expectations()
                .creation_skipped(&key, u32::try_from(skipped).unwrap_or(u32::MAX));
        }
        first_error
    }

    /// Deletes `victims` (expectations first), records events and writes the Terminating status
    /// on machines that still exist (docs/behaviour.md#manage-replicas `terminateMachines`). Errors are logged only.
    pub(super) async fn delete_machines(
        &self,
        ms: &MachineSet,
        cache: &[Arc<Machine>],
        victims: &[MachineRef],
        now: Timestamp,
    ) {
        let key = ms.metadata.name.clone().unwrap_or_default();
        let to_delete: Vec<&MachineRef> = victims
            .iter()
            .filter(|v| find(cache, v).is_none_or(|m| m.metadata.deletion_timestamp.is_none()))
            .collect();
        self.expectations()
            .expect_deletions(&key, to_delete.iter().map(|v| v.name.as_str()), now);
        tracing::info!(machine_set = %key, count = to_delete.len(), "deleting machines");
        // Lazily mapped: only DELETE_CONCURRENCY deletion futures exist at a time, not one per
        // victim (a scale-down of 1,000 held them all at once).
        // (Indices, not references: a closure over `&MachineRef` trips the compiler's Send check
        // for higher-ranked lifetimes.)
        let deletions = (0..to_delete.len()).map(|i| self.delete_one(ms, cache, to_delete[i], now));
        let outcomes: Vec<Option<(String, bool)>> = futures::stream::iter(deletions)
            .buffer_unordered(DELETE_CONCURRENCY)
            .collect()
            .await;
        let deleted: Vec<String> = outcomes
            .iter()
            .flatten()
            .map(|(name, _)| name.clone())
            .collect();
        if !deleted.is_empty() {
            self.record(ms, &events::deleted(&deleted), "Delete");
        }
        // A preserved machine goes last, but goes: say so on the machine's set.
        for machine in cache.iter().filter(|m| {
            m.metadata
                .name
                .as_ref()
                .is_some_and(|name| deleted.contains(name))
                && is_preserved(m, now)
        }) {
            let until = preserve_expiry_of(machine)
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            let name = machine.metadata.name.as_deref().unwrap_or("");
            self.record(ms, &events::preserved_deleted(name, &until), "Delete");
        }
        let stale_health_check = outcomes
            .iter()
            .flatten()
            .filter(|(_, stale)| *stale)
            .count();
        let stale_health_check = u64::try_from(stale_health_check).unwrap_or(u64::MAX);
        if stale_health_check > 0 {
            self.context
                .metrics
                .stale_machines_deleted(stale_health_check);
        }
    }

    /// Deletes one machine: its name when it was deleted, with true when it was a Failed
    /// machine whose last operation was a health check (the stale-machine counter of docs/behaviour.md#metrics-mcm).
    async fn delete_one(
        &self,
        ms: &MachineSet,
        cache: &[Arc<Machine>],
        victim: &MachineRef,
        now: Timestamp,
    ) -> Option<(String, bool)> {
        let key = ms.metadata.name.clone().unwrap_or_default();
        let api = self.context.namespaced::<Machine>();
        let params = DeleteParams {
            preconditions: (!victim.uid.is_empty()).then(|| Preconditions {
                uid: Some(victim.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&victim.name, &params).await {
            Ok(_) => {}
            Err(e) => {
                // Gone already or replaced by another object: nothing to wait for.
                self.expectations().deletion_failed(&key, &victim.name);
                if !is_not_found(&e) {
                    tracing::warn!(machine_set = %key, machine = %victim.name, error = %e, "machine deletion failed");
                    self.record(ms, &events::delete_failed(&e.to_string()), "Delete");
                }
                return None;
            }
        }
        let stale = find(cache, victim).is_some_and(|m| {
            m.phase() == Some(&MachinePhase::Failed)
                && m.last_operation()
                    .is_some_and(|l| l.type_ == Some(MachineOperationType::HealthCheck))
        });
        // A machine with finalizers is still there: say it is terminating.
        for _ in 0..UPDATE_ATTEMPTS {
            let live = match api.get_opt(&victim.name).await {
                Ok(Some(live)) => live,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(machine = %victim.name, error = %e, "cannot read deleted machine");
                    break;
                }
            };
            let Some(status) = plan::terminating_status(&live, now) else {
                break;
            };
            let mut updated = live;
            updated.status = Some(status);
            match api
                .replace_status(&victim.name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    tracing::debug!(machine = %victim.name, error = %e, "cannot write terminating status");
                    break;
                }
            }
        }
        Some((victim.name.clone(), stale))
    }
}

/// Runs the slow-start `batches` (upstream `slowStartBatch`): the attempts of one batch run
/// concurrently, each outcome goes to `settle` (true = success), and no further batch starts
/// after a batch with a failure. Returns how many attempts were issued.
async fn slow_start<R, F, Fut>(
    batches: &[usize],
    attempt: F,
    mut settle: impl FnMut(R) -> bool,
) -> usize
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = R>,
{
    let mut issued = 0usize;
    for &size in batches {
        let results = futures::future::join_all((0..size).map(|_| attempt())).await;
        issued += size;
        let mut batch_failed = false;
        for result in results {
            batch_failed |= !settle(result);
        }
        if batch_failed {
            break;
        }
    }
    issued
}

fn find<'a>(cache: &'a [Arc<Machine>], machine: &MachineRef) -> Option<&'a Machine> {
    cache
        .iter()
        .map(|m| &**m)
        .find(|m| m.metadata.name.as_deref() == Some(machine.name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Upstream `machineset_test.go` `#slowStartBatch` "should return error": count 10, initial
    /// batch 2, every call fails => 0 successes and an error. Our batches come from
    /// `plan::slow_start_batches`; the loop must stop after the first (failed) batch.
    #[tokio::test]
    async fn upstream_slow_start_batch_should_return_error() {
        let batches = plan::slow_start_batches(10, 2);
        let calls = AtomicUsize::new(0);
        let mut successes = 0usize;
        let mut first_error: Option<String> = None;
        let issued = slow_start(
            &batches,
            || {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>("some error".to_owned()) }
            },
            |result| match result {
                Ok(()) => {
                    successes += 1;
                    true
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                    false
                }
            },
        )
        .await;
        assert_eq!(successes, 0);
        assert_eq!(first_error.as_deref(), Some("some error"));
        assert_eq!(issued, 2, "only the first batch (of 2) is issued");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    /// The companion row ("should return number of success call which should be equal to
    /// count"), through the same loop: every batch runs and all 10 succeed.
    #[tokio::test]
    async fn slow_start_runs_every_batch_when_nothing_fails() {
        let batches = plan::slow_start_batches(10, 2);
        let mut successes = 0usize;
        let issued = slow_start(
            &batches,
            || async { Ok::<(), String>(()) },
            |r| {
                successes += usize::from(r.is_ok());
                r.is_ok()
            },
        )
        .await;
        assert_eq!((successes, issued), (10, 10));
    }

    /// A failure in a later batch stops the start there: the successes of earlier batches and of
    /// the failing batch count, nothing after it is issued (upstream returns them with the error).
    #[tokio::test]
    async fn slow_start_stops_after_the_batch_with_a_failure() {
        let batches = plan::slow_start_batches(10, 1);
        let calls = AtomicUsize::new(0);
        let mut successes = 0usize;
        // Call 5 (the third batch: calls 4..=7) fails.
        let issued = slow_start(
            &batches,
            || {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                async move { n != 5 }
            },
            |ok| {
                successes += usize::from(ok);
                ok
            },
        )
        .await;
        assert_eq!(batches[..3], [1, 2, 4]);
        assert_eq!(issued, 7);
        assert_eq!(successes, 6);
    }
}
