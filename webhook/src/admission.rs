//! AdmissionReview handling: decode the request, take the fast paths of docs/behaviour.md#admission-fast-paths, decode the object
//! leniently into the hub ([`crate::decode`]: a field of the wrong type is one more field
//! error), run the rules, ratchet, and build the `AdmissionReview` response.
//!
//! Pure: bytes in, JSON out. Every answer is a 200-able `AdmissionReview` (policy decisions are
//! never HTTP errors). Malformed reviews are answered with `allowed: false` and code 400.
//! Denials are 422 `Invalid` with one `StatusCause` per field error, which kubectl prints as a
//! list. The patch of a mutation is base64 in the JSON, as Kubernetes documents it.

use base64::Engine as _;
use mcm_api::{v1alpha1, v1beta1};
use mcm_conversion::Spoke;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::field::{FieldError, invalid_message};
use crate::request::{Context, Operation};
use crate::validation::{self, Report};
use crate::{decode, defaulting, paths, ratchet};

pub use crate::request::{Action, GROUP, Kind, Version};

/// The answer to one review, with what the server needs for logs and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The `AdmissionReview` to send back.
    pub review: Value,
    /// Whether the request was allowed.
    pub allowed: bool,
    /// Rules that denied the request (one entry per field error).
    pub denied_by: Vec<&'static str>,
    /// Whether a patch was returned.
    pub patched: bool,
    /// `request.dryRun`.
    pub dry_run: bool,
    /// Name of the object, for logs.
    pub name: String,
}

struct Request<'a> {
    uid: &'a str,
    api_version: &'a str,
    version: Version,
    operation: Operation,
    object: &'a Value,
    old_object: Option<&'a Value>,
    username: &'a str,
    dry_run: bool,
    name: String,
}

/// Answers an AdmissionReview body for `kind` and `action`. Never panics on any input.
#[must_use]
pub fn review(kind: Kind, action: Action, body: &[u8]) -> Answer {
    let parsed: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => return bad_request("admission.k8s.io/v1", "", &format!("body is not JSON: {e}")),
    };
    let api_version = parsed
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("admission.k8s.io/v1");
    let Some(request) = parsed.get("request") else {
        return bad_request(api_version, "", "AdmissionReview has no request");
    };
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let request = match decode_request(kind, api_version, uid, request) {
        Ok(Some(request)) => request,
        Ok(None) => return allow(api_version, uid, Vec::new(), None, false, String::new()),
        Err(message) => return bad_request(api_version, uid, &message),
    };
    match action {
        Action::Validate => validate(kind, &request),
        Action::Mutate => mutate(kind, &request),
    }
}

/// `Ok(None)` for operations we never judge (DELETE, CONNECT).
fn decode_request<'a>(
    kind: Kind,
    api_version: &'a str,
    uid: &'a str,
    request: &'a Value,
) -> Result<Option<Request<'a>>, String> {
    if uid.is_empty() {
        return Err("request.uid is missing".to_owned());
    }
    let gvk = request.get("kind").ok_or("request.kind is missing")?;
    let group = gvk.get("group").and_then(Value::as_str).unwrap_or_default();
    let request_kind = gvk.get("kind").and_then(Value::as_str).unwrap_or_default();
    if group != GROUP || request_kind != kind.name() {
        return Err(format!(
            "this endpoint serves {}.{GROUP}, not {request_kind}.{group}",
            kind.name()
        ));
    }
    let version = match gvk.get("version").and_then(Value::as_str) {
        Some("v1alpha1") => Version::V1alpha1,
        Some("v1beta1") => Version::V1beta1,
        other => return Err(format!("unsupported version {other:?} of {}", kind.name())),
    };
    let operation = match request.get("operation").and_then(Value::as_str) {
        Some("CREATE") => Operation::Create,
        Some("UPDATE") => Operation::Update,
        Some("DELETE" | "CONNECT") => return Ok(None),
        other => return Err(format!("unsupported operation {other:?}")),
    };
    let object = request
        .get("object")
        .filter(|o| o.is_object())
        .ok_or("request.object is missing")?;
    let old_object = request.get("oldObject").filter(|o| o.is_object());
    if operation == Operation::Update && old_object.is_none() {
        return Err("request.oldObject is missing on UPDATE".to_owned());
    }
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .or_else(|| request.get("name").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    Ok(Some(Request {
        uid,
        api_version,
        version,
        operation,
        object,
        old_object,
        username: request
            .pointer("/userInfo/username")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        dry_run: request
            .get("dryRun")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        name,
    }))
}

/// The conversion-data annotation of `object`, if any.
fn conversion_data(object: &Value) -> Option<&Value> {
    object
        .get("metadata")?
        .get("annotations")?
        .get(mcm_api::keys::annotation::CONVERSION_DATA)
}

/// Whether the part of the object that the spec-unchanged fast path compares is equal in `old`
/// and `new` (compared in place: no copy of either object).
fn spec_unchanged(kind: Kind, version: Version, old: &Value, new: &Value) -> bool {
    if kind == Kind::MachineClass && version == Version::V1alpha1 {
        // v1alpha1 classes keep their spec at the top level.
        return [
            "nodeTemplate",
            "credentialsSecretRef",
            "providerSpec",
            "provider",
            "secretRef",
        ]
        .iter()
        .all(|field| old.get(*field) == new.get(*field));
    }
    // A missing spec compares equal to `"spec": null`.
    old.get("spec").unwrap_or(&Value::Null) == new.get("spec").unwrap_or(&Value::Null)
}

fn validate(kind: Kind, request: &Request<'_>) -> Answer {
    let mut warnings = Vec::new();
    if let Some(old) = request.old_object
        && conversion_data(old) != conversion_data(request.object)
    {
        warnings.push(
            "machine.sapcloud.io/conversion-data is written by the conversion webhook; do not edit it"
                .to_owned(),
        );
    }
    let allow_now = |warnings: Vec<String>| {
        allow(
            request.api_version,
            request.uid,
            warnings,
            None,
            request.dry_run,
            request.name.clone(),
        )
    };
    // docs/behaviour.md#admission-fast-paths: terminating objects and spec-unchanged updates always pass.
    if request
        .object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return allow_now(Vec::new());
    }
    if let Some(old) = request.old_object
        && spec_unchanged(kind, request.version, old, request.object)
    {
        return allow_now(warnings);
    }
    let context = Context {
        operation: request.operation,
        username: request.username,
    };
    let report = match run_rules(
        kind,
        request.version,
        request.object,
        request.old_object,
        &context,
    ) {
        Ok(report) => report,
        Err(message) => return bad_request(request.api_version, request.uid, &message),
    };
    let mut report = report;
    for warning in warnings {
        report.warn(warning);
    }
    if let Some(old) = request.old_object {
        // Errors the old object already had on unchanged fields do not block the update.
        let old_context = Context {
            operation: Operation::Create,
            username: request.username,
        };
        let old_errors = run_rules(kind, request.version, old, None, &old_context)
            .map(|r| r.field_errors())
            .unwrap_or_default();
        report.errors = ratchet::ratchet(report.errors, &old_errors, request.object, old);
    }
    if report.errors.is_empty() {
        return allow(
            request.api_version,
            request.uid,
            report.warnings,
            None,
            request.dry_run,
            request.name.clone(),
        );
    }
    deny_invalid(kind, request, report)
}

/// Decodes the object(s) in their version, converts them to the hub and runs the rules; field
/// paths come back in the request's version, decoding errors first (rule `decode`).
fn run_rules(
    kind: Kind,
    version: Version,
    object: &Value,
    old: Option<&Value>,
    context: &Context<'_>,
) -> Result<Report, String> {
    let judged = match (kind, version) {
        (Kind::Machine, Version::V1alpha1) => {
            judge::<v1alpha1::Machine>(object, old, context, validation::machine)
        }
        (Kind::Machine, Version::V1beta1) => {
            judge::<v1beta1::Machine>(object, old, context, validation::machine)
        }
        (Kind::MachineSet, Version::V1alpha1) => {
            judge::<v1alpha1::MachineSet>(object, old, context, validation::machine_set)
        }
        (Kind::MachineSet, Version::V1beta1) => {
            judge::<v1beta1::MachineSet>(object, old, context, validation::machine_set)
        }
        (Kind::MachineDeployment, Version::V1alpha1) => judge::<v1alpha1::MachineDeployment>(
            object,
            old,
            context,
            validation::machine_deployment,
        ),
        (Kind::MachineDeployment, Version::V1beta1) => judge::<v1beta1::MachineDeployment>(
            object,
            old,
            context,
            validation::machine_deployment,
        ),
        (Kind::MachineClass, Version::V1alpha1) => {
            judge::<v1alpha1::MachineClass>(object, old, context, validation::machine_class)
        }
        (Kind::MachineClass, Version::V1beta1) => {
            judge::<v1beta1::MachineClass>(object, old, context, validation::machine_class)
        }
    }?;
    let (mut report, decode_errors) = judged;
    for (_, error) in &mut report.errors {
        error.field = paths::for_version(kind, version, &error.field);
    }
    // A field that did not decode was judged as absent; what the rules say about its absence
    // would only repeat the decoding error.
    report.errors.retain(|(_, error)| {
        !decode_errors
            .iter()
            .any(|bad| within(&error.field, &bad.field))
    });
    // Decoding comes first, so its errors are listed first.
    let rules_errors = std::mem::take(&mut report.errors);
    for error in decode_errors {
        report.error("decode", error);
    }
    report.errors.extend(rules_errors);
    Ok(report)
}

/// Decodes the object(s) leniently and runs the rules on what decodes. Returns the rules' report
/// (paths in the hub's shape) and the decoding errors (paths already in the request's shape).
fn judge<S>(
    object: &Value,
    old: Option<&Value>,
    context: &Context<'_>,
    rules: fn(&S::Hub, Option<&S::Hub>, &Context<'_>) -> Report,
) -> Result<(Report, Vec<FieldError>), String>
where
    S: Spoke + DeserializeOwned,
{
    let new = decode::lenient::<S>(object)?;
    // An old object that no longer decodes must not block fixing it: its good part is enough.
    let old = old
        .and_then(|o| decode::lenient::<S>(o).ok())
        .and_then(|decoded| decoded.value)
        .map(Spoke::into_hub);
    let report = match new.value {
        Some(value) => rules(&value.into_hub(), old.as_ref(), context),
        // A required member is missing: only the decoding errors can be told.
        None => Report::default(),
    };
    Ok((report, new.errors))
}

/// Whether `field` is `prefix` or a field inside it.
fn within(field: &str, prefix: &str) -> bool {
    field
        .strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

fn mutate(kind: Kind, request: &Request<'_>) -> Answer {
    let patch = (kind == Kind::MachineDeployment && request.operation == Operation::Create)
        .then(|| defaulting::machine_deployment(request.object, request.version))
        .filter(|patch| !patch.0.is_empty());
    allow(
        request.api_version,
        request.uid,
        Vec::new(),
        patch,
        request.dry_run,
        request.name.clone(),
    )
}

fn allow(
    api_version: &str,
    uid: &str,
    warnings: Vec<String>,
    patch: Option<json_patch::Patch>,
    dry_run: bool,
    name: String,
) -> Answer {
    let mut response = json!({ "uid": uid, "allowed": true });
    let patched = patch.is_some();
    if let Some(patch) = patch {
        let bytes = serde_json::to_vec(&patch).unwrap_or_default();
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    Answer {
        review: wrap(api_version, response),
        allowed: true,
        denied_by: Vec::new(),
        patched,
        dry_run,
        name,
    }
}

fn deny_invalid(kind: Kind, request: &Request<'_>, report: Report) -> Answer {
    let errors: Vec<FieldError> = report.field_errors();
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({ "reason": e.reason(), "message": e.body(), "field": e.field }))
        .collect();
    let mut response = json!({
        "uid": request.uid,
        "allowed": false,
        "status": {
            "metadata": {},
            "status": "Failure",
            "message": invalid_message(kind.name(), GROUP, &request.name, &errors),
            "reason": "Invalid",
            "details": { "name": request.name, "group": GROUP, "kind": kind.name(), "causes": causes },
            "code": 422,
        },
    });
    if !report.warnings.is_empty() {
        response["warnings"] = json!(report.warnings);
    }
    Answer {
        review: wrap(request.api_version, response),
        allowed: false,
        denied_by: report.errors.iter().map(|(rule, _)| *rule).collect(),
        patched: false,
        dry_run: request.dry_run,
        name: request.name.clone(),
    }
}

fn bad_request(api_version: &str, uid: &str, message: &str) -> Answer {
    let response = json!({
        "uid": uid,
        "allowed": false,
        "status": { "metadata": {}, "status": "Failure", "message": message, "reason": "BadRequest", "code": 400 },
    });
    Answer {
        review: wrap(api_version, response),
        allowed: false,
        denied_by: vec!["bad-request"],
        patched: false,
        dry_run: false,
        name: String::new(),
    }
}

fn wrap(api_version: &str, response: Value) -> Value {
    json!({ "apiVersion": api_version, "kind": "AdmissionReview", "response": response })
}
