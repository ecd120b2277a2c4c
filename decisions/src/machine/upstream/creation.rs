//! `machine_test.go` `#triggerCreationFlow` / `##table` (and the creation entry of
//! `#pendingMachineCreationMap tests`): one reconcile pass of the creation flow per entry, driven
//! through [`next_creation_step`] the way the shell drives it, against a driver that answers as
//! upstream's `FakeDriver` does (`pkg/util/provider/driver/fake.go`).
//!
//! Upstream calls `triggerCreationFlow` once and then reads the stored machine; here one pass runs
//! every step the plan asks for (the metadata update and the status write are applied to the
//! machine as the API server would store them) and the rows compare what upstream compares:
//! `spec.providerID`, finalizers, phase, addresses, labels, lastOperation error code and
//! description, the retry period and the returned error (ours: the pass's `reason`, which the
//! shell logs as upstream logs the error).
//!
//! Retry periods: upstream's constant ShortRetry/MediumRetry after a failing driver call are the
//! machine's backoff of that class here (the documented retry-timing deviation in
//! `docs/upstream-conformance.md`): the rows check that the class maps (`Want::Backoff`) and that
//! the stored description is upstream's text plus the backoff's `" (attempt N, ...)"` suffix.
//! Periods upstream returns after success (ShortRetry/LongRetry) and `--resource-exhausted-retry`
//! are unchanged.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeAddress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::duration::Duration;
use mcm_api::keys::{annotation, finalizer, label};
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachinePhase as P, MachineState};
use mcm_provider_proto::{Code, CreateMachineResponse, InitializeMachineResponse, MachineStatus};

use crate::machine::backoff::{RetryClass, mark_of, next_backoff, parse_mark, strip_mark};
use crate::machine::creation::{
    CreationContext, CreationOutcome, CreationPass, CreationStep, StatusCallError,
    next_creation_step,
};
use crate::test_support::*;
use crate::vocabulary::{
    ControllerSettings, DriverError, Retry, effective_settings, phase_of, provider_id_of,
};

const NOW: i64 = 30_000;
const NAME: &str = "machine-0";
const FAKE_NOT_FOUND: &str = "Fake plugin is returning no VM instances backing this machine object";
const INITIALIZED: &str =
    "machine creation in process. Machine initialization (if required) is successful";
const STATUS_UPDATED: &str = "machine creation in process. Machine/Status UPDATE successful";
const LABELS_UPDATED: &str =
    "machine creation in process. Machine labels/annotations update is successful";
const CREATE_INTERNAL: &str = "Provider is returning error on create call";
const NO_CAPACITY: &str = "Provider does not have capacity to create VM";
const NOT_INITIALIZED: &str = "VM instance could not be initialized";

/// Upstream's `FakeDriver`: one VM (`provider_id`, `node_name`, `addresses`), `err` answered by
/// every call (GetMachineStatus only once the VM exists, together with its status).
#[derive(Clone)]
struct FakeDriver {
    vm_exists: bool,
    provider_id: &'static str,
    node_name: &'static str,
    addresses: &'static [(&'static str, &'static str)],
    err: Option<(Code, &'static str)>,
}

impl FakeDriver {
    fn error(&self) -> Option<DriverError> {
        self.err
            .map(|(code, message)| DriverError::coded(code, message))
    }

    fn addresses(&self) -> Vec<NodeAddress> {
        self.addresses
            .iter()
            .map(|(type_, address)| NodeAddress {
                type_: (*type_).to_owned(),
                address: (*address).to_owned(),
            })
            .collect()
    }

    fn get_machine_status(&self) -> Result<MachineStatus, StatusCallError> {
        if !self.vm_exists {
            return Err(StatusCallError {
                error: DriverError::coded(Code::NotFound, FAKE_NOT_FOUND),
                response: None,
            });
        }
        let status = MachineStatus {
            provider_id: self.provider_id.to_owned(),
            node_name: self.node_name.to_owned(),
            addresses: self.addresses(),
        };
        match self.error() {
            None => Ok(status),
            Some(error) => Err(StatusCallError {
                error,
                response: Some(status),
            }),
        }
    }

    fn create_machine(&mut self) -> Result<CreateMachineResponse, DriverError> {
        match self.error() {
            None => {
                self.vm_exists = true;
                Ok(CreateMachineResponse {
                    provider_id: self.provider_id.to_owned(),
                    node_name: self.node_name.to_owned(),
                    last_known_state: String::new(),
                    addresses: self.addresses(),
                })
            }
            Some(error) => Err(error),
        }
    }

    fn initialize_machine(&mut self) -> Result<InitializeMachineResponse, DriverError> {
        match self.err.map(|(code, _)| code) {
            Some(Code::NotFound) => {
                self.vm_exists = false;
                return Err(self.error().unwrap());
            }
            None | Some(Code::Unimplemented) => {}
            Some(_) => return Err(self.error().unwrap()),
        }
        self.vm_exists = true;
        match self.error() {
            None => Ok(InitializeMachineResponse {
                provider_id: self.provider_id.to_owned(),
                node_name: self.node_name.to_owned(),
                addresses: self.addresses(),
            }),
            Some(error) => Err(error),
        }
    }

    fn delete_machine(&mut self) -> Result<(), DriverError> {
        self.vm_exists = false;
        self.error().map_or(Ok(()), Err)
    }
}

/// The retry upstream's entry expects, as ours must map it.
#[derive(Clone, Debug)]
enum Want {
    /// The same period (after success, LongRetry, `--resource-exhausted-retry`).
    Exact(Retry),
    /// Upstream's constant period of this class after a failing driver call: our backoff of the
    /// same class (first attempt).
    Backoff(RetryClass),
}

#[derive(Clone)]
struct Row {
    entry: &'static str,
    // Setup: the stored machine.
    provider_id: Option<&'static str>,
    /// Annotation `machinepriority.machine.sapcloud.io=3`.
    priority: bool,
    labels: &'static [(&'static str, &'static str)],
    /// Phase and, optionally, lastOperation `(description, state)` (type Create).
    phase: Option<P>,
    operation: Option<(&'static str, MachineState)>,
    addresses: &'static [(&'static str, &'static str)],
    /// Minutes between the machine's creation and the pass.
    created_minutes_ago: i64,
    /// Nodes in the target cluster.
    nodes: &'static [&'static str],
    target_cluster: bool,
    /// Upstream's `controller.resourceExhaustedRetry` (0 = unset: LongRetry).
    resource_exhausted_retry: Duration,
    driver: FakeDriver,
    // Expected.
    want_provider_id: Option<&'static str>,
    want_labels: &'static [(&'static str, &'static str)],
    want_phase: Option<P>,
    want_addresses: &'static [(&'static str, &'static str)],
    want_error_code: Option<&'static str>,
    /// lastOperation `(description without the backoff suffix, state)`; `None` = not compared
    /// (upstream's entry leaves it empty).
    want_operation: Option<(String, MachineState)>,
    want_retry: Want,
    /// Upstream's returned error (`None` = nil: ours only logs its reason).
    want_error: Option<String>,
}

const VM: FakeDriver = FakeDriver {
    vm_exists: false,
    provider_id: "fakeID-0",
    node_name: "fakeNode-0",
    addresses: &[],
    err: None,
};

const BASE: Row = Row {
    entry: "",
    provider_id: None,
    priority: false,
    labels: &[],
    phase: None,
    operation: None,
    addresses: &[],
    created_minutes_ago: 0,
    nodes: &[],
    target_cluster: true,
    resource_exhausted_retry: Duration::ZERO,
    driver: VM,
    want_provider_id: None,
    want_labels: &[],
    want_phase: None,
    want_addresses: &[],
    want_error_code: None,
    want_operation: None,
    want_retry: Want::Exact(Retry::Short),
    want_error: None,
};

/// Upstream's `status.Error(code, message).Error()`.
fn go_status_error(code: &str, message: &str) -> String {
    format!("machine codes error: code = [{code}] message = [{message}]")
}

fn rows() -> Vec<Row> {
    let adopted = Row {
        provider_id: Some("fakeID-0"),
        priority: true,
        labels: &[(label::NODE, "fakeID-0")],
        driver: FakeDriver {
            vm_exists: true,
            ..VM
        },
        want_provider_id: Some("fakeID-0"),
        want_labels: &[(label::NODE, "fakeID-0")],
        ..BASE
    };
    let without_target = Row {
        target_cluster: false,
        provider_id: Some("fakeID-0"),
        priority: true,
        driver: FakeDriver {
            vm_exists: true,
            ..VM
        },
        want_provider_id: Some("fakeID-0"),
        ..BASE
    };
    let internal = go_status_error("Internal", CREATE_INTERNAL);
    let exhausted = go_status_error("ResourceExhausted", NO_CAPACITY);
    let create_failed = Row {
        driver: FakeDriver {
            err: Some((Code::Internal, CREATE_INTERNAL)),
            ..VM
        },
        want_phase: Some(P::CrashLoopBackOff),
        want_error_code: Some("Internal"),
        // Not in upstream's expected machine; what its `machineCreateErrorHandler` writes.
        want_operation: Some((
            format!("Cloud provider message - {internal}"),
            MachineState::Failed,
        )),
        want_retry: Want::Backoff(RetryClass::Medium),
        want_error: Some(internal.clone()),
        ..BASE
    };
    let exhausted_row = Row {
        driver: FakeDriver {
            err: Some((Code::ResourceExhausted, NO_CAPACITY)),
            ..VM
        },
        want_error_code: Some("ResourceExhausted"),
        want_operation: Some((
            format!("Cloud provider message - {exhausted}"),
            MachineState::Failed,
        )),
        want_retry: Want::Exact(Retry::Long),
        want_error: Some(exhausted.clone()),
        ..create_failed.clone()
    };
    let uninitialized = go_status_error("Uninitialized", NOT_INITIALIZED);
    vec![
        Row {
            entry: "Machine creation succeeds with object UPDATE",
            want_provider_id: Some("fakeID-0"),
            want_labels: &[(label::NODE, "fakeNode-0")],
            want_error: Some(INITIALIZED.to_owned()),
            ..BASE
        },
        Row {
            entry: "Machine creation succeeds with status UPDATE",
            want_phase: Some(P::Pending),
            want_error: Some(STATUS_UPDATED.to_owned()),
            ..adopted.clone()
        },
        Row {
            entry: "Machine creation has already succeeded, so no update",
            phase: Some(P::Pending),
            operation: Some((
                "Creating machine on cloud provider",
                MachineState::Processing,
            )),
            want_phase: Some(P::Pending),
            want_operation: Some((
                "Creating machine on cloud provider".to_owned(),
                MachineState::Processing,
            )),
            want_retry: Want::Exact(Retry::Long),
            ..adopted.clone()
        },
        Row {
            entry: "Machine creation fails with CrashLoopBackOff due to Internal error",
            ..create_failed.clone()
        },
        Row {
            entry: "Machine creation fails with CrashLoopBackOff due to resource exhaustion",
            ..exhausted_row.clone()
        },
        Row {
            entry: "Machine creation fails with CrashLoopBackOff due to resource exhaustion with configured retry period",
            resource_exhausted_retry: Duration::from_mins(9),
            want_retry: Want::Exact(Retry::After(Duration::from_mins(9))),
            ..exhausted_row.clone()
        },
        Row {
            entry: "Machine creation fails with Failure due to timeout",
            created_minutes_ago: 60,
            want_phase: Some(P::Failed),
            ..create_failed.clone()
        },
        Row {
            entry: "Machine creation fails with Failure due to VM using stale node obj (case is for Provider AWS only)",
            nodes: &["fakeNode-0"],
            want_phase: Some(P::Failed),
            // Not in upstream's expected machine; what its stale-node branch writes.
            want_operation: Some(("VM using old node obj".to_owned(), MachineState::Failed)),
            want_retry: Want::Exact(Retry::Short),
            ..BASE
        },
        Row {
            entry: "CLBF machine turns to Pending if VM is present",
            phase: Some(P::CrashLoopBackOff),
            want_phase: Some(P::Pending),
            want_error: Some(STATUS_UPDATED.to_owned()),
            ..adopted.clone()
        },
        Row {
            entry: "Machine initialization failed due to VM instance initialization error",
            nodes: &["fakeNode-0"],
            driver: FakeDriver {
                vm_exists: true,
                err: Some((Code::Uninitialized, NOT_INITIALIZED)),
                ..VM
            },
            want_provider_id: Some("fakeID-0"),
            want_labels: &[(label::NODE, "fakeNode-0")],
            want_phase: Some(P::CrashLoopBackOff),
            want_error_code: Some("Uninitialized"),
            want_operation: Some((
                format!("Provider error: {uninitialized}. Initialize VM Instance"),
                MachineState::Failed,
            )),
            want_retry: Want::Backoff(RetryClass::Short),
            want_error: Some(uninitialized.clone()),
            ..BASE
        },
        Row {
            entry: "without target cluster: machine creation and initialization succeeds",
            target_cluster: false,
            driver: FakeDriver {
                addresses: &[("InternalIP", "10.0.0.1")],
                ..VM
            },
            want_provider_id: Some("fakeID-0"),
            want_addresses: &[("Hostname", "fakeNode-0"), ("InternalIP", "10.0.0.1")],
            want_error: Some(INITIALIZED.to_owned()),
            ..BASE
        },
        Row {
            entry: "without target cluster: machine transitions to Available",
            want_phase: Some(P::Available),
            want_operation: Some((
                "Created machine on cloud provider".to_owned(),
                MachineState::Successful,
            )),
            want_addresses: &[("Hostname", "fakeNode-0")],
            want_error: Some(STATUS_UPDATED.to_owned()),
            ..without_target.clone()
        },
        Row {
            entry: "without target cluster: Machine is already Available, so no update",
            phase: Some(P::Available),
            operation: Some((
                "Created machine on cloud provider",
                MachineState::Successful,
            )),
            addresses: &[("Hostname", "fakeNode-0")],
            want_phase: Some(P::Available),
            want_operation: Some((
                "Created machine on cloud provider".to_owned(),
                MachineState::Successful,
            )),
            want_addresses: &[("Hostname", "fakeNode-0")],
            want_retry: Want::Exact(Retry::Long),
            ..without_target.clone()
        },
        // `#pendingMachineCreationMap tests`: the flow part of the entry (the set itself is the
        // shell's, `machine::creation_flows::tests::a_flow_leaves_the_set_however_it_ends`).
        Row {
            entry: "Remove machine from pendingMachineCreationMap after it exits creation flow",
            driver: FakeDriver {
                vm_exists: true,
                ..VM
            },
            want_provider_id: Some("fakeID-0"),
            want_labels: &[(label::NODE, "fakeNode-0")],
            want_error: Some(LABELS_UPDATED.to_owned()),
            ..BASE
        },
    ]
}

fn stored_machine(row: &Row, now: Timestamp) -> Machine {
    let mut machine = machine(NAME);
    machine.metadata.creation_timestamp = Some(Time(
        now.checked_sub(jiff::SignedDuration::from_mins(row.created_minutes_ago))
            .unwrap(),
    ));
    if let Some(provider_id) = row.provider_id {
        machine = machine.with_provider_id(provider_id);
    }
    if row.priority {
        machine = machine.with_annotation(annotation::MACHINE_PRIORITY, "3");
    }
    for (key, value) in row.labels {
        machine = machine.with_label(key, value);
    }
    if let Some(phase) = &row.phase {
        machine = machine.with_phase(phase.clone(), now);
    }
    if let Some((description, state)) = &row.operation {
        machine = machine.with_operation(
            description,
            state.clone(),
            MachineOperationType::Create,
            now,
        );
    }
    if !row.addresses.is_empty() {
        machine
            .status
            .get_or_insert_with(Default::default)
            .addresses = Some(addresses(row.addresses));
    }
    machine
}

fn addresses(list: &[(&str, &str)]) -> Vec<NodeAddress> {
    list.iter()
        .map(|(type_, address)| NodeAddress {
            type_: (*type_).to_owned(),
            address: (*address).to_owned(),
        })
        .collect()
}

/// One pass as the shell runs it: each step executed against `driver`, the metadata update and
/// the status write stored on `machine`.
fn run_pass(
    machine: &mut Machine,
    driver: &mut FakeDriver,
    controller: &ControllerSettings,
    nodes: &[&str],
    now: Timestamp,
) -> CreationOutcome {
    let exists = |name: &str| nodes.contains(&name);
    let mut pass = CreationPass::default();
    for _ in 0..10 {
        let settings = effective_settings(machine, controller);
        let ctx = CreationContext {
            machine,
            settings: &settings,
            controller,
            retry_mark: mark_of(machine, &MachineOperationType::Create),
            now,
            node_exists: &exists,
        };
        match next_creation_step(&ctx, &pass) {
            CreationStep::CallGetMachineStatus => {
                pass.get_status = Some(driver.get_machine_status());
            }
            CreationStep::CallCreateMachine => pass.create = Some(driver.create_machine()),
            CreationStep::DeleteStaleVm { provider_id } => {
                assert_eq!(provider_id, driver.provider_id);
                pass.stale_vm_delete = Some(driver.delete_machine());
            }
            CreationStep::UpdateMachineMetadata(update) => {
                let mut stored = machine.clone();
                if let Some(node) = update.node_label {
                    stored = stored.with_label(label::NODE, &node);
                }
                if let Some(priority) = update.priority {
                    stored = stored.with_annotation(annotation::MACHINE_PRIORITY, &priority);
                }
                *machine = stored.with_provider_id(&update.provider_id);
                pass.metadata_update = Some(Ok(()));
            }
            CreationStep::CallInitializeMachine => {
                assert!(pass.initialize.is_none(), "InitializeMachine twice");
                pass.initialize = Some(driver.initialize_machine());
            }
            CreationStep::Finish(outcome) => {
                if let Some(write) = &outcome.status
                    && !write.is_redundant(machine, now)
                {
                    machine.status = Some(write.apply(machine.status.as_ref()));
                }
                return outcome;
            }
        }
    }
    panic!("the pass did not finish");
}

#[test]
fn trigger_creation_flow_table() {
    let now = at(NOW);
    for row in rows() {
        let entry = row.entry;
        let controller = ControllerSettings {
            target_cluster: row.target_cluster,
            resource_exhausted_retry: row.resource_exhausted_retry,
            ..ControllerSettings::default()
        };
        let before = stored_machine(&row, now);
        let mut machine = before.clone();
        let mut driver = row.driver.clone();
        let outcome = run_pass(&mut machine, &mut driver, &controller, row.nodes, now);

        assert_eq!(
            provider_id_of(&machine),
            row.want_provider_id,
            "{entry}: providerID"
        );
        assert_eq!(
            machine.metadata.finalizers.as_deref(),
            Some([finalizer::MACHINE_CONTROLLER_MANAGER.to_owned()].as_slice()),
            "{entry}: finalizers"
        );
        assert_eq!(phase_of(&machine), row.want_phase, "{entry}: phase");
        let stored_addresses = machine
            .status
            .as_ref()
            .and_then(|status| status.addresses.clone())
            .unwrap_or_default();
        assert_eq!(
            stored_addresses,
            addresses(row.want_addresses),
            "{entry}: addresses"
        );
        let labels: BTreeMap<String, String> = machine.metadata.labels.clone().unwrap_or_default();
        let want_labels: BTreeMap<String, String> = row
            .want_labels
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        assert_eq!(labels, want_labels, "{entry}: labels");
        let operation = machine.last_operation().cloned().unwrap_or_default();
        assert_eq!(
            operation
                .error_code
                .as_deref()
                .filter(|code| !code.is_empty()),
            row.want_error_code,
            "{entry}: errorCode"
        );
        if let Some((description, state)) = &row.want_operation {
            let stored = operation.description.as_deref().unwrap_or_default();
            assert_eq!(strip_mark(stored), description, "{entry}: description");
            assert_eq!(operation.state.as_ref(), Some(state), "{entry}: state");
            assert_eq!(
                operation.type_,
                Some(MachineOperationType::Create),
                "{entry}: type"
            );
        }

        match row.want_retry.clone() {
            Want::Exact(retry) => {
                assert_eq!(outcome.retry, retry, "{entry}: retry");
                if let Some(description) = &operation.description {
                    assert!(parse_mark(description).is_none(), "{entry}: {description}");
                }
            }
            Want::Backoff(class) => {
                let backoff = next_backoff(
                    &before,
                    mark_of(&before, &MachineOperationType::Create),
                    class,
                    &controller.retry_backoff,
                    now,
                );
                assert_eq!(backoff.mark.attempt, 1, "{entry}");
                assert_eq!(outcome.retry, Retry::After(backoff.delay), "{entry}: retry");
                let mark = parse_mark(operation.description.as_deref().unwrap_or_default());
                assert_eq!(
                    mark.map(|mark| mark.attempt),
                    Some(1),
                    "{entry}: the attempt is recorded"
                );
            }
        }
        if let Some(error) = &row.want_error {
            assert_eq!(&outcome.reason, error, "{entry}: returned error");
        }
    }
}

/// The retry classes stay apart: a failing CreateMachine with an ordinary code (upstream
/// MediumRetry) never retries sooner than MediumRetry, an InitializeMachine failure (ShortRetry)
/// starts from the short period.
#[test]
fn trigger_creation_flow_retry_classes_map() {
    let now = at(NOW);
    let controller = ControllerSettings::default();
    let run = |driver: FakeDriver| {
        let mut machine = stored_machine(&BASE, now);
        let mut driver = driver;
        run_pass(&mut machine, &mut driver, &controller, &[], now).retry
    };
    let medium = run(FakeDriver {
        err: Some((Code::Internal, CREATE_INTERNAL)),
        ..VM
    });
    let short = run(FakeDriver {
        vm_exists: true,
        err: Some((Code::Uninitialized, NOT_INITIALIZED)),
        ..VM
    });
    let (Retry::After(medium), Retry::After(short)) = (medium, short) else {
        panic!("backoff periods expected: {medium:?}, {short:?}");
    };
    assert!(medium >= Duration::from_mins(3), "{medium}");
    assert!(short < medium, "{short} < {medium}");
}
