//! `ConversionReview` handling: JSON objects in, JSON objects out.
//!
//! Each object is decoded in its own version, converted through the hub and encoded in the
//! desired version. The API server accepts changes only to `apiVersion`, labels and annotations,
//! so the original `metadata` is kept byte for byte and only its labels and annotations are taken
//! from the converted object. Objects without a spec (the API server sends such partial objects,
//! e.g. when converting managed fields) only get their `apiVersion` changed. Objects already in
//! the desired version are returned untouched. The order of objects is kept.

use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use kube::core::response::{Status, StatusSummary};
use mcm_api::{v1alpha1, v1beta1};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::spoke::Spoke;

/// The API group every convertible kind belongs to.
pub const GROUP: &str = "machine.sapcloud.io";

/// Why an object (or a review) could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// The object is not a JSON object or lacks `apiVersion`/`kind`.
    #[error("object #{index} is not a Kubernetes object: {reason}")]
    NotAnObject {
        /// Position of the object in the request.
        index: usize,
        /// What is missing.
        reason: &'static str,
    },
    /// The version (source or desired) is not one we serve.
    #[error(
        "unsupported apiVersion {api_version:?} for {kind} (served: machine.sapcloud.io/v1alpha1, machine.sapcloud.io/v1beta1)"
    )]
    UnsupportedVersion {
        /// The offending apiVersion.
        api_version: String,
        /// Kind of the object.
        kind: String,
    },
    /// The kind does not belong to this webhook.
    #[error("unsupported kind {kind:?}")]
    UnsupportedKind {
        /// The offending kind.
        kind: String,
    },
    /// The object does not decode as its version's type.
    #[error("cannot decode {kind} {name:?} as {api_version}: {source}")]
    Decode {
        /// Kind of the object.
        kind: String,
        /// Name of the object.
        name: String,
        /// Its apiVersion.
        api_version: String,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// The converted object could not be encoded.
    #[error("cannot encode {kind} {name:?}: {source}")]
    Encode {
        /// Kind of the object.
        kind: String,
        /// Name of the object.
        name: String,
        /// The encoding error.
        #[source]
        source: serde_json::Error,
    },
}

/// Served versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    Alpha,
    Beta,
}

fn parse_version(api_version: &str, kind: &str) -> Result<Version, ConversionError> {
    match api_version {
        v1alpha1::API_VERSION => Ok(Version::Alpha),
        v1beta1::API_VERSION => Ok(Version::Beta),
        _ => Err(ConversionError::UnsupportedVersion {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        }),
    }
}

/// Answers a whole review. Never panics; a malformed review gets a `Failure` response.
#[must_use]
pub fn convert_review(review: ConversionReview) -> ConversionReview {
    let mut request = match ConversionRequest::from_review(review) {
        Ok(request) => request,
        Err(_) => {
            return ConversionResponse::invalid(failure("ConversionReview has no request"))
                .into_review();
        }
    };
    let desired = request.desired_api_version.clone();
    // Objects are converted by value: no copy of each object besides its metadata.
    let objects = std::mem::take(&mut request.objects);
    let mut converted = Vec::with_capacity(objects.len());
    for (index, object) in objects.into_iter().enumerate() {
        match convert_owned(index, object, &desired) {
            Ok(object) => converted.push(object),
            Err(error) => {
                return ConversionResponse::for_request(request)
                    .failure(failure(&error.to_string()))
                    .into_review();
            }
        }
    }
    ConversionResponse::for_request(request)
        .success(converted)
        .into_review()
}

fn failure(message: &str) -> Status {
    Status {
        status: Some(StatusSummary::Failure),
        code: 0,
        message: message.to_owned(),
        metadata: None,
        reason: String::new(),
        details: None,
    }
}

/// Converts one object (at position `index` of the request) to `desired_api_version`.
pub fn convert_object(
    index: usize,
    object: &Value,
    desired_api_version: &str,
) -> Result<Value, ConversionError> {
    convert_owned(index, object.clone(), desired_api_version)
}

fn convert_owned(
    index: usize,
    object: Value,
    desired_api_version: &str,
) -> Result<Value, ConversionError> {
    let Value::Object(mut fields) = object else {
        return Err(ConversionError::NotAnObject {
            index,
            reason: "not a JSON object",
        });
    };
    let api_version =
        fields
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or(ConversionError::NotAnObject {
                index,
                reason: "no apiVersion",
            })?;
    let kind = fields
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(ConversionError::NotAnObject {
            index,
            reason: "no kind",
        })?;
    let from = parse_version(api_version, kind)?;
    let to = parse_version(desired_api_version, kind)?;
    if !matches!(
        kind,
        "Machine" | "MachineSet" | "MachineDeployment" | "MachineClass"
    ) {
        return Err(ConversionError::UnsupportedKind {
            kind: kind.to_owned(),
        });
    }
    if from == to {
        return Ok(Value::Object(fields));
    }
    let kind = kind.to_owned();
    let kind = kind.as_str();
    if !has_spec(kind, from, &fields) {
        fields.insert(
            "apiVersion".to_owned(),
            Value::String(desired_api_version.to_owned()),
        );
        return Ok(Value::Object(fields));
    }
    let original_metadata = fields.get("metadata").cloned();
    let converted = match (kind, from) {
        ("Machine", Version::Alpha) => via_hub::<v1alpha1::Machine, v1beta1::Machine>(fields, kind),
        ("Machine", Version::Beta) => via_hub::<v1beta1::Machine, v1alpha1::Machine>(fields, kind),
        ("MachineSet", Version::Alpha) => {
            via_hub::<v1alpha1::MachineSet, v1beta1::MachineSet>(fields, kind)
        }
        ("MachineSet", Version::Beta) => {
            via_hub::<v1beta1::MachineSet, v1alpha1::MachineSet>(fields, kind)
        }
        ("MachineDeployment", Version::Alpha) => {
            via_hub::<v1alpha1::MachineDeployment, v1beta1::MachineDeployment>(fields, kind)
        }
        ("MachineDeployment", Version::Beta) => {
            via_hub::<v1beta1::MachineDeployment, v1alpha1::MachineDeployment>(fields, kind)
        }
        ("MachineClass", Version::Alpha) => {
            via_hub::<v1alpha1::MachineClass, v1beta1::MachineClass>(fields, kind)
        }
        _ => via_hub::<v1beta1::MachineClass, v1alpha1::MachineClass>(fields, kind),
    }?;
    Ok(with_original_metadata(
        original_metadata,
        converted,
        desired_api_version,
        kind,
    ))
}

/// v1alpha1 MachineClass fields that live under `spec` in v1beta1.
const ALPHA_CLASS_SPEC_FIELDS: &[&str] = &[
    "nodeTemplate",
    "credentialsSecretRef",
    "providerSpec",
    "provider",
    "secretRef",
];

fn has_spec(kind: &str, version: Version, fields: &Map<String, Value>) -> bool {
    if kind == "MachineClass" && version == Version::Alpha {
        return ALPHA_CLASS_SPEC_FIELDS
            .iter()
            .any(|field| fields.contains_key(*field));
    }
    fields.contains_key("spec") || fields.contains_key("status")
}

fn via_hub<From, To>(fields: Map<String, Value>, kind: &str) -> Result<Value, ConversionError>
where
    From: Spoke + DeserializeOwned,
    To: Spoke<Hub = From::Hub> + Serialize,
{
    let name = fields
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut input = fields;
    // Partial objects: a status without spec, or a v1alpha1 class without providerSpec, still
    // convert; the types need these members.
    if kind == "MachineClass" {
        input
            .entry("providerSpec")
            .or_insert_with(|| Value::Object(Map::new()));
    } else if kind == "MachineDeployment" {
        let spec = input
            .entry("spec")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(spec) = spec.as_object_mut() {
            spec.entry("template")
                .or_insert_with(|| Value::Object(Map::new()));
        }
    } else {
        input
            .entry("spec")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    let api_version = input
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let typed: From =
        serde_json::from_value(Value::Object(input)).map_err(|source| ConversionError::Decode {
            kind: kind.to_owned(),
            name: name.clone(),
            api_version,
            source,
        })?;
    let hub = typed.into_hub();
    serde_json::to_value(To::from_hub(&hub)).map_err(|source| ConversionError::Encode {
        kind: kind.to_owned(),
        name,
        source,
    })
}

/// The converted object with the original `metadata`, except labels and annotations.
fn with_original_metadata(
    original_metadata: Option<Value>,
    converted: Value,
    desired_api_version: &str,
    kind: &str,
) -> Value {
    let Value::Object(mut out) = converted else {
        return converted;
    };
    let had_metadata = original_metadata.is_some();
    let mut metadata = match original_metadata {
        Some(Value::Object(metadata)) => metadata,
        _ => Map::new(),
    };
    // The converted metadata is replaced below, so its labels and annotations are moved, not
    // copied (it stays in place so the member order of `out` does not change).
    let mut converted_meta = out.get_mut("metadata").and_then(Value::as_object_mut);
    for key in ["labels", "annotations"] {
        match converted_meta.as_mut().and_then(|m| m.remove(key)) {
            Some(value) => {
                metadata.insert(key.to_owned(), value);
            }
            None => {
                metadata.remove(key);
            }
        }
    }
    if had_metadata || !metadata.is_empty() {
        out.insert("metadata".to_owned(), Value::Object(metadata));
    } else {
        out.remove("metadata");
    }
    out.insert(
        "apiVersion".to_owned(),
        Value::String(desired_api_version.to_owned()),
    );
    out.insert("kind".to_owned(), Value::String(kind.to_owned()));
    Value::Object(out)
}
