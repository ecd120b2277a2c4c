//! Creation flow (docs/behaviour.md#creation-flow) as a step machine, plus user-data and bootstrap-token helpers.
//!
//! The shell calls [`next_creation_step`] with everything it has observed in the current pass
//! ([`CreationPass`]), executes the returned step (a driver call or an API write), records the
//! result in the pass and asks again, until [`CreationStep::Finish`].
//!
//! Crash safety (docs/architecture.md#crash-safety): the durable record that a VM may exist is the Machine's finalizer,
//! stored before the first pass reaches this plan; [`CreationStep::CallCreateMachine`] is never
//! returned for a machine without it. Until the providerID is stored the machine has no phase (or
//! CrashLoopBackOff) and no providerID, which is what the orphan collector keeps VMs for, and a
//! deletion goes through the termination flow, which deletes the VM by machine name. The next pass
//! finds a VM created before a crash again (GetMachineStatus, or CreateMachine, which providers
//! implement idempotently by machine name).
//!
//! InitializeMachine is called in the pass whose CreateMachine created the VM (after the metadata
//! update, as upstream), and later only when GetMachineStatus answers `Uninitialized`: a driver
//! that reports a created VM normally is asked exactly once per VM. The metadata update replaces
//! the shell's machine by the stored object, whose providerID must not make the re-asked plan
//! take the VM for one found in an earlier pass, so what the pass did (`CreationPass::create`)
//! decides before the stored providerID. Without a target cluster the addresses of CreateMachine
//! and InitializeMachine are written in that pass too; the phase (`Available`) follows in the next
//! pass, as upstream (its test "without target cluster: machine creation and initialization
//! succeeds" expects no phase after the creating pass).
//!
//! Earlier versions wrote a status of their own before CreateMachine ([`CREATE_INTENT_DESCRIPTION`]);
//! upstream writes none, and the finalizer already records the intent, so the write is gone (one
//! write less per machine). Stored machines that still show it are recognised
//! ([`has_create_intent`]).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{NodeAddress, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::keys::{annotation, finalizer, misc, value};
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachinePhase, MachineState};
use mcm_provider_proto::{Code, CreateMachineResponse, InitializeMachineResponse, MachineStatus};

use super::backoff::{Backoff, RetryClass, RetryMark, next_backoff, wait_before_retry};
use crate::vocabulary::{
    ControllerSettings, DriverError, EffectiveSettings, Event, Retry, StatusWrite, WriteFailure,
    add, current_of, current_status, elapsed, has_finalizer, is_transient, last_operation,
    machine_annotation, name_of, node_name_of, phase_of, provider_id_of,
};

/// Description that earlier versions wrote before calling `CreateMachine`; still recognised on
/// stored machines.
pub const CREATE_INTENT_DESCRIPTION: &str = "Calling CreateMachine on cloud provider";
/// Description of the Pending phase once the VM exists (upstream text).
pub const CREATING_DESCRIPTION: &str = "Creating machine on cloud provider";
/// Description of the Available phase without a target cluster (upstream text).
pub const CREATED_DESCRIPTION: &str = "Created machine on cloud provider";
/// Description written when the created VM reuses the name of an existing Node (upstream text).
pub const STALE_NODE_DESCRIPTION: &str = "VM using old node obj";
/// Namespace of bootstrap token Secrets.
pub const BOOTSTRAP_TOKEN_NAMESPACE: &str = "kube-system";
/// Secret type of bootstrap tokens.
pub const BOOTSTRAP_TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Alphabet of bootstrap token secrets (16 characters drawn by the shell).
pub const BOOTSTRAP_TOKEN_ALPHABET: &str = "0123456789abcdefghijklmnopqrstuvwxyz";
/// Length of the random part of a bootstrap token.
pub const BOOTSTRAP_TOKEN_SECRET_LENGTH: usize = 16;

/// Errors of the creation helpers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreationError {
    /// The class secret has no `userData`.
    #[error("userdata field not found in secret for machine {machine}")]
    UserDataMissing {
        /// Machine name.
        machine: String,
    },
    /// Bootstrap token ids are derived from the last 5 bytes of the name.
    #[error("machine name {machine:?} is shorter than 5 bytes, cannot derive a bootstrap token id")]
    NameTooShort {
        /// Machine name.
        machine: String,
    },
    /// A bootstrap token Secret without `token-id`/`token-secret`.
    #[error("bootstrap token secret {secret:?} lacks token-id or token-secret")]
    MalformedTokenSecret {
        /// Secret name.
        secret: String,
    },
}

/// Secret data as the driver receives it.
pub type SecretData = BTreeMap<String, Vec<u8>>;

/// Go's `url.QueryEscape`.
#[must_use]
pub fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

fn replace_all(haystack: &[u8], needle: &[u8], replacement: &[u8]) -> Option<Vec<u8>> {
    if needle.is_empty()
        || haystack
            .windows(needle.len())
            .all(|window| window != needle)
    {
        return None;
    }
    let mut out = Vec::with_capacity(haystack.len());
    let mut index = 0;
    while index < haystack.len() {
        if haystack[index..].starts_with(needle) {
            out.extend_from_slice(replacement);
            index += needle.len();
        } else {
            out.push(haystack[index]);
            index += 1;
        }
    }
    Some(out)
}

/// Replaces a placeholder: the plain form with `value`, else the URL-encoded form with the
/// URL-encoded value, else nothing (a warning).
fn substitute(
    data: &[u8],
    plain: &str,
    escaped: &str,
    value: &str,
    warnings: &mut Vec<String>,
) -> Vec<u8> {
    if let Some(out) = replace_all(data, plain.as_bytes(), value.as_bytes()) {
        return out;
    }
    if let Some(out) = replace_all(data, escaped.as_bytes(), query_escape(value).as_bytes()) {
        return out;
    }
    warnings.push(format!("user data contains no {plain} placeholder"));
    data.to_vec()
}

/// User data with placeholders substituted, and warnings for placeholders that were absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchedSecret {
    /// The secret data for the driver.
    pub data: SecretData,
    /// Placeholders not found (logged by the shell).
    pub warnings: Vec<String>,
}

/// Step 2 of docs/behaviour.md#creation-flow: substitutes `<<BOOTSTRAP_TOKEN>>` (when a token is given, i.e. with a target
/// cluster) and `<<MACHINE_NAME>>` in `userData`, plain or URL-encoded.
///
/// # Errors
/// [`CreationError::UserDataMissing`] when the secret has no `userData`.
pub fn patch_user_data(
    secret: &SecretData,
    machine_name: &str,
    bootstrap_token: Option<&str>,
) -> Result<PatchedSecret, CreationError> {
    let Some(user_data) = secret.get(misc::USER_DATA_KEY) else {
        return Err(CreationError::UserDataMissing {
            machine: machine_name.to_owned(),
        });
    };
    let mut warnings = Vec::new();
    let mut patched = user_data.clone();
    if let Some(token) = bootstrap_token {
        patched = substitute(
            &patched,
            misc::BOOTSTRAP_TOKEN_PLACEHOLDER,
            misc::BOOTSTRAP_TOKEN_PLACEHOLDER_ESCAPED,
            token,
            &mut warnings,
        );
    }
    patched = substitute(
        &patched,
        misc::MACHINE_NAME_PLACEHOLDER,
        misc::MACHINE_NAME_PLACEHOLDER_ESCAPED,
        machine_name,
        &mut warnings,
    );
    let mut data = secret.clone();
    data.insert(misc::USER_DATA_KEY.to_owned(), patched);
    Ok(PatchedSecret { data, warnings })
}

/// Bootstrap token id: lowercase hex of the 3 bytes at positions `len-5 .. len-3` of the name.
///
/// # Errors
/// [`CreationError::NameTooShort`] for names shorter than 5 bytes (upstream would panic).
pub fn bootstrap_token_id(machine_name: &str) -> Result<String, CreationError> {
    let bytes = machine_name.as_bytes();
    if bytes.len() < 5 {
        return Err(CreationError::NameTooShort {
            machine: machine_name.to_owned(),
        });
    }
    Ok(bytes[bytes.len() - 5..bytes.len() - 2]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect())
}

/// Name of the bootstrap token Secret (in `kube-system`).
#[must_use]
pub fn bootstrap_token_secret_name(token_id: &str) -> String {
    format!("bootstrap-token-{token_id}")
}

/// The bootstrap token Secret to create when none exists: expires after the effective creation
/// timeout; `token_secret` is drawn by the shell (16 characters of [`BOOTSTRAP_TOKEN_ALPHABET`]).
#[must_use]
pub fn bootstrap_token_secret(
    machine_name: &str,
    token_id: &str,
    token_secret: &str,
    creation_timeout: mcm_api::duration::Duration,
    auth_extra_groups: &str,
    now: Timestamp,
) -> Secret {
    let expiration = add(now, creation_timeout);
    // Go formats RFC 3339 without fractional seconds.
    let expiration = Timestamp::from_second(expiration.as_second()).unwrap_or(expiration);
    let entries = [
        (
            "description",
            format!(
                "A bootstrap token for machine \"{machine_name}\" generated by MachineControllerManager."
            ),
        ),
        ("token-id", token_id.to_owned()),
        ("token-secret", token_secret.to_owned()),
        ("expiration", expiration.to_string()),
        ("usage-bootstrap-authentication", value::TRUE.to_owned()),
        ("usage-bootstrap-signing", value::TRUE.to_owned()),
        ("auth-extra-groups", auth_extra_groups.to_owned()),
    ];
    Secret {
        metadata: ObjectMeta {
            name: Some(bootstrap_token_secret_name(token_id)),
            namespace: Some(BOOTSTRAP_TOKEN_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some(BOOTSTRAP_TOKEN_SECRET_TYPE.to_owned()),
        data: Some(
            entries
                .into_iter()
                .map(|(key, text)| (key.to_owned(), ByteString(text.into_bytes())))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// The token `<token-id>.<token-secret>` of an existing bootstrap token Secret (reused even when
/// expired, as upstream).
///
/// # Errors
/// [`CreationError::MalformedTokenSecret`] when either field is missing or not UTF-8.
pub fn bootstrap_token_from_secret(secret: &Secret) -> Result<String, CreationError> {
    let field = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .and_then(|ByteString(bytes)| String::from_utf8(bytes.clone()).ok())
            .filter(|text| !text.is_empty())
    };
    match (field("token-id"), field("token-secret")) {
        (Some(id), Some(token_secret)) => Ok(format!("{id}.{token_secret}")),
        _ => Err(CreationError::MalformedTokenSecret {
            secret: secret.metadata.name.clone().unwrap_or_default(),
        }),
    }
}

/// Whether a drawn token secret has the required shape (the shell draws it; this guards tests and
/// alternative generators).
#[must_use]
pub fn is_valid_token_secret(token_secret: &str) -> bool {
    token_secret.len() == BOOTSTRAP_TOKEN_SECRET_LENGTH
        && token_secret
            .chars()
            .all(|c| BOOTSTRAP_TOKEN_ALPHABET.contains(c))
}

/// Everything the creation plan reads.
pub struct CreationContext<'a> {
    /// The machine (from the cache, or the object returned by the last write of this pass).
    pub machine: &'a Machine,
    /// Effective per-machine settings.
    pub settings: &'a EffectiveSettings,
    /// Controller flags.
    pub controller: &'a ControllerSettings,
    /// The backoff suffix of the machine's stored Create operation
    /// ([`super::backoff::mark_of`]), read once with the machine.
    pub retry_mark: Option<RetryMark>,
    /// Current time.
    pub now: Timestamp,
    /// Whether a Node with the given name exists in the target cluster cache (stale node check).
    pub node_exists: &'a dyn Fn(&str) -> bool,
}

/// The error of GetMachineStatus, with the VM status that comes with `Uninitialized`.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusCallError {
    /// The error.
    pub error: DriverError,
    /// The response returned together with the error.
    pub response: Option<MachineStatus>,
}

/// What the shell observed so far in this pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CreationPass {
    /// Result of GetMachineStatus.
    pub get_status: Option<Result<MachineStatus, StatusCallError>>,
    /// Result of CreateMachine.
    pub create: Option<Result<CreateMachineResponse, DriverError>>,
    /// Result of the DeleteMachine of a VM that reused a stale node name.
    pub stale_vm_delete: Option<Result<(), DriverError>>,
    /// Result of the metadata update (node label, priority, providerID).
    pub metadata_update: Option<Result<(), WriteFailure>>,
    /// Result of InitializeMachine.
    pub initialize: Option<Result<InitializeMachineResponse, DriverError>>,
}

/// Labels, annotations and spec fields to set on the Machine (one `Update`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataUpdate {
    /// Label `node` (target cluster only).
    pub node_label: Option<String>,
    /// Annotation `machinepriority.machine.sapcloud.io` when missing.
    pub priority: Option<String>,
    /// `spec.providerID`.
    pub provider_id: String,
}

/// The end of a creation pass.
#[derive(Clone, Debug, PartialEq)]
pub struct CreationOutcome {
    /// Status write, if any.
    pub status: Option<StatusWrite>,
    /// Next reconcile.
    pub retry: Retry,
    /// Why the pass ended (logged; upstream's "success error").
    pub reason: String,
    /// Events to record on the Machine.
    pub events: Vec<Event>,
    /// The backoff a failed driver call starts (its suffix is in the status write's
    /// description), for the shell's log and metric.
    pub backoff: Option<Backoff>,
}

/// The next thing the shell must do.
// A step lives for one turn of the shell's loop; boxing the final outcome would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum CreationStep {
    /// Call GetMachineStatus with the patched secret.
    CallGetMachineStatus,
    /// Call CreateMachine with the patched secret.
    CallCreateMachine,
    /// Delete the VM just created because its node name belongs to an existing Node (synthetic
    /// machine with this providerID).
    DeleteStaleVm {
        /// The new VM's providerID.
        provider_id: String,
    },
    /// Update the Machine's metadata/spec.
    UpdateMachineMetadata(MetadataUpdate),
    /// Call InitializeMachine with the updated machine.
    CallInitializeMachine,
    /// The pass is over.
    Finish(CreationOutcome),
}

/// Whether the machine's status records the intent to call CreateMachine (with or without the
/// backoff's `" (attempt N)"` suffix).
#[must_use]
pub fn has_create_intent(machine: &Machine) -> bool {
    machine.last_operation().is_some_and(|operation| {
        operation.type_ == Some(MachineOperationType::Create)
            && operation.state == Some(MachineState::Processing)
            && operation
                .description
                .as_deref()
                .is_some_and(|text| super::backoff::strip_mark(text) == CREATE_INTENT_DESCRIPTION)
    })
}

/// `Failed` once the effective creation timeout has passed since creation, else
/// `CrashLoopBackOff`.
#[must_use]
pub fn create_failure_phase(
    machine: &Machine,
    settings: &EffectiveSettings,
    now: Timestamp,
) -> MachinePhase {
    let created = machine
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |at| at.0);
    if elapsed(created, now) > settings.creation_timeout {
        MachinePhase::Failed
    } else {
        MachinePhase::CrashLoopBackOff
    }
}

/// When a machine whose driver call failed with ResourceExhausted is retried:
/// `--resource-exhausted-retry`, where 0 means the long retry (docs/behaviour.md#retry-classes).
#[must_use]
pub fn resource_exhausted_retry(controller: &ControllerSettings) -> Retry {
    let period = controller.resource_exhausted_retry;
    if period.as_nanos() == 0 {
        Retry::Long
    } else {
        Retry::After(period)
    }
}

/// Upstream `machineCreateErrorHandler`.
#[must_use]
pub fn create_error_outcome(
    ctx: &CreationContext<'_>,
    error: &DriverError,
    response_last_known_state: Option<&str>,
) -> CreationOutcome {
    let code = error.code();
    let (retry, keep_state) = match code {
        Code::ResourceExhausted => (resource_exhausted_retry(ctx.controller), true),
        code if error.is_decodable() && is_transient(code) => (Retry::Short, true),
        _ => (Retry::Medium, false),
    };
    // Upstream's constant Short/Medium retry becomes a per-machine backoff;
    // ResourceExhausted keeps its own flag.
    let class = match retry {
        Retry::Short => Some(RetryClass::Short),
        Retry::Medium => Some(RetryClass::Medium),
        _ => None,
    };
    let backoff = class.map(|class| {
        next_backoff(
            ctx.machine,
            ctx.retry_mark,
            class,
            &ctx.controller.retry_backoff,
            ctx.now,
        )
    });
    let retry = backoff.map_or(retry, |backoff| Retry::After(backoff.delay));
    let mut last_known_state = if keep_state {
        None
    } else {
        Some(String::new())
    };
    if let Some(state) = response_last_known_state.filter(|state| !state.is_empty()) {
        last_known_state = Some(state.to_owned());
    }
    let description = format!("Cloud provider message - {error}");
    let stored = backoff.map_or_else(
        || description.clone(),
        |backoff| super::backoff::with_mark(&description, backoff.mark),
    );
    let mut operation = last_operation(
        stored,
        MachineState::Failed,
        MachineOperationType::Create,
        ctx.now,
    );
    operation.error_code = Some(code.name().to_owned());
    let phase = create_failure_phase(ctx.machine, ctx.settings, ctx.now);
    let mut write = StatusWrite::similar_checked(
        operation,
        current_status(phase.clone(), false, ctx.now, None),
    );
    write.last_known_state = last_known_state;
    // The attempt count must be persisted, even when the text is "similar" to the last one.
    write.skip_if_similar &= backoff.is_none();
    CreationOutcome {
        status: Some(write),
        retry,
        // Upstream returns the driver's error itself (the description wraps it).
        reason: error.to_string(),
        events: vec![Event::warning(
            "MachineCreationFailed",
            format!("{description} (phase {phase})"),
        )],
        backoff,
    }
}

fn finish(status: Option<StatusWrite>, retry: Retry, reason: impl Into<String>) -> CreationStep {
    CreationStep::Finish(CreationOutcome {
        status,
        retry,
        reason: reason.into(),
        events: Vec::new(),
        backoff: None,
    })
}

/// The VM the pass found or created.
struct Vm {
    node_name: String,
    provider_id: String,
    addresses: Vec<NodeAddress>,
    uninitialized: bool,
}

/// The stale node check after CreateMachine (target cluster only): a VM whose node name belongs
/// to an existing Node other than the machine's own is deleted and the machine marked Failed.
fn stale_node_step(
    ctx: &CreationContext<'_>,
    pass: &CreationPass,
    created: &CreateMachineResponse,
) -> Option<CreationStep> {
    let name = name_of(ctx.machine);
    if !ctx.controller.target_cluster
        || created.node_name == name
        || created.node_name.is_empty()
        || !(ctx.node_exists)(&created.node_name)
    {
        return None;
    }
    let Some(delete_result) = &pass.stale_vm_delete else {
        return Some(CreationStep::DeleteStaleVm {
            provider_id: created.provider_id.clone(),
        });
    };
    let write = StatusWrite::similar_checked(
        last_operation(
            STALE_NODE_DESCRIPTION,
            MachineState::Failed,
            MachineOperationType::Create,
            ctx.now,
        ),
        current_status(MachinePhase::Failed, false, ctx.now, None),
    );
    let reason = match delete_result {
        Ok(()) => format!(
            "machine {name:?}: VM {} uses the name of existing node {:?}; VM deleted",
            created.provider_id, created.node_name
        ),
        Err(error) => format!(
            "machine {name:?}: VM {} uses the name of existing node {:?}; deleting it failed: {error}",
            created.provider_id, created.node_name
        ),
    };
    Some(CreationStep::Finish(CreationOutcome {
        status: Some(write),
        retry: Retry::Short,
        events: vec![Event::warning("StaleNodeDetected", reason.clone())],
        reason,
        backoff: None,
    }))
}

/// The next step of the creation flow for what has been observed in this pass.
#[must_use]
pub fn next_creation_step(ctx: &CreationContext<'_>, pass: &CreationPass) -> CreationStep {
    let machine = ctx.machine;
    let name = name_of(machine);
    let target = ctx.controller.target_cluster;
    let Some(status_result) = &pass.get_status else {
        // A reconcile before the backoff's next retry time (watch event, resync, restart) must
        // not call the failing provider again.
        if let Some(wait) = wait_before_retry(machine, ctx.retry_mark, ctx.now) {
            return finish(
                None,
                Retry::After(wait),
                format!("machine {name:?}: backing off, next driver call in {wait}"),
            );
        }
        return CreationStep::CallGetMachineStatus;
    };

    let vm = match status_result {
        Ok(status) => Vm {
            node_name: status.node_name.clone(),
            provider_id: status.provider_id.clone(),
            addresses: status.addresses.clone(),
            uninitialized: false,
        },
        Err(StatusCallError { error, .. }) if !error.is_decodable() => {
            return finish(
                None,
                Retry::Medium,
                format!(
                    "machine {name:?}: GetMachineStatus failed with an undecodable error: {error}"
                ),
            );
        }
        Err(StatusCallError { error, .. })
            if matches!(error.code(), Code::NotFound | Code::Unimplemented) =>
        {
            // What this pass did decides before the stored providerID: after the metadata update
            // the shell asks again with the stored machine, which carries the providerID of the
            // VM this very pass created; that VM still needs InitializeMachine.
            match (&pass.create, provider_id_of(machine)) {
                (Some(Err(error)), _) => {
                    return CreationStep::Finish(create_error_outcome(ctx, error, None));
                }
                (Some(Ok(created)), _) => {
                    if let Some(step) = stale_node_step(ctx, pass, created) {
                        return step;
                    }
                    Vm {
                        node_name: created.node_name.clone(),
                        provider_id: created.provider_id.clone(),
                        addresses: created.addresses.clone(),
                        uninitialized: true,
                    }
                }
                (None, Some(provider_id)) => Vm {
                    // The VM is presumed to exist (a vanished VM is not recreated, docs/behaviour.md#q27).
                    node_name: node_name_of(machine).unwrap_or("").to_owned(),
                    provider_id: provider_id.to_owned(),
                    addresses: Vec::new(),
                    uninitialized: false,
                },
                (None, None) if has_finalizer(machine, finalizer::MACHINE_CONTROLLER_MANAGER) => {
                    return CreationStep::CallCreateMachine;
                }
                (None, None) => {
                    // The entry step stores the finalizer before any pass gets here; without it
                    // a VM could outlive a deletion of its Machine.
                    return finish(
                        None,
                        Retry::Short,
                        format!(
                            "machine {name:?}: no finalizer stored yet, CreateMachine waits for it"
                        ),
                    );
                }
            }
        }
        Err(StatusCallError { error, response }) if error.code() == Code::Uninitialized => {
            let response = response.clone().unwrap_or_default();
            Vm {
                node_name: response.node_name,
                provider_id: response.provider_id,
                addresses: response.addresses,
                uninitialized: true,
            }
        }
        Err(StatusCallError { error, .. }) => {
            return CreationStep::Finish(create_error_outcome(ctx, error, None));
        }
    };

    if (target && vm.node_name.is_empty()) || vm.provider_id.is_empty() {
        return finish(
            None,
            Retry::Medium,
            format!(
                "machine {name:?}: nodeName ({:?}) or providerID ({:?}) is empty after creation flow",
                vm.node_name, vm.provider_id
            ),
        );
    }

    let needs_node_label = target && node_name_of(machine).is_none();
    let needs_priority =
        machine_annotation(machine, annotation::MACHINE_PRIORITY).is_none_or(str::is_empty);
    let needs_provider_id = provider_id_of(machine).is_none();
    // Upstream goes on to InitializeMachine even when the update failed (the next pass retries
    // the update): a VM created in this pass is initialised in this pass, whatever the API server
    // answered, or a driver that reports the VM normally from then on would never be asked.
    let metadata_update = match &pass.metadata_update {
        None if needs_node_label || needs_priority || needs_provider_id => {
            return CreationStep::UpdateMachineMetadata(MetadataUpdate {
                node_label: target.then(|| vm.node_name.clone()),
                priority: needs_priority.then(|| value::MACHINE_PRIORITY_DEFAULT.to_owned()),
                provider_id: vm.provider_id.clone(),
            });
        }
        other => other.as_ref(),
    };

    if vm.uninitialized {
        match &pass.initialize {
            None => return CreationStep::CallInitializeMachine,
            Some(Err(error)) if !error.is_decodable() => {
                return finish(
                    None,
                    Retry::Long,
                    format!(
                        "machine {name:?}: InitializeMachine failed with an undecodable error: {error}"
                    ),
                );
            }
            Some(Err(error)) if error.code() != Code::Unimplemented => {
                let description = format!(
                    "Provider error: {error}. {}",
                    mcm_api::keys::last_operation::INSTANCE_INITIALIZATION
                );
                let backoff = next_backoff(
                    machine,
                    ctx.retry_mark,
                    RetryClass::Short,
                    &ctx.controller.retry_backoff,
                    ctx.now,
                );
                let mut operation = last_operation(
                    super::backoff::with_mark(&description, backoff.mark),
                    MachineState::Failed,
                    MachineOperationType::Create,
                    ctx.now,
                );
                operation.error_code = Some(error.code().name().to_owned());
                let phase = create_failure_phase(machine, ctx.settings, ctx.now);
                return CreationStep::Finish(CreationOutcome {
                    // Not similarity-checked: the attempt count must be persisted.
                    status: Some(StatusWrite::new(
                        operation,
                        current_status(phase, false, ctx.now, None),
                    )),
                    retry: Retry::After(backoff.delay),
                    events: vec![Event::warning("MachineInitializationFailed", description)],
                    // Upstream returns the driver's error itself (the description wraps it).
                    reason: error.to_string(),
                    backoff: Some(backoff),
                });
            }
            Some(result) => {
                let init_addresses = match result {
                    Ok(response) => response.addresses.clone(),
                    Err(_) => Vec::new(),
                };
                let status = (!target).then(|| {
                    let mut write = StatusWrite::new(
                        machine.last_operation().cloned().unwrap_or_default(),
                        current_of(machine),
                    );
                    write.addresses = Some(merge_addresses(
                        machine,
                        &[&vm.addresses, &init_addresses],
                        &vm.node_name,
                    ));
                    write
                });
                return finish(
                    status,
                    Retry::Short,
                    "machine creation in process. Machine initialization (if required) is successful",
                );
            }
        }
    }

    match metadata_update {
        Some(Err(failure)) => {
            return finish(
                None,
                failure.retry(),
                format!(
                    "machine {name:?}: updating labels/providerID failed: {}",
                    failure.message
                ),
            );
        }
        Some(Ok(())) => {
            return finish(
                None,
                Retry::Short,
                "machine creation in process. Machine labels/annotations update is successful",
            );
        }
        None => {}
    }

    match phase_of(machine) {
        None | Some(MachinePhase::CrashLoopBackOff) => {
            let write = if target {
                StatusWrite::new(
                    last_operation(
                        CREATING_DESCRIPTION,
                        MachineState::Processing,
                        MachineOperationType::Create,
                        ctx.now,
                    ),
                    current_status(MachinePhase::Pending, true, ctx.now, None),
                )
            } else {
                let mut write = StatusWrite::new(
                    last_operation(
                        CREATED_DESCRIPTION,
                        MachineState::Successful,
                        MachineOperationType::Create,
                        ctx.now,
                    ),
                    current_status(MachinePhase::Available, false, ctx.now, None),
                );
                write.addresses = Some(merge_addresses(machine, &[&vm.addresses], &vm.node_name));
                write
            };
            finish(
                Some(write),
                Retry::Short,
                "machine creation in process. Machine/Status UPDATE successful",
            )
        }
        Some(_) => finish(None, Retry::Long, "machine already created"),
    }
}

/// Previous ∪ new addresses plus `{Hostname, nodeName}`, de-duplicated and sorted by type+address.
fn merge_addresses(
    machine: &Machine,
    extra: &[&Vec<NodeAddress>],
    node_name: &str,
) -> Vec<NodeAddress> {
    let mut all: BTreeMap<(String, String), NodeAddress> = BTreeMap::new();
    let previous = machine
        .status
        .as_ref()
        .and_then(|status| status.addresses.clone())
        .unwrap_or_default();
    let hostname = NodeAddress {
        type_: "Hostname".to_owned(),
        address: node_name.to_owned(),
    };
    for address in previous
        .iter()
        .chain(extra.iter().flat_map(|list| list.iter()))
        .chain(std::iter::once(&hostname))
    {
        if address.address.is_empty() {
            continue;
        }
        all.insert(
            (address.type_.clone(), address.address.clone()),
            address.clone(),
        );
    }
    all.into_values().collect()
}

/// Time helper re-exported for the shell's metrics (seconds since creation, rounded).
#[must_use]
pub fn seconds_since_creation(machine: &Machine, now: Timestamp) -> Option<i64> {
    machine
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|at| now.duration_since(at.0).as_secs())
}

#[cfg(test)]
mod tests;
