//! Hot update of running VMs (issue item 5; docs/behaviour.md#hot-update): when a MachineClass's
//! `providerSpec` changes only in paths the provider declares hot-updatable (GetCapabilities, e.g.
//! `tags`), the machine controller calls `UpdateMachine` instead of requiring a new class and a
//! rollout.
//!
//! State lives on the Machine:
//! - annotation [`LAST_APPLIED_PROVIDER_SPEC`] holds the providerSpec (JSON) the VM is known to
//!   match; it is written only after a successful `UpdateMachine`;
//! - `status.lastOperation {type: Update, state: Processing}` is written **before** the call and
//!   marks an update in flight.
//!
//! Crash and revert safety: while an update is in flight the controller calls `UpdateMachine`
//! again even when the class was reverted to the last-applied spec (the VM may have been partly
//! changed), so the VM always converges to the class; the annotation never claims a state the VM
//! has not reached.

use jiff::Timestamp;
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachinePhase, MachineState};
use mcm_provider_proto::{Code, UpdateMachineResponse};
use serde_json::Value;

use crate::vocabulary::{
    DriverError, Event, Retry, StatusWrite, current_of, is_transient, last_operation,
    machine_annotation, name_of, phase_of, provider_id_of,
};

/// Machine annotation holding the last applied providerSpec (JSON). Our key, in the style of the
/// other `node.machine.sapcloud.io/last-applied-*` annotations (upstream's proposal calls it
/// `last-applied-providerspec`).
pub const LAST_APPLIED_PROVIDER_SPEC: &str = "node.machine.sapcloud.io/last-applied-providerspec";

/// lastOperation description written before `UpdateMachine`.
pub const HOT_UPDATE_INTENT: &str =
    "Updating machine on cloud provider (hot update of providerSpec)";

/// Event reason when a class change cannot be applied in place.
pub const NEW_CLASS_NEEDED_REASON: &str = "MachineClassChangeNotHotUpdatable";

/// Inputs of the hot-update decision.
pub struct HotUpdateInput<'a> {
    /// The machine.
    pub machine: &'a Machine,
    /// The class's current `providerSpec`.
    pub provider_spec: &'a Value,
    /// Hot-updatable paths from the driver's capabilities (`tags`, `a.b`, `/a/b`).
    pub hot_paths: &'a [String],
    /// The intent write of this pass succeeded.
    pub intent_recorded: bool,
    /// Result of `UpdateMachine` in this pass.
    pub update: Option<&'a Result<UpdateMachineResponse, DriverError>>,
    /// Current time.
    pub now: Timestamp,
}

/// The next step.
#[derive(Clone, Debug, PartialEq)]
pub enum HotUpdateStep {
    /// Nothing to do.
    Nothing,
    /// The machine has no (valid) last-applied annotation: adopt the current spec without calling
    /// the driver (a VM created from this class matches it).
    InitialiseAnnotation {
        /// JSON to write into [`LAST_APPLIED_PROVIDER_SPEC`].
        annotation: String,
        /// Warning when an unparsable value is replaced.
        event: Option<Event>,
    },
    /// The change touches paths that are not hot-updatable: warn, change nothing.
    NewClassNeeded(Event),
    /// Write the in-flight marker, then ask again with `intent_recorded`.
    RecordIntent(StatusWrite),
    /// Call `UpdateMachine` with this last-applied spec and the current class.
    CallUpdateMachine {
        /// The annotation's providerSpec.
        last_applied: Value,
    },
    /// Done: write the annotation (if any) first, then the status.
    Finish {
        /// New annotation value.
        annotation: Option<String>,
        /// Status write.
        status: StatusWrite,
        /// Next reconcile.
        retry: Retry,
        /// Events.
        events: Vec<Event>,
    },
}

fn normalise(path: &str) -> String {
    path.trim_start_matches("$.")
        .trim_start_matches('/')
        .replace('/', ".")
}

/// Dotted paths of the leaves that differ between two JSON documents (objects are compared key by
/// key; arrays and scalars as a whole).
#[must_use]
pub fn changed_paths(old: &Value, new: &Value) -> Vec<String> {
    fn walk(prefix: &str, old: Option<&Value>, new: Option<&Value>, out: &mut Vec<String>) {
        match (old, new) {
            (Some(Value::Object(a)), Some(Value::Object(b))) => {
                let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                for key in keys {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    walk(&path, a.get(key), b.get(key), out);
                }
            }
            (a, b) if a != b => out.push(prefix.to_owned()),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", Some(old), Some(new), &mut out);
    out
}

/// Whether a changed path lies within one of the hot-updatable paths.
#[must_use]
pub fn is_hot_updatable(path: &str, hot_paths: &[String]) -> bool {
    hot_paths
        .iter()
        .map(|hot| normalise(hot))
        .any(|hot| !hot.is_empty() && (path == hot || path.starts_with(&format!("{hot}."))))
}

/// Whether a hot update is in flight: the `Update`/`Processing` intent is written and its
/// `UpdateMachine` has not been recorded as finished.
#[must_use]
pub fn in_flight(machine: &Machine) -> bool {
    machine.last_operation().is_some_and(|operation| {
        operation.type_ == Some(MachineOperationType::Update)
            && operation.state == Some(MachineState::Processing)
    })
}

/// The hot-update decision for one machine.
#[must_use]
pub fn plan_hot_update(input: &HotUpdateInput<'_>) -> HotUpdateStep {
    let machine = input.machine;
    let name = name_of(machine);
    let eligible = machine.metadata.deletion_timestamp.is_none()
        && provider_id_of(machine).is_some()
        && matches!(
            phase_of(machine),
            Some(
                MachinePhase::Running
                    | MachinePhase::Available
                    | MachinePhase::Pending
                    | MachinePhase::Unknown
            )
        );
    if !eligible {
        return HotUpdateStep::Nothing;
    }
    let current_text = input.provider_spec.to_string();
    let last_applied: Value = match machine_annotation(machine, LAST_APPLIED_PROVIDER_SPEC) {
        None => {
            return HotUpdateStep::InitialiseAnnotation {
                annotation: current_text,
                event: None,
            };
        }
        Some(text) => match serde_json::from_str(text) {
            Ok(value) => value,
            Err(error) => {
                return HotUpdateStep::InitialiseAnnotation {
                    annotation: current_text,
                    event: Some(Event::warning(
                        "InvalidLastAppliedProviderSpec",
                        format!(
                            "annotation {LAST_APPLIED_PROVIDER_SPEC} of machine {name} is not JSON ({error}); replaced by the class's providerSpec"
                        ),
                    )),
                };
            }
        },
    };
    let updating = in_flight(machine);
    let changes = changed_paths(&last_applied, input.provider_spec);
    if changes.is_empty() && !updating {
        return HotUpdateStep::Nothing;
    }
    let cold: Vec<&String> = changes
        .iter()
        .filter(|path| !is_hot_updatable(path, input.hot_paths))
        .collect();
    if !cold.is_empty() {
        return HotUpdateStep::NewClassNeeded(Event::warning(
            NEW_CLASS_NEEDED_REASON,
            format!(
                "providerSpec changes at {cold:?} are not hot-updatable by the provider; a new MachineClass is needed (roll the machines by referencing a new class)"
            ),
        ));
    }
    if !updating && !input.intent_recorded {
        return HotUpdateStep::RecordIntent(StatusWrite::new(
            last_operation(
                HOT_UPDATE_INTENT,
                MachineState::Processing,
                MachineOperationType::Update,
                input.now,
            ),
            current_of(machine),
        ));
    }
    let Some(result) = input.update else {
        return HotUpdateStep::CallUpdateMachine { last_applied };
    };
    let status = |description: String, state: MachineState, error_code: Option<Code>| {
        let mut operation =
            last_operation(description, state, MachineOperationType::Update, input.now);
        operation.error_code = error_code.map(|code| code.name().to_owned());
        StatusWrite::new(operation, current_of(machine))
    };
    match result {
        Ok(response) => {
            let description = format!(
                "Machine {name} updated in place on cloud provider (paths: {})",
                if response.updated_paths.is_empty() {
                    changes.join(", ")
                } else {
                    response.updated_paths.join(", ")
                }
            );
            HotUpdateStep::Finish {
                annotation: Some(current_text),
                status: status(description.clone(), MachineState::Successful, None),
                retry: Retry::Short,
                events: vec![Event::normal("MachineHotUpdated", description)],
            }
        }
        Err(error) => {
            let code = error.code();
            let description = format!("Hot update of machine {name} failed: {error}");
            let retry = if code == Code::Unimplemented {
                Retry::Long
            } else if error.is_decodable() && is_transient(code) {
                Retry::Short
            } else {
                Retry::Medium
            };
            HotUpdateStep::Finish {
                annotation: None,
                status: status(description.clone(), MachineState::Failed, Some(code)),
                retry,
                events: vec![Event::warning("MachineHotUpdateFailed", description)],
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn running(spec: Option<&Value>) -> Machine {
        let m = machine("m1")
            .with_provider_id("p")
            .with_phase(MachinePhase::Running, at(0));
        match spec {
            Some(spec) => m.with_annotation(LAST_APPLIED_PROVIDER_SPEC, &spec.to_string()),
            None => m,
        }
    }

    fn step(
        m: &Machine,
        spec: &Value,
        intent: bool,
        update: Option<&Result<UpdateMachineResponse, DriverError>>,
    ) -> HotUpdateStep {
        plan_hot_update(&HotUpdateInput {
            machine: m,
            provider_spec: spec,
            hot_paths: &["tags".to_owned(), "/labels/team".to_owned()],
            intent_recorded: intent,
            update,
            now: at(10),
        })
    }

    #[test]
    fn diff_and_path_matching() {
        let old = json!({"tags": {"a": "1"}, "image": "x", "disk": [1]});
        let new = json!({"tags": {"a": "2", "b": "3"}, "image": "x", "disk": [2]});
        assert_eq!(changed_paths(&old, &new), vec!["disk", "tags.a", "tags.b"]);
        let hot = vec!["tags".to_owned()];
        assert!(is_hot_updatable("tags.a", &hot));
        assert!(is_hot_updatable("tags", &hot));
        assert!(!is_hot_updatable("tagsX", &hot));
        assert!(!is_hot_updatable("disk", &hot));
        assert!(is_hot_updatable(
            "labels.team",
            &["/labels/team".to_owned()]
        ));
    }

    #[test]
    fn hot_change_records_intent_before_calling() {
        let old = json!({"tags": {"a": "1"}, "image": "x"});
        let new = json!({"tags": {"a": "2"}, "image": "x"});
        let m = running(Some(&old));
        let HotUpdateStep::RecordIntent(write) = step(&m, &new, false, None) else {
            panic!()
        };
        assert_eq!(
            write.last_operation.type_,
            Some(MachineOperationType::Update)
        );
        assert_eq!(write.last_operation.state, Some(MachineState::Processing));
        assert_eq!(
            step(&m, &new, true, None),
            HotUpdateStep::CallUpdateMachine {
                last_applied: old.clone()
            }
        );
        let ok = Ok(UpdateMachineResponse {
            updated_paths: vec!["tags".into()],
        });
        let HotUpdateStep::Finish {
            annotation,
            status,
            retry,
            ..
        } = step(&m, &new, true, Some(&ok))
        else {
            panic!()
        };
        assert_eq!(annotation, Some(new.to_string()));
        assert_eq!(status.last_operation.state, Some(MachineState::Successful));
        assert_eq!(retry, Retry::Short);
    }

    #[test]
    fn cold_change_warns_and_does_nothing() {
        let old = json!({"tags": {"a": "1"}, "image": "x"});
        let new = json!({"tags": {"a": "2"}, "image": "y"});
        let HotUpdateStep::NewClassNeeded(event) = step(&running(Some(&old)), &new, false, None)
        else {
            panic!()
        };
        assert!(event.message.contains("a new MachineClass is needed"));
        assert!(event.message.contains("image"));
    }

    #[test]
    fn unchanged_or_ineligible_does_nothing_and_missing_annotation_is_adopted() {
        let spec = json!({"tags": {"a": "1"}});
        assert_eq!(
            step(&running(Some(&spec)), &spec, false, None),
            HotUpdateStep::Nothing
        );
        let HotUpdateStep::InitialiseAnnotation { annotation, event } =
            step(&running(None), &spec, false, None)
        else {
            panic!()
        };
        assert_eq!(annotation, spec.to_string());
        assert!(event.is_none());
        let broken = running(None).with_annotation(LAST_APPLIED_PROVIDER_SPEC, "{oops");
        assert!(matches!(
            step(&broken, &spec, false, None),
            HotUpdateStep::InitialiseAnnotation { event: Some(_), .. }
        ));
        let deleting = running(Some(&json!({}))).deleting_since(at(1));
        assert_eq!(step(&deleting, &spec, false, None), HotUpdateStep::Nothing);
        let creating = machine("m1").with_phase(MachinePhase::CrashLoopBackOff, at(0));
        assert_eq!(step(&creating, &spec, false, None), HotUpdateStep::Nothing);
    }

    #[test]
    fn in_flight_update_is_resumed_even_after_a_revert() {
        let old = json!({"tags": {"a": "1"}});
        let m = running(Some(&old)).with_operation(
            HOT_UPDATE_INTENT,
            MachineState::Processing,
            MachineOperationType::Update,
            at(5),
        );
        // The class was reverted to the last applied spec while the call was in flight: call again
        // so the VM converges back, without a new intent write.
        assert_eq!(
            step(&m, &old, false, None),
            HotUpdateStep::CallUpdateMachine {
                last_applied: old.clone()
            }
        );
    }

    #[test]
    fn failures_keep_the_annotation() {
        let old = json!({"tags": {"a": "1"}});
        let new = json!({"tags": {"a": "2"}});
        let m = running(Some(&old));
        for (error, retry) in [
            (DriverError::coded(Code::Unavailable, "x"), Retry::Short),
            (DriverError::coded(Code::Unimplemented, "x"), Retry::Long),
            (
                DriverError::coded(Code::InvalidArgument, "x"),
                Retry::Medium,
            ),
            (DriverError::Undecodable("x".into()), Retry::Medium),
        ] {
            let HotUpdateStep::Finish {
                annotation,
                status,
                retry: got,
                ..
            } = step(&m, &new, true, Some(&Err(error.clone())))
            else {
                panic!()
            };
            assert_eq!(annotation, None);
            assert_eq!(status.last_operation.state, Some(MachineState::Failed));
            assert_eq!(got, retry, "{error:?}");
        }
    }

    proptest! {
        /// UpdateMachine is never called without the in-flight marker (on the machine or written in
        /// this pass), and a finished update always leaves the annotation equal to the class.
        #[test]
        fn prop_update_only_after_intent(a in 0u8..3, b in 0u8..3, image_changes in any::<bool>(), in_flight in any::<bool>(), ok in any::<bool>()) {
            let old = json!({"tags": {"k": a}, "image": "x"});
            let new = json!({"tags": {"k": b}, "image": if image_changes { "y" } else { "x" }});
            let mut m = running(Some(&old));
            if in_flight {
                m = m.with_operation(HOT_UPDATE_INTENT, MachineState::Processing, MachineOperationType::Update, at(1));
            }
            let mut intent = false;
            let result = if ok { Ok(UpdateMachineResponse::default()) } else { Err(DriverError::coded(Code::Internal, "x")) };
            let mut update = None;
            for _ in 0..5 {
                match step(&m, &new, intent, update) {
                    HotUpdateStep::RecordIntent(_) => intent = true,
                    HotUpdateStep::CallUpdateMachine { .. } => {
                        prop_assert!(intent || in_flight);
                        update = Some(&result);
                    }
                    HotUpdateStep::Finish { annotation, .. } => {
                        if ok { prop_assert_eq!(annotation, Some(new.to_string())); }
                        return Ok(());
                    }
                    HotUpdateStep::NewClassNeeded(_) => { prop_assert!(image_changes); return Ok(()); }
                    HotUpdateStep::Nothing => { prop_assert!(a == b && !image_changes && !in_flight); return Ok(()); }
                    HotUpdateStep::InitialiseAnnotation { .. } => prop_assert!(false),
                }
            }
            prop_assert!(false, "did not finish");
        }
    }
}
