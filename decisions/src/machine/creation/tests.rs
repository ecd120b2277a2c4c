#![allow(clippy::unwrap_used)]

use super::*;
use crate::machine::backoff::{RetryClass, mark_of, next_backoff, parse_mark, strip_mark};
use crate::test_support::*;
use crate::vocabulary::{description_of, effective_settings, label};
use mcm_api::duration::Duration;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn vm_status(provider_id: &str, node_name: &str) -> MachineStatus {
    MachineStatus {
        provider_id: provider_id.into(),
        node_name: node_name.into(),
        addresses: vec![NodeAddress {
            type_: "InternalIP".into(),
            address: "10.0.0.1".into(),
        }],
    }
}

fn created(provider_id: &str, node_name: &str) -> CreateMachineResponse {
    CreateMachineResponse {
        provider_id: provider_id.into(),
        node_name: node_name.into(),
        last_known_state: "lks".into(),
        addresses: vec![],
    }
}

/// Upstream's matrix retry as this controller applies it: Short and Medium become the machine's
/// backoff, everything else is unchanged.
fn backed_off(f: &Fixture, retry: Retry) -> Retry {
    let class = match retry {
        Retry::Short => RetryClass::Short,
        Retry::Medium => RetryClass::Medium,
        other => return other,
    };
    Retry::After(
        next_backoff(
            &f.machine,
            mark_of(&f.machine, &MachineOperationType::Create),
            class,
            &f.controller.retry_backoff,
            f.now,
        )
        .delay,
    )
}

fn status_error(code: Code) -> StatusCallError {
    StatusCallError {
        error: DriverError::coded(code, "boom"),
        response: None,
    }
}

struct Fixture {
    machine: Machine,
    controller: ControllerSettings,
    now: Timestamp,
    nodes: Vec<String>,
}

impl Fixture {
    fn new(machine: Machine) -> Self {
        Self {
            machine,
            controller: ControllerSettings::default(),
            now: at(60),
            nodes: vec![],
        }
    }

    fn step(&self, pass: &CreationPass) -> CreationStep {
        let settings = effective_settings(&self.machine, &self.controller);
        let nodes = self.nodes.clone();
        let exists = move |name: &str| nodes.iter().any(|n| n == name);
        let ctx = CreationContext {
            machine: &self.machine,
            settings: &settings,
            controller: &self.controller,
            retry_mark: mark_of(&self.machine, &MachineOperationType::Create),
            now: self.now,
            node_exists: &exists,
        };
        next_creation_step(&ctx, pass)
    }
}

fn outcome(step: CreationStep) -> CreationOutcome {
    match step {
        CreationStep::Finish(outcome) => outcome,
        other => panic!("expected Finish, got {other:?}"),
    }
}

fn written_phase(outcome: &CreationOutcome) -> MachinePhase {
    outcome
        .status
        .as_ref()
        .unwrap()
        .current_status
        .phase
        .clone()
        .unwrap()
}

#[test]
fn happy_path_creates_without_a_status_write_then_initializes() {
    let f = Fixture::new(machine("shoot-worker-abcde"));
    let mut pass = CreationPass::default();
    assert_eq!(f.step(&pass), CreationStep::CallGetMachineStatus);

    // The stored finalizer is the record that a VM may exist: no status write before the call
    // (upstream writes none either).
    pass.get_status = Some(Err(status_error(Code::NotFound)));
    assert_eq!(f.step(&pass), CreationStep::CallCreateMachine);

    pass.create = Some(Ok(created("aws:///eu/i-1", "ip-10-0-0-1")));
    assert_eq!(
        f.step(&pass),
        CreationStep::UpdateMachineMetadata(MetadataUpdate {
            node_label: Some("ip-10-0-0-1".into()),
            priority: Some("3".into()),
            provider_id: "aws:///eu/i-1".into(),
        })
    );
    pass.metadata_update = Some(Ok(()));
    assert_eq!(f.step(&pass), CreationStep::CallInitializeMachine);
    pass.initialize = Some(Ok(InitializeMachineResponse::default()));
    let done = outcome(f.step(&pass));
    assert_eq!(done.retry, Retry::Short);
    assert!(done.status.is_none());
}

#[test]
fn second_pass_with_vm_sets_pending() {
    let f = Fixture::new(
        machine("shoot-worker-abcde")
            .with_provider_id("aws:///eu/i-1")
            .with_label("node", "ip-10-0-0-1")
            .with_annotation("machinepriority.machine.sapcloud.io", "3"),
    );
    let pass = CreationPass {
        get_status: Some(Ok(vm_status("aws:///eu/i-1", "ip-10-0-0-1"))),
        ..CreationPass::default()
    };
    let done = outcome(f.step(&pass));
    let write = done.status.unwrap();
    assert_eq!(write.current_status.phase, Some(MachinePhase::Pending));
    assert_eq!(write.current_status.timeout_active, Some(true));
    assert_eq!(
        write.last_operation.description.as_deref(),
        Some("Creating machine on cloud provider")
    );
    assert_eq!(done.retry, Retry::Short);

    // Already Pending: nothing to do.
    let f = Fixture::new(f.machine.clone().with_phase(MachinePhase::Pending, at(10)));
    let done = outcome(f.step(&pass));
    assert!(done.status.is_none());
    assert_eq!(done.retry, Retry::Long);
}

#[test]
fn intent_written_by_an_earlier_version_calls_create_directly() {
    let f = Fixture::new(machine("shoot-worker-abcde").with_operation(
        CREATE_INTENT_DESCRIPTION,
        MachineState::Processing,
        MachineOperationType::Create,
        at(1),
    ));
    let pass = CreationPass {
        get_status: Some(Err(status_error(Code::NotFound))),
        ..CreationPass::default()
    };
    assert_eq!(f.step(&pass), CreationStep::CallCreateMachine);
}

#[test]
fn create_machine_waits_for_the_stored_finalizer() {
    let mut bare = machine("shoot-worker-abcde");
    bare.metadata.finalizers = None;
    let f = Fixture::new(bare);
    let pass = CreationPass {
        get_status: Some(Err(status_error(Code::NotFound))),
        ..CreationPass::default()
    };
    let done = outcome(f.step(&pass));
    assert!(done.status.is_none(), "nothing is written");
    assert_eq!(done.retry, Retry::Short);
    assert!(done.reason.contains("finalizer"), "{}", done.reason);
}

#[test]
fn get_status_matrix_in_creation() {
    let base = machine("shoot-worker-abcde");
    // OK: adopt the VM (metadata first).
    let f = Fixture::new(base.clone());
    let pass = CreationPass {
        get_status: Some(Ok(vm_status("p", "n"))),
        ..CreationPass::default()
    };
    assert!(matches!(
        f.step(&pass),
        CreationStep::UpdateMachineMetadata(_)
    ));

    // NotFound / Unimplemented with providerID: assume the VM exists, never create.
    for code in [Code::NotFound, Code::Unimplemented] {
        let f = Fixture::new(
            base.clone()
                .with_provider_id("p")
                .with_label("node", "n")
                .with_annotation("machinepriority.machine.sapcloud.io", "3"),
        );
        let pass = CreationPass {
            get_status: Some(Err(status_error(code))),
            ..CreationPass::default()
        };
        let done = outcome(f.step(&pass));
        assert_eq!(written_phase(&done), MachinePhase::Pending, "{code:?}");
    }

    // Uninitialized: initialise with the response's ids.
    let f = Fixture::new(
        base.clone()
            .with_provider_id("p")
            .with_label("node", "n")
            .with_annotation("machinepriority.machine.sapcloud.io", "3"),
    );
    let pass = CreationPass {
        get_status: Some(Err(StatusCallError {
            error: DriverError::coded(Code::Uninitialized, "not yet"),
            response: Some(vm_status("p", "n")),
        })),
        ..CreationPass::default()
    };
    assert_eq!(f.step(&pass), CreationStep::CallInitializeMachine);

    // Error codes: create-error handler with the matrix retry.
    let table = [
        (Code::Unknown, Retry::Short, None),
        (Code::DeadlineExceeded, Retry::Short, None),
        (Code::Aborted, Retry::Short, None),
        (Code::Unavailable, Retry::Short, None),
        (
            Code::ResourceExhausted,
            Retry::After(Duration::from_mins(10)),
            None,
        ),
        (Code::InvalidArgument, Retry::Medium, Some(String::new())),
        (Code::Internal, Retry::Medium, Some(String::new())),
        (Code::OutOfRange, Retry::Medium, Some(String::new())),
        (Code::PermissionDenied, Retry::Medium, Some(String::new())),
    ];
    for (code, retry, last_known_state) in table {
        let f = Fixture::new(base.clone());
        let pass = CreationPass {
            get_status: Some(Err(status_error(code))),
            ..CreationPass::default()
        };
        let done = outcome(f.step(&pass));
        assert_eq!(done.retry, backed_off(&f, retry), "{code:?}");
        let write = done.status.as_ref().unwrap();
        assert_eq!(write.last_known_state, last_known_state, "{code:?}");
        assert_eq!(
            write.last_operation.error_code.as_deref(),
            Some(code.name())
        );
        assert!(
            write
                .last_operation
                .description
                .as_deref()
                .unwrap()
                .starts_with("Cloud provider message - machine codes error: code = [")
        );
        assert_eq!(written_phase(&done), MachinePhase::CrashLoopBackOff);
    }

    // Undecodable: MediumRetry, no status write.
    let f = Fixture::new(base);
    let pass = CreationPass {
        get_status: Some(Err(StatusCallError {
            error: DriverError::Undecodable("transport closed".into()),
            response: None,
        })),
        ..CreationPass::default()
    };
    let done = outcome(f.step(&pass));
    assert_eq!(done.retry, Retry::Medium);
    assert!(done.status.is_none());
}

#[test]
fn resource_exhausted_retry_zero_means_long() {
    let mut f = Fixture::new(machine("shoot-worker-abcde"));
    f.controller.resource_exhausted_retry = Duration::ZERO;
    let pass = CreationPass {
        get_status: Some(Err(status_error(Code::ResourceExhausted))),
        ..CreationPass::default()
    };
    assert_eq!(outcome(f.step(&pass)).retry, Retry::Long);
}

#[test]
fn create_machine_matrix() {
    let table = [
        (DriverError::coded(Code::NotFound, "x"), Retry::Medium),
        (DriverError::coded(Code::Unimplemented, "x"), Retry::Medium),
        (DriverError::coded(Code::Uninitialized, "x"), Retry::Medium),
        (DriverError::coded(Code::Unknown, "x"), Retry::Short),
        (
            DriverError::coded(Code::DeadlineExceeded, "x"),
            Retry::Short,
        ),
        (DriverError::coded(Code::Aborted, "x"), Retry::Short),
        (DriverError::coded(Code::Unavailable, "x"), Retry::Short),
        (
            DriverError::coded(Code::ResourceExhausted, "x"),
            Retry::After(Duration::from_mins(10)),
        ),
        (DriverError::coded(Code::Internal, "x"), Retry::Medium),
        (DriverError::Undecodable("garbage".into()), Retry::Medium),
    ];
    for (error, retry) in table {
        let f = Fixture::new(machine("shoot-worker-abcde"));
        let pass = CreationPass {
            get_status: Some(Err(status_error(Code::NotFound))),
            create: Some(Err(error.clone())),
            ..CreationPass::default()
        };
        let done = outcome(f.step(&pass));
        assert_eq!(done.retry, backed_off(&f, retry), "{error:?}");
        // The attempt reported to the shell (its log and metric) is the one the mark stores.
        assert_eq!(
            done.backoff.map(|backoff| backoff.mark.attempt),
            done.status
                .as_ref()
                .and_then(|write| write.last_operation.description.as_deref())
                .and_then(parse_mark)
                .filter(|mark| mark.next_retry_at.is_some())
                .map(|mark| mark.attempt),
            "{error:?}"
        );
        let write = done.status.unwrap();
        let keeps_state = matches!(
            error.code(),
            Code::Unknown
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::Unavailable
                | Code::ResourceExhausted
        ) && error.is_decodable();
        assert_eq!(write.last_known_state.is_none(), keeps_state, "{error:?}");
        assert_eq!(write.last_operation.state, Some(MachineState::Failed));
        if !error.is_decodable() {
            assert_eq!(write.last_operation.error_code.as_deref(), Some("Unknown"));
            assert_eq!(
                write.last_operation.description.as_deref().map(strip_mark),
                Some("Cloud provider message - garbage")
            );
        }
    }
}

#[test]
fn create_failure_after_creation_timeout_is_failed() {
    let mut f = Fixture::new(machine("shoot-worker-abcde"));
    f.now = at(21 * 60);
    let pass = CreationPass {
        get_status: Some(Err(status_error(Code::Internal))),
        ..CreationPass::default()
    };
    assert_eq!(written_phase(&outcome(f.step(&pass))), MachinePhase::Failed);
    // The per-machine creation timeout counts, not only the flag.
    f.machine.spec.configuration.creation_timeout = Some(Duration::from_mins(30));
    assert_eq!(
        written_phase(&outcome(f.step(&pass))),
        MachinePhase::CrashLoopBackOff
    );
}

#[test]
fn initialize_matrix() {
    let base = machine("shoot-worker-abcde")
        .with_provider_id("p")
        .with_label("node", "n")
        .with_annotation("machinepriority.machine.sapcloud.io", "3");
    let uninitialized = Some(Err(StatusCallError {
        error: DriverError::coded(Code::Uninitialized, "later"),
        response: Some(vm_status("p", "n")),
    }));
    // OK and Unimplemented proceed.
    for result in [
        Ok(InitializeMachineResponse::default()),
        Err(DriverError::coded(Code::Unimplemented, "no")),
    ] {
        let f = Fixture::new(base.clone());
        let pass = CreationPass {
            get_status: uninitialized.clone(),
            initialize: Some(result),
            ..CreationPass::default()
        };
        let done = outcome(f.step(&pass));
        assert_eq!(done.retry, Retry::Short);
        assert!(done.status.is_none());
        assert!(done.reason.contains("initialization"));
    }
    // Every other code: Failed/CLBO with the provider error text, ShortRetry.
    for code in Code::ALL
        .into_iter()
        .filter(|code| !matches!(code, Code::Ok | Code::Unimplemented))
    {
        let f = Fixture::new(base.clone());
        let pass = CreationPass {
            get_status: uninitialized.clone(),
            initialize: Some(Err(DriverError::coded(code, "init failed"))),
            ..CreationPass::default()
        };
        let done = outcome(f.step(&pass));
        assert_eq!(done.retry, backed_off(&f, Retry::Short), "{code:?}");
        let write = done.status.as_ref().unwrap();
        assert_eq!(
            write.last_operation.error_code.as_deref(),
            Some(code.name())
        );
        assert!(
            write
                .last_operation
                .description
                .as_deref()
                .map(strip_mark)
                .unwrap()
                .ends_with(". Initialize VM Instance")
        );
        assert_eq!(written_phase(&done), MachinePhase::CrashLoopBackOff);
    }
    // Undecodable: LongRetry, no write.
    let f = Fixture::new(base);
    let pass = CreationPass {
        get_status: uninitialized,
        initialize: Some(Err(DriverError::Undecodable("?".into()))),
        ..CreationPass::default()
    };
    let done = outcome(f.step(&pass));
    assert_eq!(done.retry, Retry::Long);
    assert!(done.status.is_none());
}

#[test]
fn stale_node_deletes_new_vm_and_fails_machine() {
    let mut f = Fixture::new(machine("shoot-worker-abcde"));
    f.nodes = vec!["old-node".into()];
    let mut pass = CreationPass {
        get_status: Some(Err(status_error(Code::NotFound))),
        create: Some(Ok(created("p-new", "old-node"))),
        ..CreationPass::default()
    };
    assert_eq!(
        f.step(&pass),
        CreationStep::DeleteStaleVm {
            provider_id: "p-new".into()
        }
    );
    pass.stale_vm_delete = Some(Ok(()));
    let done = outcome(f.step(&pass));
    assert_eq!(written_phase(&done), MachinePhase::Failed);
    assert_eq!(
        done.status.unwrap().last_operation.description.as_deref(),
        Some("VM using old node obj")
    );
    assert_eq!(done.retry, Retry::Short);

    // A node named like the machine itself is not stale.
    let mut f = Fixture::new(machine("shoot-worker-abcde"));
    f.nodes = vec!["shoot-worker-abcde".into()];
    pass.create = Some(Ok(created("p-new", "shoot-worker-abcde")));
    pass.stale_vm_delete = None;
    assert!(matches!(
        f.step(&pass),
        CreationStep::UpdateMachineMetadata(_)
    ));
}

#[test]
fn empty_ids_after_creation_are_medium_retry() {
    let f = Fixture::new(machine("shoot-worker-abcde"));
    let pass = CreationPass {
        get_status: Some(Ok(vm_status("", "n"))),
        ..CreationPass::default()
    };
    let done = outcome(f.step(&pass));
    assert_eq!(done.retry, Retry::Medium);
    assert!(done.reason.contains("is empty after creation flow"));
}

#[test]
fn metadata_update_failure_still_initializes_then_ends_the_pass() {
    let f = Fixture::new(machine("shoot-worker-abcde"));
    let failure = Some(Err(WriteFailure {
        conflict: true,
        message: "conflict".into(),
    }));
    let mut pass = CreationPass {
        get_status: Some(Err(StatusCallError {
            error: DriverError::coded(Code::Uninitialized, "later"),
            response: Some(vm_status("p", "n")),
        })),
        metadata_update: failure.clone(),
        ..CreationPass::default()
    };
    assert_eq!(f.step(&pass), CreationStep::CallInitializeMachine);
    pass.initialize = Some(Ok(InitializeMachineResponse::default()));
    assert_eq!(outcome(f.step(&pass)).retry, Retry::Short);

    // A VM found initialised: the failed update ends the pass (retried after ConflictRetry).
    let pass = CreationPass {
        get_status: Some(Ok(vm_status("p", "n"))),
        metadata_update: failure,
        ..CreationPass::default()
    };
    let done = outcome(f.step(&pass));
    assert_eq!(done.retry, Retry::Conflict);
    assert!(done.status.is_none());
}

#[test]
fn without_target_cluster_machine_becomes_available_with_addresses() {
    let mut f = Fixture::new(
        machine("shoot-worker-abcde")
            .with_provider_id("p")
            .with_annotation("machinepriority.machine.sapcloud.io", "3"),
    );
    f.controller.target_cluster = false;
    let pass = CreationPass {
        get_status: Some(Ok(vm_status("p", "host-1"))),
        ..CreationPass::default()
    };
    let done = outcome(f.step(&pass));
    let write = done.status.unwrap();
    assert_eq!(write.current_status.phase, Some(MachinePhase::Available));
    assert_eq!(write.last_operation.state, Some(MachineState::Successful));
    let addresses = write.addresses.unwrap();
    assert_eq!(addresses.len(), 2);
    assert_eq!(addresses[0].type_, "Hostname");
    assert_eq!(addresses[0].address, "host-1");
    // Without target no node label is required or written.
    let f2 = Fixture {
        machine: machine("shoot-worker-abcde"),
        ..f
    };
    let CreationStep::UpdateMachineMetadata(update) = f2.step(&pass) else {
        panic!()
    };
    assert_eq!(update.node_label, None);
}

/// A cloud as the shell sees it through the driver: GetMachineStatus looks the VM up by machine
/// name (NotFound before CreateMachine, the VM after); `reports_uninitialized` makes it answer
/// `Uninitialized` until InitializeMachine succeeded (provider-virtual's `reported` mode, AWS).
#[derive(Default)]
struct Cloud {
    reports_uninitialized: bool,
    /// Per machine: providerID, node name, initialised.
    vms: BTreeMap<String, (String, String, bool)>,
    creates: usize,
    initializes: usize,
    /// The errors the next InitializeMachine calls answer.
    init_errors: Vec<DriverError>,
    /// The results the next metadata updates get.
    metadata_failures: Vec<WriteFailure>,
}

impl Cloud {
    fn status(&self, name: &str) -> Result<MachineStatus, StatusCallError> {
        match self.vms.get(name) {
            None => Err(status_error(Code::NotFound)),
            Some((provider_id, node, initialized)) => {
                let status = vm_status(provider_id, node);
                if self.reports_uninitialized && !initialized {
                    Err(StatusCallError {
                        error: DriverError::coded(Code::Uninitialized, "not initialised yet"),
                        response: Some(status),
                    })
                } else {
                    Ok(status)
                }
            }
        }
    }
}

/// One reconcile pass the way the shell runs it: every step executed against `cloud`, the
/// metadata update and the status write stored on `machine` (the shell continues with the stored
/// object).
fn run_pass(f: &mut Fixture, cloud: &mut Cloud) -> CreationOutcome {
    let name = name_of(&f.machine).to_owned();
    let mut pass = CreationPass::default();
    for _ in 0..10 {
        match f.step(&pass) {
            CreationStep::CallGetMachineStatus => pass.get_status = Some(cloud.status(&name)),
            CreationStep::CallCreateMachine => {
                cloud.creates += 1;
                let number = cloud.vms.len() + 1;
                let vm = cloud
                    .vms
                    .entry(name.clone())
                    .or_insert_with(|| (format!("cloud:///i-{number}"), name.clone(), false))
                    .clone();
                pass.create = Some(Ok(CreateMachineResponse {
                    provider_id: vm.0,
                    node_name: vm.1,
                    last_known_state: String::new(),
                    addresses: vec![NodeAddress {
                        type_: "InternalIP".into(),
                        address: "10.0.0.1".into(),
                    }],
                }));
            }
            CreationStep::DeleteStaleVm { .. } => panic!("no stale node in these tests"),
            CreationStep::UpdateMachineMetadata(update) => {
                if cloud.metadata_failures.is_empty() {
                    let mut stored = f.machine.clone();
                    if let Some(node) = update.node_label {
                        stored = stored.with_label("node", &node);
                    }
                    if let Some(priority) = update.priority {
                        stored = stored
                            .with_annotation("machinepriority.machine.sapcloud.io", &priority);
                    }
                    f.machine = stored.with_provider_id(&update.provider_id);
                    pass.metadata_update = Some(Ok(()));
                } else {
                    pass.metadata_update = Some(Err(cloud.metadata_failures.remove(0)));
                }
            }
            CreationStep::CallInitializeMachine => {
                assert!(
                    pass.initialize.is_none(),
                    "InitializeMachine twice in one pass"
                );
                cloud.initializes += 1;
                pass.initialize = Some(if cloud.init_errors.is_empty() {
                    if let Some(vm) = cloud.vms.get_mut(&name) {
                        vm.2 = true;
                    }
                    Ok(InitializeMachineResponse {
                        provider_id: String::new(),
                        node_name: String::new(),
                        addresses: vec![NodeAddress {
                            type_: "ExternalIP".into(),
                            address: "192.0.2.7".into(),
                        }],
                    })
                } else {
                    Err(cloud.init_errors.remove(0))
                });
            }
            CreationStep::Finish(outcome) => {
                if let Some(write) = &outcome.status {
                    f.machine.status = Some(write.apply(f.machine.status.as_ref()));
                }
                return outcome;
            }
        }
    }
    panic!("the pass did not finish");
}

const INITIALIZED: &str =
    "machine creation in process. Machine initialization (if required) is successful";

/// A driver that implements InitializeMachine and answers GetMachineStatus like a real
/// cloud (NotFound before CreateMachine, the VM after) gets exactly one InitializeMachine per
/// created VM, in the pass that created it (upstream's "Machine creation succeeds with object
/// UPDATE": that pass ends with the initialization text and the providerID stored).
#[test]
fn a_vm_created_in_this_pass_is_initialized_in_this_pass() {
    let mut f = Fixture::new(machine("shoot-worker-abcde"));
    let mut cloud = Cloud::default();

    let first = run_pass(&mut f, &mut cloud);
    assert_eq!((cloud.creates, cloud.initializes), (1, 1));
    assert_eq!(first.reason, INITIALIZED);
    assert_eq!(first.retry, Retry::Short);
    assert!(
        first.status.is_none(),
        "with a target cluster nothing else is written"
    );
    assert_eq!(provider_id_of(&f.machine), Some("cloud:///i-1"));
    assert_eq!(
        phase_of(&f.machine),
        None,
        "Pending follows in the next pass"
    );

    let second = run_pass(&mut f, &mut cloud);
    assert_eq!(
        second.reason,
        "machine creation in process. Machine/Status UPDATE successful"
    );
    assert_eq!(phase_of(&f.machine), Some(MachinePhase::Pending));
    let third = run_pass(&mut f, &mut cloud);
    assert_eq!(third.retry, Retry::Long);
    assert_eq!(
        (cloud.creates, cloud.initializes),
        (1, 1),
        "exactly one of each per VM"
    );
}

/// A driver that answers `Uninitialized` until initialised is asked in the creating pass too
/// (no extra pass), and never again once it reports the VM initialised.
#[test]
fn a_driver_reporting_uninitialized_is_initialized_once_in_the_creating_pass() {
    let mut f = Fixture::new(machine("shoot-worker-abcde"));
    let mut cloud = Cloud {
        reports_uninitialized: true,
        ..Cloud::default()
    };
    assert_eq!(run_pass(&mut f, &mut cloud).reason, INITIALIZED);
    assert_eq!(cloud.initializes, 1);
    run_pass(&mut f, &mut cloud);
    assert_eq!(phase_of(&f.machine), Some(MachinePhase::Pending));
    assert_eq!((cloud.creates, cloud.initializes), (1, 1));

    // A VM that still reports Uninitialized later (initialisation lost) is initialised again.
    let mut f = Fixture::new(
        machine("shoot-worker-fghij")
            .with_provider_id("cloud:///i-9")
            .with_label("node", "shoot-worker-fghij")
            .with_annotation("machinepriority.machine.sapcloud.io", "3"),
    );
    cloud.vms.insert(
        "shoot-worker-fghij".into(),
        ("cloud:///i-9".into(), "shoot-worker-fghij".into(), false),
    );
    assert_eq!(run_pass(&mut f, &mut cloud).reason, INITIALIZED);
    assert_eq!((cloud.creates, cloud.initializes), (1, 2));
}

/// Upstream's "without target cluster: machine creation and initialization succeeds" and
/// "...: machine transitions to Available": the creating pass writes the addresses of
/// CreateMachine and InitializeMachine plus the Hostname (sorted by type+address) and no phase;
/// the next pass writes Available with "Created machine on cloud provider".
#[test]
fn without_target_cluster_addresses_are_written_in_the_creating_pass() {
    let mut f = Fixture::new(machine("shoot-worker-abcde"));
    f.controller.target_cluster = false;
    let mut cloud = Cloud::default();
    let first = run_pass(&mut f, &mut cloud);
    assert_eq!(first.reason, INITIALIZED);
    assert_eq!(cloud.initializes, 1);
    let addresses: Vec<(String, String)> = f
        .machine
        .status
        .as_ref()
        .and_then(|status| status.addresses.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|address| (address.type_, address.address))
        .collect();
    assert_eq!(
        addresses,
        [
            ("ExternalIP".to_owned(), "192.0.2.7".to_owned()),
            ("Hostname".to_owned(), "shoot-worker-abcde".to_owned()),
            ("InternalIP".to_owned(), "10.0.0.1".to_owned()),
        ]
    );
    assert_eq!(phase_of(&f.machine), None);
    assert!(
        label(&f.machine, "node").is_none(),
        "no node label without a target cluster"
    );

    let second = run_pass(&mut f, &mut cloud);
    assert_eq!(
        second.reason,
        "machine creation in process. Machine/Status UPDATE successful"
    );
    assert_eq!(phase_of(&f.machine), Some(MachinePhase::Available));
    assert_eq!(
        description_of(&f.machine),
        "Created machine on cloud provider"
    );
    let operation = f.machine.last_operation().unwrap();
    assert_eq!(operation.state, Some(MachineState::Successful));
    assert_eq!(operation.type_, Some(MachineOperationType::Create));
    assert_eq!(
        f.machine
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .map(Vec::len),
        Some(3),
        "the addresses are kept"
    );
    assert_eq!(cloud.initializes, 1);
}

/// Upstream calls InitializeMachine even when the metadata update failed (the update is retried
/// by the next pass, which finds the VM): a failed update must not cost the VM its
/// initialisation.
#[test]
fn a_failed_metadata_update_does_not_skip_initialization() {
    let mut f = Fixture::new(machine("shoot-worker-abcde"));
    let mut cloud = Cloud {
        metadata_failures: vec![WriteFailure {
            conflict: true,
            message: "the object has been modified".into(),
        }],
        ..Cloud::default()
    };
    let first = run_pass(&mut f, &mut cloud);
    assert_eq!(first.reason, INITIALIZED);
    assert_eq!(first.retry, Retry::Short);
    assert_eq!(provider_id_of(&f.machine), None, "the update failed");
    let second = run_pass(&mut f, &mut cloud);
    assert_eq!(
        second.reason,
        "machine creation in process. Machine labels/annotations update is successful"
    );
    assert_eq!(provider_id_of(&f.machine), Some("cloud:///i-1"));
    run_pass(&mut f, &mut cloud);
    assert_eq!(phase_of(&f.machine), Some(MachinePhase::Pending));
    assert_eq!((cloud.creates, cloud.initializes), (1, 1));
}

/// InitializeMachine answers of the creating pass (upstream's `initializeMachine`): Unimplemented
/// counts as success; any other code writes "Provider error: <err>. Initialize VM Instance" with
/// the code, phase CrashLoopBackOff (Failed after the creation timeout) and ShortRetry (our
/// backoff); undecodable answers write nothing and retry after LongRetry. A cloud that reports
/// the VM normally is not asked again (upstream: only `Uninitialized` leads back to it).
#[test]
fn initialize_answers_in_the_creating_pass() {
    let mut f = Fixture::new(machine("shoot-worker-abcde"));
    let mut cloud = Cloud {
        init_errors: vec![DriverError::coded(Code::Unimplemented, "not supported")],
        ..Cloud::default()
    };
    assert_eq!(run_pass(&mut f, &mut cloud).reason, INITIALIZED);

    for (code, expected_phase, now) in [
        (Code::Internal, MachinePhase::CrashLoopBackOff, at(60)),
        (Code::Uninitialized, MachinePhase::CrashLoopBackOff, at(60)),
        (Code::NotFound, MachinePhase::CrashLoopBackOff, at(60)),
        (Code::ResourceExhausted, MachinePhase::Failed, at(21 * 60)),
    ] {
        let mut f = Fixture::new(machine("shoot-worker-abcde"));
        f.now = now;
        let mut cloud = Cloud {
            init_errors: vec![DriverError::coded(code, "init failed")],
            ..Cloud::default()
        };
        let done = run_pass(&mut f, &mut cloud);
        assert_eq!(cloud.initializes, 1);
        let write = done.status.as_ref().unwrap();
        assert_eq!(
            write.last_operation.description.as_deref().map(strip_mark),
            Some(
                format!(
                    "Provider error: machine codes error: code = [{}] message = [init failed]. Initialize VM Instance",
                    code.name()
                )
                .as_str()
            ),
            "{code:?}"
        );
        assert_eq!(
            write.last_operation.error_code.as_deref(),
            Some(code.name())
        );
        assert_eq!(write.last_operation.state, Some(MachineState::Failed));
        assert_eq!(
            write.last_operation.type_,
            Some(MachineOperationType::Create)
        );
        assert_eq!(written_phase(&done), expected_phase, "{code:?}");
        assert!(
            matches!(done.retry, Retry::After(_)),
            "{code:?}: {:?}",
            done.retry
        );
        assert_eq!(
            provider_id_of(&f.machine),
            Some("cloud:///i-1"),
            "stored before"
        );
        // The VM is reported normally now: the next pass adopts it (Pending), as upstream.
        f.now = at(30 * 60);
        run_pass(&mut f, &mut cloud);
        let next = if expected_phase == MachinePhase::Failed {
            MachinePhase::Failed
        } else {
            MachinePhase::Pending
        };
        assert_eq!(phase_of(&f.machine), Some(next), "{code:?}");
        assert_eq!((cloud.creates, cloud.initializes), (1, 1), "{code:?}");
    }

    let mut f = Fixture::new(machine("shoot-worker-abcde"));
    let mut cloud = Cloud {
        init_errors: vec![DriverError::Undecodable("transport closed".into())],
        ..Cloud::default()
    };
    let done = run_pass(&mut f, &mut cloud);
    assert_eq!(done.retry, Retry::Long);
    assert!(done.status.is_none());
}

#[test]
fn user_data_placeholders() {
    let secret = SecretData::from([(
        "userData".to_owned(),
        b"token=<<BOOTSTRAP_TOKEN>> name=<<MACHINE_NAME>> again=<<MACHINE_NAME>>".to_vec(),
    )]);
    let patched = patch_user_data(&secret, "m-1", Some("abc.def")).unwrap();
    assert_eq!(
        patched.data["userData"],
        b"token=abc.def name=m-1 again=m-1".to_vec()
    );
    assert!(patched.warnings.is_empty());

    let escaped = SecretData::from([(
        "userData".to_owned(),
        b"u=%3C%3CMACHINE_NAME%3E%3E&t=%3C%3CBOOTSTRAP_TOKEN%3E%3E".to_vec(),
    )]);
    let patched = patch_user_data(&escaped, "m 1/x", Some("a.b")).unwrap();
    assert_eq!(patched.data["userData"], b"u=m+1%2Fx&t=a.b".to_vec());

    let plain = SecretData::from([("userData".to_owned(), b"nothing".to_vec())]);
    let patched = patch_user_data(&plain, "m", Some("t")).unwrap();
    assert_eq!(patched.warnings.len(), 2);
    // No target cluster: the token placeholder is left alone and not warned about.
    let patched = patch_user_data(&plain, "m", None).unwrap();
    assert_eq!(patched.warnings.len(), 1);

    assert_eq!(
        patch_user_data(&SecretData::new(), "m", None),
        Err(CreationError::UserDataMissing {
            machine: "m".into()
        })
    );
}

#[test]
fn bootstrap_token_id_and_secret() {
    // Last five bytes "abcde": hex of "abc".
    assert_eq!(bootstrap_token_id("shoot-worker-abcde").unwrap(), "616263");
    assert_eq!(bootstrap_token_id("abcde").unwrap(), "616263");
    assert!(bootstrap_token_id("abcd").is_err());
    let secret = bootstrap_token_secret(
        "shoot-worker-abcde",
        "616263",
        "0123456789abcdef",
        Duration::from_mins(20),
        "system:bootstrappers:worker",
        at(0),
    );
    assert_eq!(
        secret.metadata.name.as_deref(),
        Some("bootstrap-token-616263")
    );
    assert_eq!(secret.metadata.namespace.as_deref(), Some("kube-system"));
    assert_eq!(
        secret.type_.as_deref(),
        Some("bootstrap.kubernetes.io/token")
    );
    let data = secret.data.as_ref().unwrap();
    let text = |key: &str| String::from_utf8(data[key].0.clone()).unwrap();
    assert_eq!(text("expiration"), at(20 * 60).to_string());
    assert_eq!(text("usage-bootstrap-authentication"), "true");
    assert_eq!(text("auth-extra-groups"), "system:bootstrappers:worker");
    assert!(text("description").contains("\"shoot-worker-abcde\""));
    assert_eq!(
        bootstrap_token_from_secret(&secret).unwrap(),
        "616263.0123456789abcdef"
    );
    assert!(bootstrap_token_from_secret(&Secret::default()).is_err());
    assert!(is_valid_token_secret("0123456789abcdef"));
    assert!(!is_valid_token_secret("0123456789ABCDEF"));
}

fn arb_driver_error() -> impl Strategy<Value = DriverError> {
    prop_oneof![
        (0usize..18).prop_map(|i| DriverError::coded(Code::ALL[i], "e")),
        Just(DriverError::Undecodable("?".into())),
    ]
}

proptest! {
    /// Whatever the driver answers, a pass never reaches CreateMachine unless the machine's
    /// finalizer is stored (the record that a VM may exist), and never writes a status before it.
    #[test]
    fn prop_create_only_with_the_finalizer_stored(
        status in prop_oneof![
            Just(Ok(())),
            arb_driver_error().prop_map(Err),
        ],
        create_ok in any::<bool>(),
        create_error in arb_driver_error(),
        init in proptest::option::of(arb_driver_error()),
        has_intent in any::<bool>(),
        has_finalizer in any::<bool>(),
        provider_id in any::<bool>(),
        metadata_ok in any::<bool>(),
    ) {
        let mut m = machine("shoot-worker-abcde");
        if has_intent {
            m = m.with_operation(CREATE_INTENT_DESCRIPTION, MachineState::Processing, MachineOperationType::Create, at(1));
        }
        if provider_id {
            m = m.with_provider_id("p");
        }
        if !has_finalizer {
            m.metadata.finalizers = None;
        }
        let f = Fixture::new(m.clone());
        let mut pass = CreationPass::default();
        for _ in 0..12 {
            match f.step(&pass) {
                CreationStep::CallGetMachineStatus => {
                    pass.get_status = Some(match &status {
                        Ok(()) => Ok(vm_status("p", "n")),
                        Err(error) => Err(StatusCallError { error: error.clone(), response: Some(vm_status("p", "n")) }),
                    });
                }
                CreationStep::CallCreateMachine => {
                    prop_assert!(has_finalizer, "CreateMachine without the stored finalizer");
                    prop_assert!(pass.create.is_none(), "CreateMachine called twice in one pass");
                    pass.create = Some(if create_ok { Ok(created("p", "n")) } else { Err(create_error.clone()) });
                }
                CreationStep::DeleteStaleVm { .. } => pass.stale_vm_delete = Some(Ok(())),
                CreationStep::UpdateMachineMetadata(update) => {
                    prop_assert!(!update.provider_id.is_empty());
                    pass.metadata_update = Some(if metadata_ok { Ok(()) } else { Err(WriteFailure { conflict: false, message: "x".into() }) });
                }
                CreationStep::CallInitializeMachine => {
                    // Only for a VM created in this pass or reported Uninitialized, once a pass.
                    prop_assert!(pass.initialize.is_none(), "InitializeMachine twice in one pass");
                    let reported_uninitialized = matches!(&pass.get_status, Some(Err(e)) if e.error.is_decodable() && e.error.code() == Code::Uninitialized);
                    prop_assert!(matches!(pass.create, Some(Ok(_))) || reported_uninitialized);
                    pass.initialize = Some(match &init { None => Ok(InitializeMachineResponse::default()), Some(e) => Err(e.clone()) });
                }
                CreationStep::Finish(_) => return Ok(()),
            }
        }
        prop_assert!(false, "creation pass did not finish");
    }
}
