//! Errors answered to clients as Kubernetes `Status` objects, worded like kube-apiserver's.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

/// An API error: always answered as a `metav1.Status` with the matching HTTP code.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Status reason (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, ...).
    pub reason: String,
    /// Human readable message.
    pub message: String,
    /// Optional `details` object.
    pub details: Option<Value>,
}

/// Result alias for request handling.
pub type ApiResult<T> = Result<T, ApiError>;

/// Identifies an object in error details: group, kind (or resource) and name.
#[derive(Debug, Clone, Copy)]
pub struct ErrTarget<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Plural resource name, used in messages as `resource.group`.
    pub resource: &'a str,
    /// Object name.
    pub name: &'a str,
}

impl ErrTarget<'_> {
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
    fn details(&self) -> Value {
        json!({"name": self.name, "group": self.group, "kind": self.resource})
    }
}

impl ApiError {
    /// A plain error with code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }
    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    /// 404 for an unknown URL or resource type.
    pub fn not_found_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }
    /// 404 for a missing object, worded as kube-apiserver: `pods "x" not found`.
    pub fn not_found(t: ErrTarget<'_>) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", t.qualified(), t.name),
        );
        e.details = Some(t.details());
        e
    }
    /// 404 for a missing namespace.
    pub fn namespace_not_found(ns: &str) -> Self {
        let t = ErrTarget {
            group: "",
            resource: "namespaces",
            name: ns,
        };
        Self::not_found(t)
    }
    /// 409 AlreadyExists.
    pub fn already_exists(t: ErrTarget<'_>) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", t.qualified(), t.name),
        );
        e.details = Some(t.details());
        e
    }
    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(t: ErrTarget<'_>) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                t.qualified(),
                t.name
            ),
        );
        e.details = Some(t.details());
        e
    }
    /// 422 Invalid with field causes, worded as kube-apiserver.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: &[Cause]) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let list: Vec<String> = causes.iter().map(|c| c.render()).collect();
        let joined = if list.len() == 1 {
            list.join("")
        } else {
            format!("[{}]", list.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {joined}"),
        );
        e.details = Some(json!({
            "name": name, "group": group, "kind": kind,
            "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message_body(), "field": c.field})).collect::<Vec<_>>()
        }));
        e
    }
    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }
    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {ct:?})"
            ),
        )
    }
    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }
    /// The Status object for this error.
    pub fn status_body(&self) -> Value {
        let mut v = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

/// One field error (a `StatusCause`).
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, `FieldValueForbidden`, ...
    pub reason: String,
    /// Field path such as `spec.replicas`.
    pub field: String,
    /// Detail text (without the field prefix).
    pub detail: String,
    /// The offending value, rendered as JSON, when the error is about a value.
    pub value: Option<String>,
}

impl Cause {
    fn label(&self) -> &'static str {
        match self.reason.as_str() {
            "FieldValueRequired" => "Required value",
            "FieldValueNotSupported" => "Unsupported value",
            "FieldValueForbidden" => "Forbidden",
            "FieldValueDuplicate" => "Duplicate value",
            "FieldValueTooLong" => "Too long",
            "FieldValueTypeInvalid" => "Invalid value",
            _ => "Invalid value",
        }
    }
    /// The cause's message as kube-apiserver puts it in `details.causes[].message`.
    pub fn message_body(&self) -> String {
        let mut s = self.label().to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
    /// `field: message`, the form used in the top-level message.
    pub fn render(&self) -> String {
        format!("{}: {}", self.field, self.message_body())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.status_body().to_string();
        (
            code,
            [(http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn invalid_message_matches_kube_wording() {
        let c = Cause {
            reason: "FieldValueInvalid".into(),
            field: "spec.replicas".into(),
            detail: "spec.replicas in body must be of type integer: \"string\"".into(),
            value: Some("\"x\"".into()),
        };
        let e = ApiError::invalid("Machine", "machine.sapcloud.io", "m1", &[c]);
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "Machine.machine.sapcloud.io \"m1\" is invalid: spec.replicas: Invalid value: \"x\": spec.replicas in body must be of type integer: \"string\""
        );
        let body = e.status_body();
        assert_eq!(body["details"]["causes"][0]["field"], "spec.replicas");
        assert_eq!(body["reason"], "Invalid");
    }

    #[test]
    fn not_found_wording() {
        let e = ApiError::not_found(ErrTarget {
            group: "",
            resource: "pods",
            name: "p",
        });
        assert_eq!(e.message, "pods \"p\" not found");
        let e = ApiError::conflict(ErrTarget {
            group: "apps",
            resource: "deployments",
            name: "d",
        });
        assert!(
            e.message
                .starts_with("Operation cannot be fulfilled on deployments.apps \"d\"")
        );
    }
}
