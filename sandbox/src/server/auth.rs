//! Authentication and authorization of requests, and the endpoints that expose them: access
//! reviews (`kubectl auth can-i`) and the ServiceAccount TokenRequest subresource.

use super::common::*;
use crate::authn::{Authn, User};
use crate::error::{ApiError, ApiResult};
use crate::faults::Verb;
use crate::rbac::{self, Attributes};
use crate::resource_path::ResourcePath;
use crate::state::AppState;
use axum::response::Response;
use http::{HeaderMap, Method};
use serde_json::{Value, json};

/// The client certificate user of a TLS connection, put into request extensions by the server.
#[derive(Debug, Clone)]
pub struct PeerUser(pub User);

/// Paths kube-apiserver serves to unauthenticated clients (`system:public-info-viewer`).
fn public_path(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/livez" | "/readyz" | "/version" | "/version/"
    ) || ["/healthz/", "/livez/", "/readyz/"]
        .iter()
        .any(|p| path.starts_with(p))
}

fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// Who is asking, and whether a credential identified them. With authorization off, anything
/// that is not a valid credential is the admin (the sandbox's behaviour before authentication
/// existed, which tests rely on) and `false` says so, so the request record can fall back to the
/// bearer token as the name (see [`crate::requesters`]).
pub(super) fn authenticate(
    state: &AppState,
    path: &str,
    headers: &HeaderMap,
    peer: Option<&PeerUser>,
) -> ApiResult<(User, bool)> {
    let header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let result = state
        .authn
        .authenticate(&state.store, header, peer.map(|p| &p.0));
    match result {
        Authn::User(u) if state.authorization => Ok((impersonate(state, u, headers)?, true)),
        Authn::User(u) => Ok((u, true)),
        _ if !state.authorization => Ok((User::admin(), false)),
        Authn::Anonymous if public_path(path) => Ok((
            User {
                name: "system:anonymous".into(),
                groups: vec!["system:unauthenticated".into()],
            },
            false,
        )),
        Authn::Anonymous | Authn::Invalid => {
            tracing::debug!(path, "unauthenticated request refused");
            Err(unauthorized())
        }
    }
}

/// kube's impersonation (`kubectl --as`, `--as-group`): the requester needs `impersonate` on the
/// users (and groups) it names; the request then runs as that user.
fn impersonate(state: &AppState, user: User, headers: &HeaderMap) -> ApiResult<User> {
    let Some(name) = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(user);
    };
    let groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    let check = |resource: &str, target: &str| Attributes {
        verb: "impersonate".into(),
        resource_request: true,
        resource: resource.into(),
        name: target.into(),
        ..Default::default()
    };
    authorize(state, &user, &check("users", name))?;
    for g in &groups {
        authorize(state, &user, &check("groups", g))?;
    }
    Ok(User::new(name, groups))
}

/// 403 unless RBAC allows the request; denials are counted per user.
pub(super) fn authorize(state: &AppState, user: &User, a: &Attributes) -> ApiResult<()> {
    if !state.authorization || rbac::allowed(&state.store, user, a) {
        return Ok(());
    }
    state.denials.record(&user.name);
    let message = a.forbidden_message(&user.name);
    tracing::info!(user = %user.name, %message, "forbidden");
    let mut e = ApiError::new(403, "Forbidden", message);
    e.details = Some(a.forbidden_details());
    Err(e)
}

/// Attributes of a non-resource request (discovery, OpenAPI, health).
pub(super) fn path_attributes(method: &Method, path: &str) -> Attributes {
    Attributes {
        verb: method.as_str().to_ascii_lowercase(),
        path: path.to_string(),
        ..Default::default()
    }
}

/// Attributes of a resource request, as kube's RequestInfo derives them.
pub(super) fn resource_attributes(rp: &ResourcePath, verb: Verb) -> Attributes {
    // `/api/v1/namespaces/{ns}` is a request in namespace {ns} (RequestInfo sets it), so a
    // RoleBinding there can grant access to the Namespace object itself.
    let namespace = match (
        &rp.namespace,
        rp.group.is_empty() && rp.resource == "namespaces",
    ) {
        (Some(ns), _) => ns.clone(),
        (None, true) => rp.name.clone().unwrap_or_default(),
        (None, false) => String::new(),
    };
    Attributes {
        // The fault counters' verb names are kube's RBAC verbs.
        verb: verb.to_string(),
        resource_request: true,
        group: rp.group.clone(),
        resource: rp.resource.clone(),
        subresource: rp.sub.clone().unwrap_or_default(),
        name: rp.name.clone().unwrap_or_default(),
        namespace,
        path: String::new(),
    }
}

fn str_at(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// SelfSubjectAccessReview and SubjectAccessReview (201 with `status.allowed`).
pub(super) async fn access_review(ctx: &Ctx<'_>, mut review: Value) -> ApiResult<Response> {
    if !review.is_object() {
        return Err(ApiError::bad_request("the review must be a JSON object"));
    }
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    let user = if ctx.def.plural == "selfsubjectaccessreviews" {
        ctx.user.clone()
    } else {
        let name = str_at(&spec, "user");
        let groups: Vec<String> = spec
            .get("groups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|g| g.as_str().map(str::to_string))
            .collect();
        if name.is_empty() && groups.is_empty() {
            return Err(ApiError::new(
                422,
                "Invalid",
                "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified",
            ));
        }
        // A SubjectAccessReview evaluates exactly the groups given (kube adds none).
        User { name, groups }
    };
    let attrs = if let Some(r) = spec.get("resourceAttributes") {
        Attributes {
            verb: str_at(r, "verb"),
            resource_request: true,
            group: str_at(r, "group"),
            resource: str_at(r, "resource"),
            subresource: str_at(r, "subresource"),
            name: str_at(r, "name"),
            namespace: str_at(r, "namespace"),
            path: String::new(),
        }
    } else if let Some(n) = spec.get("nonResourceAttributes") {
        Attributes {
            verb: str_at(n, "verb"),
            path: str_at(n, "path"),
            ..Default::default()
        }
    } else {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "{}.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
                ctx.def.kind
            ),
        ));
    };
    let allowed = rbac::allowed(&ctx.state.store, &user, &attrs);
    review["status"] = if allowed {
        json!({"allowed": true, "reason": "allowed by RBAC"})
    } else {
        json!({"allowed": false})
    };
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!(ctx.def.kind);
    if review.get("metadata").is_none() {
        review["metadata"] = json!({});
    }
    Ok(json_response(201, &review, &[]))
}

/// The TokenRequest subresource of ServiceAccounts.
pub(super) async fn token_request(ctx: &Ctx<'_>, mut req: Value) -> ApiResult<Response> {
    if !req.is_object() || req.get("spec").is_some_and(|s| !s.is_object()) {
        return Err(ApiError::bad_request(
            "the TokenRequest must be a JSON object",
        ));
    }
    let name = ctx.rp.name.clone().unwrap_or_default();
    let sa = ctx
        .state
        .store
        .get(&ctx.gr, &ctx.ns, &name)
        .ok_or_else(|| ApiError::not_found(ctx.target(&name)))?;
    let uid = sa
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let seconds = req
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    // Tokens do not expire in the sandbox; the timestamp is what clients display.
    let expires = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let token = ctx.state.authn.issue_sa_token(&ctx.ns, &name, uid);
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["kind"] = json!("TokenRequest");
    req["metadata"] = json!({"name": name, "namespace": ctx.ns,
        "creationTimestamp": crate::store::now_rfc3339()});
    req["spec"]["expirationSeconds"] = json!(seconds);
    req["status"] = json!({"token": token, "expirationTimestamp": expires});
    Ok(json_response(201, &req, &[]))
}
