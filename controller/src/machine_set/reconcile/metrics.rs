//! Scrape-time MachineSet gauges (docs/behaviour.md#metrics-mcm): a hook turns the MachineSet cache into
//! [`MachineSetSample`]s at every scrape, so deleted sets lose their series.

use mcm_api::v1alpha1::MachineSet;

use crate::machine_set::context::MachineSetContext;
use crate::platform::metrics::{ConditionSample, FailedMachineSample, MachineSetSample};

/// Registers the scrape hook on the shell's metrics.
pub(super) fn register(context: &MachineSetContext) {
    let machine_sets = context.machine_sets.clone();
    context.metrics.on_scrape(Box::new(move |metrics| {
        let samples: Vec<MachineSetSample> =
            machine_sets.list().iter().map(|ms| sample(ms)).collect();
        metrics.replace_machine_sets(&samples);
    }));
}

/// The metric sample of one MachineSet.
fn sample(ms: &MachineSet) -> MachineSetSample {
    let status = ms.status.clone().unwrap_or_default();
    let class = ms.spec.machine_class.clone().unwrap_or_default();
    let n = |v: Option<i32>| i64::from(v.unwrap_or(0));
    MachineSetSample {
        name: ms.metadata.name.clone().unwrap_or_default(),
        namespace: ms.metadata.namespace.clone().unwrap_or_default(),
        created_at: ms
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        class_api_group: class.api_group.unwrap_or_default(),
        class_kind: class.kind.unwrap_or_default(),
        class_name: class.name.unwrap_or_default(),
        spec_replicas: n(ms.spec.replicas),
        min_ready_seconds: n(ms.spec.min_ready_seconds),
        conditions: status
            .conditions
            .iter()
            .flatten()
            .map(|c| ConditionSample {
                condition_type: c.type_.as_str().to_owned(),
                status: c.status.as_str().to_owned(),
            })
            .collect(),
        failed_machines: status
            .failed_machines
            .iter()
            .flatten()
            .map(|f| {
                let last = f.last_operation.clone().unwrap_or_default();
                FailedMachineSample {
                    name: f.name.clone().unwrap_or_default(),
                    provider_id: f.provider_id.clone().unwrap_or_default(),
                    owner_ref: f.owner_ref.clone().unwrap_or_default(),
                    last_operation_state: last
                        .state
                        .as_ref()
                        .map(|s| s.as_str().to_owned())
                        .unwrap_or_default(),
                    last_operation_type: last
                        .type_
                        .as_ref()
                        .map(|t| t.as_str().to_owned())
                        .unwrap_or_default(),
                }
            })
            .collect(),
        available_replicas: n(status.available_replicas),
        fully_labelled_replicas: n(status.fully_labeled_replicas),
        ready_replicas: n(status.ready_replicas),
        replicas: n(status.replicas),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcm_api::v1alpha1::{
        ConditionStatus, MachineSetCondition, MachineSetConditionType, MachineSetStatus,
    };

    #[test]
    fn sample_reads_spec_and_status() {
        let mut ms = MachineSet::default();
        ms.metadata.name = Some("a".into());
        ms.metadata.namespace = Some("ns".into());
        ms.spec.replicas = Some(3);
        ms.status = Some(MachineSetStatus {
            replicas: Some(2),
            ready_replicas: Some(1),
            conditions: Some(vec![MachineSetCondition {
                type_: MachineSetConditionType::ReplicaFailure,
                status: ConditionStatus::True,
                last_transition_time: None,
                reason: None,
                message: None,
            }]),
            ..MachineSetStatus::default()
        });
        let s = sample(&ms);
        assert_eq!((s.name.as_str(), s.namespace.as_str()), ("a", "ns"));
        assert_eq!((s.spec_replicas, s.replicas, s.ready_replicas), (3, 2, 1));
        assert_eq!(s.conditions[0].condition_type, "ReplicaFailure");
        assert_eq!(s.conditions[0].status, "True");
        assert!(s.failed_machines.is_empty());
    }
}
