//! Reconcile order of a machine (docs/behaviour.md#machine-reconcile) and the validations it runs (docs/behaviour.md#class-validation, docs/behaviour.md#validation).
//!
//! [`plan_entry`] is `reconcileClusterMachineKey` (finalizer first, deletions to the termination
//! queue); [`plan_reconcile_order`] is `reconcileClusterMachine`: it returns the steps the shell
//! runs in order, the first step that ends the pass wins, and the final requeue is the soonest of
//! the wishes collected.

use mcm_api::keys::{finalizer, misc};
use mcm_api::v1alpha1::{Machine, MachineClass, MachinePhase};

use crate::vocabulary::{
    Event, Retry, has_finalizer, name_of, node_name_of, phase_of, provider_id_of,
};

/// First decision on a machine key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryDecision {
    /// Not in the cache: nothing to do.
    Gone,
    /// Add the MCM finalizer (Update) and requeue ("Machine creation in process. Machine
    /// finalizers are UPDATED").
    AddFinalizer,
    /// Being deleted and not in the creation flow: enqueue the termination key.
    RouteToTermination,
    /// Continue with [`plan_reconcile_order`].
    Reconcile,
}

/// `reconcileClusterMachineKey`.
#[must_use]
pub fn plan_entry(machine: Option<&Machine>, in_creation_flow: bool) -> EntryDecision {
    let Some(machine) = machine else {
        return EntryDecision::Gone;
    };
    if machine.metadata.deletion_timestamp.is_some() && !in_creation_flow {
        // Upstream adds the finalizer first even here; a deleting object cannot get new
        // finalizers, so the termination path handles a missing one (LongRetry).
        return EntryDecision::RouteToTermination;
    }
    if !has_finalizer(machine, finalizer::MACHINE_CONTROLLER_MANAGER) {
        return EntryDecision::AddFinalizer;
    }
    EntryDecision::Reconcile
}

/// Steps of a machine reconcile, in upstream order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileStep {
    /// Validate the MachineClass and read its secrets (docs/behaviour.md#class-validation).
    ValidateClass,
    /// Health check (docs/behaviour.md#health-check).
    Health,
    /// Machine-name label on the Node (docs/behaviour.md#node-sync).
    SyncMachineNameToNode,
    /// Node template labels/annotations/taints and virtual capacity (docs/behaviour.md#node-sync).
    SyncNodeTemplates,
    /// In-place update node condition from labels (docs/behaviour.md#in-place-machine).
    InPlaceNodeCondition,
    /// In-place update drain/hand-off (docs/behaviour.md#in-place-machine).
    InPlaceUpdate,
    /// Hot update of the providerSpec (issue item 5; runs after the node steps, like in-place).
    HotUpdate,
    /// Preservation (docs/behaviour.md#preservation).
    Preservation,
    /// Creation flow (docs/behaviour.md#creation-flow).
    Creation,
}

/// What the reconcile does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconcileOrder {
    /// Nothing runs.
    Blocked {
        /// Next reconcile.
        retry: Retry,
        /// Why.
        reason: String,
    },
    /// Run these steps in order.
    Steps(Vec<ReconcileStep>),
}

/// Upstream `ValidateMachine`: `spec.class.kind` and `spec.class.name` are required.
#[must_use]
pub fn validate_machine(machine: &Machine) -> Vec<String> {
    let class = machine.spec.class.clone().unwrap_or_default();
    let mut errors = Vec::new();
    if class.kind.as_deref().unwrap_or("").is_empty() {
        errors.push("spec.class.kind: Required value: Kind is required".to_owned());
    }
    if class.name.as_deref().unwrap_or("").is_empty() {
        errors.push("spec.class.name: Required value: Name is required".to_owned());
    }
    errors
}

/// Upstream `ValidateMachineClass` when the machine's class is not in the cache: the pass ends
/// with LongRetry (upstream returns the lister's NotFound error with LongRetry); ours also records
/// a Warning event `MachineClassNotFound` on the machine.
#[must_use]
pub fn machine_class_not_found(machine: &Machine, class_name: &str) -> (Retry, Event) {
    (
        Retry::Long,
        Event::warning(
            "MachineClassNotFound",
            format!(
                "MachineClass {class_name:?} of machine {} was not found",
                name_of(machine)
            ),
        ),
    )
}

/// Upstream `ValidateMachineClass` checks after the lookup: the class finalizer and the node
/// template's mandatory fields. `Err` carries the retry and the message.
///
/// # Errors
/// ShortRetry when the class lacks its finalizer or its node template is incomplete.
pub fn validate_machine_class(class: &MachineClass) -> Result<(), (Retry, String)> {
    let name = class.metadata.name.as_deref().unwrap_or("");
    let has = class
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == finalizer::MACHINE_CONTROLLER_MANAGER));
    if !has {
        return Err((
            Retry::Short,
            format!(
                "The machine class {name} has no finalizers set. So not reconciling the machine."
            ),
        ));
    }
    if let Some(template) = &class.node_template {
        let mut errors = Vec::new();
        for key in ["cpu", "gpu", "memory"] {
            if !template.capacity.contains_key(key) {
                errors.push(
                    "MachineClass NodeTemplate Capacity should mandatorily have CPU, GPU and Memory configured"
                        .to_owned(),
                );
            }
        }
        if template.instance_type.is_empty()
            || template.region.is_empty()
            || template.zone.is_empty()
        {
            errors.push(
                "MachineClass NodeTemplate Instance Type, region and zone cannot be empty"
                    .to_owned(),
            );
        }
        if !errors.is_empty() {
            // Upstream formats its error slice with `%s`: "[first second]".
            return Err((Retry::Short, format!("[{}]", errors.join(" "))));
        }
    }
    Ok(())
}

/// `reconcileClusterMachine` order for a machine that is not being deleted.
#[must_use]
pub fn plan_reconcile_order(machine: &Machine, frozen: bool) -> ReconcileOrder {
    if frozen && machine.metadata.deletion_timestamp.is_none() {
        return ReconcileOrder::Blocked {
            retry: Retry::Long,
            reason: "Machine controller has frozen. Retrying reconcile after resync period"
                .to_owned(),
        };
    }
    let errors = validate_machine(machine);
    if !errors.is_empty() {
        return ReconcileOrder::Blocked {
            retry: Retry::Long,
            reason: format!(
                "machine {} is invalid: {}",
                name_of(machine),
                errors.join(", ")
            ),
        };
    }
    if machine
        .spec
        .class
        .as_ref()
        .and_then(|class| class.kind.as_deref())
        .is_some_and(|kind| kind != misc::MACHINE_CLASS_KIND)
    {
        return ReconcileOrder::Blocked {
            retry: Retry::Long,
            reason: format!(
                "machine {} references class kind {:?}; only {} is handled",
                name_of(machine),
                machine
                    .spec
                    .class
                    .as_ref()
                    .and_then(|c| c.kind.clone())
                    .unwrap_or_default(),
                misc::MACHINE_CLASS_KIND
            ),
        };
    }
    let phase = phase_of(machine);
    let mut steps = vec![ReconcileStep::ValidateClass];
    if node_name_of(machine).is_some() && phase.is_some() {
        steps.extend([
            ReconcileStep::Health,
            ReconcileStep::SyncMachineNameToNode,
            ReconcileStep::SyncNodeTemplates,
            ReconcileStep::InPlaceNodeCondition,
            ReconcileStep::InPlaceUpdate,
        ]);
    }
    if provider_id_of(machine).is_some() && phase.is_some() {
        steps.push(ReconcileStep::HotUpdate);
    }
    steps.push(ReconcileStep::Preservation);
    if provider_id_of(machine).is_none()
        || phase.is_none()
        || phase == Some(MachinePhase::CrashLoopBackOff)
    {
        steps.push(ReconcileStep::Creation);
    }
    ReconcileOrder::Steps(steps)
}

/// Whether the steps after the health check still run in the pass whose health check has just
/// written the machine's status, taking it from phase `before` to `after`.
///
/// Upstream ends every such pass (ShortRetry) and syncs the node in the next one. Ours, timing
/// only: a machine that has just joined (Pending → Running) gets its node's machine-name label
/// and node template in the same pass. Those steps read the machine as just written and the node,
/// not the status, so the next pass would decide exactly the same, one queue trip later; in a
/// large scale-up those trips were the slowest link (docs/performance.md). Every other status
/// change still ends the pass as upstream does.
#[must_use]
pub fn steps_follow_health_write(
    before: Option<MachinePhase>,
    after: Option<MachinePhase>,
) -> bool {
    before == Some(MachinePhase::Pending) && after == Some(MachinePhase::Running)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use mcm_api::v1alpha1::{ClassSpec, NodeTemplate};

    fn valid(m: Machine) -> Machine {
        let mut m = m;
        m.spec.class = Some(ClassSpec {
            api_group: None,
            kind: Some("MachineClass".into()),
            name: Some("c".into()),
        });
        m
    }

    #[test]
    fn entry_decisions() {
        assert_eq!(plan_entry(None, false), EntryDecision::Gone);
        let mut bare = machine("m");
        bare.metadata.finalizers = None;
        assert_eq!(plan_entry(Some(&bare), false), EntryDecision::AddFinalizer);
        let deleting = machine("m").deleting_since(at(0));
        assert_eq!(
            plan_entry(Some(&deleting), false),
            EntryDecision::RouteToTermination
        );
        assert_eq!(plan_entry(Some(&deleting), true), EntryDecision::Reconcile);
        assert_eq!(
            plan_entry(Some(&machine("m")), false),
            EntryDecision::Reconcile
        );
    }

    #[test]
    fn only_a_machine_that_just_joined_continues_after_the_health_write() {
        use MachinePhase::{CrashLoopBackOff, Failed, Pending, Running, Unknown};
        assert!(steps_follow_health_write(Some(Pending), Some(Running)));
        for (before, after) in [
            (Some(Running), Some(Unknown)),
            (Some(Unknown), Some(Running)),
            (Some(Unknown), Some(Failed)),
            (Some(Pending), Some(Failed)),
            (Some(Running), Some(Running)),
            (Some(CrashLoopBackOff), Some(Running)),
            (None, Some(Running)),
        ] {
            assert!(
                !steps_follow_health_write(before.clone(), after.clone()),
                "{before:?} -> {after:?}"
            );
        }
    }

    #[test]
    fn order_follows_upstream() {
        let new = valid(machine("m"));
        assert_eq!(
            plan_reconcile_order(&new, false),
            ReconcileOrder::Steps(vec![
                ReconcileStep::ValidateClass,
                ReconcileStep::Preservation,
                ReconcileStep::Creation
            ])
        );
        let running = valid(machine("m"))
            .with_label("node", "n")
            .with_provider_id("p")
            .with_phase(MachinePhase::Running, at(0));
        assert_eq!(
            plan_reconcile_order(&running, false),
            ReconcileOrder::Steps(vec![
                ReconcileStep::ValidateClass,
                ReconcileStep::Health,
                ReconcileStep::SyncMachineNameToNode,
                ReconcileStep::SyncNodeTemplates,
                ReconcileStep::InPlaceNodeCondition,
                ReconcileStep::InPlaceUpdate,
                ReconcileStep::HotUpdate,
                ReconcileStep::Preservation,
            ])
        );
        let clbo = running
            .clone()
            .with_phase(MachinePhase::CrashLoopBackOff, at(0));
        let ReconcileOrder::Steps(steps) = plan_reconcile_order(&clbo, false) else {
            panic!()
        };
        assert_eq!(steps.last(), Some(&ReconcileStep::Creation));
        assert!(matches!(
            plan_reconcile_order(&running, true),
            ReconcileOrder::Blocked {
                retry: Retry::Long,
                ..
            }
        ));
        // Deletions proceed while frozen (they do not come here, but the rule is explicit).
        let deleting = running.deleting_since(at(1));
        assert!(matches!(
            plan_reconcile_order(&deleting, true),
            ReconcileOrder::Steps(_)
        ));
    }

    #[test]
    fn invalid_machine_is_blocked() {
        let m = machine("m");
        let ReconcileOrder::Blocked { retry, reason } = plan_reconcile_order(&m, false) else {
            panic!()
        };
        assert_eq!(retry, Retry::Long);
        assert!(reason.contains("Kind is required") && reason.contains("Name is required"));
    }

    #[test]
    fn class_validation() {
        let mut class = MachineClass::new("c", serde_json::json!({}));
        assert!(
            validate_machine_class(&class)
                .unwrap_err()
                .1
                .contains("has no finalizers set")
        );
        class.metadata.finalizers = Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
        assert_eq!(validate_machine_class(&class), Ok(()));
        class.node_template = Some(NodeTemplate::default());
        let (retry, message) = validate_machine_class(&class).unwrap_err();
        assert_eq!(retry, Retry::Short);
        assert!(message.contains("CPU, GPU and Memory"));
        assert!(message.contains("region and zone cannot be empty"));
    }
}
