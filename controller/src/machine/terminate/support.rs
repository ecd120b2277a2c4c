//! The termination shell's helpers that are no API writes (those are in `machine::writes`, the
//! one writes module of the machine shells): the class and its secrets, driver errors and metrics,
//! the plans' events.

use std::time::Instant;

use mcm_api::v1alpha1::{Machine, MachineClass};
use mcm_provider_proto::{MachineError, SecretData};

use crate::machine::context::MachineContext;
use mcm_decisions::machine::order::validate_machine_class;
use mcm_decisions::vocabulary::{DriverError, Event, EventType, Retry};

/// Records the plan's events on the machine.
pub(super) fn record_events(context: &MachineContext, machine: &Machine, events: &[Event]) {
    for event in events {
        context.event(
            machine,
            event.type_ == EventType::Warning,
            &event.reason,
            "Delete",
            event.message.clone(),
        );
    }
}

/// The name of the machine's class (empty when it has none).
pub(super) fn class_name(machine: &Machine) -> &str {
    machine
        .spec
        .class
        .as_ref()
        .and_then(|class| class.name.as_deref())
        .unwrap_or("")
}

/// The machine's class, validated as upstream's `ValidateMachineClass` (docs/behaviour.md#class-validation); `Err` carries the
/// retry and the reason.
pub(super) fn class_of(
    context: &MachineContext,
    machine: &Machine,
) -> Result<MachineClass, (Retry, String)> {
    let name = class_name(machine);
    let Some(class) = context.machine_classes.get(name) else {
        return Err((
            Retry::Long,
            format!(
                "machine class {name:?} of machine {:?} not found",
                machine.metadata.name.as_deref().unwrap_or("")
            ),
        ));
    };
    validate_machine_class(&class)?;
    Ok((*class).clone())
}

/// The class's Secret data (read through the shell's short-lived Secret reuse).
pub(super) async fn secret_data(
    context: &MachineContext,
    class: &MachineClass,
) -> Result<SecretData, String> {
    context
        .class_secret_data(class)
        .await
        .map_err(|error| error.to_string())
}

/// The plans' view of a driver error.
pub(super) fn driver_error(error: MachineError) -> DriverError {
    DriverError::Coded(error)
}

/// Records a driver call in the metrics.
pub(super) fn driver_metric(
    context: &MachineContext,
    class: &MachineClass,
    method: &str,
    code: &str,
    started: Instant,
) {
    context.metrics.driver_call(
        class.provider.as_deref().unwrap_or(""),
        method,
        code,
        started.elapsed(),
    );
}
