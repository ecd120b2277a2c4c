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

mod fixture;
mod lifecycle;
mod refusals;
mod report;
mod runner;
mod suite;

pub use fixture::{Fixture, HotUpdate, InvalidSpec, SlowCreate, machine};
pub use report::{Outcome, Report};
pub use runner::{check_driver, run};
