#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use jiff::SignedDuration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mcm_api::keys::annotation;
use mcm_api::v1alpha1::{
    ClassSpec, InPlaceUpdateMachineDeployment, Machine, MachineClass, MachineDeployment,
    MachineDeploymentSpec, MachineDeploymentStrategy, MachinePhase, MachineSet, MachineSetSpec,
    MachineSpec, MachineTemplateSpec, NodeTemplateSpec, OrchestrationType,
    RollingUpdateMachineDeployment, UpdateConfiguration,
};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::batches::{batch_count, estimate, human};
use super::field_diff::template_changes;
use super::text::{
    class_report, class_warnings, could_not_determine, deployment_report, deployment_warnings,
    missing_class_warning,
};
use super::types::*;
use super::verdict::{preview_class, preview_deployment};
use crate::machine::hot_update::LAST_APPLIED_PROVIDER_SPEC;
use crate::machine_deployment::revision;
use crate::machine_set::claim;
use crate::test_support::{MachineExt, at, machine};

const NS: &str = "shoot";

fn ios(s: &str) -> IntOrString {
    s.parse::<i32>()
        .map_or_else(|_| IntOrString::String(s.to_owned()), IntOrString::Int)
}

fn template(class: &str) -> MachineTemplateSpec {
    MachineTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([("pool".into(), "a".into())])),
            ..ObjectMeta::default()
        }),
        spec: Some(MachineSpec {
            class: Some(ClassSpec {
                api_group: None,
                kind: Some("MachineClass".into()),
                name: Some(class.into()),
            }),
            ..MachineSpec::default()
        }),
    }
}

fn config(surge: &str, unavailable: &str) -> UpdateConfiguration {
    UpdateConfiguration {
        max_surge: Some(ios(surge)),
        max_unavailable: Some(ios(unavailable)),
    }
}

fn rolling(name: &str, replicas: i32, surge: &str, unavailable: &str) -> MachineDeployment {
    let mut md = MachineDeployment::new(
        name,
        MachineDeploymentSpec {
            replicas: Some(replicas),
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("pool".into(), "a".into())])),
                match_expressions: None,
            }),
            template: template("small"),
            strategy: Some(MachineDeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateMachineDeployment {
                    update_configuration: config(surge, unavailable),
                }),
                in_place_update: None,
            }),
            ..MachineDeploymentSpec::default()
        },
    );
    md.metadata.namespace = Some(NS.into());
    md.metadata.uid = Some(format!("uid-{name}"));
    md
}

fn recreate(name: &str, replicas: i32) -> MachineDeployment {
    let mut md = rolling(name, replicas, "1", "0");
    md.spec.strategy = Some(MachineDeploymentStrategy {
        type_: Some("Recreate".into()),
        rolling_update: None,
        in_place_update: None,
    });
    md
}

fn in_place(
    name: &str,
    replicas: i32,
    surge: &str,
    unavailable: &str,
    manual: bool,
) -> MachineDeployment {
    let mut md = rolling(name, replicas, "1", "0");
    md.spec.strategy = Some(MachineDeploymentStrategy {
        type_: Some("InPlaceUpdate".into()),
        rolling_update: None,
        in_place_update: Some(InPlaceUpdateMachineDeployment {
            update_configuration: config(surge, unavailable),
            orchestration_type: Some(if manual {
                OrchestrationType::Manual
            } else {
                OrchestrationType::Auto
            }),
        }),
    });
    md
}

fn with_class(md: &MachineDeployment, class: &str) -> MachineDeployment {
    let mut md = md.clone();
    md.spec.template = template(class);
    md
}

/// A MachineSet of `md` with `md`'s template, created at `created` seconds.
fn set_of(md: &MachineDeployment, suffix: &str, created: i64) -> MachineSet {
    let mut ms = MachineSet::new(
        &format!("{}-{suffix}", md.metadata.name.as_deref().unwrap()),
        MachineSetSpec {
            template: Some(md.spec.template.clone()),
            ..MachineSetSpec::default()
        },
    );
    ms.metadata.namespace = Some(NS.into());
    ms.metadata.uid = Some(format!("uid-set-{suffix}"));
    ms.metadata.creation_timestamp = Some(Time(at(created)));
    ms.metadata.owner_references = Some(vec![claim::owner_reference(
        revision::KIND,
        md.metadata.name.as_deref().unwrap(),
        md.metadata.uid.as_deref().unwrap(),
    )]);
    ms
}

/// `n` running machines of `ms`, on `ms`'s class, with `spec` as last-applied providerSpec.
fn machines_of(ms: &MachineSet, n: usize, spec: Option<&Value>) -> Vec<Machine> {
    let class = ms
        .spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.class.clone());
    (0..n)
        .map(|i| {
            let name = format!("{}-{i:03}", ms.metadata.name.as_deref().unwrap());
            let mut m = machine(&name)
                .with_provider_id(&format!("virtual:///{name}"))
                .with_phase(MachinePhase::Running, at(0));
            if let Some(spec) = spec {
                m = m.with_annotation(LAST_APPLIED_PROVIDER_SPEC, &spec.to_string());
            }
            m.metadata.namespace = Some(NS.into());
            m.metadata.creation_timestamp = Some(Time(at(i64::try_from(i).unwrap())));
            m.spec.class = class.clone();
            m.metadata.owner_references = Some(vec![claim::owner_reference(
                crate::machine_set::plan::KIND,
                ms.metadata.name.as_deref().unwrap(),
                ms.metadata.uid.as_deref().unwrap(),
            )]);
            m
        })
        .collect()
}

fn deployment_verdict(
    old: &MachineDeployment,
    new: &MachineDeployment,
    sets: &[MachineSet],
    machines: &[Machine],
) -> DeploymentVerdict {
    preview_deployment(&DeploymentChange {
        old,
        new,
        machine_sets: sets,
        machines,
        observed: true,
        now: at(100),
    })
    .unwrap()
}

/// A deployment with one set and `n` machines, and its verdict on moving to class `large`.
fn roll_of_fleet(md: &MachineDeployment, n: usize) -> DeploymentVerdict {
    let set = set_of(md, "old", 0);
    let machines = machines_of(&set, n, None);
    deployment_verdict(md, &with_class(md, "large"), &[set], &machines)
}

#[test]
fn rolling_update_of_300_machines_words_it_as_the_issue_does() {
    let mut md = rolling("worker-1", 300, "30", "0");
    md.metadata.namespace = Some("shoot--a".into());
    let set = {
        let mut s = set_of(&md, "old", 0);
        s.metadata.namespace = Some("shoot--a".into());
        s
    };
    let machines: Vec<Machine> = machines_of(&set, 300, None)
        .into_iter()
        .map(|mut m| {
            m.metadata.namespace = Some("shoot--a".into());
            m
        })
        .collect();
    let v = deployment_verdict(&md, &with_class(&md, "large"), &[set], &machines);
    assert_eq!(
        deployment_warnings(&v),
        vec![
            "this change replaces 300 machines of machinedeployment shoot--a/worker-1 by a rolling update (maxSurge 30, maxUnavailable 0: about 10 batches)"
        ]
    );
    assert_eq!(
        v.changes,
        vec![FieldChange {
            path: "spec.template.spec.class.name".into(),
            effect: FieldEffect::Rolls
        }]
    );
}

#[test]
fn percentages_round_surge_up_and_unavailable_down() {
    // 25% of 10: surge 3 (2.5 up), unavailable 2 (2.5 down): 5 at a time, 2 batches.
    let v = roll_of_fleet(&rolling("md", 10, "25%", "25%"), 10);
    assert_eq!(
        v.effect,
        DeploymentEffect::Roll {
            roll: Roll::Rolling {
                max_surge: 3,
                max_unavailable: 2
            },
            machines: 10,
            kept: 0,
            per_batch: 5,
            batches: 2
        }
    );
    // 10% of 7: surge 1 (0.7 up), unavailable 0 (0.7 down): 7 batches of 1.
    let DeploymentEffect::Roll {
        per_batch, batches, ..
    } = roll_of_fleet(&rolling("md", 7, "10%", "10%"), 7).effect
    else {
        panic!()
    };
    assert_eq!((per_batch, batches), (1, 7));
    // Both 0: the controller lets one machine be unavailable.
    let v = roll_of_fleet(&rolling("md", 4, "0", "0"), 4);
    assert!(deployment_warnings(&v)[0].contains("(maxSurge 0, maxUnavailable 1: about 4 batches)"));
}

#[test]
fn recreate_replaces_everything_in_one_batch() {
    let v = roll_of_fleet(&recreate("md", 5), 5);
    assert_eq!(
        deployment_warnings(&v),
        vec![
            "this change replaces 5 machines of machinedeployment shoot/md by recreating them (all are deleted first, then the new ones are created: 1 batch)"
        ]
    );
}

#[test]
fn in_place_updates_one_at_a_time() {
    let v = roll_of_fleet(&in_place("md", 300, "0", "1", false), 300);
    assert_eq!(
        deployment_warnings(&v),
        vec![
            "in-place update: 300 machines of machinedeployment shoot/md, 1 at a time (maxUnavailable 1: about 300 batches); none is replaced"
        ]
    );
    let report = deployment_report(&v, &MeasuredDurations::default());
    assert!(
        report.contains("spec.template.spec.class.name  updates in place (node agent)"),
        "{report}"
    );
    let v = roll_of_fleet(&in_place("md", 4, "1", "1", false), 4);
    assert!(
        deployment_warnings(&v)[0]
            .contains("2 at a time (maxSurge 1, maxUnavailable 1: about 2 batches)")
    );
    let v = roll_of_fleet(&in_place("md", 3, "0", "1", true), 3);
    assert!(
        deployment_warnings(&v)[0]
            .starts_with("in-place update (manual orchestration): 3 machines")
    );
}

#[test]
fn class_rename_rolls_and_propagated_fields_do_not() {
    let md = rolling("md", 2, "1", "0");
    let set = set_of(&md, "old", 0);
    let machines = machines_of(&set, 2, None);
    let mut node_only = md.clone();
    node_only.spec.template.spec.as_mut().unwrap().node_template = Some(NodeTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([("zone".into(), "b".into())])),
            ..ObjectMeta::default()
        }),
        spec: None,
    });
    let v = deployment_verdict(&md, &node_only, std::slice::from_ref(&set), &machines);
    assert_eq!(v.effect, DeploymentEffect::Propagate { machines: 2 });
    assert_eq!(
        deployment_warnings(&v),
        vec![
            "spec.template.spec.nodeTemplate is propagated in place to the 2 machines of machinedeployment shoot/md: none is replaced"
        ]
    );
    // Mixed: the rename rolls, the node template is listed as propagated.
    let mixed = with_class(&node_only, "large");
    let mut mixed = mixed;
    mixed.spec.template.spec.as_mut().unwrap().node_template = node_only
        .spec
        .template
        .spec
        .as_ref()
        .unwrap()
        .node_template
        .clone();
    let v = deployment_verdict(&md, &mixed, std::slice::from_ref(&set), &machines);
    assert!(matches!(
        v.effect,
        DeploymentEffect::Roll { machines: 2, .. }
    ));
    let effects: Vec<(&str, FieldEffect)> = v
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.effect))
        .collect();
    assert_eq!(
        effects,
        vec![
            ("spec.template.spec.class.name", FieldEffect::Rolls),
            ("spec.template.spec.nodeTemplate", FieldEffect::Propagated),
        ]
    );
}

#[test]
fn paused_zero_replicas_no_op_and_scale() {
    let mut md = rolling("md", 3, "1", "0");
    md.spec.paused = Some(true);
    let v = roll_of_fleet(&md, 3);
    assert_eq!(
        deployment_warnings(&v),
        vec![
            "machinedeployment shoot/md is paused, nothing happens until it is resumed; then this change replaces 3 machines of machinedeployment shoot/md by a rolling update (maxSurge 1, maxUnavailable 0: about 3 batches)"
        ]
    );
    let v = roll_of_fleet(&rolling("md", 0, "1", "0"), 0);
    assert_eq!(
        deployment_warnings(&v),
        vec![
            "this change rolls machinedeployment shoot/md to a new template, but no machine runs an older one: none is replaced"
        ]
    );
    let md = rolling("md", 3, "1", "0");
    let v = deployment_verdict(&md, &md, &[], &[]);
    assert_eq!(v.effect, DeploymentEffect::Nothing);
    assert!(v.changes.is_empty());
    assert!(deployment_warnings(&v).is_empty());
    // Labels on the deployment itself and the strategy touch no machine.
    let mut other = rolling("md", 5, "2", "1");
    other.metadata.labels = Some(BTreeMap::from([("x".into(), "y".into())]));
    let v = deployment_verdict(&md, &other, &[], &[]);
    assert_eq!(v.effect, DeploymentEffect::Nothing);
    assert_eq!(
        deployment_warnings(&v),
        vec!["this change scales machinedeployment shoot/md from 3 to 5 machines"]
    );
    assert!(v.changes.contains(&FieldChange {
        path: "spec.strategy.rollingUpdate.maxSurge".into(),
        effect: FieldEffect::NoMachineEffect
    }));
}

#[test]
fn rollback_keeps_the_machines_of_the_matching_set() {
    let md = rolling("md", 3, "1", "0");
    let large = with_class(&md, "large");
    let old = set_of(&md, "small", 0);
    let back = set_of(&large, "large", 10);
    let mut machines = machines_of(&old, 2, None);
    machines.extend(machines_of(&back, 1, None));
    // Current template `small`; going back to `large`, whose set already has 1 machine.
    let v = deployment_verdict(&md, &large, &[old, back], &machines);
    let DeploymentEffect::Roll {
        machines: n, kept, ..
    } = v.effect
    else {
        panic!()
    };
    assert_eq!((n, kept), (2, 1));
    assert!(deployment_warnings(&v)[0].ends_with("; 1 machine already on the new template stay"));
}

#[test]
fn deletion_order_is_the_machine_sets_order() {
    let md = rolling("md", 3, "1", "0");
    let set = set_of(&md, "old", 0);
    let mut machines = machines_of(&set, 3, None);
    // Lower machine priority goes first; a Failed machine before a Running one.
    machines[2]
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(annotation::MACHINE_PRIORITY.into(), "1".into());
    machines[1] = machines[1].clone().with_phase(MachinePhase::Failed, at(0));
    let v = deployment_verdict(&md, &with_class(&md, "large"), &[set], &machines);
    assert_eq!(v.order, vec!["md-old-002", "md-old-001", "md-old-000"]);
    let report = deployment_report(&v, &MeasuredDurations::default());
    assert!(report.contains("Deletion order (first first): md-old-002, md-old-001, md-old-000"));
    assert!(report.contains("Estimate: no history"));
}

#[test]
fn estimate_multiplies_batches_by_measured_durations() {
    let durations = MeasuredDurations {
        creation: Some(SignedDuration::from_secs(60)),
        join: Some(SignedDuration::from_secs(30)),
        drain: Some(SignedDuration::from_secs(30)),
        slow: None,
        source: "the manager's metrics".into(),
    };
    let roll = Roll::Rolling {
        max_surge: 1,
        max_unavailable: 0,
    };
    let e = estimate(&roll, 3, &durations).unwrap();
    assert_eq!(e.typical, SignedDuration::from_secs(360));
    assert_eq!(e.slow, None);
    assert!(e.why.ends_with("from the manager's metrics"), "{}", e.why);
    let partial = MeasuredDurations {
        drain: None,
        ..durations
    };
    assert_eq!(estimate(&roll, 3, &partial), None);
    assert_eq!(batch_count(0, 5), 0);
    assert_eq!(batch_count(11, 5), 3);
}

/// With the steps' distributions measured, the estimate is a range from every step at its
/// median to every step at its 90th percentile, and the report prints both ends.
#[test]
fn estimate_is_a_range_when_distributions_are_measured() {
    let s = SignedDuration::from_secs;
    let durations = MeasuredDurations {
        creation: Some(s(4)),
        join: Some(s(6)),
        drain: Some(s(2)),
        slow: Some(SlowDurations {
            creation: s(6),
            join: s(9),
            drain: s(3),
        }),
        source: "m.txt".into(),
    };
    let one_at_a_time = Roll::Rolling {
        max_surge: 1,
        max_unavailable: 0,
    };
    let e = estimate(&one_at_a_time, 2, &durations).unwrap();
    assert_eq!((e.typical, e.slow), (s(24), Some(s(36))));
    assert_eq!(
        e.why,
        "2 batch(es) × (creation 4.0s + join 6.0s + drain 2.0s) at the median, × (creation 6.0s + join 9.0s + drain 3.0s) at the 90th percentile, from m.txt"
    );
    let in_place = Roll::InPlace {
        max_surge: 0,
        max_unavailable: 1,
        manual: false,
    };
    let e = estimate(&in_place, 2, &durations).unwrap();
    assert_eq!((e.typical, e.slow), (s(16), Some(s(24))));
    // Two machines, one at a time (maxSurge 1, maxUnavailable 0): two batches.
    let v = roll_of_fleet(&rolling("md", 2, "1", "0"), 2);
    let report = deployment_report(&v, &durations);
    assert!(
        report.contains("Estimate: 24s to 36s (2 batch(es)"),
        "{report}"
    );
    // Ends that print alike are one figure.
    let close = MeasuredDurations {
        slow: Some(SlowDurations {
            creation: SignedDuration::from_millis(4_200),
            join: s(6),
            drain: s(2),
        }),
        ..durations
    };
    let report = deployment_report(&v, &close);
    assert!(
        report.contains("Estimate: about 24s (2 batch(es)"),
        "{report}"
    );
}

/// Steps under 10 s print in tenths, so that a short estimate's steps add up to the total it
/// prints. Before, a `make run` roll printed "about 2s (1 batch(es) × (creation 0s + join 1s +
/// drain 0s) …)".
#[test]
fn a_short_estimate_prints_steps_that_add_up_to_its_total() {
    let ms = SignedDuration::from_millis;
    let durations = MeasuredDurations {
        creation: Some(ms(400)),
        join: Some(ms(1_300)),
        drain: Some(ms(300)),
        slow: Some(SlowDurations {
            creation: ms(600),
            join: ms(3_900),
            drain: ms(1_000),
        }),
        source: "m.txt".into(),
    };
    let v = roll_of_fleet(&rolling("md", 1, "1", "0"), 1);
    let report = deployment_report(&v, &durations);
    assert!(
        report.contains(
            "Estimate: 2.0s to 5.5s (1 batch(es) × (creation 0.4s + join 1.3s + drain 0.3s) at the median, × (creation 0.6s + join 3.9s + drain 1.0s) at the 90th percentile, from m.txt)"
        ),
        "{report}"
    );
    // From 10 s on, whole seconds as before.
    assert_eq!(human(ms(9_940)), "9.9s");
    assert_eq!(human(ms(9_960)), "10.0s");
    assert_eq!(human(ms(10_400)), "10s");
    assert_eq!(human(ms(83_000)), "1m23s");
}

/// "No history" says what is missing: no figures given at all is not "the manager has measured
/// nothing" (it had, on `make run` after a roll), and figures given without a step name where
/// they came from.
#[test]
fn no_history_says_whether_figures_were_given() {
    let v = roll_of_fleet(&rolling("md", 2, "1", "0"), 2);
    let none_given = deployment_report(&v, &MeasuredDurations::default());
    assert!(
        none_given.contains(
            "Estimate: no history given (pass the manager's /metrics text with --metrics-file"
        ),
        "{none_given}"
    );
    assert!(!none_given.contains("has measured no"), "{none_given}");
    let without_drain = MeasuredDurations {
        creation: Some(SignedDuration::from_secs(4)),
        join: Some(SignedDuration::from_secs(6)),
        drain: None,
        slow: None,
        source:
            "the averages of the latest figures in m.txt (2 creation, 2 join and 0 drain figures)"
                .into(),
    };
    let report = deployment_report(&v, &without_drain);
    assert!(
        report.contains(
            "Estimate: no history (a creation, join or drain duration is missing: the averages of the latest figures in m.txt (2 creation, 2 join and 0 drain figures))"
        ),
        "{report}"
    );
}

#[test]
fn unread_machines_are_estimated_from_replicas_and_said_so() {
    let md = rolling("md", 6, "2", "0");
    let v = preview_deployment(&DeploymentChange {
        old: &md,
        new: &with_class(&md, "large"),
        machine_sets: &[],
        machines: &[],
        observed: false,
        now: at(0),
    })
    .unwrap();
    let lines = deployment_warnings(&v);
    assert!(lines[0].contains("replaces 6 machines") && lines[0].contains("about 3 batches"));
    assert!(lines[1].contains("estimated from spec.replicas"));
}

#[test]
fn malformed_strategy_is_an_error_not_a_panic() {
    let md = rolling("md", 3, "1", "0");
    let bad = rolling("md", 3, "lots", "0");
    let err = preview_deployment(&DeploymentChange {
        old: &md,
        new: &with_class(&bad, "large"),
        machine_sets: &[],
        machines: &[],
        observed: true,
        now: at(0),
    })
    .unwrap_err();
    assert!(matches!(err, PreviewError::Fencepost(_)));
    assert_eq!(
        could_not_determine(&err.to_string()),
        "could not determine the effect: the update strategy cannot be resolved: invalid value for IntOrString: \"lots\": not an integer or a percentage"
    );
}

fn class(name: &str, spec: Value) -> MachineClass {
    let mut c = MachineClass::new(name, spec);
    c.metadata.namespace = Some(NS.into());
    c
}

fn class_verdict(
    old: &MachineClass,
    new: &MachineClass,
    fleets: &[(MachineDeployment, Vec<MachineSet>, Vec<Machine>)],
    hot: HotPaths,
) -> Result<ClassVerdict, PreviewError> {
    preview_class(&ClassChange {
        old,
        new,
        deployments: fleets
            .iter()
            .map(|(md, sets, machines)| ClassUser {
                deployment: md,
                machine_sets: sets,
                machines,
            })
            .collect(),
        hot_paths: hot,
        now: at(100),
    })
}

/// Deployments `a` (3 machines) and `b` (2) on class `small`, `c` (1) on `large`, all with
/// `spec` applied.
fn fleets(spec: &Value) -> Vec<(MachineDeployment, Vec<MachineSet>, Vec<Machine>)> {
    [("a", "small", 3), ("b", "small", 2), ("c", "large", 1)]
        .into_iter()
        .map(|(name, class, n)| {
            let md = with_class(&rolling(name, i32::try_from(n).unwrap(), "1", "0"), class);
            let set = set_of(&md, &format!("{name}1"), 0);
            let machines = machines_of(&set, n, Some(spec));
            (md, vec![set], machines)
        })
        .collect()
}

#[test]
fn hot_update_of_a_class_used_by_two_deployments() {
    let before = json!({"tags": {"team": "a"}, "image": "x"});
    let after = json!({"tags": {"team": "b"}, "image": "x"});
    let v = class_verdict(
        &class("small", before.clone()),
        &class("small", after),
        &fleets(&before),
        HotPaths::Published(vec!["tags".into()]),
    )
    .unwrap();
    assert_eq!(
        class_warnings(&v),
        vec![
            "providerSpec.tags.team is hot-updatable: 3 machines of machinedeployment shoot/a are updated in place through UpdateMachine, none is replaced",
            "providerSpec.tags.team is hot-updatable: 2 machines of machinedeployment shoot/b are updated in place through UpdateMachine, none is replaced",
        ]
    );
    assert_eq!(v.hot_paths_source, "the driver's GetCapabilities");
    assert!(class_report(&v).contains("providerSpec.tags.team  hot-updates (UpdateMachine)"));
}

#[test]
fn mixed_hot_and_cold_class_change_updates_nothing() {
    let before = json!({"tags": {"team": "a"}, "image": "x"});
    let after = json!({"tags": {"team": "b"}, "image": "y"});
    let v = class_verdict(
        &class("small", before.clone()),
        &class("small", after),
        &fleets(&before),
        HotPaths::Rules,
    )
    .unwrap();
    assert_eq!(v.users.len(), 2);
    assert!(
        v.users
            .iter()
            .all(|u| u.hot_updated == 0 && u.left_unchanged == u.machines)
    );
    assert_eq!(
        class_warnings(&v)[0],
        "providerSpec.image is not hot-updatable: the 3 machines of machinedeployment shoot/a are neither updated nor replaced; only new machines get the change (reference a new class to roll them)"
    );
    assert!(class_report(&v).contains("providerSpec rules"));
}

#[test]
fn unused_class_and_missing_last_applied_record() {
    let before = json!({"tags": {"team": "a"}});
    let after = json!({"tags": {"team": "b"}});
    let v = class_verdict(
        &class("unused", before.clone()),
        &class("unused", after.clone()),
        &fleets(&before),
        HotPaths::Rules,
    )
    .unwrap();
    assert_eq!(
        class_warnings(&v),
        vec!["no MachineDeployment uses machineclass shoot/unused: no machine is touched"]
    );
    let mut fleet = fleets(&before);
    for m in &mut fleet[0].2 {
        m.metadata.annotations = None;
    }
    let v = class_verdict(
        &class("small", before),
        &class("small", after),
        &fleet[..1],
        HotPaths::Rules,
    )
    .unwrap();
    assert_eq!(v.users[0].adopted, 3);
    assert!(
        class_warnings(&v)[0]
            .contains("3 machines without a last-applied providerSpec adopt the new one")
    );
}

#[test]
fn malformed_provider_spec_is_an_error() {
    let err = class_verdict(
        &class("small", json!({"tags": {}})),
        &class("small", json!("not an object")),
        &[],
        HotPaths::Rules,
    )
    .unwrap_err();
    assert_eq!(
        could_not_determine(&err.to_string()),
        "could not determine the effect: providerSpec is not an object but a string"
    );
}

#[test]
fn history_explains_template_differences() {
    let a = template("small");
    let mut b = template("large");
    b.metadata
        .as_mut()
        .unwrap()
        .labels
        .as_mut()
        .unwrap()
        .insert(
            mcm_api::keys::label::MACHINE_TEMPLATE_HASH.into(),
            "123".into(),
        );
    assert_eq!(
        template_changes(&a, &b),
        vec![FieldChange {
            path: "spec.template.spec.class.name".into(),
            effect: FieldEffect::Rolls
        }]
    );
    assert!(template_changes(&a, &a).is_empty());
}

proptest! {
    /// Batches cover the machines exactly: no batch is empty and none is missing.
    #[test]
    fn prop_batches_cover_the_roll(replicas in 0i32..400, surge in 0u8..3, unavailable in 0u8..3, s in 0i32..60, u in 0i32..60) {
        let value = |kind: u8, v: i32| match kind { 0 => v.to_string(), 1 => format!("{v}%"), _ => "0".to_owned() };
        let md = rolling("md", replicas, &value(surge, s), &value(unavailable, u));
        let n = usize::try_from(replicas).unwrap();
        let v = roll_of_fleet(&md, n);
        let DeploymentEffect::Roll { machines, per_batch, batches, .. } = v.effect else {
            return Err(TestCaseError::fail("no roll"));
        };
        prop_assert_eq!(machines, n);
        prop_assert!(per_batch >= 1);
        prop_assert!(batches * per_batch >= machines);
        prop_assert!(batches == 0 || (batches - 1) * per_batch < machines);
    }

}

/// Runs `check` over generated pairs on a thread with a big stack: the strategies of these deep
/// types are large value trees, which overflow the default 2 MiB stack in debug builds.
fn check_pairs<T, S>(strategy: fn() -> S, check: fn(&T, &T))
where
    S: Strategy<Value = T> + 'static,
    T: std::fmt::Debug + 'static,
{
    let outcome = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || {
            let config = ProptestConfig {
                cases: 64,
                ..ProptestConfig::default()
            };
            proptest::test_runner::TestRunner::new(config)
                .run(&(strategy(), strategy()), |(a, b)| {
                    check(&a, &b);
                    Ok(())
                })
                .map_err(|e| e.to_string())
        })
        .unwrap()
        .join()
        .unwrap();
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

/// Any pair of deployments gives a verdict or an error, never a panic, and the verdict's text is
/// printable.
#[test]
fn prop_deployments_never_panic() {
    check_pairs(mcm_api::arbitrary::machine_deployment, |old, new| {
        if let Ok(v) = preview_deployment(&DeploymentChange {
            old,
            new,
            machine_sets: &[],
            machines: &[],
            observed: false,
            now: at(0),
        }) {
            assert!(
                deployment_report(&v, &MeasuredDurations::default())
                    .starts_with("MachineDeployment ")
            );
        }
    });
}

/// Any pair of classes gives a verdict or an error, never a panic.
#[test]
fn prop_classes_never_panic() {
    check_pairs(mcm_api::arbitrary::machine_class, |c1, c2| {
        if let Ok(v) = class_verdict(c1, c2, &[], HotPaths::Rules) {
            assert!(class_report(&v).starts_with("MachineClass "));
        }
    });
}

/// `md` rolled from `small` (revision 1, now empty) to `large` (revision 2, `n` machines).
fn rolled_to_large(n: usize) -> (MachineDeployment, Vec<MachineSet>, Vec<Machine>) {
    let md = rolling("md", i32::try_from(n).unwrap(), "1", "0");
    let mut small = set_of(&md, "small", 0);
    small.metadata.annotations = Some(BTreeMap::from([(annotation::REVISION.into(), "1".into())]));
    let large_md = with_class(&md, "large");
    let mut large = set_of(&large_md, "large", 10);
    large.metadata.annotations = Some(BTreeMap::from([(annotation::REVISION.into(), "2".into())]));
    let machines = machines_of(&large, n, None);
    (large_md, vec![small, large], machines)
}

#[test]
fn rollback_to_the_previous_revision_replaces_the_fleet() {
    let (md, sets, machines) = rolled_to_large(6);
    let mut undo = md.clone();
    undo.spec.rollback_to = Some(mcm_api::v1alpha1::RollbackConfig { revision: Some(0) });
    let v = deployment_verdict(&md, &undo, &sets, &machines);
    assert_eq!(v.rollback, Some(RollbackPlan::To { revision: 1 }));
    assert!(matches!(
        v.effect,
        DeploymentEffect::Roll {
            machines: 6,
            kept: 0,
            ..
        }
    ));
    assert_eq!(
        deployment_warnings(&v),
        vec![
            "this rollback (spec.rollbackTo) to revision 1 replaces 6 machines of machinedeployment shoot/md by a rolling update (maxSurge 1, maxUnavailable 0: about 6 batches)"
        ]
    );
    assert!(
        v.changes
            .iter()
            .any(|c| c.path.starts_with("spec.rollbackTo") && c.effect == FieldEffect::Rolls),
        "{:?}",
        v.changes
    );
    // Named by number; the current revision's template is no change; an unknown one is cleared.
    undo.spec.rollback_to = Some(mcm_api::v1alpha1::RollbackConfig { revision: Some(2) });
    let v = deployment_verdict(&md, &undo, &sets, &machines);
    assert_eq!(v.rollback, Some(RollbackPlan::SameTemplate { revision: 2 }));
    assert!(deployment_warnings(&v)[0].contains("DeploymentRollbackTemplateUnchanged"));
    undo.spec.rollback_to = Some(mcm_api::v1alpha1::RollbackConfig { revision: Some(9) });
    let v = deployment_verdict(&md, &undo, &sets, &machines);
    assert_eq!(v.rollback, Some(RollbackPlan::NotFound { requested: 9 }));
    assert!(deployment_warnings(&v)[0].contains("revision 9, which no MachineSet"));
    // Without the sets, the preview says it cannot tell (the webhook then reads them).
    undo.spec.rollback_to = Some(mcm_api::v1alpha1::RollbackConfig { revision: Some(0) });
    let blind = preview_deployment(&DeploymentChange {
        old: &md,
        new: &undo,
        machine_sets: &[],
        machines: &[],
        observed: false,
        now: at(100),
    })
    .unwrap();
    assert_eq!(
        deployment_warnings(&blind),
        vec![
            "could not determine the effect: spec.rollbackTo rolls machinedeployment shoot/md back to the previous revision; which machines are replaced depends on its MachineSets, which were not read"
        ]
    );
}

#[test]
fn resuming_with_a_pending_template_change_replaces_the_fleet() {
    // Paused, then moved to `large`: the machines still run `small`.
    let md = rolling("md", 6, "1", "0");
    let set = set_of(&md, "small", 0);
    let machines = machines_of(&set, 6, None);
    let mut paused = with_class(&md, "large");
    paused.spec.paused = Some(true);
    let mut resumed = paused.clone();
    resumed.spec.paused = Some(false);
    let v = deployment_verdict(&paused, &resumed, std::slice::from_ref(&set), &machines);
    assert!(v.resumes_pending);
    assert_eq!(
        deployment_warnings(&v),
        vec![
            "resuming rolls out the template changed while it was paused and replaces 6 machines of machinedeployment shoot/md by a rolling update (maxSurge 1, maxUnavailable 0: about 6 batches)"
        ]
    );
    assert!(v.changes.contains(&FieldChange {
        path: "spec.paused".into(),
        effect: FieldEffect::Rolls
    }));
    // Nothing pending: resuming touches no machine.
    let mut paused_same = md.clone();
    paused_same.spec.paused = Some(true);
    let v = deployment_verdict(&paused_same, &md, std::slice::from_ref(&set), &machines);
    assert!(
        deployment_warnings(&v).is_empty(),
        "{:?}",
        deployment_warnings(&v)
    );
}

#[test]
fn a_drifted_fleet_says_which_earlier_change_blocks_the_hot_update() {
    // Warnings for deployment `a` whose machines applied `applied`, on a class change.
    let warnings = |applied: Value, before: Value, after: Value| {
        let v = class_verdict(
            &class("small", before),
            &class("small", after),
            &fleets(&applied)[..1],
            HotPaths::Rules,
        )
        .unwrap();
        class_warnings(&v)
    };
    // The machines run image x and team a; the class got image y (not hot), now team b (hot).
    assert_eq!(
        warnings(
            json!({"tags": {"team": "a"}, "image": "x"}),
            json!({"tags": {"team": "a"}, "image": "y"}),
            json!({"tags": {"team": "b"}, "image": "y"}),
        ),
        vec![
            "providerSpec.tags.team is hot-updatable, but 3 machines of machinedeployment shoot/a are not updated: their providerSpec also differs from the class at providerSpec.image, which is not hot-updatable (an earlier change); only new machines get either change (reference a new class to roll them)"
        ]
    );
    // Reverting the image (a cold path) while team b is pending: the update names team, never an
    // empty subject.
    assert_eq!(
        warnings(
            json!({"tags": {"team": "a"}, "image": "x"}),
            json!({"tags": {"team": "b"}, "image": "y"}),
            json!({"tags": {"team": "b"}, "image": "x"}),
        ),
        vec![
            "providerSpec.tags.team is hot-updatable: 3 machines of machinedeployment shoot/a are updated in place through UpdateMachine, none is replaced"
        ]
    );
}

#[test]
fn a_missing_class_says_what_the_strategy_does_meanwhile() {
    let v = roll_of_fleet(&rolling("md", 6, "1", "1"), 6);
    assert_eq!(
        missing_class_warning(&v, "large"),
        "machineclass shoot/large does not exist: new machines of machinedeployment shoot/md cannot be created until it does (they stay without a phase, event MachineClassNotFound); no old machine goes meanwhile (the 6 old machines stay until the class exists; only surge machines are created); reverting the template deletes the new machines at once"
    );
    let v = roll_of_fleet(&recreate("md", 3), 3);
    assert!(
        missing_class_warning(&v, "large")
            .contains("Recreate keeps the 3 old machines until the class exists;")
    );
}

#[test]
fn deletion_order_ties_are_broken_as_the_controller_breaks_them() {
    // Six machines created in the same second, listed in reverse: the controller deletes them
    // by name, and so does the preview (it printed 1 of 6 positions right before).
    let md = rolling("md", 6, "1", "0");
    let set = set_of(&md, "old", 0);
    let mut machines: Vec<Machine> = machines_of(&set, 6, None)
        .into_iter()
        .map(|mut m| {
            m.metadata.creation_timestamp = Some(Time(at(5)));
            m
        })
        .collect();
    machines.reverse();
    let v = deployment_verdict(&md, &with_class(&md, "large"), &[set], &machines);
    assert_eq!(
        v.order,
        vec![
            "md-old-000",
            "md-old-001",
            "md-old-002",
            "md-old-003",
            "md-old-004",
            "md-old-005"
        ]
    );
}
