//! A conformance kit for drivers, like csi-sanity: a reusable async suite that any driver runs
//! against itself through the real gRPC contract.
//!
//! ```no_run
//! # async fn demo(client: mcm_provider_proto::DriverClient, fixture: mcm_provider_proto::conformance::Fixture) {
//! let report = mcm_provider_proto::conformance::run(&client, &fixture).await;
//! report.assert_passed();
//! # }
//! ```
//!
//! Or serve a driver in-process and check it in one call with [`check_driver`].
//!
//! What it checks: GetCapabilities names the provider and the required methods; CreateMachine is
//! idempotent by machine name (a second create returns the same VM); GetMachineStatus of an unknown
//! machine is `NotFound`; DeleteMachine of an absent VM is OK (and deleting twice is OK); ListMachines
//! returns providerID → machine name for exactly the VMs of the class; InitializeMachine works
//! after create (or is `Unimplemented`), and an `Uninitialized` status carries the VM's status;
//! UpdateMachine applies hot-updatable changes and refuses others; an invalid providerSpec or a
//! wrong `provider` gives `InvalidArgument` naming the field; ValidateMachineClass, when advertised,
//! accepts the valid class and refuses the invalid one with at least one field error (and, when
//! not advertised, answers `Unimplemented`); deadlines are honoured (a call that
//! outlives its deadline fails with `DeadlineExceeded` and leaves no second VM).

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mcm_api::v1alpha1::{Machine, MachineClass};

use crate::client::DriverClient;
use crate::codes::Code;
use crate::driver::Driver;
use crate::endpoint::Endpoint;
use crate::error::MachineError;
use crate::server::BoundServer;
use crate::types::{Method, SecretData};

/// An invalid providerSpec and the field path the `InvalidArgument` message must name.
#[derive(Debug, Clone)]
pub struct InvalidSpec {
    /// A class (same provider) whose providerSpec is invalid.
    pub class: MachineClass,
    /// The field path, e.g. `providerSpec.bootDelay`.
    pub field_path: String,
}

/// Inputs of the UpdateMachine checks.
#[derive(Debug, Clone)]
pub struct HotUpdate {
    /// [`Fixture::class`] with only hot-updatable providerSpec fields changed.
    pub hot_class: MachineClass,
    /// [`Fixture::class`] with a field changed that is not hot-updatable.
    pub cold_class: MachineClass,
    /// The path of that field, which the refusal must name.
    pub cold_path: String,
}

/// Inputs of the deadline check.
#[derive(Debug, Clone)]
pub struct SlowCreate {
    /// A class whose CreateMachine takes much longer than `deadline`.
    pub class: MachineClass,
    /// The deadline to call it with.
    pub deadline: Duration,
}

/// What the suite needs from the driver under test.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Namespace of the test machines.
    pub namespace: String,
    /// Prefix of the test machines' names (make it unique per run).
    pub machine_prefix: String,
    /// A valid class. Its name must be unique to the run: ListMachines must return exactly the
    /// VMs this suite creates in it.
    pub class: MachineClass,
    /// A second valid class of the same provider, with another name.
    pub other_class: MachineClass,
    /// Secret data sent with every call.
    pub secret: SecretData,
    /// An invalid providerSpec to check validation (skipped when `None`).
    pub invalid: Option<InvalidSpec>,
    /// UpdateMachine inputs (skipped when `None` or when UpdateMachine is not implemented).
    pub hot_update: Option<HotUpdate>,
    /// Deadline inputs (skipped when `None`).
    pub slow_create: Option<SlowCreate>,
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The driver behaved as the contract says.
    Passed,
    /// It did not; the text says how.
    Failed(String),
    /// Not applicable (the reason says why).
    Skipped(String),
}

/// The outcomes of a run, one per check.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// (check name, outcome), in run order.
    pub cases: Vec<(&'static str, Outcome)>,
}

impl Report {
    /// The failed checks.
    pub fn failures(&self) -> Vec<(&'static str, &str)> {
        self.cases
            .iter()
            .filter_map(|(name, outcome)| match outcome {
                Outcome::Failed(reason) => Some((*name, reason.as_str())),
                _ => None,
            })
            .collect()
    }

    /// The outcome of a check by name.
    pub fn outcome(&self, name: &str) -> Option<&Outcome> {
        self.cases
            .iter()
            .find(|(case, _)| *case == name)
            .map(|(_, outcome)| outcome)
    }

    /// Panics with the whole report if any check failed (for use in tests).
    pub fn assert_passed(&self) {
        assert!(
            self.failures().is_empty(),
            "driver conformance failed:\n{self}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, outcome) in &self.cases {
            match outcome {
                Outcome::Passed => writeln!(f, "PASS {name}")?,
                Outcome::Failed(reason) => writeln!(f, "FAIL {name}: {reason}")?,
                Outcome::Skipped(reason) => writeln!(f, "SKIP {name}: {reason}")?,
            }
        }
        Ok(())
    }
}

/// A machine for the suite (and for drivers' own tests), built from its upstream JSON shape.
pub fn machine(
    namespace: &str,
    name: &str,
    class_name: &str,
    provider_id: Option<&str>,
) -> Machine {
    let mut spec = serde_json::json!({
        "class": {"kind": "MachineClass", "name": class_name},
    });
    if let Some(provider_id) = provider_id {
        spec["providerID"] = provider_id.into();
    }
    let value = serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    });
    serde_json::from_value(value).expect("a minimal machine always decodes")
}

type CaseResult = Result<Outcome, String>;

struct Suite<'a> {
    client: &'a DriverClient,
    fixture: &'a Fixture,
    counter: AtomicU32,
    created: Mutex<Vec<(Machine, MachineClass)>>,
}

impl Suite<'_> {
    fn new_machine(&self, class: &MachineClass) -> Machine {
        let index = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let class_name = class.metadata.name.clone().unwrap_or_default();
        machine(
            &self.fixture.namespace,
            &format!("{}-{index}", self.fixture.machine_prefix),
            &class_name,
            None,
        )
    }

    async fn create(
        &self,
        machine: &Machine,
        class: &MachineClass,
    ) -> Result<crate::CreateMachineResponse, String> {
        self.remember(machine, class);
        self.client
            .create_machine(machine, class, &self.fixture.secret)
            .await
            .map_err(|error| format!("CreateMachine({}) failed: {error}", name_of(machine)))
    }

    fn remember(&self, machine: &Machine, class: &MachineClass) {
        self.created
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((machine.clone(), class.clone()));
    }

    async fn delete(&self, machine: &Machine, class: &MachineClass) -> Result<(), String> {
        self.client
            .delete_machine(machine, class, &self.fixture.secret)
            .await
            .map(drop)
            .map_err(|error| format!("DeleteMachine({}) failed: {error}", name_of(machine)))
    }
}

fn name_of(machine: &Machine) -> String {
    machine.metadata.name.clone().unwrap_or_default()
}

fn with_provider_id(machine: &Machine, provider_id: &str) -> Machine {
    let mut machine = machine.clone();
    machine.spec.provider_id = Some(provider_id.to_owned());
    machine
}

fn expect_code(error: &MachineError, expected: Code, what: &str) -> Result<(), String> {
    if error.code == expected {
        Ok(())
    } else {
        Err(format!("{what}: expected {expected}, got {error}"))
    }
}

/// Runs every check against the driver behind `client`, cleaning up the VMs it created.
pub async fn run(client: &DriverClient, fixture: &Fixture) -> Report {
    let suite = Suite {
        client,
        fixture,
        counter: AtomicU32::new(0),
        created: Mutex::new(Vec::new()),
    };
    let mut report = Report::default();
    let capabilities = match client.get_capabilities().await {
        Ok(capabilities) => capabilities,
        Err(error) => {
            report.cases.push((
                "capabilities",
                Outcome::Failed(format!("GetCapabilities failed: {error}")),
            ));
            return report;
        }
    };
    let record = |report: &mut Report, name: &'static str, result: CaseResult| {
        report
            .cases
            .push((name, result.unwrap_or_else(Outcome::Failed)));
    };
    record(
        &mut report,
        "capabilities",
        check_capabilities(&capabilities),
    );
    record(
        &mut report,
        "create_is_idempotent_by_machine_name",
        create_is_idempotent(&suite).await,
    );
    record(
        &mut report,
        "status_of_unknown_machine_is_not_found",
        status_of_unknown_is_not_found(&suite).await,
    );
    record(
        &mut report,
        "delete_of_absent_vm_is_ok",
        delete_of_absent_is_ok(&suite).await,
    );
    record(
        &mut report,
        "list_returns_exactly_the_vms_of_the_class",
        list_is_exact(&suite).await,
    );
    record(
        &mut report,
        "initialize_after_create",
        initialize_after_create(&suite, capabilities.implements(Method::InitializeMachine)).await,
    );
    record(
        &mut report,
        "update_changes_only_hot_updatable_fields",
        update_only_hot_fields(&suite, &capabilities).await,
    );
    record(
        &mut report,
        "invalid_provider_spec_is_invalid_argument",
        invalid_spec(&suite).await,
    );
    record(
        &mut report,
        "validate_machine_class",
        validate_machine_class(&suite, &capabilities).await,
    );
    record(
        &mut report,
        "wrong_provider_is_invalid_argument",
        wrong_provider(&suite).await,
    );
    record(
        &mut report,
        "deadlines_are_honoured",
        deadlines_are_honoured(&suite).await,
    );
    record(&mut report, "cleanup_leaves_no_vm", cleanup(&suite).await);
    report
}

/// Serves `driver` on a loopback port in-process, runs the suite through a real gRPC client and
/// stops the server.
pub async fn check_driver<D: Driver>(driver: Arc<D>, fixture: &Fixture) -> Report {
    let failed = |reason: String| Report {
        cases: vec![("serve", Outcome::Failed(reason))],
    };
    let loopback = Endpoint::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let bound = match BoundServer::bind(&loopback).await {
        Ok(bound) => bound,
        Err(error) => return failed(error.to_string()),
    };
    let endpoint = bound.local_endpoint().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(bound.serve(driver, async move {
        let _ = stopped.await;
    }));
    let report = match DriverClient::connect(&endpoint, Duration::from_secs(30)).await {
        Ok(client) => run(&client, fixture).await,
        Err(error) => failed(error.to_string()),
    };
    let _ = stop.send(());
    let _ = server.await;
    report
}

fn check_capabilities(capabilities: &crate::Capabilities) -> CaseResult {
    if capabilities.provider_name.is_empty() {
        return Err("GetCapabilities returned an empty provider name".into());
    }
    for required in [
        Method::CreateMachine,
        Method::DeleteMachine,
        Method::GetMachineStatus,
        Method::ListMachines,
    ] {
        if !capabilities.implements(required) {
            return Err(format!(
                "GetCapabilities does not list the required method {required:?}"
            ));
        }
    }
    if !capabilities.hot_updatable_paths.is_empty()
        && !capabilities.implements(Method::UpdateMachine)
    {
        return Err("hot-updatable paths are reported but UpdateMachine is not implemented".into());
    }
    Ok(Outcome::Passed)
}

async fn create_is_idempotent(suite: &Suite<'_>) -> CaseResult {
    let class = &suite.fixture.class;
    let machine = suite.new_machine(class);
    let first = suite.create(&machine, class).await?;
    if first.provider_id.is_empty() {
        return Err("CreateMachine returned an empty providerID".into());
    }
    if first.node_name.is_empty() {
        return Err("CreateMachine returned an empty node name".into());
    }
    let second = suite.create(&machine, class).await?;
    if (second.provider_id.as_str(), second.node_name.as_str())
        != (first.provider_id.as_str(), first.node_name.as_str())
    {
        return Err(format!(
            "a second CreateMachine returned another VM: {} / {} after {} / {}",
            second.provider_id, second.node_name, first.provider_id, first.node_name
        ));
    }
    // The controller may also retry with the providerID already recorded on the machine.
    let third = suite
        .create(&with_provider_id(&machine, &first.provider_id), class)
        .await?;
    if third.provider_id != first.provider_id {
        return Err(format!(
            "CreateMachine with spec.providerID set returned {}",
            third.provider_id
        ));
    }
    let list = suite
        .client
        .list_machines(class, &suite.fixture.secret)
        .await
        .map_err(|error| format!("ListMachines failed: {error}"))?;
    let backing = list
        .values()
        .filter(|name| **name == name_of(&machine))
        .count();
    if backing != 1 {
        return Err(format!(
            "{backing} VMs back machine {} after three creates",
            name_of(&machine)
        ));
    }
    suite
        .delete(&with_provider_id(&machine, &first.provider_id), class)
        .await?;
    Ok(Outcome::Passed)
}

async fn status_of_unknown_is_not_found(suite: &Suite<'_>) -> CaseResult {
    let class = &suite.fixture.class;
    let machine = suite.new_machine(class);
    match suite
        .client
        .get_machine_status(&machine, class, &suite.fixture.secret)
        .await
    {
        Ok(status) => Err(format!(
            "GetMachineStatus of a never-created machine succeeded: {status:?}"
        )),
        Err(error) => expect_code(
            &error.error,
            Code::NotFound,
            "GetMachineStatus of a never-created machine",
        )
        .map(|()| Outcome::Passed),
    }
}

async fn delete_of_absent_is_ok(suite: &Suite<'_>) -> CaseResult {
    let class = &suite.fixture.class;
    let never_created = suite.new_machine(class);
    suite.delete(&never_created, class).await?;
    let machine = suite.new_machine(class);
    let created = suite.create(&machine, class).await?;
    let machine = with_provider_id(&machine, &created.provider_id);
    suite.delete(&machine, class).await?;
    suite
        .delete(&machine, class)
        .await
        .map_err(|error| format!("second delete of the same VM: {error}"))?;
    match suite
        .client
        .get_machine_status(&machine, class, &suite.fixture.secret)
        .await
    {
        Ok(status) => Err(format!(
            "GetMachineStatus after DeleteMachine still finds the VM: {status:?}"
        )),
        Err(error) => expect_code(
            &error.error,
            Code::NotFound,
            "GetMachineStatus after DeleteMachine",
        )
        .map(|()| Outcome::Passed),
    }
}

async fn list_is_exact(suite: &Suite<'_>) -> CaseResult {
    let (class, other) = (&suite.fixture.class, &suite.fixture.other_class);
    let mut expected = crate::MachineList::new();
    for _ in 0..2 {
        let machine = suite.new_machine(class);
        let created = suite.create(&machine, class).await?;
        expected.insert(created.provider_id, name_of(&machine));
    }
    let foreign = suite.new_machine(other);
    let foreign_vm = suite.create(&foreign, other).await?;
    let list = suite
        .client
        .list_machines(class, &suite.fixture.secret)
        .await
        .map_err(|error| format!("ListMachines failed: {error}"))?;
    if list != expected {
        return Err(format!(
            "ListMachines returned {list:?}, expected exactly {expected:?}"
        ));
    }
    let other_list = suite
        .client
        .list_machines(other, &suite.fixture.secret)
        .await
        .map_err(|error| format!("ListMachines of the other class failed: {error}"))?;
    let expected_other =
        crate::MachineList::from([(foreign_vm.provider_id.clone(), name_of(&foreign))]);
    if other_list != expected_other {
        return Err(format!(
            "ListMachines of the other class returned {other_list:?}, expected {expected_other:?}"
        ));
    }
    for (provider_id, name) in &expected {
        let machine = machine(
            &suite.fixture.namespace,
            name,
            &class.metadata.name.clone().unwrap_or_default(),
            Some(provider_id),
        );
        suite.delete(&machine, class).await?;
    }
    suite
        .delete(&with_provider_id(&foreign, &foreign_vm.provider_id), other)
        .await?;
    let after = suite
        .client
        .list_machines(class, &suite.fixture.secret)
        .await
        .map_err(|error| format!("ListMachines after deletes failed: {error}"))?;
    if !after.is_empty() {
        return Err(format!("ListMachines still returns deleted VMs: {after:?}"));
    }
    Ok(Outcome::Passed)
}

async fn initialize_after_create(suite: &Suite<'_>, implemented: bool) -> CaseResult {
    let class = &suite.fixture.class;
    let machine = suite.new_machine(class);
    let created = suite.create(&machine, class).await?;
    let machine = with_provider_id(&machine, &created.provider_id);
    let secret = &suite.fixture.secret;
    // Before initialisation the status is either OK or Uninitialized with the VM's status.
    match suite
        .client
        .get_machine_status(&machine, class, secret)
        .await
    {
        Ok(status) if status.provider_id != created.provider_id => {
            return Err(format!(
                "GetMachineStatus returned providerID {}, created {}",
                status.provider_id, created.provider_id
            ));
        }
        Ok(_) => {}
        Err(error) if error.code() == Code::Uninitialized => match &error.response {
            Some(status)
                if status.provider_id == created.provider_id && !status.node_name.is_empty() => {}
            other => {
                return Err(format!(
                    "Uninitialized must come with the VM's status, got {other:?}"
                ));
            }
        },
        Err(error) => return Err(format!("GetMachineStatus after create: {}", error.error)),
    }
    match suite
        .client
        .initialize_machine(&machine, class, secret)
        .await
    {
        Ok(initialized) if initialized.provider_id != created.provider_id => {
            return Err(format!(
                "InitializeMachine returned providerID {}, created {}",
                initialized.provider_id, created.provider_id
            ));
        }
        Ok(_) => {}
        Err(error) if error.code == Code::Unimplemented && !implemented => {}
        Err(error) => return Err(format!("InitializeMachine after create: {error}")),
    }
    if implemented {
        let status = suite
            .client
            .get_machine_status(&machine, class, secret)
            .await
            .map_err(|error| {
                format!("GetMachineStatus after InitializeMachine: {}", error.error)
            })?;
        if status.provider_id != created.provider_id {
            return Err(format!(
                "GetMachineStatus after InitializeMachine returned {}",
                status.provider_id
            ));
        }
    }
    suite.delete(&machine, class).await?;
    Ok(Outcome::Passed)
}

async fn update_only_hot_fields(
    suite: &Suite<'_>,
    capabilities: &crate::Capabilities,
) -> CaseResult {
    if !capabilities.implements(Method::UpdateMachine) {
        return Ok(Outcome::Skipped("UpdateMachine is not implemented".into()));
    }
    let Some(update) = &suite.fixture.hot_update else {
        return Ok(Outcome::Skipped("no hot-update fixture given".into()));
    };
    let class = &suite.fixture.class;
    let machine = suite.new_machine(class);
    let created = suite.create(&machine, class).await?;
    let machine = with_provider_id(&machine, &created.provider_id);
    let secret = &suite.fixture.secret;
    let updated = suite
        .client
        .update_machine(
            &created.provider_id,
            &class.provider_spec,
            &update.hot_class,
            secret,
            Some(&machine),
        )
        .await
        .map_err(|error| format!("UpdateMachine with hot-updatable changes: {error}"))?;
    if updated.updated_paths.is_empty() {
        return Err("UpdateMachine reported no updated path for a hot-updatable change".into());
    }
    if let Some(cold) = updated.updated_paths.iter().find(|path| {
        !capabilities
            .hot_updatable_paths
            .iter()
            .any(|hot| path.starts_with(hot.as_str()))
    }) {
        return Err(format!(
            "UpdateMachine changed {cold}, which GetCapabilities does not list as hot-updatable"
        ));
    }
    match suite
        .client
        .update_machine(
            &created.provider_id,
            &update.hot_class.provider_spec,
            &update.cold_class,
            secret,
            Some(&machine),
        )
        .await
    {
        Ok(response) => {
            return Err(format!(
                "UpdateMachine accepted a change of {}: {response:?}",
                update.cold_path
            ));
        }
        Err(error) => {
            expect_code(
                &error,
                Code::InvalidArgument,
                "UpdateMachine with a cold change",
            )?;
            if !error.message.contains(&update.cold_path) {
                return Err(format!(
                    "the refusal does not name {}: {error}",
                    update.cold_path
                ));
            }
        }
    }
    let unknown = suite
        .client
        .update_machine(
            "conformance:///no-such-vm",
            &class.provider_spec,
            &update.hot_class,
            secret,
            None,
        )
        .await;
    match unknown {
        Err(error) if error.code == Code::NotFound => {}
        other => {
            return Err(format!(
                "UpdateMachine of an unknown VM must be NotFound, got {other:?}"
            ));
        }
    }
    suite.delete(&machine, class).await?;
    Ok(Outcome::Passed)
}

async fn invalid_spec(suite: &Suite<'_>) -> CaseResult {
    let Some(invalid) = &suite.fixture.invalid else {
        return Ok(Outcome::Skipped(
            "no invalid providerSpec fixture given".into(),
        ));
    };
    let machine = suite.new_machine(&invalid.class);
    suite.remember(&machine, &invalid.class);
    match suite
        .client
        .create_machine(&machine, &invalid.class, &suite.fixture.secret)
        .await
    {
        Ok(created) => Err(format!(
            "CreateMachine accepted an invalid providerSpec: {created:?}"
        )),
        Err(error) => {
            expect_code(
                &error,
                Code::InvalidArgument,
                "CreateMachine with an invalid providerSpec",
            )?;
            if error.message.contains(&invalid.field_path) {
                Ok(Outcome::Passed)
            } else {
                Err(format!(
                    "the error does not name {}: {error}",
                    invalid.field_path
                ))
            }
        }
    }
}

async fn validate_machine_class(
    suite: &Suite<'_>,
    capabilities: &crate::Capabilities,
) -> CaseResult {
    let secret = &suite.fixture.secret;
    let valid = suite
        .client
        .validate_machine_class(&suite.fixture.class, secret)
        .await;
    if !capabilities.implements(Method::ValidateMachineClass) {
        return match valid {
            Err(error) if error.code == Code::Unimplemented => Ok(Outcome::Passed),
            Err(error) => Err(format!(
                "ValidateMachineClass is not advertised, so it must answer Unimplemented: {error}"
            )),
            Ok(errors) => Err(format!(
                "ValidateMachineClass is not advertised but answered {errors:?}; list \
                 Method::ValidateMachineClass in GetCapabilities"
            )),
        };
    }
    let errors =
        valid.map_err(|error| format!("ValidateMachineClass of the valid class: {error}"))?;
    if !errors.is_empty() {
        return Err(format!(
            "ValidateMachineClass refused the valid class: {}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let Some(invalid) = &suite.fixture.invalid else {
        return Ok(Outcome::Passed);
    };
    let errors = suite
        .client
        .validate_machine_class(&invalid.class, secret)
        .await
        .map_err(|error| format!("ValidateMachineClass of the invalid class: {error}"))?;
    if errors.is_empty() {
        return Err(format!(
            "ValidateMachineClass accepted the invalid class (CreateMachine refuses {})",
            invalid.field_path
        ));
    }
    if !errors
        .iter()
        .any(|error| error.field.starts_with(invalid.field_path.as_str()))
    {
        return Err(format!(
            "ValidateMachineClass does not name {}: {errors:?}",
            invalid.field_path
        ));
    }
    Ok(Outcome::Passed)
}

async fn wrong_provider(suite: &Suite<'_>) -> CaseResult {
    let mut class = suite.fixture.class.clone();
    class.provider = Some("conformance-wrong-provider".into());
    let machine = suite.new_machine(&class);
    suite.remember(&machine, &suite.fixture.class);
    match suite
        .client
        .create_machine(&machine, &class, &suite.fixture.secret)
        .await
    {
        Ok(created) => Err(format!(
            "CreateMachine accepted provider \"conformance-wrong-provider\": {created:?}"
        )),
        Err(error) => {
            expect_code(
                &error,
                Code::InvalidArgument,
                "CreateMachine with a wrong provider",
            )?;
            if error.message.contains("provider") {
                Ok(Outcome::Passed)
            } else {
                Err(format!(
                    "the error does not name the provider field: {error}"
                ))
            }
        }
    }
}

async fn deadlines_are_honoured(suite: &Suite<'_>) -> CaseResult {
    let Some(slow) = &suite.fixture.slow_create else {
        return Ok(Outcome::Skipped("no slow-create fixture given".into()));
    };
    let machine = suite.new_machine(&slow.class);
    suite.remember(&machine, &slow.class);
    let hurried = suite.client.with_deadline(slow.deadline);
    match hurried
        .create_machine(&machine, &slow.class, &suite.fixture.secret)
        .await
    {
        Ok(created) => {
            return Err(format!(
                "CreateMachine finished within {:?} although it is slow: {created:?}",
                slow.deadline
            ));
        }
        Err(error) => expect_code(
            &error,
            Code::DeadlineExceeded,
            "CreateMachine past its deadline",
        )?,
    }
    // The abandoned call must not have left a VM that a later create would duplicate.
    let list = suite
        .client
        .list_machines(&slow.class, &suite.fixture.secret)
        .await
        .map_err(|error| format!("ListMachines after a timed-out create: {error}"))?;
    let backing = list
        .values()
        .filter(|name| **name == name_of(&machine))
        .count();
    if backing > 1 {
        return Err(format!(
            "{backing} VMs back {} after a timed-out create",
            name_of(&machine)
        ));
    }
    Ok(Outcome::Passed)
}

async fn cleanup(suite: &Suite<'_>) -> CaseResult {
    let created = suite
        .created
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for (machine, class) in &created {
        suite.delete(machine, class).await?;
    }
    let mut classes = vec![&suite.fixture.class, &suite.fixture.other_class];
    classes.extend(suite.fixture.slow_create.as_ref().map(|slow| &slow.class));
    for class in classes {
        let list = suite
            .client
            .list_machines(class, &suite.fixture.secret)
            .await
            .map_err(|error| format!("ListMachines during cleanup: {error}"))?;
        if !list.is_empty() {
            return Err(format!(
                "VMs left after deleting every test machine: {list:?}"
            ));
        }
    }
    Ok(Outcome::Passed)
}
