//! `machine_test.go` `#ValidateMachine` (`#happy path` and `#machine validation fails with no
//! class name`).

use mcm_api::v1alpha1::ClassSpec;

use crate::machine::plan::order::validate_machine;
use crate::machine::plan::test_support::machine;

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
