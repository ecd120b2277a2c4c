//! Running the suite: [`run`] against a client, [`check_driver`] against a driver served
//! in-process.

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::client::DriverClient;
use crate::driver::Driver;
use crate::endpoint::Endpoint;
use crate::server::BoundServer;
use crate::types::Method;

use super::fixture::Fixture;
use super::lifecycle::{
    check_capabilities, cleanup, create_is_idempotent, delete_of_absent_is_ok,
    initialize_after_create, list_is_exact, status_of_unknown_is_not_found,
};
use super::refusals::{
    deadlines_are_honoured, invalid_spec, update_only_hot_fields, validate_machine_class,
    wrong_provider,
};
use super::report::{Outcome, Report};
use super::suite::{CaseResult, Suite};

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
