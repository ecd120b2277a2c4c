//! Meltdown guard: when too large a share of a MachineDeployment's machines
//! (or of one zone's machines) is Unknown or Failed at once, the cause is rarely the machines
//! themselves (a zone outage, a broken network, an API server in trouble). Replacing them then
//! only churns VMs, so the health check stops marking Unknown machines Failed (which is what makes
//! the MachineSet replace them) until the share drops. Upstream's one-at-a-time permit stays in
//! force below the threshold.
//!
//! Off by default (`--machine-meltdown-threshold=0`). A single unhealthy machine never trips the
//! guard, however small its deployment or zone.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::v1alpha1::{
    ConditionStatus, Machine, MachineDeployment, MachineDeploymentCondition,
    MachineDeploymentConditionType, MachinePhase,
};

use crate::vocabulary::phase_of;

/// MachineDeployment condition type set while the guard holds.
pub const CONDITION_TYPE: &str = "MeltdownProtection";

/// Condition reason while the guard holds.
pub const REASON: &str = "TooManyUnhealthyMachines";

/// Unhealthy and total machines of one scope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Count {
    unhealthy: usize,
    total: usize,
}

impl Count {
    fn exceeds(&self, threshold: f64) -> bool {
        #[allow(clippy::cast_precision_loss)]
        let share = self.unhealthy as f64 / self.total.max(1) as f64;
        self.unhealthy >= 2 && share > threshold
    }

    fn text(&self) -> String {
        #[allow(clippy::cast_precision_loss)]
        let percent = 100.0 * self.unhealthy as f64 / self.total.max(1) as f64;
        format!("{} of {} ({percent:.0}%)", self.unhealthy, self.total)
    }
}

fn zone_of(machine: &Machine) -> Option<&str> {
    machine.zone().filter(|zone| !zone.is_empty())
}

/// Why replacements stop for these machines (one deployment's), `None` while they may go on.
/// Machines being deleted do not count; `threshold ≤ 0` disables the guard.
#[must_use]
pub fn assess<'a>(
    machines: impl IntoIterator<Item = &'a Machine>,
    threshold: f64,
) -> Option<String> {
    if threshold.is_nan() || threshold <= 0.0 {
        return None;
    }
    let mut whole = Count::default();
    let mut zones: std::collections::BTreeMap<&str, Count> = std::collections::BTreeMap::new();
    for machine in machines {
        let phase = phase_of(machine);
        if machine.metadata.deletion_timestamp.is_some() || phase == Some(MachinePhase::Terminating)
        {
            continue;
        }
        let unhealthy = matches!(phase, Some(MachinePhase::Unknown | MachinePhase::Failed));
        let add = |count: &mut Count| {
            count.total += 1;
            count.unhealthy += usize::from(unhealthy);
        };
        add(&mut whole);
        if let Some(zone) = zone_of(machine) {
            add(zones.entry(zone).or_default());
        }
    }
    let limit = format!("{:.0}%", threshold * 100.0);
    if whole.exceeds(threshold) {
        return Some(format!(
            "{} machines are Unknown or Failed, more than --machine-meltdown-threshold {limit}; unhealthy machines are not replaced until the share drops",
            whole.text()
        ));
    }
    let tripped: Vec<String> = zones
        .iter()
        .filter(|(_, count)| count.exceeds(threshold))
        .map(|(zone, count)| format!("zone {zone}: {}", count.text()))
        .collect();
    (!tripped.is_empty()).then(|| {
        format!(
            "machines Unknown or Failed in {}, more than --machine-meltdown-threshold {limit}; unhealthy machines are not replaced until the share drops",
            tripped.join(", ")
        )
    })
}

/// The change of a MachineDeployment's meltdown condition: the new condition list and the event
/// to record, `None` when nothing changes (the guard writes only on a change).
#[derive(Clone, Debug, PartialEq)]
pub struct ConditionChange {
    /// `status.conditions` after the change.
    pub conditions: Vec<MachineDeploymentCondition>,
    /// Whether the event is a warning (guard set) or normal (guard lifted).
    pub warning: bool,
    /// Event reason.
    pub reason: &'static str,
    /// Event message.
    pub message: String,
}

/// Sets, updates or removes the deployment's [`CONDITION_TYPE`] condition for `verdict`.
#[must_use]
pub fn condition_change(
    deployment: &MachineDeployment,
    verdict: Option<&str>,
    now: Timestamp,
) -> Option<ConditionChange> {
    let type_ = MachineDeploymentConditionType::Other(CONDITION_TYPE.to_owned());
    let conditions = deployment
        .status
        .as_ref()
        .and_then(|status| status.conditions.clone())
        .unwrap_or_default();
    let existing = conditions.iter().find(|c| c.type_ == type_);
    let mut others: Vec<MachineDeploymentCondition> = conditions
        .iter()
        .filter(|c| c.type_ != type_)
        .cloned()
        .collect();
    match (existing, verdict) {
        (None, None) => None,
        (Some(old), Some(message))
            if old.status == ConditionStatus::True && old.message.as_deref() == Some(message) =>
        {
            None
        }
        (old, Some(message)) => {
            others.push(MachineDeploymentCondition {
                type_,
                status: ConditionStatus::True,
                last_update_time: Some(Time(now)),
                last_transition_time: old
                    .filter(|old| old.status == ConditionStatus::True)
                    .and_then(|old| old.last_transition_time.clone())
                    .or(Some(Time(now))),
                reason: Some(REASON.to_owned()),
                message: Some(message.to_owned()),
            });
            Some(ConditionChange {
                conditions: others,
                warning: true,
                reason: "MeltdownProtection",
                message: message.to_owned(),
            })
        }
        (Some(_), None) => Some(ConditionChange {
            conditions: others,
            warning: false,
            reason: "MeltdownProtectionLifted",
            message: "the share of Unknown or Failed machines is back under --machine-meltdown-threshold; unhealthy machines are replaced again".to_owned(),
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use proptest::prelude::*;

    fn fleet(phases: &[(MachinePhase, Option<&str>)]) -> Vec<Machine> {
        phases
            .iter()
            .enumerate()
            .map(|(index, (phase, zone))| {
                let mut m = machine(&format!("m{index}")).with_phase(phase.clone(), at(0));
                if let Some(zone) = zone {
                    let template = m.spec.node_template.get_or_insert_with(Default::default);
                    template
                        .metadata
                        .get_or_insert_with(Default::default)
                        .labels
                        .get_or_insert_with(Default::default)
                        .insert(mcm_api::keys::label::ZONE.to_owned(), (*zone).to_owned());
                }
                m
            })
            .collect()
    }

    #[test]
    fn off_by_default_and_one_machine_never_trips() {
        let all_down = fleet(&[(MachinePhase::Unknown, None), (MachinePhase::Failed, None)]);
        assert_eq!(assess(&all_down, 0.0), None);
        let one = fleet(&[(MachinePhase::Unknown, None), (MachinePhase::Running, None)]);
        assert_eq!(assess(&one, 0.3), None);
    }

    #[test]
    fn deployment_share_above_threshold_trips_and_terminating_does_not_count() {
        use MachinePhase::{Failed, Running, Terminating, Unknown};
        let down = fleet(&[
            (Unknown, None),
            (Failed, None),
            (Running, None),
            (Running, None),
            (Running, None),
        ]);
        // 2 of 5 = 40% > 30%.
        let reason = assess(&down, 0.3).unwrap();
        assert!(
            reason.starts_with("2 of 5 (40%) machines are Unknown or Failed"),
            "{reason}"
        );
        assert_eq!(
            assess(&down, 0.4),
            None,
            "exactly at the threshold is allowed"
        );
        let mut more = down.clone();
        more.extend(fleet(&[(Terminating, None), (Running, None)]));
        // 2 of 6 = 33%.
        assert!(assess(&more, 0.3).is_some());
        assert_eq!(assess(&more, 0.34), None);
    }

    #[test]
    fn one_zone_down_trips_alone() {
        use MachinePhase::{Running, Unknown};
        let zoned = fleet(&[
            (Unknown, Some("a")),
            (Unknown, Some("a")),
            (Running, Some("a")),
            (Running, Some("b")),
            (Running, Some("b")),
            (Running, Some("b")),
            (Running, Some("c")),
            (Running, Some("c")),
            (Running, Some("c")),
        ]);
        // 2 of 9 (22%) overall is fine; zone a has 2 of 3 (67%).
        let reason = assess(&zoned, 0.5).unwrap();
        assert!(reason.contains("zone a: 2 of 3 (67%)"), "{reason}");
        assert!(!reason.contains("zone b"), "{reason}");
    }

    #[test]
    fn deployment_condition_is_set_once_and_lifted() {
        let mut md = MachineDeployment::default();
        assert_eq!(condition_change(&md, None, at(0)), None);
        let set = condition_change(&md, Some("2 of 3"), at(1)).unwrap();
        assert!(set.warning);
        assert_eq!(set.conditions.len(), 1);
        assert_eq!(set.conditions[0].reason.as_deref(), Some(REASON));
        md.status = Some(mcm_api::v1alpha1::MachineDeploymentStatus {
            conditions: Some(set.conditions.clone()),
            ..Default::default()
        });
        assert_eq!(
            condition_change(&md, Some("2 of 3"), at(5)),
            None,
            "unchanged: no write"
        );
        let updated = condition_change(&md, Some("3 of 3"), at(6)).unwrap();
        assert_eq!(
            updated.conditions[0].last_transition_time,
            set.conditions[0].last_transition_time
        );
        let lifted = condition_change(&md, None, at(9)).unwrap();
        assert!(!lifted.warning);
        assert!(lifted.conditions.is_empty());
    }

    proptest! {
        /// The guard never trips with fewer than two unhealthy machines, and always trips when
        /// every machine of a deployment of two or more is unhealthy.
        #[test]
        fn prop_guard_bounds(unhealthy in 0usize..6, healthy in 0usize..10, threshold in 0.01f64..0.99) {
            let mut phases = vec![(MachinePhase::Unknown, None); unhealthy];
            phases.extend(vec![(MachinePhase::Running, None); healthy]);
            let verdict = assess(&fleet(&phases), threshold);
            if unhealthy < 2 {
                prop_assert!(verdict.is_none());
            }
            if healthy == 0 && unhealthy >= 2 {
                prop_assert!(verdict.is_some());
            }
        }
    }
}
