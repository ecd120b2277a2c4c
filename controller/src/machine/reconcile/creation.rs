//! Executes the creation flow (docs/behaviour.md#creation-flow) planned by [`plan::creation::next_creation_step`]: user-data
//! placeholders and the bootstrap token Secret, GetMachineStatus → CreateMachine →
//! labels/providerID → InitializeMachine, with the docs/behaviour.md#reaction-matrix error reactions decided by the plan.
//!
//! The Machine's finalizer is stored before CreateMachine is called, and CreateMachine is
//! idempotent by machine name, so a crash at any point leaves at most one VM per Machine and a
//! deletion always reaches the VM (see `plan::creation`).

use std::ops::ControlFlow;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use mcm_api::keys::{annotation, label};
use mcm_api::v1alpha1::{Machine, MachineOperationType};

use super::driver::{provider_of, timed};
use super::{ClassContext, MachineController, StepFlow, writes};
use crate::platform::error::ApiError;
use crate::platform::metrics::MachineDurationLabels;
use mcm_decisions::machine as plan;
use mcm_decisions::machine::creation::{
    BOOTSTRAP_TOKEN_ALPHABET, BOOTSTRAP_TOKEN_NAMESPACE, BOOTSTRAP_TOKEN_SECRET_LENGTH,
    CreationContext, CreationPass, CreationStep, MetadataUpdate, SecretData, StatusCallError,
};
use mcm_decisions::machine::hot_update::LAST_APPLIED_PROVIDER_SPEC;
use mcm_decisions::vocabulary::{DriverError, Event, Retry, effective_settings, name_of};

impl MachineController {
    /// `triggerCreationFlow`.
    pub(crate) async fn creation(
        &self,
        machine: &mut Machine,
        class: &ClassContext,
    ) -> Result<StepFlow, ApiError> {
        let name = name_of(machine).to_owned();
        let settings = effective_settings(machine, &self.settings);
        // Read once: the pass's writes before the final status write leave `lastOperation` as is.
        let retry_mark = plan::backoff::mark_of(machine, &MachineOperationType::Create);
        for warning in &settings.warnings {
            tracing::warn!(machine = %name, %warning, "machine settings");
        }
        let token = if self.settings.target_cluster {
            // A machine without a providerID has no VM yet: its token Secret is most likely
            // still to be created.
            let likely_new = machine
                .spec
                .provider_id
                .as_deref()
                .is_none_or(str::is_empty);
            match self
                .bootstrap_token(&name, settings.creation_timeout, likely_new)
                .await
            {
                Ok(token) => Some(token),
                Err(message) => {
                    tracing::warn!(machine = %name, %message, "cannot prepare the bootstrap token");
                    self.event(
                        machine,
                        &Event::warning("BootstrapTokenFailed", message.clone()),
                    );
                    return Ok(ControlFlow::Break(Retry::Short));
                }
            }
        } else {
            None
        };
        let patched = match plan::creation::patch_user_data(&class.secret, &name, token.as_deref())
        {
            Ok(patched) => patched,
            Err(error) => {
                tracing::warn!(machine = %name, %error, "cannot prepare the user data");
                self.event(
                    machine,
                    &Event::warning("UserDataMissing", error.to_string()),
                );
                return Ok(ControlFlow::Break(Retry::Short));
            }
        };
        for warning in &patched.warnings {
            tracing::info!(machine = %name, %warning, "user data");
        }
        let secret: SecretData = patched.data;
        let provider = provider_of(&class.class).to_owned();
        let instance_type = class
            .class
            .node_template
            .as_ref()
            .map(|template| template.instance_type.clone());
        let labels = |machine: &Machine| {
            MachineDurationLabels::for_machine(machine, instance_type.as_deref())
        };

        let mut pass = CreationPass::default();
        loop {
            let now = Timestamp::now();
            // The context holds a non-Send closure: compute the step before any await.
            let step = {
                let nodes = &self.context.nodes;
                let node_exists = |node: &str| nodes.get(node).is_some();
                let ctx = CreationContext {
                    machine,
                    settings: &settings,
                    controller: &self.settings,
                    retry_mark,
                    now,
                    node_exists: &node_exists,
                };
                plan::creation::next_creation_step(&ctx, &pass)
            };
            match step {
                CreationStep::CallGetMachineStatus => {
                    let result = timed(
                        &self.context,
                        &provider,
                        "GetMachineStatus",
                        self.context
                            .driver
                            .get_machine_status(machine, &class.class, &secret),
                    )
                    .await;
                    pass.get_status = Some(result.map_err(|error| StatusCallError {
                        error: DriverError::Coded(error.error),
                        response: error.response,
                    }));
                }
                CreationStep::CallCreateMachine => {
                    tracing::info!(machine = %name, "calling CreateMachine");
                    let result = timed(
                        &self.context,
                        &provider,
                        "CreateMachine",
                        self.context
                            .driver
                            .create_machine(machine, &class.class, &secret),
                    )
                    .await;
                    if result.is_ok() {
                        // No event: providerID, node label and lastOperation say it.
                        if let Some(labels) = labels(machine)
                            && let Some(seconds) =
                                plan::creation::seconds_since_creation(machine, Timestamp::now())
                        {
                            #[allow(clippy::cast_precision_loss)]
                            self.context
                                .metrics
                                .machine_created(&labels, seconds as f64);
                        }
                    }
                    pass.create = Some(result.map_err(DriverError::Coded));
                }
                CreationStep::DeleteStaleVm { provider_id } => {
                    let mut synthetic = machine.clone();
                    synthetic.spec.provider_id = Some(provider_id.clone());
                    let result = timed(
                        &self.context,
                        &provider,
                        "DeleteMachine",
                        self.context
                            .driver
                            .delete_machine(&synthetic, &class.class, &secret),
                    )
                    .await;
                    tracing::warn!(machine = %name, %provider_id, ok = result.is_ok(), "deleted a VM that reused a stale node name");
                    pass.stale_vm_delete = Some(result.map(|_| ()).map_err(DriverError::Coded));
                }
                CreationStep::UpdateMachineMetadata(update) => {
                    // The providerSpec a VM created in this pass was built from: recorded with
                    // the providerID so the hot update never adopts a later class change as
                    // applied. A VM found from an earlier pass is adopted by the hot update.
                    let created_from =
                        matches!(pass.create, Some(Ok(_))).then_some(&class.class.provider_spec);
                    let result = self.update_metadata(machine, &update, created_from).await;
                    pass.metadata_update = Some(match result {
                        Ok(stored) => {
                            *machine = stored;
                            Ok(())
                        }
                        Err(error) => Err(error.as_write_failure()),
                    });
                }
                CreationStep::CallInitializeMachine => {
                    let result = timed(
                        &self.context,
                        &provider,
                        "InitializeMachine",
                        self.context
                            .driver
                            .initialize_machine(machine, &class.class, &secret),
                    )
                    .await;
                    if result.is_ok()
                        && let Some(labels) = labels(machine)
                        && let Some(seconds) =
                            plan::creation::seconds_since_creation(machine, Timestamp::now())
                    {
                        #[allow(clippy::cast_precision_loss)]
                        self.context
                            .metrics
                            .machine_initialized(&labels, seconds as f64);
                    }
                    pass.initialize = Some(result.map_err(DriverError::Coded));
                }
                CreationStep::Finish(outcome) => {
                    tracing::info!(machine = %name, reason = %outcome.reason, retry = ?outcome.retry, "creation pass finished");
                    if let Some(mark) = outcome.backoff.map(|backoff| backoff.mark) {
                        let method = if matches!(pass.initialize, Some(Err(_))) {
                            "InitializeMachine"
                        } else if matches!(pass.create, Some(Err(_))) {
                            "CreateMachine"
                        } else {
                            "GetMachineStatus"
                        };
                        let delay = outcome.retry.delay();
                        tracing::warn!(machine = %name, method, attempt = mark.attempt, backoff_seconds = delay.as_secs_f64(), "driver call failed; backing off");
                        self.context
                            .metrics
                            .driver_retry_backoff(method, delay.as_secs_f64());
                    }
                    self.events(machine, &outcome.events);
                    if let Some(write) = &outcome.status {
                        match writes::write_status(&self.context, machine, write, now).await {
                            Ok(stored) => *machine = stored,
                            Err(error) => return Ok(ControlFlow::Break(error.retry())),
                        }
                    }
                    return Ok(ControlFlow::Break(outcome.retry));
                }
            }
        }
    }

    /// Step 5 of docs/behaviour.md#creation-flow: label `node`, priority annotation and `spec.providerID` in one Update,
    /// plus the last-applied providerSpec (`created_from`, when this pass created the VM), so no
    /// machine carries a providerID without it and a class change made before the first hot-update
    /// pass still reaches the VM through UpdateMachine.
    async fn update_metadata(
        &self,
        machine: &Machine,
        update: &MetadataUpdate,
        created_from: Option<&serde_json::Value>,
    ) -> Result<Machine, ApiError> {
        let mut updated = machine.clone();
        if let Some(node) = &update.node_label {
            updated
                .metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(label::NODE.to_owned(), node.clone());
        }
        if let Some(priority) = &update.priority {
            updated
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(annotation::MACHINE_PRIORITY.to_owned(), priority.clone());
        }
        if let Some(spec) = created_from {
            updated
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .entry(LAST_APPLIED_PROVIDER_SPEC.to_owned())
                .or_insert_with(|| spec.to_string());
        }
        updated.spec.provider_id = Some(update.provider_id.clone());
        writes::replace_machine(&self.context, &updated).await
    }

    /// The bootstrap token `<id>.<secret>` of `machine`: the existing Secret in the target
    /// cluster's `kube-system`, or a new one (expiring after the creation timeout); upstream's
    /// `getBootstrapTokenOrCreateIfNotExist`.
    ///
    /// `likely_new` (the machine has no VM yet) tries the creation first and reads only when the
    /// Secret exists (409): the first creation pass of a machine then costs one request instead
    /// of a read that finds nothing and a creation. In a scale-up of 1,000 that is 1,000 fewer
    /// requests in the target cluster's `--kube-api-qps` budget, ahead of every CreateMachine.
    async fn bootstrap_token(
        &self,
        machine: &str,
        creation_timeout: mcm_api::duration::Duration,
        likely_new: bool,
    ) -> Result<String, String> {
        let Some(target) = self.context.target.clone() else {
            return Err("no target cluster".to_owned());
        };
        let token_id = plan::creation::bootstrap_token_id(machine).map_err(|e| e.to_string())?;
        let name = plan::creation::bootstrap_token_secret_name(&token_id);
        let api: Api<Secret> = Api::namespaced(target, BOOTSTRAP_TOKEN_NAMESPACE);
        let get_failed =
            |error: kube::Error| format!("get Secret {BOOTSTRAP_TOKEN_NAMESPACE}/{name}: {error}");
        let token_of = |secret: &Secret| {
            plan::creation::bootstrap_token_from_secret(secret).map_err(|e| e.to_string())
        };
        if !likely_new && let Some(secret) = api.get_opt(&name).await.map_err(get_failed)? {
            return token_of(&secret);
        }
        let token_secret = random_token_secret()?;
        let secret = plan::creation::bootstrap_token_secret(
            machine,
            &token_id,
            &token_secret,
            creation_timeout,
            &self.settings.bootstrap_token_auth_extra_groups,
            Timestamp::now(),
        );
        match api.create(&PostParams::default(), &secret).await {
            Ok(created) => token_of(&created),
            // It exists (an earlier pass, or another pass meanwhile): use that one.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                token_of(&api.get(&name).await.map_err(get_failed)?)
            }
            Err(error) => Err(format!(
                "create Secret {BOOTSTRAP_TOKEN_NAMESPACE}/{name}: {error}"
            )),
        }
    }
}

/// 16 characters of the bootstrap token alphabet from the system's secure random generator
/// (rejection sampling keeps the draw uniform).
fn random_token_secret() -> Result<String, String> {
    let alphabet = BOOTSTRAP_TOKEN_ALPHABET.as_bytes();
    let provider = rustls::crypto::ring::default_provider();
    let limit = 256 - 256 % alphabet.len();
    let mut out = String::with_capacity(BOOTSTRAP_TOKEN_SECRET_LENGTH);
    let mut buffer = [0u8; 64];
    while out.len() < BOOTSTRAP_TOKEN_SECRET_LENGTH {
        provider
            .secure_random
            .fill(&mut buffer)
            .map_err(|_| "the secure random generator failed".to_owned())?;
        for byte in buffer {
            if usize::from(byte) < limit && out.len() < BOOTSTRAP_TOKEN_SECRET_LENGTH {
                out.push(char::from(alphabet[usize::from(byte) % alphabet.len()]));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_secrets_have_the_bootstrap_token_shape_and_differ() {
        let a = random_token_secret().unwrap_or_default();
        let b = random_token_secret().unwrap_or_default();
        assert!(plan::creation::is_valid_token_secret(&a), "{a:?}");
        assert!(plan::creation::is_valid_token_secret(&b), "{b:?}");
        assert_ne!(a, b);
    }
}
