//! Reads: get and list (with selectors, paging, tables and exact resource versions).

use super::common::*;
use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::table::{self, IncludeObject};
use axum::response::Response;
use base64::Engine;
use http::HeaderMap;
use serde_json::{Value, json};
use std::collections::HashMap;

pub(super) async fn get(ctx: &Ctx<'_>, headers: &HeaderMap) -> ApiResult<Response> {
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

pub(super) fn include_object(q: &HashMap<String, String>) -> IncludeObject {
    match q.get("includeObject").map(String::as_str) {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    }
}

pub(super) fn printer_columns(def: &ResourceDef, version: &str) -> Vec<Value> {
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
        // kube's node printer: STATUS and ROLES are computed (Ready/NotReady/Unknown, roles from
        // the node-role labels).
        ("", "nodes") => vec![
            json!({"name": "Status", "type": "string", "x-compute": "node-status"}),
            json!({"name": "Roles", "type": "string", "x-compute": "node-roles"}),
            age,
            json!({"name": "Version", "type": "string", "jsonPath": ".status.nodeInfo.kubeletVersion"}),
        ],
        ("apps", "deployments" | "replicasets" | "statefulsets") => vec![
            json!({"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"}),
            json!({"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"}),
            age,
        ],
        (group, plural) => table::builtin_columns(group, plural).unwrap_or_else(|| vec![age]),
    }
}

pub(super) fn selectors(ctx: &Ctx<'_>) -> ApiResult<(LabelSelector, FieldSelector)> {
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
pub(super) fn exact_resource_version(query: &HashMap<String, String>) -> ApiResult<Option<u64>> {
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

pub(super) fn list_kind(def: &ResourceDef) -> String {
    format!("{}List", def.kind)
}

pub(super) async fn list(ctx: &Ctx<'_>, headers: &HeaderMap) -> ApiResult<Response> {
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
