//! CustomResourceDefinitions generated from the Rust types, one function per kind.
//!
//! Each function returns the finished CRD of one kind with the single `v1alpha1` version: what
//! works without our conversion webhook (Gardener seeds, where gardenlet owns the CRDs, and
//! plain installs). [`all_with_conversion`] returns the CRDs serving `v1alpha1` (storage) and
//! `v1beta1`, merged with `kube::core::crd::merge_crds`, with the `spec.conversion` stanza
//! pointing at the conversion webhook. The two versions differ in shape, so a CRD serving both
//! *without* a conversion webhook (strategy `None`) would hand out wrongly shaped objects; that
//! combination is deliberately not offered.
//!
//! The derive's schema is normalised to what controller-gen writes upstream: no `nullable`
//! (upstream has none, so the API server prunes explicit nulls instead of storing them), no
//! `default` (upstream has no defaulting) and int-or-string values as `anyOf: [integer, string]`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceValidation,
    JSONSchemaProps, ServiceReference, WebhookClientConfig, WebhookConversion,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde_json::{Value, json};

use crate::{v1alpha1, v1beta1};

/// Why a CRD could not be produced or written.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The generated schema did not fit the CRD schema type.
    #[error("schema of {kind} is not a valid JSONSchemaProps: {source}")]
    Schema {
        /// Kind whose schema failed.
        kind: &'static str,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// The per-version CRDs of a kind could not be merged.
    #[error("cannot merge the versions of {kind}: {message}")]
    Merge {
        /// Kind whose versions failed to merge.
        kind: &'static str,
        /// The merge error.
        message: String,
    },
    /// The CRD could not be rendered as YAML.
    #[error("cannot render the CRD {name} as YAML: {message}")]
    Yaml {
        /// Name of the CRD.
        name: String,
        /// The renderer's message.
        message: String,
    },
}

/// The CRD of `machines.machine.sapcloud.io`.
pub fn machine() -> Result<CustomResourceDefinition, CrdError> {
    normalised(v1alpha1::Machine::crd(), "Machine")
}

/// The CRD of `machinesets.machine.sapcloud.io`.
pub fn machine_set() -> Result<CustomResourceDefinition, CrdError> {
    normalised(v1alpha1::MachineSet::crd(), "MachineSet")
}

/// The CRD of `machinedeployments.machine.sapcloud.io`.
pub fn machine_deployment() -> Result<CustomResourceDefinition, CrdError> {
    normalised(v1alpha1::MachineDeployment::crd(), "MachineDeployment")
}

/// The CRD of `machineclasses.machine.sapcloud.io` (hand-assembled: the kind has no spec).
pub fn machine_class() -> Result<CustomResourceDefinition, CrdError> {
    let schema = schema_of::<v1alpha1::MachineClass>("MachineClass")?;
    let crd = CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some("machineclasses.machine.sapcloud.io".to_owned()),
            ..ObjectMeta::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: v1alpha1::GROUP.to_owned(),
            names: CustomResourceDefinitionNames {
                kind: "MachineClass".to_owned(),
                plural: "machineclasses".to_owned(),
                singular: Some("machineclass".to_owned()),
                short_names: Some(vec!["mcc".to_owned()]),
                ..CustomResourceDefinitionNames::default()
            },
            scope: "Namespaced".to_owned(),
            versions: vec![CustomResourceDefinitionVersion {
                name: v1alpha1::VERSION.to_owned(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                ..CustomResourceDefinitionVersion::default()
            }],
            ..CustomResourceDefinitionSpec::default()
        },
        status: None,
    };
    normalised(crd, "MachineClass")
}

/// All CRDs of the group, keyed by the upstream file name
/// (`machine.sapcloud.io_<plural>.yaml`), in a fixed order.
pub fn all() -> Result<BTreeMap<String, CustomResourceDefinition>, CrdError> {
    let mut crds = BTreeMap::new();
    for crd in [
        machine_class()?,
        machine_deployment()?,
        machine()?,
        machine_set()?,
    ] {
        crds.insert(file_name(&crd), crd);
    }
    Ok(crds)
}

/// Where the API server sends `ConversionReview`s for the group's CRDs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversionWebhook {
    /// Namespace of the webhook Service.
    pub service_namespace: String,
    /// Name of the webhook Service.
    pub service_name: String,
    /// Path of the conversion endpoint (`/convert`).
    pub path: String,
    /// Service port; `None` means the API server's default 443.
    pub port: Option<i32>,
    /// PEM CA bundle; `None` when it is injected later (cert-manager or self-managed mode).
    pub ca_bundle: Option<Vec<u8>>,
}

impl ConversionWebhook {
    /// The `spec.conversion` stanza for this webhook.
    #[must_use]
    pub fn stanza(&self) -> CustomResourceConversion {
        CustomResourceConversion {
            strategy: "Webhook".to_owned(),
            webhook: Some(WebhookConversion {
                conversion_review_versions: vec!["v1".to_owned()],
                client_config: Some(WebhookClientConfig {
                    ca_bundle: self.ca_bundle.clone().map(ByteString),
                    service: Some(ServiceReference {
                        namespace: self.service_namespace.clone(),
                        name: self.service_name.clone(),
                        path: Some(self.path.clone()),
                        port: self.port,
                    }),
                    url: None,
                }),
            }),
        }
    }
}

/// The CRDs serving `v1alpha1` (storage) and `v1beta1` with a conversion webhook, keyed by file
/// name like [`all`].
pub fn all_with_conversion(
    webhook: &ConversionWebhook,
) -> Result<BTreeMap<String, CustomResourceDefinition>, CrdError> {
    let beta_class = normalised(v1beta1::MachineClass::crd(), "MachineClass")?;
    let merged = [
        merge(machine_class()?, beta_class, "MachineClass")?,
        merge(
            machine_deployment()?,
            normalised(v1beta1::MachineDeployment::crd(), "MachineDeployment")?,
            "MachineDeployment",
        )?,
        merge(
            machine()?,
            normalised(v1beta1::Machine::crd(), "Machine")?,
            "Machine",
        )?,
        merge(
            machine_set()?,
            normalised(v1beta1::MachineSet::crd(), "MachineSet")?,
            "MachineSet",
        )?,
    ];
    let mut crds = BTreeMap::new();
    for mut crd in merged {
        crd.spec.conversion = Some(webhook.stanza());
        crds.insert(file_name(&crd), crd);
    }
    Ok(crds)
}

fn merge(
    alpha: CustomResourceDefinition,
    beta: CustomResourceDefinition,
    kind: &'static str,
) -> Result<CustomResourceDefinition, CrdError> {
    let names = alpha.spec.names.clone();
    let mut crd =
        kube::core::crd::merge_crds(vec![alpha, beta], v1alpha1::VERSION).map_err(|e| {
            CrdError::Merge {
                kind,
                message: e.to_string(),
            }
        })?;
    // The hand-assembled v1alpha1 names (list kind, short names) are the upstream ones.
    crd.spec.names = names;
    Ok(crd)
}

/// The upstream file name of a CRD: `<group>_<plural>.yaml`.
#[must_use]
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// The CRD as a YAML document (starting with `---`, like the upstream files).
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    let body = serde_saphyr::to_string(crd).map_err(|e| CrdError::Yaml {
        name: crd.metadata.name.clone().unwrap_or_default(),
        message: e.to_string(),
    })?;
    Ok(format!("---\n{body}"))
}

/// Generates the schema of a type with the settings kube-derive uses for CRDs.
fn schema_of<T: JsonSchema>(kind: &'static str) -> Result<JSONSchemaProps, CrdError> {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .with_transform(kube::core::schema::OptionalIntOrString)
        .into_generator();
    let schema = generator.into_root_schema_for::<T>().to_value();
    serde_json::from_value(schema).map_err(|source| CrdError::Schema { kind, source })
}

/// Applies the upstream conventions to every version's schema.
fn normalised(
    mut crd: CustomResourceDefinition,
    kind: &'static str,
) -> Result<CustomResourceDefinition, CrdError> {
    if crd.spec.names.list_kind.is_none() {
        crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
    }
    for version in &mut crd.spec.versions {
        let Some(validation) = version.schema.as_mut() else {
            continue;
        };
        let Some(schema) = validation.open_api_v3_schema.take() else {
            continue;
        };
        let mut value =
            serde_json::to_value(schema).map_err(|source| CrdError::Schema { kind, source })?;
        normalise_schema(&mut value);
        add_type_meta_properties(&mut value);
        validation.open_api_v3_schema = Some(
            serde_json::from_value(value).map_err(|source| CrdError::Schema { kind, source })?,
        );
    }
    Ok(crd)
}

/// Declares `apiVersion`, `kind` and `metadata` at the root like controller-gen does (kube-derive
/// leaves them to the API server, which validates them either way).
fn add_type_meta_properties(root: &mut Value) {
    let Some(properties) = root
        .as_object_mut()
        .map(|object| object.entry("properties").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    properties.entry("apiVersion").or_insert_with(|| {
        json!({
            "description": "APIVersion defines the versioned schema of this representation of an object.\nServers should convert recognized schemas to the latest internal value, and\nmay reject unrecognized values.\nMore info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
            "type": "string",
        })
    });
    properties.entry("kind").or_insert_with(|| {
        json!({
            "description": "Kind is a string value representing the REST resource this object represents.\nServers may infer this from the endpoint the client submits requests to.\nCannot be updated.\nIn CamelCase.\nMore info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
            "type": "string",
        })
    });
    // kube-apiserver refuses a CRD whose root `metadata` schema says anything but `type: object`
    // (or name and generateName constraints), even a description: "must not specify anything other
    // than name and generateName, but metadata is implicitly specified".
    properties.insert("metadata".to_owned(), json!({ "type": "object" }));
}

/// Removes `nullable`, `title` and `default` (upstream has none of them) and gives int-or-string
/// schemas the `anyOf` controller-gen writes.
fn normalise_schema(schema: &mut Value) {
    let Value::Object(object) = schema else {
        return;
    };
    object.remove("nullable");
    object.remove("title");
    // Upstream registers no defaulting: a `default` in the schema would make the API server
    // write values Go clients never see written.
    object.remove("default");
    if object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        // kube's structural rewriter hoists the alternatives' types; put them back.
        object.insert(
            "anyOf".to_owned(),
            json!([{ "type": "integer" }, { "type": "string" }]),
        );
    }
    // Recurse only where schemas live: property names, enum values and defaults are data.
    for (key, child) in object.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" => {
                if let Value::Object(properties) = child {
                    properties.values_mut().for_each(normalise_schema);
                }
            }
            "items" | "additionalProperties" | "not" => match child {
                Value::Array(schemas) => schemas.iter_mut().for_each(normalise_schema),
                other => normalise_schema(other),
            },
            "anyOf" | "allOf" | "oneOf" => {
                if let Value::Array(schemas) = child {
                    schemas.iter_mut().for_each(normalise_schema);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_removes_nullable_and_adds_any_of() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "a": { "type": "string", "nullable": true },
                "b": { "x-kubernetes-int-or-string": true, "nullable": true },
                "c": { "type": "array", "items": { "type": "object", "nullable": true } },
                "d": { "type": "string", "enum": [{ "nullable": true }] },
                "title": { "type": "string", "title": "x" },
            },
            "title": "Root",
        });
        normalise_schema(&mut schema);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "a": { "type": "string" },
                    "b": {
                        "x-kubernetes-int-or-string": true,
                        "anyOf": [{ "type": "integer" }, { "type": "string" }],
                    },
                    "c": { "type": "array", "items": { "type": "object" } },
                    "d": { "type": "string", "enum": [{ "nullable": true }] },
                    "title": { "type": "string" },
                },
            })
        );
    }

    #[test]
    fn conversion_crds_serve_both_versions_with_v1alpha1_stored() {
        let webhook = ConversionWebhook {
            service_namespace: "mcm".to_owned(),
            service_name: "mcm-webhook".to_owned(),
            path: "/convert".to_owned(),
            port: Some(443),
            ca_bundle: None,
        };
        let crds = all_with_conversion(&webhook).unwrap();
        assert_eq!(
            crds.keys().collect::<Vec<_>>(),
            all().unwrap().keys().collect::<Vec<_>>()
        );
        for crd in crds.values() {
            let versions: Vec<_> = crd
                .spec
                .versions
                .iter()
                .map(|v| (v.name.as_str(), v.served, v.storage))
                .collect();
            assert_eq!(
                versions,
                [("v1alpha1", true, true), ("v1beta1", true, false)]
            );
            let value = serde_json::to_value(&crd.spec.conversion).unwrap();
            assert_eq!(
                value,
                json!({
                    "strategy": "Webhook",
                    "webhook": {
                        "conversionReviewVersions": ["v1"],
                        "clientConfig": { "service": { "namespace": "mcm", "name": "mcm-webhook", "path": "/convert", "port": 443 } },
                    },
                })
            );
        }
        // The served-by-default CRDs stay single-version without conversion.
        for crd in all().unwrap().values() {
            assert_eq!(crd.spec.versions.len(), 1);
            assert!(crd.spec.conversion.is_none());
        }
        // v1beta1 MachineClass has its provider fields under spec.
        let class = &crds["machine.sapcloud.io_machineclasses.yaml"];
        let beta = serde_json::to_value(&class.spec.versions[1].schema).unwrap();
        assert!(
            beta.pointer("/openAPIV3Schema/properties/spec/properties/providerSpec")
                .is_some()
        );
    }

    #[test]
    fn file_names_follow_upstream() {
        let names: Vec<String> = all().unwrap().into_keys().collect();
        assert_eq!(
            names,
            [
                "machine.sapcloud.io_machineclasses.yaml",
                "machine.sapcloud.io_machinedeployments.yaml",
                "machine.sapcloud.io_machines.yaml",
                "machine.sapcloud.io_machinesets.yaml",
            ]
        );
    }
}
