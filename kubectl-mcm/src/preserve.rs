//! Pure plans of `preserve` and `unpreserve`: which merge patches to send to the node or machine
//! (the upstream `node.machine.sapcloud.io/preserve` annotation) and to the machine's
//! `machinePreserveTimeout` for `--duration`.

use mcm_api::duration::Duration;
use mcm_api::keys::{annotation, preserve};
use serde_json::{Value, json};

/// The preserve annotation patch: `Some(value)` sets it, `None` removes it.
#[must_use]
pub fn annotation_patch(value: Option<&str>) -> Value {
    json!({"metadata": {"annotations": {annotation::PRESERVE: value}}})
}

/// The machine patch for `--duration`: the machine's own preserve timeout, which MCM uses
/// instead of `--machine-preserve-timeout` when it starts the preservation.
#[must_use]
pub fn duration_patch(duration: Duration) -> Value {
    json!({"spec": {"machinePreserveTimeout": duration.to_string()}})
}

/// The annotation value for `preserve` (`--when-failed` waits for the machine to fail).
#[must_use]
pub fn preserve_value(when_failed: bool) -> &'static str {
    if when_failed {
        preserve::WHEN_FAILED
    } else {
        preserve::NOW
    }
}

/// Parses `--duration` (Go duration text such as `2h`, `90m`, `1h30m`), which must be positive.
///
/// # Errors
/// A message naming the bad value.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration: Duration = text
        .parse()
        .map_err(|e| format!("invalid --duration {text:?}: {e}"))?;
    match duration.to_std() {
        Some(d) if !d.is_zero() => Ok(duration),
        _ => Err(format!("invalid --duration {text:?}: must be positive")),
    }
}

/// Refuses `--duration` for a machine controlled by a MachineSet: the MachineSet controller
/// propagates its template's machine configuration to its machines (upstream
/// `syncMachinesConfig`), so a per-machine `machinePreserveTimeout` would be reset before or
/// after MCM reads it.
///
/// # Errors
/// The explanation, naming the MachineSet and what to do instead.
pub fn check_duration_allowed(machine: &mcm_api::v1alpha1::Machine) -> Result<(), String> {
    let owner = machine
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "MachineSet");
    match owner {
        None => Ok(()),
        Some(owner) => Err(format!(
            "--duration cannot be set for machine {:?}: its MachineSet {:?} resets the machine's \
             machinePreserveTimeout to its template's; set spec.template.spec.machinePreserveTimeout \
             on the MachineDeployment (all its machines) or the manager's --machine-preserve-timeout, \
             or preserve without --duration",
            machine.metadata.name.as_deref().unwrap_or_default(),
            owner.name
        )),
    }
}

/// How far MCM's expiry may be from `started + requested` before the plugin warns (the
/// controller computes it when it sees the annotation, a little after the plugin's clock read).
const EXPIRY_TOLERANCE_SECONDS: i64 = 120;

/// A warning when MCM's preservation expiry does not match the requested `--duration` (for
/// example when preservation had started before the timeout was set: MCM computes the expiry
/// once).
#[must_use]
pub fn expiry_warning(
    expiry: jiff::Timestamp,
    requested: Duration,
    started: jiff::Timestamp,
) -> Option<String> {
    let expected = started.as_second() + requested.to_signed_duration().as_secs();
    let off = expiry.as_second() - expected;
    (off.abs() > EXPIRY_TOLERANCE_SECONDS).then(|| {
        format!(
            "warning: MCM preserves the machine until {expiry}, not for the requested {requested}: \
             the preservation started with another timeout (unpreserve, then preserve again)"
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn patches_use_the_upstream_annotation() {
        assert_eq!(
            annotation_patch(Some(preserve_value(false))),
            json!({"metadata": {"annotations": {"node.machine.sapcloud.io/preserve": "now"}}})
        );
        assert_eq!(
            annotation_patch(Some(preserve_value(true)))["metadata"]["annotations"]
                [annotation::PRESERVE],
            "when-failed"
        );
        assert_eq!(
            annotation_patch(None)["metadata"]["annotations"][annotation::PRESERVE],
            Value::Null
        );
    }

    #[test]
    fn duration_round_trips_as_go_text() {
        let d = parse_duration("2h").unwrap();
        let patch = duration_patch(d);
        let text = patch["spec"]["machinePreserveTimeout"].as_str().unwrap();
        assert_eq!(text.parse::<Duration>().unwrap(), d);
        assert_eq!(d.to_std().unwrap().as_secs(), 7200);
    }

    #[test]
    fn bad_durations_are_refused_with_the_value() {
        for bad in ["", "two hours", "0s", "-1h"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn expiry_far_from_the_requested_duration_warns() {
        let started: jiff::Timestamp = "2026-11-25T10:00:00Z".parse().unwrap();
        let two_hours = parse_duration("2h").unwrap();
        let on_time: jiff::Timestamp = "2026-11-25T12:00:30Z".parse().unwrap();
        assert_eq!(expiry_warning(on_time, two_hours, started), None);
        let default_96h: jiff::Timestamp = "2026-11-29T10:00:01Z".parse().unwrap();
        let warning = expiry_warning(default_96h, two_hours, started).unwrap();
        assert!(warning.contains("2026-11-29T10:00:01Z"), "{warning}");
    }

    #[test]
    fn duration_is_refused_for_machines_of_a_machine_set() {
        let mut machine: mcm_api::v1alpha1::Machine = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m1"}, "spec": {}
        }))
        .unwrap();
        assert_eq!(check_duration_allowed(&machine), Ok(()));
        machine.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "machine.sapcloud.io/v1alpha1".to_owned(),
                kind: "MachineSet".to_owned(),
                name: "web-abc".to_owned(),
                uid: "u".to_owned(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        let error = check_duration_allowed(&machine).unwrap_err();
        assert!(
            error.contains("\"web-abc\"") && error.contains("machinePreserveTimeout"),
            "{error}"
        );
    }
}
