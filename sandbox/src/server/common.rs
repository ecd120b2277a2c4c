//! Shared pieces of request handling: URL and query parsing, body decoding, rendering, version
//! conversion and the per-request context.

use crate::admission::{self};
use crate::error::{ApiError, ApiResult, ErrTarget};
use crate::resource_path::ResourcePath;
use crate::resources::{Conversion, ResourceDef};
use crate::selector::LabelSelector;
use crate::state::AppState;
use crate::store::GroupResource;
use crate::table::{self};
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// Largest accepted request body (kube-apiserver's limit).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

pub(super) fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for pair in q.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        m.insert(percent_decode(k), percent_decode(v));
    }
    m
}

pub(super) fn percent_decode(s: &str) -> String {
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

pub(super) fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response {
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

pub(super) fn error_response(e: &ApiError) -> Response {
    e.clone().into_response()
}

/// Most of an oversized body read (and thrown away) before answering 413: enough for any client
/// that sends a body a few times the limit, bounded so a client streaming forever is cut off.
pub const MAX_DISCARD: usize = 256 * 1024 * 1024;

/// How long an oversized body is read before answering 413 anyway.
pub const DISCARD_TIME: std::time::Duration = std::time::Duration::from_secs(30);

/// kube-apiserver's answer to a body over [`MAX_BODY`].
pub fn too_large() -> ApiError {
    ApiError::new(
        413,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {MAX_BODY}"),
    )
}

/// Reads and drops the rest of a request body (up to [`MAX_DISCARD`] bytes or [`DISCARD_TIME`]).
/// A server that answers while the client is still sending and then closes the connection makes
/// the kernel reset it, and the client sees a dropped connection instead of the answer; once the
/// body is consumed the client reads the 413 like any other answer.
pub async fn discard_body(body: Body) {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut seen = 0usize;
    let drain = async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                seen = seen.saturating_add(data.len());
                if seen > MAX_DISCARD {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_TIME, drain).await;
}

pub(super) async fn read_body(body: Body) -> ApiResult<Bytes> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("unable to read the request body: {e}")))?;
        if let Some(data) = frame.data_ref() {
            if out.len().saturating_add(data.len()) > MAX_BODY {
                discard_body(body).await;
                return Err(too_large());
            }
            out.extend_from_slice(data);
        }
    }
    Ok(out.freeze())
}

pub(super) fn content_type(headers: &HeaderMap) -> String {
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
pub(super) enum Render {
    Full,
    Table,
    Partial,
}

pub(super) fn render_mode(headers: &HeaderMap) -> Render {
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

pub(super) fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
}

pub(super) fn meta<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
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

pub(super) async fn many_to_version(
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

pub(super) struct Ctx<'a> {
    pub(super) state: &'a AppState,
    pub(super) def: Arc<ResourceDef>,
    pub(super) gr: GroupResource,
    pub(super) rp: &'a ResourcePath,
    pub(super) ns: String,
    pub(super) query: &'a HashMap<String, String>,
    pub(super) dry_run: bool,
    pub(super) manager: String,
    /// The authenticated user.
    pub(super) user: &'a crate::authn::User,
}

impl Ctx<'_> {
    pub(super) fn target<'b>(&'b self, name: &'b str) -> ErrTarget<'b> {
        ErrTarget {
            group: &self.def.group,
            resource: &self.def.plural,
            name,
        }
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
    // autoscaling/v1 ScaleSpec's replicas is `omitempty`: kube sends `spec: {}` for 0.
    let replicas = first(&sc.spec_replicas)
        .and_then(|v| v.as_i64())
        .unwrap_or(0);
    let spec = if replicas == 0 {
        json!({})
    } else {
        json!({ "replicas": replicas })
    };
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta(obj, "name"), "namespace": meta(obj, "namespace"), "uid": meta(obj, "uid"),
            "resourceVersion": meta(obj, "resourceVersion"), "creationTimestamp": meta(obj, "creationTimestamp")
        },
        "spec": spec,
        "status": status
    })
}

pub(super) fn set_path(obj: &mut Value, path: &str, value: Value) -> ApiResult<()> {
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

/// The field manager of a write: `fieldManager`, else the User-Agent's program name.
pub(super) fn field_manager(query: &HashMap<String, String>, headers: &HeaderMap) -> String {
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
