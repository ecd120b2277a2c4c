//! The checks of what a driver must apply or refuse: UpdateMachine (hot changes applied, others
//! refused), an invalid providerSpec or a wrong provider, ValidateMachineClass, and deadlines.

use crate::codes::Code;
use crate::types::Method;

use super::report::Outcome;
use super::suite::{CaseResult, Suite, expect_code, name_of, with_provider_id};

pub(super) async fn update_only_hot_fields(
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

pub(super) async fn invalid_spec(suite: &Suite<'_>) -> CaseResult {
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

pub(super) async fn validate_machine_class(
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

pub(super) async fn wrong_provider(suite: &Suite<'_>) -> CaseResult {
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

pub(super) async fn deadlines_are_honoured(suite: &Suite<'_>) -> CaseResult {
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
