//! HTTP request handling: one dispatcher for every URL shape (health, version, discovery, OpenAPI,
//! admin, resources), fault injection and counters around it.

use crate::admission::{self, AdmissionAttrs};
use crate::error::{ApiError, ApiResult, ErrTarget};
use crate::faults::{Faults, Injected, UnavailableMode, Verb};
use crate::gc::Propagation;
use crate::patch::{self, PatchKind};
use crate::pdb::{self, EvictionDecision};
use crate::resources::{Conversion, ResourceDef};
use crate::schema;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, Deleted, Event, EventType, GroupResource, Store};
use crate::table::{self, IncludeObject};
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Largest accepted request body (kube-apiserver's limit).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Shared state of one sandbox server.
pub struct AppState {
    /// Objects.
    pub store: Arc<Store>,
    /// Faults and counters.
    pub faults: Arc<Faults>,
    /// (namespace, service) -> address for webhook `clientConfig.service`.
    pub service_addresses: HashMap<(String, String), SocketAddr>,
    /// The server's own URL (for discovery's serverAddressByClientCIDRs).
    pub url: String,
}

/// A parsed resource URL.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourcePath {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Namespace from the URL.
    pub namespace: Option<String>,
    /// Plural resource.
    pub resource: String,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub sub: Option<String>,
    /// Legacy `/watch/` prefix.
    pub watch: bool,
}

/// Parses `/api/v1/...` and `/apis/{g}/{v}/...` resource URLs.
pub fn parse_resource_path(path: &str) -> Option<ResourcePath> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, mut rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return None,
    };
    let mut p = ResourcePath {
        group,
        version,
        ..Default::default()
    };
    if rest.first() == Some(&"watch") {
        p.watch = true;
        rest = &rest[1..];
    }
    match rest {
        [] => return None,
        [r] => p.resource = r.to_string(),
        ["namespaces", ns] if p.group.is_empty() => {
            p.resource = "namespaces".into();
            p.name = Some(ns.to_string());
        }
        ["namespaces", ns, sub @ ("status" | "finalize")] if p.group.is_empty() => {
            p.resource = "namespaces".into();
            p.name = Some(ns.to_string());
            p.sub = Some(sub.to_string());
        }
        ["namespaces", ns, r, tail @ ..] => {
            p.namespace = Some(ns.to_string());
            p.resource = r.to_string();
            match tail {
                [] => {}
                [n] => p.name = Some(n.to_string()),
                [n, s] => {
                    p.name = Some(n.to_string());
                    p.sub = Some(s.to_string());
                }
                _ => return None,
            }
        }
        [r, n] => {
            p.resource = r.to_string();
            p.name = Some(n.to_string());
        }
        [r, n, s] => {
            p.resource = r.to_string();
            p.name = Some(n.to_string());
            p.sub = Some(s.to_string());
        }
        _ => return None,
    }
    if p.resource.is_empty() || p.name.as_deref() == Some("") {
        return None;
    }
    Some(p)
}

fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for pair in q.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        m.insert(percent_decode(k), percent_decode(v));
    }
    m
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append("Warning", v);
        }
    }
    resp
}

fn error_response(e: &ApiError) -> Response {
    e.clone().into_response()
}

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
    let Some(rp) = parse_resource_path(&path) else {
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
    let resp = match state.faults.decide(verb, &counted) {
        Injected::Error(code) => error_response(&injected_error(code, &rp)),
        Injected::None => {
            let headers = req.headers().clone();
            let body = req.into_body();
            match handle_resource(&state, verb, &rp, &query, &headers, body).await {
                Ok(r) => r,
                Err(e) => error_response(&e),
            }
        }
    };
    state.faults.count(verb, &counted, resp.status().as_u16());
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

async fn read_body(body: Body) -> ApiResult<Bytes> {
    match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => Ok(b),
        Err(e) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
                || e.to_string().contains("length limit");
            if too_large {
                Err(ApiError::new(
                    413,
                    "RequestEntityTooLarge",
                    format!("Request entity too large: limit is {MAX_BODY}"),
                ))
            } else {
                Err(ApiError::bad_request(format!(
                    "unable to read the request body: {e}"
                )))
            }
        }
    }
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string()
}

/// Decodes a request body as JSON or YAML according to Content-Type.
pub fn decode_body(ct: &str, bytes: &[u8]) -> ApiResult<Value> {
    let base = ct.split(';').next().unwrap_or_default().trim();
    match base {
        "" | "application/json" | "*/*" | "application/merge-patch+json" | "application/json-patch+json" | "application/strategic-merge-patch+json" | "application/apply-patch+json" => {
            serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("error decoding JSON: {e}")))
        }
        "application/yaml" | "application/apply-patch+yaml" | "text/yaml" => {
            if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
                return Ok(v);
            }
            let text = std::str::from_utf8(bytes).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            serde_saphyr::from_str::<Value>(text).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
        }
        "application/vnd.kubernetes.protobuf" => crate::proto::decode(bytes).map_err(|e| match e {
            crate::proto::ProtoError::Malformed(m) => ApiError::bad_request(format!("error decoding protobuf: {m}")),
            crate::proto::ProtoError::Unsupported(kind) => ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the sandbox decodes protobuf only for a few kinds, not {kind:?}; send application/json"),
            ),
        }),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

/// How the client wants objects rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Render {
    Full,
    Table,
    Partial,
}

fn render_mode(headers: &HeaderMap) -> Render {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    for media in accept.split(',') {
        if media.contains("as=Table") {
            return Render::Table;
        }
        if media.contains("as=PartialObjectMetadata") {
            return Render::Partial;
        }
        if media.trim().starts_with("application/json") || media.trim().starts_with("*/*") {
            return Render::Full;
        }
    }
    Render::Full
}

fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
}

fn meta<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get("metadata")
        .and_then(|m| m.get(k))
        .and_then(Value::as_str)
}

/// Converts a stored object to the requested version.
pub async fn to_version(
    state: &AppState,
    def: &ResourceDef,
    obj: &Value,
    version: &str,
) -> ApiResult<Value> {
    let want = def.api_version(version);
    let have = obj.get("apiVersion").and_then(Value::as_str);
    if have == Some(want.as_str()) {
        return Ok(obj.clone());
    }
    if def.group == "events.k8s.io" && have == Some("v1") {
        return Ok(crate::builtin::event_core_to_new(obj));
    }
    match &def.conversion {
        Conversion::None => {
            let mut o = obj.clone();
            o["apiVersion"] = json!(want);
            if o.get("kind").is_none() {
                o["kind"] = json!(def.kind);
            }
            Ok(o)
        }
        Conversion::Webhook(cc) => {
            let mut out = admission::convert(state, cc, vec![obj.clone()], &want).await?;
            out.pop()
                .ok_or_else(|| ApiError::internal("conversion webhook returned no objects"))
        }
    }
}

async fn many_to_version(
    state: &AppState,
    def: &ResourceDef,
    objs: Vec<Value>,
    version: &str,
) -> ApiResult<Vec<Value>> {
    let want = def.api_version(version);
    if objs
        .iter()
        .all(|o| o.get("apiVersion").and_then(Value::as_str) == Some(want.as_str()))
    {
        return Ok(objs);
    }
    match &def.conversion {
        Conversion::Webhook(cc) => {
            let (same, other): (Vec<_>, Vec<_>) =
                objs.into_iter().enumerate().partition(|(_, o)| {
                    o.get("apiVersion").and_then(Value::as_str) == Some(want.as_str())
                });
            let converted = admission::convert(
                state,
                cc,
                other.iter().map(|(_, o)| o.clone()).collect(),
                &want,
            )
            .await?;
            let mut all: Vec<(usize, Value)> = same;
            all.extend(other.into_iter().map(|(i, _)| i).zip(converted));
            all.sort_by_key(|(i, _)| *i);
            Ok(all.into_iter().map(|(_, o)| o).collect())
        }
        Conversion::None => {
            let mut out = Vec::with_capacity(objs.len());
            for o in objs {
                out.push(to_version(state, def, &o, version).await?);
            }
            Ok(out)
        }
    }
}

struct Ctx<'a> {
    state: &'a AppState,
    def: Arc<ResourceDef>,
    gr: GroupResource,
    rp: &'a ResourcePath,
    ns: String,
    query: &'a HashMap<String, String>,
    dry_run: bool,
    manager: String,
}

impl Ctx<'_> {
    fn target<'b>(&'b self, name: &'b str) -> ErrTarget<'b> {
        ErrTarget {
            group: &self.def.group,
            resource: &self.def.plural,
            name,
        }
    }
}

async fn handle_resource(
    state: &AppState,
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
    };
    if let Some(ns) = &rp.namespace
        && matches!(verb, Verb::Create)
        && state.store.namespace_state(ns).is_none()
    {
        return Err(ApiError::namespace_not_found(ns));
    }
    match verb {
        Verb::Get => get(&ctx, headers).await,
        Verb::List => list(&ctx, headers).await,
        Verb::Watch => watch(&ctx, headers).await,
        Verb::Create => {
            let bytes = read_body(body).await?;
            if let Some(sub) = rp.sub.as_deref() {
                return match sub {
                    "eviction" => evict(&ctx, &bytes, headers).await,
                    "binding" => bind(&ctx, &bytes, headers).await,
                    _ => Err(ApiError::method_not_allowed()),
                };
            }
            create(&ctx, decode_body(&content_type(headers), &bytes)?).await
        }
        Verb::Update => {
            let bytes = read_body(body).await?;
            let obj = decode_body(&content_type(headers), &bytes)?;
            update(&ctx, obj).await
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
            patch(&ctx, kind, p).await
        }
        Verb::Delete => {
            let bytes = read_body(body).await?;
            delete(&ctx, &bytes, headers).await
        }
        Verb::DeleteCollection => {
            let bytes = read_body(body).await?;
            delete_collection(&ctx, &bytes, headers).await
        }
    }
}

async fn get(ctx: &Ctx<'_>, headers: &HeaderMap) -> ApiResult<Response> {
    let name = ctx.rp.name.as_deref().unwrap_or_default();
    let obj = ctx
        .state
        .store
        .get(&ctx.gr, &ctx.ns, name)
        .ok_or_else(|| ApiError::not_found(ctx.target(name)))?;
    let obj = to_version(ctx.state, &ctx.def, &obj, &ctx.rp.version).await?;
    match ctx.rp.sub.as_deref() {
        Some("scale") => return Ok(json_response(200, &scale_of(&ctx.def, &obj), &[])),
        Some("status") | None => {}
        Some(_) => return Err(ApiError::method_not_allowed()),
    }
    match render_mode(headers) {
        Render::Table => {
            let cols = printer_columns(&ctx.def, &ctx.rp.version);
            let t = table::build_table(
                &cols,
                std::slice::from_ref(&obj),
                json!({"resourceVersion": meta(&obj, "resourceVersion")}),
                include_object(ctx.query),
                jiff::Timestamp::now(),
            );
            Ok(json_response(200, &t, &[]))
        }
        Render::Partial => Ok(json_response(200, &partial(&obj), &[])),
        Render::Full => Ok(json_response(200, &obj, &[])),
    }
}

fn include_object(q: &HashMap<String, String>) -> IncludeObject {
    match q.get("includeObject").map(String::as_str) {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    }
}

fn printer_columns(def: &ResourceDef, version: &str) -> Vec<Value> {
    if let Some(v) = def.crd_versions.get(version) {
        return v.printer_columns.clone();
    }
    let age = json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"});
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => vec![
            json!({"name": "Status", "type": "string", "jsonPath": ".status.phase"}),
            age,
        ],
        // kube's pod printer: Ready/Status/Restarts are computed from the container statuses.
        ("", "pods") => vec![
            json!({"name": "Ready", "type": "string", "x-compute": "pod-ready"}),
            json!({"name": "Status", "type": "string", "x-compute": "pod-status"}),
            json!({"name": "Restarts", "type": "string", "x-compute": "pod-restarts"}),
            age,
            json!({"name": "IP", "type": "string", "jsonPath": ".status.podIP", "priority": 1}),
            json!({"name": "Node", "type": "string", "jsonPath": ".spec.nodeName", "priority": 1}),
        ],
        ("policy", "poddisruptionbudgets") => vec![
            json!({"name": "Min Available", "type": "string", "x-compute": "or-na:.spec.minAvailable"}),
            json!({"name": "Max Unavailable", "type": "string", "x-compute": "or-na:.spec.maxUnavailable"}),
            json!({"name": "Allowed Disruptions", "type": "integer", "jsonPath": ".status.disruptionsAllowed"}),
            age,
        ],
        ("", "configmaps") => vec![
            json!({"name": "Data", "type": "integer", "jsonPath": ".data", "x-count": [".data", ".binaryData"]}),
            age,
        ],
        ("", "secrets") => vec![
            json!({"name": "Type", "type": "string", "jsonPath": ".type"}),
            json!({"name": "Data", "type": "integer", "jsonPath": ".data", "x-count": [".data"]}),
            age,
        ],
        ("", "nodes") => vec![
            json!({"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}),
            age,
        ],
        ("apps", "deployments" | "replicasets" | "statefulsets") => vec![
            json!({"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"}),
            json!({"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"}),
            age,
        ],
        (group, plural) => table::builtin_columns(group, plural).unwrap_or_else(|| vec![age]),
    }
}

/// Builds an autoscaling/v1 Scale for an object.
pub fn scale_of(def: &ResourceDef, obj: &Value) -> Value {
    let Some(sc) = &def.scale else {
        return json!({});
    };
    let first = |p: &str| table::jsonpath(obj, p).into_iter().next();
    let mut status =
        json!({"replicas": first(&sc.status_replicas).and_then(|v| v.as_i64()).unwrap_or(0)});
    if let Some(sel) = sc.label_selector.as_deref().and_then(first) {
        status["selector"] = sel;
    } else if let Some(sel) = obj.pointer("/spec/selector")
        && let Ok(ls) = LabelSelector::from_object(sel)
    {
        let s: Vec<String> =
            ls.0.iter()
                .filter_map(|r| match r {
                    crate::selector::LabelReq::In(k, v) if v.len() == 1 => {
                        Some(format!("{k}={}", v[0]))
                    }
                    _ => None,
                })
                .collect();
        if !s.is_empty() {
            status["selector"] = json!(s.join(","));
        }
    }
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta(obj, "name"), "namespace": meta(obj, "namespace"), "uid": meta(obj, "uid"),
            "resourceVersion": meta(obj, "resourceVersion"), "creationTimestamp": meta(obj, "creationTimestamp")
        },
        "spec": {"replicas": first(&sc.spec_replicas).and_then(|v| v.as_i64()).unwrap_or(0)},
        "status": status
    })
}

fn set_path(obj: &mut Value, path: &str, value: Value) -> ApiResult<()> {
    let segs: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .collect();
    let Some((last, parents)) = segs.split_last() else {
        return Err(ApiError::internal("empty scale path"));
    };
    let mut cur = obj;
    for s in parents {
        if !cur.get(*s).is_some_and(Value::is_object) {
            cur[*s] = json!({});
        }
        cur = &mut cur[*s];
    }
    cur[*last] = value;
    Ok(())
}

fn selectors(ctx: &Ctx<'_>) -> ApiResult<(LabelSelector, FieldSelector)> {
    let ls = LabelSelector::parse(
        ctx.query
            .get("labelSelector")
            .map(String::as_str)
            .unwrap_or_default(),
    )
    .map_err(ApiError::bad_request)?;
    let fs = FieldSelector::parse(
        ctx.query
            .get("fieldSelector")
            .map(String::as_str)
            .unwrap_or_default(),
        &ctx.def.group,
        &ctx.def.plural,
    )
    .map_err(|e| {
        ApiError::bad_request(format!(
            "Unable to find {:?} that match label selector \"\", field selector {:?}: {e}",
            ctx.def.plural,
            ctx.query.get("fieldSelector").cloned().unwrap_or_default()
        ))
    })?;
    let mut fs = fs;
    if ctx.def.group == "events.k8s.io" {
        // Stored as core/v1 Events.
        for r in fs.0.iter_mut() {
            if let Some(rest) = r.path.strip_prefix("regarding.") {
                r.path = format!("involvedObject.{rest}");
            }
        }
    }
    Ok((ls, fs))
}

/// The resourceVersion of a `resourceVersionMatch=Exact` list, validated like kube-apiserver.
fn exact_resource_version(query: &HashMap<String, String>) -> ApiResult<Option<u64>> {
    let rv_match = query
        .get("resourceVersionMatch")
        .map(String::as_str)
        .unwrap_or("");
    let rv = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    match rv_match {
        "" | "NotOlderThan" => {
            if !rv_match.is_empty() && rv.is_empty() {
                return Err(ApiError::bad_request(
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            Ok(None)
        }
        "Exact" => {
            if rv.is_empty() {
                return Err(ApiError::bad_request(
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if rv == "0" {
                return Err(ApiError::bad_request(
                    "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
            rv.parse::<u64>()
                .map(Some)
                .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))
        }
        other => Err(ApiError::bad_request(format!(
            "unsupported resourceVersionMatch {other:?}: supported values are \"Exact\" and \"NotOlderThan\""
        ))),
    }
}

fn list_kind(def: &ResourceDef) -> String {
    format!("{}List", def.kind)
}

async fn list(ctx: &Ctx<'_>, headers: &HeaderMap) -> ApiResult<Response> {
    let (ls, fs) = selectors(ctx)?;
    let ns_filter = ctx.rp.namespace.as_deref();
    let (rv, mut items) = ctx.state.store.list(&ctx.gr, ns_filter);
    let limit: usize = match ctx.query.get("limit") {
        Some(l) if !l.is_empty() => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?
            .max(0) as usize,
        _ => 0,
    };
    let exact_rv = exact_resource_version(ctx.query)?;
    let mut list_rv = rv;
    let mut start_after: Option<(String, String)> = None;
    if let Some(tok) = ctx.query.get("continue").filter(|t| !t.is_empty()) {
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(tok)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .ok_or_else(|| ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
        list_rv = decoded.get("rv").and_then(Value::as_u64).unwrap_or(rv);
        if exact_rv.is_some() {
            return Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        start_after = Some((
            decoded
                .get("ns")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            decoded
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        ));
        // Later pages are served from the first page's snapshot, like kube's etcd reads at
        // the list revision.
        items = ctx
            .state
            .store
            .list_at(&ctx.gr, ns_filter, list_rv)
            .map_err(|e| {
                if e.code == 410 {
                    ApiError::new(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    )
                } else {
                    e
                }
            })?;
    } else if let Some(at) = exact_rv {
        items = ctx.state.store.list_at(&ctx.gr, ns_filter, at)?;
        list_rv = at;
    }
    let mut selected = Vec::new();
    let mut remaining = 0usize;
    let mut next: Option<(String, String)> = None;
    for o in items.iter() {
        let key = (
            meta(o, "namespace").unwrap_or_default().to_string(),
            meta(o, "name").unwrap_or_default().to_string(),
        );
        if let Some(s) = &start_after
            && &key <= s
        {
            continue;
        }
        if !ls.matches(o.pointer("/metadata/labels")) || !fs.matches(o) {
            continue;
        }
        if limit > 0 && selected.len() >= limit {
            remaining += 1;
            continue;
        }
        if limit > 0 && selected.len() + 1 == limit {
            next = Some(key);
        }
        selected.push(o.as_ref().clone());
    }
    let mut list_meta = json!({"resourceVersion": list_rv.to_string()});
    if remaining > 0
        && let Some((ns, name)) = next
    {
        let tok = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(json!({"rv": list_rv, "ns": ns, "name": name}).to_string());
        list_meta["continue"] = json!(tok);
        if ls.is_empty() && fs.is_empty() {
            list_meta["remainingItemCount"] = json!(remaining);
        }
    }
    let selected = many_to_version(ctx.state, &ctx.def, selected, &ctx.rp.version).await?;
    match render_mode(headers) {
        Render::Table => {
            let t = table::build_table(
                &printer_columns(&ctx.def, &ctx.rp.version),
                &selected,
                list_meta,
                include_object(ctx.query),
                jiff::Timestamp::now(),
            );
            Ok(json_response(200, &t, &[]))
        }
        Render::Partial => {
            let items: Vec<Value> = selected.iter().map(partial).collect();
            Ok(json_response(
                200,
                &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "items": items}),
                &[],
            ))
        }
        Render::Full => {
            let body = json!({"kind": list_kind(&ctx.def), "apiVersion": ctx.def.api_version(&ctx.rp.version), "metadata": list_meta, "items": selected});
            Ok(json_response(200, &body, &[]))
        }
    }
}

struct WatchFilter {
    ns: Option<String>,
    name: Option<String>,
    ls: LabelSelector,
    fs: FieldSelector,
}

impl WatchFilter {
    fn matches(&self, o: &Value) -> bool {
        if let Some(ns) = &self.ns
            && meta(o, "namespace") != Some(ns.as_str())
        {
            return false;
        }
        if let Some(n) = &self.name
            && meta(o, "name") != Some(n.as_str())
        {
            return false;
        }
        self.ls.matches(o.pointer("/metadata/labels")) && self.fs.matches(o)
    }
    /// The event type a watcher with this filter sees, if any.
    fn translate(&self, ev: &Event) -> Option<EventType> {
        let now = self.matches(&ev.obj);
        match ev.kind {
            EventType::Added | EventType::Deleted => now.then_some(ev.kind),
            EventType::Modified => {
                let before = ev.old.as_ref().is_some_and(|o| self.matches(o));
                match (before, now) {
                    (true, true) => Some(EventType::Modified),
                    (false, true) => Some(EventType::Added),
                    (true, false) => Some(EventType::Deleted),
                    (false, false) => None,
                }
            }
        }
    }
}

async fn watch(ctx: &Ctx<'_>, headers: &HeaderMap) -> ApiResult<Response> {
    let (ls, mut fs) = selectors(ctx)?;
    let mut name = ctx.rp.name.clone();
    // kube clients watch single objects with fieldSelector=metadata.name=x.
    if name.is_none()
        && let Some(pos) =
            fs.0.iter()
                .position(|r| r.path == "metadata.name" && !r.negated)
    {
        name = Some(fs.0.remove(pos).value);
    }
    let filter = WatchFilter {
        ns: ctx.rp.namespace.clone(),
        name,
        ls,
        fs,
    };
    let from_rv = match ctx.query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(s) => Some(s.parse::<u64>().map_err(|_| {
            ApiError::new(400, "BadRequest", format!("invalid resource version: {s}"))
        })?),
    };
    let send_initial = ctx
        .query
        .get("sendInitialEvents")
        .is_some_and(|v| v == "true");
    let from_rv = if send_initial { None } else { from_rv };
    let bookmarks = ctx
        .query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let timeout = ctx
        .query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let start = ctx.state.store.watch(&ctx.gr, from_rv)?;
    let start_rv = ctx.state.store.current_rv();
    let partial_mode = render_mode(headers) == Render::Partial;
    // `kubectl get -w` watches as Table: every event carries a one-row Table, as kube-apiserver does.
    let table_mode = (render_mode(headers) == Render::Table).then(|| {
        (
            printer_columns(&ctx.def, &ctx.rp.version),
            include_object(ctx.query),
        )
    });
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::convert::Infallible>>(256);
    let store = ctx.state.store.clone();
    let def = ctx.def.clone();
    let version = ctx.rp.version.clone();
    let state_conv = ConvState {
        service_addresses: ctx.state.service_addresses.clone(),
        faults: ctx.state.faults.clone(),
        store: ctx.state.store.clone(),
        url: ctx.state.url.clone(),
    };
    let mut closer = ctx.state.faults.watch_closer();
    let api_version = def.api_version(&version);
    let kind = def.kind.clone();
    tokio::spawn(async move {
        let app = state_conv.into_app();
        let encode = encode_event;
        let mut last_rv = from_rv.unwrap_or(0);
        let send_event = |ev: Arc<Event>, last_rv: &mut u64| {
            if filter.translate(&ev).is_some() {
                *last_rv = (*last_rv).max(ev.rv);
            }
            render_event(
                &app,
                &def,
                &version,
                &filter,
                partial_mode,
                table_mode.as_ref(),
                ev,
            )
        };
        // Events held back by the watch-delay fault, with the instant they arrived; each is due at
        // arrival + the delay configured now (lowering the delay releases them early).
        let mut held: std::collections::VecDeque<(tokio::time::Instant, Arc<Event>)> =
            std::collections::VecDeque::new();
        let delay_of = |app: &AppState| app.faults.watch_delay();
        for ev in start.replay {
            let delay = delay_of(&app);
            // Initial events of a streaming list end with a bookmark sent right after them: not delayed.
            if !delay.is_zero() && !send_initial {
                held.push_back((tokio::time::Instant::now(), ev));
                continue;
            }
            if let Some(line) = send_event(ev, &mut last_rv).await
                && tx.send(Ok(line)).await.is_err()
            {
                return;
            }
        }
        last_rv = last_rv.max(if from_rv.is_none() { start_rv } else { last_rv });
        if send_initial && bookmarks {
            let bm = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": start_rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}});
            if tx.send(Ok(encode("BOOKMARK", &bm))).await.is_err() {
                return;
            }
        }
        let mut rx_events = start.rx;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        loop {
            // Re-check at least every 100 ms so a changed delay takes effect on held events.
            let next_due = held.front().map(|(arrived, _)| {
                (*arrived + delay_of(&app))
                    .min(tokio::time::Instant::now() + Duration::from_millis(100))
            });
            tokio::select! {
                _ = &mut deadline => break,
                _ = closer.changed() => break,
                _ = tx.closed() => break,
                r = rx_events.recv() => match r {
                    Ok(ev) => {
                        let delay = delay_of(&app);
                        if !delay.is_zero() || !held.is_empty() {
                            held.push_back((tokio::time::Instant::now(), ev));
                        } else if let Some(line) = send_event(ev, &mut last_rv).await && tx.send(Ok(line)).await.is_err() {
                            break;
                        }
                    }
                    // A slow watcher that fell behind is closed; the client re-watches from its last version.
                    Err(_) => break,
                },
                () = tokio::time::sleep_until(next_due.unwrap_or_else(tokio::time::Instant::now)), if next_due.is_some() => {
                    let now = tokio::time::Instant::now();
                    let delay = delay_of(&app);
                    let mut closed = false;
                    while held.front().is_some_and(|(arrived, _)| *arrived + delay <= now) {
                        let Some((_, ev)) = held.pop_front() else { break };
                        if let Some(line) = send_event(ev, &mut last_rv).await && tx.send(Ok(line)).await.is_err() {
                            closed = true;
                            break;
                        }
                    }
                    if closed { break; }
                }
                _ = tick.tick(), if bookmarks => {
                    let cur = store.current_rv();
                    // Events up to `cur` are already in the channel: drain them before the bookmark.
                    let mut closed = false;
                    loop {
                        match rx_events.try_recv() {
                            Ok(ev) => {
                                let delay = delay_of(&app);
                                if !delay.is_zero() || !held.is_empty() {
                                    held.push_back((tokio::time::Instant::now(), ev));
                                } else if let Some(line) = send_event(ev, &mut last_rv).await && tx.send(Ok(line)).await.is_err() {
                                    closed = true;
                                    break;
                                }
                            }
                            Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                            Err(_) => { closed = true; break; }
                        }
                    }
                    if closed { break; }
                    // A bookmark must not claim versions of events still held back.
                    if !held.is_empty() { continue; }
                    last_rv = last_rv.max(cur);
                    let bm = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": last_rv.to_string()}});
                    if tx.send(Ok(encode("BOOKMARK", &bm))).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

fn encode_event(t: &str, obj: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": t, "object": obj})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

async fn render_event(
    app: &AppState,
    def: &ResourceDef,
    version: &str,
    filter: &WatchFilter,
    partial_mode: bool,
    table_mode: Option<&(Vec<Value>, IncludeObject)>,
    ev: Arc<Event>,
) -> Option<Bytes> {
    let t = filter.translate(&ev)?;
    let obj = match to_version(app, def, &ev.obj, version).await {
        Ok(o) => o,
        Err(e) => return Some(encode_event("ERROR", &e.status_body())),
    };
    let obj = if partial_mode { partial(&obj) } else { obj };
    let obj = match table_mode {
        Some((columns, include)) => table::watch_row(columns, &obj, *include),
        None => obj,
    };
    Some(encode_event(t.as_str(), &obj))
}

/// The parts of the app state a watch task needs (owned, so the task outlives the request).
struct ConvState {
    service_addresses: HashMap<(String, String), SocketAddr>,
    faults: Arc<Faults>,
    store: Arc<Store>,
    url: String,
}

impl ConvState {
    fn into_app(self) -> AppState {
        AppState {
            store: self.store,
            faults: self.faults,
            service_addresses: self.service_addresses,
            url: self.url,
        }
    }
}

/// CRD pruning and defaulting in the given version; returns the pruned unknown field paths.
fn prune_and_default(def: &ResourceDef, version: &str, obj: &mut Value) -> Vec<String> {
    if !def.is_crd {
        return crate::builtin::prune_unknown_fields(&def.group, &def.plural, obj);
    }
    let Some(s) = def.schema(version) else {
        return Vec::new();
    };
    let before = obj.clone();
    schema::prune(obj, s, true);
    let mut removed = Vec::new();
    diff_removed(&before, obj, "", &mut removed);
    schema::apply_defaults(obj, s);
    removed
}

fn diff_removed(before: &Value, after: &Value, prefix: &str, out: &mut Vec<String>) {
    if let (Value::Object(b), Value::Object(a)) = (before, after) {
        for (k, v) in b {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match a.get(k) {
                None if !v.is_null() => out.push(path),
                Some(av) => diff_removed(v, av, &path, out),
                None => {}
            }
        }
    } else if let (Value::Array(b), Value::Array(a)) = (before, after) {
        for (i, (bv, av)) in b.iter().zip(a.iter()).enumerate() {
            diff_removed(bv, av, &format!("{prefix}[{i}]"), out);
        }
    }
}

fn validate_object(
    ctx: &Ctx<'_>,
    obj: &Value,
    unknown: &[String],
    mut causes: Vec<crate::error::Cause>,
) -> ApiResult<Vec<String>> {
    let name = meta(obj, "name").unwrap_or_default();
    let mut warnings = Vec::new();
    match ctx.query.get("fieldValidation").map(String::as_str) {
        Some("Strict") if !unknown.is_empty() => {
            let msgs: Vec<String> = unknown
                .iter()
                .map(|u| format!("unknown field \"{u}\""))
                .collect();
            return Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                msgs.join(", ")
            )));
        }
        Some("Ignore") => {}
        _ => warnings.extend(unknown.iter().map(|u| format!("unknown field \"{u}\""))),
    }
    if !name.is_empty() {
        let allow_colon =
            ctx.def.group == "rbac.authorization.k8s.io" || ctx.def.plural == "events";
        if let Err(e) = schema::validate_name(name, allow_colon) {
            causes.push(crate::error::Cause {
                reason: "FieldValueInvalid".into(),
                field: "metadata.name".into(),
                detail: e,
                value: Some(format!("\"{name}\"")),
            });
        }
    }
    causes.extend(crate::names::metadata_causes(&ctx.def.plural, obj));
    if let Some(v) = ctx
        .state
        .store
        .validator(&ctx.def.group, &ctx.def.plural, &ctx.rp.version)
    {
        causes.extend(v.validate(obj));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            &ctx.def.kind,
            &ctx.def.group,
            name,
            &causes,
        ));
    }
    Ok(warnings)
}

fn check_type(ctx: &Ctx<'_>, obj: &Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    let want = ctx.def.api_version(&ctx.rp.version);
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && av != want
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({want})"
        )));
    }
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && k != ctx.def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            ctx.def.kind
        )));
    }
    if let Some(ns) = meta(obj, "namespace")
        && ctx.def.namespaced
        && !ns.is_empty()
        && ns != ctx.ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

fn normalise(ctx: &Ctx<'_>, obj: &mut Value) {
    obj["apiVersion"] = json!(ctx.def.api_version(&ctx.rp.version));
    obj["kind"] = json!(ctx.def.kind);
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    if ctx.def.namespaced {
        obj["metadata"]["namespace"] = json!(ctx.ns);
    }
}

fn attrs<'a>(ctx: &'a Ctx<'a>, operation: &'a str, name: &'a str) -> AdmissionAttrs<'a> {
    AdmissionAttrs {
        def: &ctx.def,
        version: &ctx.rp.version,
        sub: ctx.rp.sub.as_deref(),
        operation,
        namespace: &ctx.ns,
        name,
        dry_run: ctx.dry_run,
    }
}

async fn to_storage(ctx: &Ctx<'_>, obj: &Value) -> ApiResult<Value> {
    if ctx.def.group == "events.k8s.io" {
        return Ok(crate::builtin::event_new_to_core(obj));
    }
    to_version(ctx.state, &ctx.def, obj, &ctx.def.storage_version).await
}

async fn create(ctx: &Ctx<'_>, mut obj: Value) -> ApiResult<Response> {
    check_type(ctx, &obj)?;
    normalise(ctx, &mut obj);
    let name = meta(&obj, "name").unwrap_or_default().to_string();
    if name.is_empty() && meta(&obj, "generateName").is_none_or(str::is_empty) {
        let c = crate::error::Cause {
            reason: "FieldValueRequired".into(),
            field: "metadata.name".into(),
            detail: "name or generateName is required".into(),
            value: None,
        };
        return Err(ApiError::invalid(&ctx.def.kind, &ctx.def.group, "", &[c]));
    }
    if ctx.def.is_crd
        && ctx.def.status
        && let Some(m) = obj.as_object_mut()
    {
        // Create cannot set status when the status subresource is enabled.
        m.remove("status");
    }
    let unknown = prune_and_default(&ctx.def, &ctx.rp.version, &mut obj);
    let (mut obj, mut warnings) =
        admission::mutate(ctx.state, &attrs(ctx, "CREATE", &name), obj, None).await?;
    let unknown2 = prune_and_default(&ctx.def, &ctx.rp.version, &mut obj);
    let causes = crate::builtin::prepare_create(&ctx.def.group, &ctx.def.plural, &mut obj);
    warnings.extend(validate_object(
        ctx,
        &obj,
        if unknown.is_empty() {
            &unknown2
        } else {
            &unknown
        },
        causes,
    )?);
    warnings.extend(
        admission::validate(ctx.state, &attrs(ctx, "CREATE", &name), Some(&obj), None).await?,
    );
    let applied = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter()
                .any(|e| e.get("operation").and_then(Value::as_str) == Some("Apply"))
        });
    if !applied {
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        let api_version = ctx.def.api_version(&ctx.rp.version);
        let now = crate::store::now_rfc3339();
        crate::apply::record_update(None, &mut obj, &ctx.manager, &api_version, None, &now);
    }
    let stored = to_storage(ctx, &obj).await?;
    let created = ctx.state.store.create(&ctx.gr, stored, ctx.dry_run)?;
    let out = to_version(ctx.state, &ctx.def, &created, &ctx.rp.version).await?;
    Ok(json_response(201, &out, &warnings))
}

/// Applies status-subresource rules: main writes keep the stored status, status writes keep
/// everything but status (and metadata labels/annotations stay as stored).
fn merge_for_subresource(
    def: &ResourceDef,
    sub: Option<&str>,
    old: &Value,
    mut new: Value,
) -> Value {
    match sub {
        Some("status") => {
            let mut out = old.clone();
            match new.get_mut("status").map(Value::take) {
                Some(s) => out["status"] = s,
                None => {
                    if let Some(m) = out.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if let Some(rv) = new.pointer("/metadata/resourceVersion") {
                out["metadata"]["resourceVersion"] = rv.clone();
            }
            out
        }
        _ if def.status_separate() => {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            new
        }
        _ => new,
    }
}

/// The field manager of a write: `fieldManager`, else the User-Agent's program name.
fn field_manager(query: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

async fn write_update(
    ctx: &Ctx<'_>,
    name: &str,
    old_v: &Value,
    new: Value,
    expected_rv: Option<String>,
    record_fields: bool,
) -> ApiResult<(Arc<Value>, Vec<String>)> {
    let operation = "UPDATE";
    let mut obj = merge_for_subresource(&ctx.def, ctx.rp.sub.as_deref(), old_v, new);
    normalise(ctx, &mut obj);
    if obj.pointer("/metadata/managedFields").is_none()
        && let Some(mf) = old_v.pointer("/metadata/managedFields")
    {
        obj["metadata"]["managedFields"] = mf.clone();
    }
    let unknown = prune_and_default(&ctx.def, &ctx.rp.version, &mut obj);
    let (mut obj, mut warnings) =
        admission::mutate(ctx.state, &attrs(ctx, operation, name), obj, Some(old_v)).await?;
    let unknown2 = prune_and_default(&ctx.def, &ctx.rp.version, &mut obj);
    let causes = crate::builtin::prepare_update(&ctx.def.group, &ctx.def.plural, old_v, &mut obj);
    warnings.extend(validate_object(
        ctx,
        &obj,
        if unknown.is_empty() {
            &unknown2
        } else {
            &unknown
        },
        causes,
    )?);
    warnings.extend(
        admission::validate(
            ctx.state,
            &attrs(ctx, operation, name),
            Some(&obj),
            Some(old_v),
        )
        .await?,
    );
    if record_fields {
        let api_version = ctx.def.api_version(&ctx.rp.version);
        let now = crate::store::now_rfc3339();
        crate::apply::record_update(
            Some(old_v),
            &mut obj,
            &ctx.manager,
            &api_version,
            ctx.rp.sub.as_deref(),
            &now,
        );
    }
    let stored = to_storage(ctx, &obj).await?;
    let updated = ctx.state.store.update(
        &ctx.gr,
        &ctx.ns,
        name,
        stored,
        expected_rv.as_deref(),
        ctx.dry_run,
    )?;
    Ok((updated, warnings))
}

async fn update(ctx: &Ctx<'_>, mut obj: Value) -> ApiResult<Response> {
    let name = ctx.rp.name.clone().unwrap_or_default();
    if ctx.rp.sub.as_deref() == Some("scale") {
        return update_scale(ctx, &name, obj).await;
    }
    check_type(ctx, &obj)?;
    if let Some(n) = meta(&obj, "name")
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    normalise(ctx, &mut obj);
    obj["metadata"]["name"] = json!(name);
    let Some(old) = ctx.state.store.get(&ctx.gr, &ctx.ns, &name) else {
        return Err(ApiError::not_found(ctx.target(&name)));
    };
    let old_v = to_version(ctx.state, &ctx.def, &old, &ctx.rp.version).await?;
    let expected = meta(&obj, "resourceVersion").map(String::from);
    if ctx.rp.sub.as_deref() == Some("finalize") {
        let mut next = old_v.clone();
        next["spec"]["finalizers"] = obj
            .pointer("/spec/finalizers")
            .cloned()
            .unwrap_or(json!([]));
        let updated = ctx.state.store.update(
            &ctx.gr,
            &ctx.ns,
            &name,
            next,
            expected.as_deref(),
            ctx.dry_run,
        )?;
        return Ok(json_response(200, &updated, &[]));
    }
    let (updated, warnings) = write_update(ctx, &name, &old_v, obj, expected, true).await?;
    let out = to_version(ctx.state, &ctx.def, &updated, &ctx.rp.version).await?;
    Ok(json_response(200, &out, &warnings))
}

async fn update_scale(ctx: &Ctx<'_>, name: &str, scale: Value) -> ApiResult<Response> {
    let Some(sc) = ctx.def.scale.clone() else {
        return Err(ApiError::not_found_path());
    };
    let replicas = scale.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
    if !replicas.is_i64() && !replicas.is_u64() {
        return Err(ApiError::bad_request("spec.replicas must be an integer"));
    }
    let old = ctx
        .state
        .store
        .get(&ctx.gr, &ctx.ns, name)
        .ok_or_else(|| ApiError::not_found(ctx.target(name)))?;
    let old_v = to_version(ctx.state, &ctx.def, &old, &ctx.rp.version).await?;
    let mut next = old_v.clone();
    set_path(&mut next, &sc.spec_replicas, replicas)?;
    let expected = scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .map(String::from);
    let sub_ctx = Ctx {
        rp: &ResourcePath {
            sub: None,
            ..ctx.rp.clone()
        },
        state: ctx.state,
        def: ctx.def.clone(),
        gr: ctx.gr.clone(),
        ns: ctx.ns.clone(),
        query: ctx.query,
        dry_run: ctx.dry_run,
        manager: ctx.manager.clone(),
    };
    let (updated, warnings) = write_update(&sub_ctx, name, &old_v, next, expected, true).await?;
    let out = to_version(ctx.state, &ctx.def, &updated, &ctx.rp.version).await?;
    Ok(json_response(200, &scale_of(&ctx.def, &out), &warnings))
}

async fn patch(ctx: &Ctx<'_>, kind: PatchKind, p: Value) -> ApiResult<Response> {
    let name = ctx.rp.name.clone().unwrap_or_default();
    if kind == PatchKind::Apply && ctx.query.get("fieldManager").is_none_or(String::is_empty) {
        return Err(ApiError::bad_request(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    if kind == PatchKind::Apply {
        check_type(ctx, &p)?;
        if meta(&p, "name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta(&p, "name").unwrap_or_default()
            )));
        }
    }
    for attempt in 0..8 {
        let Some(old) = ctx.state.store.get(&ctx.gr, &ctx.ns, &name) else {
            if kind == PatchKind::Apply && ctx.rp.sub.is_none() {
                let manager = ctx.query.get("fieldManager").cloned().unwrap_or_default();
                let force = ctx.query.get("force").is_some_and(|f| f == "true");
                let empty = json!({"apiVersion": ctx.def.api_version(&ctx.rp.version), "kind": ctx.def.kind, "metadata": {"name": name}});
                let now = crate::store::now_rfc3339();
                let obj = match crate::apply::server_side_apply(
                    &empty,
                    &p,
                    &manager,
                    force,
                    &ctx.def.api_version(&ctx.rp.version),
                    &now,
                )
                .map_err(ApiError::bad_request)?
                {
                    crate::apply::ApplyOutcome::Apply(o) => o,
                    crate::apply::ApplyOutcome::Conflicts(c) => {
                        return Err(ApiError::new(
                            409,
                            "Conflict",
                            crate::apply::conflict_message(&c),
                        ));
                    }
                };
                match create(ctx, obj).await {
                    Err(e) if e.code == 409 && e.reason == "AlreadyExists" && attempt < 7 => {
                        continue;
                    }
                    other => return other,
                }
            }
            return Err(ApiError::not_found(ctx.target(&name)));
        };
        let old_v = to_version(ctx.state, &ctx.def, &old, &ctx.rp.version).await?;
        let old_rv = meta(&old_v, "resourceVersion").map(String::from);
        if ctx.rp.sub.as_deref() == Some("scale") {
            let cur = scale_of(&ctx.def, &old_v);
            let patched =
                patch::apply_patch(kind, &cur, &p).map_err(|e| ApiError::new(422, "Invalid", e))?;
            return update_scale(ctx, &name, patched).await;
        }
        let patched = if kind == PatchKind::Apply {
            let manager = ctx.query.get("fieldManager").cloned().unwrap_or_default();
            let force = ctx.query.get("force").is_some_and(|f| f == "true");
            let now = crate::store::now_rfc3339();
            match crate::apply::server_side_apply(
                &old_v,
                &p,
                &manager,
                force,
                &ctx.def.api_version(&ctx.rp.version),
                &now,
            )
            .map_err(ApiError::bad_request)?
            {
                crate::apply::ApplyOutcome::Apply(o) => o,
                crate::apply::ApplyOutcome::Conflicts(c) => {
                    return Err(ApiError::new(
                        409,
                        "Conflict",
                        crate::apply::conflict_message(&c),
                    ));
                }
            }
        } else {
            patch::apply_patch(kind, &old_v, &p).map_err(|e| match kind {
                PatchKind::Json => ApiError::new(422, "Invalid", e),
                _ => ApiError::bad_request(e),
            })?
        };
        if !patched.is_object() {
            return Err(ApiError::bad_request(
                "the patch produced a value that is not an object",
            ));
        }
        let patch_rv = meta(&patched, "resourceVersion").map(String::from);
        let explicit = patch_rv.is_some() && patch_rv != old_rv;
        let expected = if explicit { patch_rv } else { old_rv };
        match write_update(
            ctx,
            &name,
            &old_v,
            patched,
            expected,
            kind != PatchKind::Apply,
        )
        .await
        {
            Ok((updated, warnings)) => {
                let out = to_version(ctx.state, &ctx.def, &updated, &ctx.rp.version).await?;
                return Ok(json_response(200, &out, &warnings));
            }
            Err(e) if e.code == 409 && e.reason == "Conflict" && !explicit && attempt < 7 => {
                continue;
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::conflict(ctx.target(&name)))
}

fn delete_options(ctx: &Ctx<'_>, bytes: &[u8], headers: &HeaderMap) -> ApiResult<DeleteOptions> {
    let body: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        decode_body(&content_type(headers), bytes)?
    };
    let prop = body
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .map(String::from)
        .or_else(|| ctx.query.get("propagationPolicy").cloned())
        .or_else(|| {
            match body
                .get("orphanDependents")
                .and_then(Value::as_bool)
                .or(ctx.query.get("orphanDependents").map(|v| v == "true"))
            {
                Some(true) => Some("Orphan".into()),
                Some(false) => Some("Background".into()),
                None => None,
            }
        });
    let propagation = match prop.as_deref() {
        None | Some("") => None,
        Some(p) => Some(Propagation::parse(p).ok_or_else(|| {
            ApiError::invalid(
                "DeleteOptions",
                "",
                "",
                &[crate::error::Cause {
                    reason: "FieldValueNotSupported".into(),
                    field: "propagationPolicy".into(),
                    detail: "supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                        .into(),
                    value: Some(format!("\"{p}\"")),
                }],
            )
        })?),
    };
    let grace = body
        .get("gracePeriodSeconds")
        .and_then(Value::as_i64)
        .or_else(|| {
            ctx.query
                .get("gracePeriodSeconds")
                .and_then(|g| g.parse().ok())
        });
    let dry = body
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "All"))
        || ctx.dry_run;
    Ok(DeleteOptions {
        propagation,
        grace,
        uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(String::from),
        rv: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(String::from),
        dry_run: dry,
    })
}

async fn delete(ctx: &Ctx<'_>, bytes: &[u8], headers: &HeaderMap) -> ApiResult<Response> {
    if ctx.rp.sub.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let name = ctx.rp.name.clone().unwrap_or_default();
    let opts = delete_options(ctx, bytes, headers)?;
    let old = ctx
        .state
        .store
        .get(&ctx.gr, &ctx.ns, &name)
        .ok_or_else(|| ApiError::not_found(ctx.target(&name)))?;
    let old_v = to_version(ctx.state, &ctx.def, &old, &ctx.rp.version).await?;
    let warnings =
        admission::validate(ctx.state, &attrs(ctx, "DELETE", &name), None, Some(&old_v)).await?;
    let res = ctx.state.store.delete(&ctx.gr, &ctx.ns, &name, &opts)?;
    let (code, obj) = match res {
        Deleted::Gone(o) => (200, o),
        Deleted::Marked(o) => (
            if opts.grace.is_some() || ctx.def.plural == "pods" {
                202
            } else {
                200
            },
            o,
        ),
    };
    let out = to_version(ctx.state, &ctx.def, &obj, &ctx.rp.version).await?;
    Ok(json_response(code, &out, &warnings))
}

async fn delete_collection(
    ctx: &Ctx<'_>,
    bytes: &[u8],
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let (ls, fs) = selectors(ctx)?;
    let opts = delete_options(ctx, bytes, headers)?;
    let (rv, items) = ctx.state.store.list(&ctx.gr, ctx.rp.namespace.as_deref());
    let mut deleted = Vec::new();
    for o in items
        .iter()
        .filter(|o| ls.matches(o.pointer("/metadata/labels")) && fs.matches(o))
    {
        let name = meta(o, "name").unwrap_or_default().to_string();
        let ns = meta(o, "namespace").unwrap_or_default().to_string();
        let old_v = to_version(ctx.state, &ctx.def, o, &ctx.rp.version).await?;
        admission::validate(ctx.state, &attrs(ctx, "DELETE", &name), None, Some(&old_v)).await?;
        match ctx.state.store.delete(&ctx.gr, &ns, &name, &opts) {
            Ok(Deleted::Gone(o) | Deleted::Marked(o)) => {
                deleted.push(to_version(ctx.state, &ctx.def, &o, &ctx.rp.version).await?)
            }
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json_response(
        200,
        &json!({"kind": list_kind(&ctx.def), "apiVersion": ctx.def.api_version(&ctx.rp.version), "metadata": {"resourceVersion": rv.to_string()}, "items": deleted}),
        &[],
    ))
}

async fn evict(ctx: &Ctx<'_>, bytes: &[u8], headers: &HeaderMap) -> ApiResult<Response> {
    let name = ctx.rp.name.clone().unwrap_or_default();
    let body = decode_body(&content_type(headers), bytes)?;
    if let Some(k) = body.get("kind").and_then(Value::as_str)
        && k != "Eviction"
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind (Eviction)"
        )));
    }
    if let Some(n) = meta(&body, "name")
        && n != name
    {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let pod = ctx
        .state
        .store
        .get(&ctx.gr, &ctx.ns, &name)
        .ok_or_else(|| ApiError::not_found(ctx.target(&name)))?;
    let pdb_gr: GroupResource = ("policy".into(), "poddisruptionbudgets".into());
    let (_, pdbs) = ctx.state.store.list(&pdb_gr, Some(&ctx.ns));
    let (_, pods) = ctx.state.store.list(&ctx.gr, Some(&ctx.ns));
    let pod_refs: Vec<&Value> = pods.iter().map(|p| p.as_ref()).collect();
    let pdb_values: Vec<Value> = pdbs.iter().map(|p| p.as_ref().clone()).collect();
    let statuses: Vec<Value> = pdb_values
        .iter()
        .map(|p| pdb::compute_status(p, &pod_refs))
        .collect();
    let dry_run = ctx.dry_run
        || body
            .pointer("/deleteOptions/dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"));
    match pdb::decide_eviction(&pod, &pdb_values, &statuses) {
        EvictionDecision::Deny(cause) => {
            let mut e = ApiError::new(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            );
            e.details = Some(json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]}));
            Err(e)
        }
        EvictionDecision::MultiplePdbs => Err(ApiError::internal(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        )),
        EvictionDecision::Allow(idx) => {
            if dry_run {
                return Ok(json_response(
                    201,
                    &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                    &[],
                ));
            }
            if let Some(i) = idx {
                let pdb_name = meta(&pdb_values[i], "name").unwrap_or_default().to_string();
                let mut st = statuses[i].clone();
                let allowed = st
                    .get("disruptionsAllowed")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                st["disruptionsAllowed"] = json!((allowed - 1).max(0));
                st["disruptedPods"][name.as_str()] = json!(crate::store::now_rfc3339());
                let key = crate::gc::ObjKey {
                    group: "policy".into(),
                    resource: "poddisruptionbudgets".into(),
                    namespace: ctx.ns.clone(),
                    name: pdb_name,
                };
                ctx.state.store.modify(&key, |o| o["status"] = st.clone());
            }
            let mut opts = DeleteOptions::default();
            if let Some(d) = body.get("deleteOptions") {
                opts.grace = d.get("gracePeriodSeconds").and_then(Value::as_i64);
                opts.uid = d
                    .pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(String::from);
                opts.rv = d
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(String::from);
            }
            ctx.state.store.delete(&ctx.gr, &ctx.ns, &name, &opts)?;
            Ok(json_response(
                201,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                &[],
            ))
        }
    }
}

async fn bind(ctx: &Ctx<'_>, bytes: &[u8], headers: &HeaderMap) -> ApiResult<Response> {
    let name = ctx.rp.name.clone().unwrap_or_default();
    let body = decode_body(&content_type(headers), bytes)?;
    let node = body
        .pointer("/target/name")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("target.name is required"))?
        .to_string();
    let key = crate::gc::ObjKey {
        group: String::new(),
        resource: "pods".into(),
        namespace: ctx.ns.clone(),
        name: name.clone(),
    };
    let cur = ctx
        .state
        .store
        .get(&ctx.gr, &ctx.ns, &name)
        .ok_or_else(|| ApiError::not_found(ctx.target(&name)))?;
    if cur
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty())
    {
        return Err(ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node {:?}",
                cur.pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ),
        ));
    }
    ctx.state
        .store
        .modify(&key, |o| o["spec"]["nodeName"] = json!(node));
    Ok(json_response(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        &[],
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn resource_paths() {
        let p = parse_resource_path("/api/v1/namespaces/default/pods/p1/eviction").unwrap();
        assert_eq!(
            (
                p.namespace.as_deref(),
                p.resource.as_str(),
                p.name.as_deref(),
                p.sub.as_deref()
            ),
            (Some("default"), "pods", Some("p1"), Some("eviction"))
        );
        let p = parse_resource_path("/api/v1/namespaces/kube-system").unwrap();
        assert_eq!(
            (p.resource.as_str(), p.name.as_deref(), p.namespace),
            ("namespaces", Some("kube-system"), None)
        );
        let p = parse_resource_path("/api/v1/namespaces/x/finalize").unwrap();
        assert_eq!(p.sub.as_deref(), Some("finalize"));
        let p = parse_resource_path("/apis/machine.sapcloud.io/v1alpha1/namespaces/ns/machines")
            .unwrap();
        assert_eq!(
            (p.group.as_str(), p.resource.as_str(), p.name),
            ("machine.sapcloud.io", "machines", None)
        );
        let p = parse_resource_path("/apis/apps/v1/watch/namespaces/ns/deployments").unwrap();
        assert!(p.watch);
        let p = parse_resource_path("/api/v1/nodes/n1/status").unwrap();
        assert_eq!(
            (p.resource.as_str(), p.sub.as_deref()),
            ("nodes", Some("status"))
        );
        assert!(parse_resource_path("/api/v1").is_none());
        assert!(parse_resource_path("/foo/bar").is_none());
        assert!(parse_resource_path("/api/v1/namespaces/a/pods/b/c/d").is_none());
    }

    #[test]
    fn query_decoding() {
        let q = parse_query(Some(
            "labelSelector=app%3Dweb%2Ctier+in+%28a%29&watch=true&x",
        ));
        assert_eq!(q["labelSelector"], "app=web,tier in (a)");
        assert_eq!(q["watch"], "true");
        assert_eq!(q["x"], "");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%"), "%");
    }

    #[test]
    fn bodies() {
        assert!(decode_body("application/json", b"{").unwrap_err().code == 400);
        assert_eq!(
            decode_body("application/vnd.kubernetes.protobuf", b"x")
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(decode_body("text/plain", b"x").unwrap_err().code, 415);
        assert_eq!(
            decode_body("application/yaml", b"a: 1\nb: [x]\n").unwrap(),
            json!({"a": 1, "b": ["x"]})
        );
        assert_eq!(
            decode_body("application/yaml", b"a: [").unwrap_err().code,
            400
        );
    }

    #[test]
    fn status_subresource_rules() {
        let def = crate::resources::builtins()
            .into_iter()
            .find(|d| d.plural == "deployments")
            .unwrap();
        let old =
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}, "status": {"replicas": 1}});
        let main = merge_for_subresource(
            &def,
            None,
            &old,
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 2}, "status": {"replicas": 9}}),
        );
        assert_eq!(main["status"]["replicas"], 1);
        assert_eq!(main["spec"]["replicas"], 2);
        let st = merge_for_subresource(
            &def,
            Some("status"),
            &old,
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 5}, "status": {"replicas": 3}}),
        );
        assert_eq!(st["status"]["replicas"], 3);
        assert_eq!(st["spec"]["replicas"], 1);
    }

    #[test]
    fn scale_view() {
        let def = crate::resources::builtins()
            .into_iter()
            .find(|d| d.plural == "replicasets")
            .unwrap();
        let o = json!({"metadata": {"name": "r", "namespace": "n"}, "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}}}, "status": {"replicas": 2}});
        let s = scale_of(&def, &o);
        assert_eq!(
            (
                s["spec"]["replicas"].as_i64(),
                s["status"]["replicas"].as_i64()
            ),
            (Some(3), Some(2))
        );
        assert_eq!(s["status"]["selector"], "a=b");
        let mut o2 = o.clone();
        set_path(&mut o2, ".spec.replicas", json!(7)).unwrap();
        assert_eq!(o2["spec"]["replicas"], 7);
    }

    #[test]
    fn watch_filter_transitions() {
        let f = WatchFilter {
            ns: None,
            name: None,
            ls: LabelSelector::parse("a=1").unwrap(),
            fs: FieldSelector::default(),
        };
        let inside = Arc::new(json!({"metadata": {"labels": {"a": "1"}}}));
        let outside = Arc::new(json!({"metadata": {"labels": {"a": "2"}}}));
        let ev = |old: &Arc<Value>, new: &Arc<Value>| Event {
            rv: 1,
            kind: EventType::Modified,
            obj: new.clone(),
            old: Some(old.clone()),
        };
        assert_eq!(f.translate(&ev(&outside, &inside)), Some(EventType::Added));
        assert_eq!(
            f.translate(&ev(&inside, &outside)),
            Some(EventType::Deleted)
        );
        assert_eq!(
            f.translate(&ev(&inside, &inside)),
            Some(EventType::Modified)
        );
        assert_eq!(f.translate(&ev(&outside, &outside)), None);
    }
}
