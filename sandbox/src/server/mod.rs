//! HTTP request handling: one dispatcher for every URL shape (health, version, discovery, OpenAPI,
//! admin, resources), fault injection and counters around it. The handlers live in submodules by
//! concern; imports go one way: `common` <- `read` <- `watch`, `common` <- `write` <- `delete`,
//! `subresource`, and this module routes to all of them.

mod auth;
mod common;
mod delete;
mod read;
mod subresource;
#[cfg(test)]
mod tests;
mod watch;
mod write;

use crate::error::{ApiError, ApiResult, ErrTarget};
use crate::faults::{Injected, UnavailableMode, Verb};
use crate::patch::PatchKind;
pub use crate::state::AppState;
pub use auth::PeerUser;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use common::*;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

pub use crate::resource_path::{ResourcePath, parse_resource_path};
pub use common::{MAX_BODY, decode_body, discard_body, scale_of, to_version, too_large};

/// The single entry point: faults, counters, routing.
pub async fn dispatch(
    state: axum::extract::State<Arc<AppState>>,
    req: axum::extract::Request,
) -> Response {
    let state = state.0;
    let path = req.uri().path().to_string();
    if let Some(rest) = path.strip_prefix("/sandbox/admin") {
        return crate::admin::handle(&state, req.method().clone(), rest, req.into_body()).await;
    }
    if let Some(mode) = state.faults.unavailable() {
        let _ = mode == UnavailableMode::Refuse;
        return error_response(&ApiError::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ));
    }
    let latency = state.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let method = req.method().clone();
    let query = parse_query(req.uri().query());
    let (user, identified) =
        match auth::authenticate(&state, &path, req.headers(), req.extensions().get()) {
            Ok(u) => u,
            Err(e) => return error_response(&e),
        };
    let parsed = parse_resource_path(&path);
    if parsed.is_none()
        && let Err(e) = auth::authorize(&state, &user, &auth::path_attributes(&method, &path))
    {
        return error_response(&e);
    }
    match (method.clone(), path.as_str()) {
        (Method::GET, "/healthz" | "/livez" | "/readyz") => {
            return (StatusCode::OK, "ok").into_response();
        }
        (Method::GET, p)
            if p.starts_with("/healthz/")
                || p.starts_with("/livez/")
                || p.starts_with("/readyz/") =>
        {
            return (StatusCode::OK, "ok").into_response();
        }
        (Method::GET, "/version") => return json_response(200, &version_info(), &[]),
        (Method::GET, "/api" | "/apis") if wants_aggregated(req.headers()) => {
            let doc = crate::discovery::aggregated(&state.store, path == "/api");
            let mut resp = json_response(200, &doc, &[]);
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(crate::discovery::AGGREGATED_CONTENT_TYPE),
            );
            return resp;
        }
        (Method::GET, "/api") => {
            return json_response(200, &crate::discovery::api_versions(&state.url), &[]);
        }
        (Method::GET, "/apis") => {
            return json_response(200, &crate::discovery::group_list(&state.store), &[]);
        }
        (Method::GET, "/openapi/v2") => {
            return json_response(200, &crate::openapi::v2(&state.store), &[]);
        }
        (Method::GET, "/openapi/v3") => {
            return json_response(200, &crate::openapi::v3_index(&state.store), &[]);
        }
        (Method::GET, p) if p.starts_with("/openapi/v3/") => {
            return match crate::openapi::v3_group_version(&state.store, &p["/openapi/v3/".len()..])
            {
                Some(doc) => json_response(200, &doc, &[]),
                None => error_response(&ApiError::not_found_path()),
            };
        }
        _ => {}
    }
    // kube-apiserver serves only registered groups: under an unknown one (and outside /api and
    // /apis) its mux answers a plain-text 404, not a Status.
    {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let unknown_group = matches!(segs.as_slice(), ["apis", g, ..] if crate::discovery::group(&state.store, g).is_none());
        let outside_api = !matches!(segs.first(), Some(&"api" | &"apis"));
        if unknown_group || (outside_api && parsed.is_none()) {
            return page_not_found();
        }
    }
    // Discovery for one group or group/version.
    if method == Method::GET {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segs.as_slice() {
            ["api", "v1"] => {
                return discovery_or_404(crate::discovery::resource_list(&state.store, "", "v1"));
            }
            ["apis", g] => return discovery_or_404(crate::discovery::group(&state.store, g)),
            ["apis", g, v] => {
                return discovery_or_404(crate::discovery::resource_list(&state.store, g, v));
            }
            _ => {}
        }
    }
    let Some(rp) = parsed else {
        return error_response(&ApiError::not_found_path());
    };
    let watch_param = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (&method, rp.name.is_some()) {
        (&Method::GET, _) if rp.watch || watch_param => Verb::Watch,
        (&Method::GET, true) => Verb::Get,
        (&Method::GET, false) => Verb::List,
        (&Method::POST, _) => Verb::Create,
        (&Method::PUT, _) => Verb::Update,
        (&Method::PATCH, _) => Verb::Patch,
        (&Method::DELETE, true) => Verb::Delete,
        (&Method::DELETE, false) => Verb::DeleteCollection,
        _ => return error_response(&ApiError::method_not_allowed()),
    };
    let collection_write = matches!(verb, Verb::Update | Verb::Patch) && rp.name.is_none();
    let named_create = verb == Verb::Create && rp.name.is_some() && rp.sub.is_none();
    if collection_write || named_create {
        return error_response(&ApiError::method_not_allowed());
    }
    let counted = match &rp.sub {
        Some(s) => format!("{}/{}", rp.resource, s),
        None => rp.resource.clone(),
    };
    // The record names whom authentication identified; the raw token only when nobody was
    // (authorization off and an unknown token).
    let requester =
        crate::requesters::Requester::of(identified.then_some(user.name.as_str()), req.headers());
    let authorized = auth::authorize(&state, &user, &auth::resource_attributes(&rp, verb));
    let resp = match authorized.map(|()| state.faults.decide(verb, &counted)) {
        Err(e) => error_response(&e),
        Ok(Injected::Error(code)) => error_response(&injected_error(code, &rp)),
        Ok(Injected::None) => {
            let headers = req.headers().clone();
            let body = req.into_body();
            match handle_resource(&state, &user, verb, &rp, &query, &headers, body).await {
                Ok(r) => r,
                Err(e) => error_response(&e),
            }
        }
    };
    state.faults.count(verb, &counted, resp.status().as_u16());
    state.faults.requesters.record(&requester, verb, &rp);
    resp
}

/// Whether the client asks for aggregated discovery v2 before the legacy documents.
fn wants_aggregated(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    accept.split(',').next().is_some_and(|first| {
        first.contains("as=APIGroupDiscoveryList")
            && first.contains("v=v2")
            && !first.contains("v2beta1")
    })
}

/// The plain-text 404 of kube-apiserver's mux for paths no API group serves.
fn page_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [
            (http::header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        "404 page not found\n",
    )
        .into_response()
}

fn discovery_or_404(v: Option<Value>) -> Response {
    match v {
        Some(v) => json_response(200, &v, &[]),
        None => error_response(&ApiError::not_found_path()),
    }
}

fn injected_error(code: u16, rp: &ResourcePath) -> ApiError {
    let name = rp.name.as_deref().unwrap_or_default();
    let t = ErrTarget {
        group: &rp.group,
        resource: &rp.resource,
        name,
    };
    match code {
        409 => ApiError::conflict(t),
        429 => ApiError::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later (injected)",
        ),
        500 => ApiError::internal("injected fault"),
        503 => ApiError::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request (injected)",
        ),
        other => ApiError::new(
            other,
            "InternalError",
            format!("injected fault with status {other}"),
        ),
    }
}

/// `/version`.
pub fn version_info() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-mcm-sandbox", "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH })
    })
}

async fn handle_resource(
    state: &AppState,
    user: &crate::authn::User,
    verb: Verb,
    rp: &ResourcePath,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let def = state
        .store
        .def(&rp.group, &rp.version, &rp.resource)
        .ok_or_else(ApiError::not_found_path)?;
    if def.namespaced
        && rp.namespace.is_none()
        && (rp.name.is_some() || matches!(verb, Verb::Create | Verb::DeleteCollection))
    {
        return Err(ApiError::not_found_path());
    }
    if !def.namespaced && rp.namespace.is_some() {
        return Err(ApiError::not_found_path());
    }
    if let Some(sub) = &rp.sub {
        let known = (sub == "status" && def.status)
            || (sub == "scale" && def.scale.is_some())
            || def.extra_subresources.iter().any(|(s, _)| s == sub);
        if !known {
            return Err(ApiError::not_found_path());
        }
    }
    let dry_run = match query.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid dryRun value: {other:?}: supported values: \"All\""
            )));
        }
    };
    let ctx = Ctx {
        state,
        gr: def.storage_key(),
        def,
        rp,
        ns: rp.namespace.clone().unwrap_or_default(),
        query,
        dry_run,
        manager: field_manager(query, headers),
        user,
    };
    if ctx.def.group == "authorization.k8s.io" {
        // Access reviews are computed, never stored.
        if verb != Verb::Create {
            return Err(ApiError::method_not_allowed());
        }
        let bytes = read_body(body).await?;
        return auth::access_review(&ctx, decode_body(&content_type(headers), &bytes)?).await;
    }
    if let Some(ns) = &rp.namespace
        && matches!(verb, Verb::Create)
        && state.store.namespace_state(ns).is_none()
    {
        return Err(ApiError::namespace_not_found(ns));
    }
    match verb {
        Verb::Get => read::get(&ctx, headers).await,
        Verb::List => read::list(&ctx, headers).await,
        Verb::Watch => watch::watch(&ctx, headers).await,
        Verb::Create => {
            let bytes = read_body(body).await?;
            if let Some(sub) = rp.sub.as_deref() {
                return match sub {
                    "eviction" => subresource::evict(&ctx, &bytes, headers).await,
                    "binding" => subresource::bind(&ctx, &bytes, headers).await,
                    "token" => {
                        auth::token_request(&ctx, decode_body(&content_type(headers), &bytes)?)
                            .await
                    }
                    _ => Err(ApiError::method_not_allowed()),
                };
            }
            write::create(&ctx, decode_body(&content_type(headers), &bytes)?).await
        }
        Verb::Update => {
            let bytes = read_body(body).await?;
            let obj = decode_body(&content_type(headers), &bytes)?;
            write::update(&ctx, obj).await
        }
        Verb::Patch => {
            let bytes = read_body(body).await?;
            let ct = content_type(headers);
            let kind = PatchKind::from_content_type(&ct)
                .ok_or_else(|| ApiError::unsupported_media_type(&ct))?;
            if kind == PatchKind::Strategic && ctx.def.is_crd {
                return Err(ApiError::unsupported_media_type(&ct));
            }
            let p = decode_body(&ct, &bytes)?;
            write::patch(&ctx, kind, p).await
        }
        Verb::Delete => {
            let bytes = read_body(body).await?;
            delete::delete(&ctx, &bytes, headers).await
        }
        Verb::DeleteCollection => {
            let bytes = read_body(body).await?;
            delete::delete_collection(&ctx, &bytes, headers).await
        }
    }
}
