//! The checks of a VM's lifecycle: GetCapabilities, CreateMachine (idempotent), GetMachineStatus,
//! DeleteMachine, ListMachines, InitializeMachine, and the cleanup that leaves no VM.

use std::sync::PoisonError;

use crate::codes::Code;
use crate::types::Method;

use super::fixture::machine;
use super::report::Outcome;
use super::suite::{CaseResult, Suite, expect_code, name_of, with_provider_id};

pub(super) fn check_capabilities(capabilities: &crate::Capabilities) -> CaseResult {
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

pub(super) async fn create_is_idempotent(suite: &Suite<'_>) -> CaseResult {
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

pub(super) async fn status_of_unknown_is_not_found(suite: &Suite<'_>) -> CaseResult {
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

pub(super) async fn delete_of_absent_is_ok(suite: &Suite<'_>) -> CaseResult {
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

pub(super) async fn list_is_exact(suite: &Suite<'_>) -> CaseResult {
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

pub(super) async fn initialize_after_create(suite: &Suite<'_>, implemented: bool) -> CaseResult {
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

pub(super) async fn cleanup(suite: &Suite<'_>) -> CaseResult {
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
