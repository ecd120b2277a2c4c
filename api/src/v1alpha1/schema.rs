//! `schema_with` helpers that make the generated OpenAPI schema match the upstream CRDs.
//!
//! k8s-openapi's schemas leave out the list/map-type markers that controller-gen writes (they
//! affect server-side apply merging) and the quantity pattern; embedded `ObjectMeta` and raw
//! extensions need `x-kubernetes-preserve-unknown-fields` so the API server neither prunes them
//! nor rejects the CRD as non-structural.

use k8s_openapi::api::core::v1::{NodeSpec, SecretReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;

/// The pattern controller-gen puts on `resource.Quantity` values.
pub(crate) const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// An object whose content the API server keeps as is (upstream `RawExtension` and embedded
/// `metadata` of templates).
pub(crate) fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// `type: object` without properties: the root `metadata`, validated by the API server itself.
pub(crate) fn plain_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object" })
}

/// An int-or-string in the form controller-gen writes it.
pub(crate) fn int_or_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{ "type": "integer" }, { "type": "string" }],
        "x-kubernetes-int-or-string": true,
    })
}

/// A `core/v1` `ResourceList` (map of quantities) as controller-gen writes it.
pub(crate) fn resource_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "anyOf": [{ "type": "integer" }, { "type": "string" }],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true,
        },
    })
}

fn set_extension(schema: &mut Schema, pointer: &str, key: &str, value: &str) {
    let target = if pointer.is_empty() {
        schema.as_object_mut()
    } else {
        schema.pointer_mut(pointer).and_then(Value::as_object_mut)
    };
    if let Some(object) = target {
        object.insert(key.to_owned(), Value::String(value.to_owned()));
    }
}

/// `metav1.LabelSelector`, atomic as a whole and in its lists.
pub(crate) fn label_selector(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = LabelSelector::json_schema(generator);
    // Inline the requirement schema so the markers below have a place to go whatever the
    // generator's settings are.
    let mut requirement = LabelSelectorRequirement::json_schema(generator);
    set_extension(
        &mut requirement,
        "/properties/values",
        "x-kubernetes-list-type",
        "atomic",
    );
    if let Some(items) = schema.pointer_mut("/properties/matchExpressions/items") {
        *items = requirement.to_value();
    }
    set_extension(
        &mut schema,
        "/properties/matchExpressions",
        "x-kubernetes-list-type",
        "atomic",
    );
    set_extension(&mut schema, "", "x-kubernetes-map-type", "atomic");
    schema
}

/// `core/v1` `SecretReference`, atomic as upstream.
pub(crate) fn secret_reference(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = SecretReference::json_schema(generator);
    set_extension(&mut schema, "", "x-kubernetes-map-type", "atomic");
    schema
}

/// `core/v1` `NodeSpec` with the list types of the Kubernetes API (`podCIDRs` is a set, `taints`
/// atomic).
pub(crate) fn node_spec(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = NodeSpec::json_schema(generator);
    set_extension(
        &mut schema,
        "/properties/podCIDRs",
        "x-kubernetes-list-type",
        "set",
    );
    set_extension(
        &mut schema,
        "/properties/taints",
        "x-kubernetes-list-type",
        "atomic",
    );
    schema
}
