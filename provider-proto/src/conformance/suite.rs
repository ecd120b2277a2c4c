//! The state of one run shared by the checks ([`Suite`]: the client, the fixture, the machines
//! created so far) and the checks' small helpers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

use mcm_api::v1alpha1::{Machine, MachineClass};

use crate::client::DriverClient;
use crate::codes::Code;
use crate::error::MachineError;

use super::fixture::{Fixture, machine};
use super::report::Outcome;

pub(super) type CaseResult = Result<Outcome, String>;

pub(super) struct Suite<'a> {
    pub(super) client: &'a DriverClient,
    pub(super) fixture: &'a Fixture,
    pub(super) counter: AtomicU32,
    pub(super) created: Mutex<Vec<(Machine, MachineClass)>>,
}

impl Suite<'_> {
    pub(super) fn new_machine(&self, class: &MachineClass) -> Machine {
        let index = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let class_name = class.metadata.name.clone().unwrap_or_default();
        machine(
            &self.fixture.namespace,
            &format!("{}-{index}", self.fixture.machine_prefix),
            &class_name,
            None,
        )
    }

    pub(super) async fn create(
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

    pub(super) fn remember(&self, machine: &Machine, class: &MachineClass) {
        self.created
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((machine.clone(), class.clone()));
    }

    pub(super) async fn delete(
        &self,
        machine: &Machine,
        class: &MachineClass,
    ) -> Result<(), String> {
        self.client
            .delete_machine(machine, class, &self.fixture.secret)
            .await
            .map(drop)
            .map_err(|error| format!("DeleteMachine({}) failed: {error}", name_of(machine)))
    }
}

pub(super) fn name_of(machine: &Machine) -> String {
    machine.metadata.name.clone().unwrap_or_default()
}

pub(super) fn with_provider_id(machine: &Machine, provider_id: &str) -> Machine {
    let mut machine = machine.clone();
    machine.spec.provider_id = Some(provider_id.to_owned());
    machine
}

pub(super) fn expect_code(error: &MachineError, expected: Code, what: &str) -> Result<(), String> {
    if error.code == expected {
        Ok(())
    } else {
        Err(format!("{what}: expected {expected}, got {error}"))
    }
}
