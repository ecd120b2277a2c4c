//! Events the shell records on the MachineSet for the outcome of each create/delete (docs/behaviour.md#manage-replicas, docs/behaviour.md#machine-from-template).

use crate::vocabulary::Event;

/// Machines named in one event at most; the rest are counted.
const NAMED: usize = 5;

/// `names` joined, the ones past [`NAMED`] counted: "a, b, c, d, e (+12 more)".
fn list(names: &[String]) -> String {
    let mut text = names
        .iter()
        .take(NAMED)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMED {
        text.push_str(&format!(" (+{} more)", names.len() - NAMED));
    }
    text
}

/// Machines were created in one pass: one event for all of them, worded as upstream's
/// per-machine event when there is one (a scale-up of 1,000 writes a few events, not 1,000).
#[must_use]
pub fn created(machines: &[String]) -> Event {
    match machines {
        [one] => Event::normal("SuccessfulCreate", format!("Created Machine: {one}")),
        _ => Event::normal(
            "SuccessfulCreate",
            format!("Created {} machines: {}", machines.len(), list(machines)),
        ),
    }
}
/// A creation failed.
#[must_use]
pub fn create_failed(error: &str) -> Event {
    Event::warning("FailedCreate", format!("Error creating: {error}"))
}
/// Machines were deleted in one pass: one event for all of them, worded as upstream's
/// per-machine event when there is one.
#[must_use]
pub fn deleted(machines: &[String]) -> Event {
    match machines {
        [one] => Event::normal("SuccessfulDelete", format!("Deleted machine: {one}")),
        _ => Event::normal(
            "SuccessfulDelete",
            format!("Deleted {} machines: {}", machines.len(), list(machines)),
        ),
    }
}
/// A machine MCM was preserving is deleted because the set needs fewer machines (a rollout or a
/// scale-down): preserved machines go last, not never (docs/behaviour.md#deletion-order), which
/// surprises whoever asked for `preserve=now`.
#[must_use]
pub fn preserved_deleted(machine: &str, until: &str) -> Event {
    Event::warning(
        "PreservedMachineDeleted",
        format!(
            "Deleted machine {machine} although it was preserved until {until}: the MachineSet needs fewer machines (a rollout or scale-down deletes preserved machines last, but deletes them)"
        ),
    )
}
/// A deletion failed.
#[must_use]
pub fn delete_failed(error: &str) -> Event {
    Event::warning("FailedDelete", format!("Error deleting: {error}"))
}

#[cfg(test)]
mod tests;
