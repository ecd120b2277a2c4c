//! proptest strategies for typed `v1alpha1` objects (feature `proptest`), shared by the
//! property tests of this crate's users (conversion round trips, webhook defaulting).

#![allow(missing_docs, clippy::expect_used)]

use std::collections::BTreeMap;

use crate::duration::Duration;
use crate::v1alpha1::*;
use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeSpec, SecretReference, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::collection::{btree_map, vec};
use proptest::option::of;
use proptest::prelude::*;
use serde_json::Value;

pub fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 ./:_-]{0,12}"
}

pub fn key() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9.-]{0,10}(/[a-z0-9-]{1,8})?"
}

pub fn labels() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    of(btree_map(key(), text(), 0..3))
}

fn time() -> impl Strategy<Value = Time> {
    (0i64..4_102_444_800)
        .prop_map(|s| Time(k8s_openapi::jiff::Timestamp::from_second(s).expect("in range")))
}

fn duration() -> impl Strategy<Value = Duration> {
    any::<i64>().prop_map(Duration::from_nanos)
}

/// Known values and arbitrary other text, as decoding would produce them.
fn open_enum<T: From<String> + std::fmt::Debug>(
    known: &'static [&'static str],
) -> impl Strategy<Value = T> {
    prop_oneof![
        proptest::sample::select(known).prop_map(|s| T::from(s.to_owned())),
        "[A-Za-z]{0,10}".prop_map(T::from),
    ]
}

fn int_or_string() -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        any::<i32>().prop_map(IntOrString::Int),
        "[0-9]{1,3}%?".prop_map(IntOrString::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

pub fn json_object() -> impl Strategy<Value = Value> {
    btree_map("[a-zA-Z]{1,8}", json_value(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

pub fn object_meta() -> impl Strategy<Value = ObjectMeta> {
    (of(key()), of(key()), labels(), labels(), of(time())).prop_map(
        |(name, namespace, labels, annotations, creation_timestamp)| ObjectMeta {
            name,
            namespace,
            labels,
            annotations,
            creation_timestamp,
            ..ObjectMeta::default()
        },
    )
}

fn taint() -> impl Strategy<Value = Taint> {
    (key(), text(), of(text()), of(time())).prop_map(|(key, effect, value, time_added)| Taint {
        key,
        effect,
        value,
        time_added,
    })
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        of(text()),
        of(vec(text(), 0..3)),
        of(text()),
        of(vec(taint(), 0..3)),
        of(any::<bool>()),
    )
        .prop_map(
            |(pod_cidr, pod_cidrs, provider_id, taints, unschedulable)| NodeSpec {
                pod_cidr,
                pod_cidrs,
                provider_id,
                taints,
                unschedulable,
                ..NodeSpec::default()
            },
        )
}

fn class_spec() -> impl Strategy<Value = ClassSpec> {
    (of(text()), of(text()), of(key())).prop_map(|(api_group, kind, name)| ClassSpec {
        api_group,
        kind,
        name,
    })
}

fn configuration() -> impl Strategy<Value = MachineConfiguration> {
    (
        of(duration()),
        of(duration()),
        of(duration()),
        of(duration()),
        of(duration()),
        of(any::<bool>()),
        of(any::<i32>()),
        of(text()),
    )
        .prop_map(
            |(drain, health, creation, in_place, preserve, disable, retries, conditions)| {
                MachineConfiguration {
                    drain_timeout: drain,
                    health_timeout: health,
                    creation_timeout: creation,
                    in_place_update_timeout: in_place,
                    machine_preserve_timeout: preserve,
                    disable_health_timeout: disable,
                    max_evict_retries: retries,
                    node_conditions: conditions,
                }
            },
        )
}

fn machine_spec() -> BoxedStrategy<MachineSpec> {
    (
        of(class_spec()),
        of(text()),
        of((of(object_meta()), of(node_spec()))),
        configuration(),
    )
        .prop_map(
            |(class, provider_id, node_template, configuration)| MachineSpec {
                class,
                provider_id,
                node_template: node_template
                    .map(|(metadata, spec)| NodeTemplateSpec { metadata, spec }),
                configuration,
            },
        )
        .boxed()
}

fn last_operation() -> impl Strategy<Value = LastOperation> {
    (
        of(text()),
        of(text()),
        of(time()),
        of(open_enum::<MachineState>(MachineState::KNOWN)),
        of(open_enum::<MachineOperationType>(
            MachineOperationType::KNOWN,
        )),
    )
        .prop_map(
            |(description, error_code, last_update_time, state, type_)| LastOperation {
                description,
                error_code,
                last_update_time,
                state,
                type_,
            },
        )
}

fn node_condition() -> impl Strategy<Value = NodeCondition> {
    (
        text(),
        text(),
        of(text()),
        of(text()),
        of(time()),
        of(time()),
    )
        .prop_map(
            |(type_, status, reason, message, last_heartbeat_time, last_transition_time)| {
                NodeCondition {
                    type_,
                    status,
                    reason,
                    message,
                    last_heartbeat_time,
                    last_transition_time,
                }
            },
        )
}

fn machine_status() -> impl Strategy<Value = MachineStatus> {
    (
        of(vec((text(), text()), 0..3)),
        of(vec(node_condition(), 0..3)),
        of(last_operation()),
        of((
            of(open_enum::<MachinePhase>(MachinePhase::KNOWN)),
            of(any::<bool>()),
            of(time()),
            of(time()),
        )),
        of(text()),
    )
        .prop_map(
            |(addresses, conditions, last_operation, current, last_known_state)| MachineStatus {
                addresses: addresses.map(|a| {
                    a.into_iter()
                        .map(|(address, type_)| NodeAddress { address, type_ })
                        .collect()
                }),
                conditions,
                last_operation,
                current_status: current.map(
                    |(phase, timeout_active, last_update_time, preserve_expiry_time)| {
                        CurrentStatus {
                            phase,
                            timeout_active,
                            last_update_time,
                            preserve_expiry_time,
                        }
                    },
                ),
                last_known_state,
            },
        )
}

pub fn machine() -> impl Strategy<Value = Machine> {
    (object_meta(), machine_spec(), of(machine_status())).prop_map(|(metadata, spec, status)| {
        Machine {
            metadata,
            spec,
            status,
        }
    })
}

fn selector() -> impl Strategy<Value = LabelSelector> {
    (
        labels(),
        of(vec((key(), text(), of(vec(text(), 0..3))), 0..3)),
    )
        .prop_map(|(match_labels, expressions)| LabelSelector {
            match_labels,
            match_expressions: expressions.map(|e| {
                e.into_iter()
                    .map(|(key, operator, values)| LabelSelectorRequirement {
                        key,
                        operator,
                        values,
                    })
                    .collect()
            }),
        })
}

fn template() -> BoxedStrategy<MachineTemplateSpec> {
    (of(object_meta()), of(machine_spec()))
        .prop_map(|(metadata, spec)| MachineTemplateSpec { metadata, spec })
        .boxed()
}

fn summary() -> impl Strategy<Value = MachineSummary> {
    (of(key()), of(text()), of(last_operation()), of(key())).prop_map(
        |(name, provider_id, last_operation, owner_ref)| MachineSummary {
            name,
            provider_id,
            last_operation,
            owner_ref,
        },
    )
}

pub fn machine_set() -> impl Strategy<Value = MachineSet> {
    let spec = (
        of(any::<i32>()),
        of(selector()),
        of(class_spec()),
        of(template()),
        of(any::<i32>()),
        of(any::<i32>()),
    )
        .prop_map(
            |(replicas, selector, machine_class, template, min_ready, preserve)| MachineSetSpec {
                replicas,
                selector,
                machine_class,
                template,
                min_ready_seconds: min_ready,
                auto_preserve_failed_machine_max: preserve,
            },
        );
    let condition = (
        open_enum::<MachineSetConditionType>(MachineSetConditionType::KNOWN),
        open_enum::<ConditionStatus>(ConditionStatus::KNOWN),
        of(time()),
        of(text()),
        of(text()),
    )
        .prop_map(|(type_, status, last_transition_time, reason, message)| {
            MachineSetCondition {
                type_,
                status,
                last_transition_time,
                reason,
                message,
            }
        });
    let status = (
        (
            of(any::<i32>()),
            of(any::<i32>()),
            of(any::<i32>()),
            of(any::<i32>()),
        ),
        (of(any::<i32>()), of(any::<i64>()), of(any::<i32>())),
        of(vec(condition, 0..3)),
        of(last_operation()),
        of(vec(summary(), 0..2)),
    )
        .prop_map(
            |(
                (replicas, fully, ready, available),
                (preserved, generation, auto),
                conditions,
                last_operation,
                failed,
            )| {
                MachineSetStatus {
                    replicas,
                    fully_labeled_replicas: fully,
                    ready_replicas: ready,
                    available_replicas: available,
                    preserved_failed_replicas: preserved,
                    observed_generation: generation,
                    conditions,
                    last_operation,
                    failed_machines: failed,
                    auto_preserve_failed_machine_count: auto,
                }
            },
        );
    (object_meta(), spec, of(status)).prop_map(|(metadata, spec, status)| MachineSet {
        metadata,
        spec,
        status,
    })
}

fn update_configuration() -> impl Strategy<Value = UpdateConfiguration> {
    (of(int_or_string()), of(int_or_string())).prop_map(|(max_unavailable, max_surge)| {
        UpdateConfiguration {
            max_unavailable,
            max_surge,
        }
    })
}

pub fn machine_deployment() -> impl Strategy<Value = MachineDeployment> {
    let strategy = (
        of(open_enum::<MachineDeploymentStrategyType>(
            MachineDeploymentStrategyType::KNOWN,
        )),
        of(update_configuration()),
        of((
            update_configuration(),
            of(open_enum::<OrchestrationType>(OrchestrationType::KNOWN)),
        )),
    )
        .prop_map(|(type_, rolling, in_place)| MachineDeploymentStrategy {
            type_,
            rolling_update: rolling.map(|update_configuration| RollingUpdateMachineDeployment {
                update_configuration,
            }),
            in_place_update: in_place.map(|(update_configuration, orchestration_type)| {
                InPlaceUpdateMachineDeployment {
                    update_configuration,
                    orchestration_type,
                }
            }),
        });
    let spec = (
        (of(any::<i32>()), of(selector()), template(), of(strategy)),
        (
            of(any::<i32>()),
            of(any::<i32>()),
            of(any::<bool>()),
            of(of(any::<i64>())),
            of(any::<i32>()),
            of(any::<i32>()),
        ),
    )
        .prop_map(
            |(
                (replicas, selector, template, strategy),
                (min_ready, history, paused, rollback, deadline, preserve),
            )| {
                MachineDeploymentSpec {
                    replicas,
                    selector,
                    template,
                    strategy,
                    min_ready_seconds: min_ready,
                    revision_history_limit: history,
                    paused,
                    rollback_to: rollback.map(|revision| RollbackConfig { revision }),
                    progress_deadline_seconds: deadline,
                    auto_preserve_failed_machine_max: preserve,
                }
            },
        );
    let condition = (
        open_enum::<MachineDeploymentConditionType>(MachineDeploymentConditionType::KNOWN),
        open_enum::<ConditionStatus>(ConditionStatus::KNOWN),
        of(time()),
        of(time()),
        of(text()),
        of(text()),
    )
        .prop_map(
            |(type_, status, last_update_time, last_transition_time, reason, message)| {
                MachineDeploymentCondition {
                    type_,
                    status,
                    last_update_time,
                    last_transition_time,
                    reason,
                    message,
                }
            },
        );
    let status = (
        (
            of(any::<i64>()),
            of(any::<i32>()),
            of(any::<i32>()),
            of(any::<i32>()),
        ),
        (
            of(any::<i32>()),
            of(any::<i32>()),
            of(any::<i32>()),
            of(any::<i32>()),
        ),
        of(vec(condition, 0..3)),
        of(vec(summary(), 0..2)),
    )
        .prop_map(
            |(
                (generation, replicas, updated, ready),
                (available, preserved, unavailable, collisions),
                conditions,
                failed,
            )| {
                MachineDeploymentStatus {
                    observed_generation: generation,
                    replicas,
                    updated_replicas: updated,
                    ready_replicas: ready,
                    available_replicas: available,
                    preserved_failed_replicas: preserved,
                    unavailable_replicas: unavailable,
                    conditions,
                    collision_count: collisions,
                    failed_machines: failed,
                }
            },
        );
    (object_meta(), spec, of(status)).prop_map(|(metadata, spec, status)| MachineDeployment {
        metadata,
        spec,
        status,
    })
}

fn resource_list() -> impl Strategy<Value = ResourceList> {
    btree_map(key(), "[0-9]{1,4}(Mi|Gi|m|k)?".prop_map(Quantity), 0..4)
}

fn secret_ref() -> impl Strategy<Value = SecretReference> {
    (of(key()), of(key())).prop_map(|(name, namespace)| SecretReference { name, namespace })
}

pub fn machine_class() -> impl Strategy<Value = MachineClass> {
    let node_template = (
        resource_list(),
        of(resource_list()),
        (text(), text(), text()),
        of(text()),
        // Unknown fields: prefixed so they never collide with the known ones.
        btree_map("x[A-Z][a-z]{1,6}", json_value(), 0..3),
    )
        .prop_map(
            |(capacity, virtual_capacity, (instance_type, region, zone), architecture, extra)| {
                NodeTemplate {
                    capacity,
                    virtual_capacity,
                    instance_type,
                    region,
                    zone,
                    architecture,
                    extra,
                }
            },
        );
    (
        object_meta(),
        of(node_template),
        of(secret_ref()),
        json_object(),
        of(text()),
        of(secret_ref()),
    )
        .prop_map(
            |(
                metadata,
                node_template,
                credentials_secret_ref,
                provider_spec,
                provider,
                secret_ref,
            )| {
                MachineClass {
                    metadata,
                    node_template,
                    credentials_secret_ref,
                    provider_spec,
                    provider,
                    secret_ref,
                    ..MachineClass::default()
                }
            },
        )
}
