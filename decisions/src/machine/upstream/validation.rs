//! `machine_test.go` `#ValidateMachine` (`#happy path` and `#machine validation fails with no
//! class name`) and `#ValidateMachineClass`, `machine_util_test.go` `#validateNodeTemplate`.

use mcm_api::v1alpha1::{ClassSpec, MachineClass};

use crate::machine::order::{validate_machine, validate_machine_class};
use crate::test_support::machine;
use crate::vocabulary::Retry;

/// `(table, entry, class kind, class name, expected errors)`. Upstream's `field.Error`
/// (`FieldValueRequired`, field `spec.class.name`, detail `Name is required`) prints as
/// `spec.class.name: Required value: Name is required`.
#[allow(clippy::type_complexity)]
const TABLE: &[(&str, &str, &str, &str, &[&str])] = &[
    ("#happy path", "aws", "MachineClass", "aws", &[]),
    (
        "#machine validation fails with no class name",
        "aws",
        "MachineClass",
        "",
        &["spec.class.name: Required value: Name is required"],
    ),
];

#[test]
fn validate_machine_table() {
    for (table, entry, kind, name, expected) in TABLE {
        let mut m = machine("m");
        m.spec.class = Some(ClassSpec {
            api_group: None,
            kind: Some((*kind).to_owned()),
            name: Some((*name).to_owned()),
        });
        assert_eq!(validate_machine(&m), *expected, "{table} / {entry}");
    }
}

fn class(finalizer: bool, template: Option<mcm_api::v1alpha1::NodeTemplate>) -> MachineClass {
    let mut class = MachineClass::new("test-machine-class", serde_json::Value::Null);
    if finalizer {
        class.metadata.finalizers = Some(vec![
            mcm_api::keys::finalizer::MACHINE_CONTROLLER_MANAGER.to_owned(),
        ]);
    }
    class.node_template = template;
    class
}

fn template(capacity: &[&str], region: &str) -> mcm_api::v1alpha1::NodeTemplate {
    mcm_api::v1alpha1::NodeTemplate {
        capacity: capacity
            .iter()
            .map(|name| {
                (
                    (*name).to_owned(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".to_owned()),
                )
            })
            .collect(),
        region: region.to_owned(),
        zone: "test-zone".to_owned(),
        instance_type: "test-instance-type".to_owned(),
        ..mcm_api::v1alpha1::NodeTemplate::default()
    }
}

/// `#ValidateMachineClass` / `##table`: the checks after the class and secret lookups (which are
/// the shell's). "valid machineClass" passes; "machineClass without Finalizer" is refused.
#[test]
fn validate_machine_class_table() {
    assert_eq!(
        validate_machine_class(&class(true, None)),
        Ok(()),
        "valid machineClass"
    );
    assert_eq!(
        validate_machine_class(&class(false, None)),
        Err((
            Retry::Short,
            "The machine class test-machine-class has no finalizers set. So not reconciling the machine."
                .to_owned()
        )),
        "machineClass without Finalizer"
    );
}

/// `#validateNodeTemplate` / `##table`, with upstream's error texts (its error slice printed
/// with `%s`).
#[test]
fn validate_node_template_table() {
    let rows = [
        (
            "MachineClass with proper nodetemplate field",
            template(&["cpu", "gpu", "memory"], "test-region"),
            None,
        ),
        (
            "MachineClass with improper capacity in nodetemplate attribute",
            template(&["gpu", "memory"], "test-region"),
            Some(
                "[MachineClass NodeTemplate Capacity should mandatorily have CPU, GPU and Memory configured]",
            ),
        ),
        (
            "MachineClass with missing region in nodetemplate attribute",
            template(&["cpu", "gpu", "memory"], ""),
            Some("[MachineClass NodeTemplate Instance Type, region and zone cannot be empty]"),
        ),
    ];
    for (entry, node_template, error) in rows {
        let result = validate_machine_class(&class(true, Some(node_template)));
        assert_eq!(
            result,
            error.map_or(Ok(()), |text| Err((Retry::Short, text.to_owned()))),
            "{entry}"
        );
    }
}

/// `#ValidateMachineClass` / `##table` "non-existing machine class": the lookup fails, the pass
/// ends with LongRetry (ours also records a Warning event).
#[test]
fn validate_machine_class_non_existing_class() {
    use crate::vocabulary::EventType;
    let (retry, event) =
        crate::machine::order::machine_class_not_found(&machine("test-machine"), "non-existing");
    assert_eq!(retry, Retry::Long, "non-existing machine class");
    assert_eq!(event.type_, EventType::Warning);
    assert_eq!(event.reason, "MachineClassNotFound");
    assert!(
        event.message.contains("\"non-existing\""),
        "{}",
        event.message
    );
}

/// `#ValidateMachineClass` / `##table` "non-existing secret": the class (with its finalizer)
/// refers to a Secret that does not exist; upstream returns the class, no secret data and no
/// error. Ours: the class passes the checks and the missing Secret adds no data.
#[test]
fn validate_machine_class_non_existing_secret() {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;

    use crate::machine::class::merge_secret_data;

    assert_eq!(validate_machine_class(&class(true, None)), Ok(()));
    let mut data = BTreeMap::new();
    merge_secret_data(&mut data, None);
    assert!(data.is_empty(), "non-existing secret");
    // "valid machineClass" for contrast: the Secret's data is handed on.
    let secret = Secret {
        data: Some(BTreeMap::from([(
            "foo".to_owned(),
            ByteString(b"bar".to_vec()),
        )])),
        ..Secret::default()
    };
    merge_secret_data(&mut data, Some(&secret));
    assert_eq!(
        data,
        BTreeMap::from([("foo".to_owned(), b"bar".to_vec())]),
        "valid machineClass"
    );
}
