//! Deletes: one object or a collection, with delete options and preconditions.

use super::common::*;
use super::read::*;
use super::write::*;
use crate::admission::{self};
use crate::error::{ApiError, ApiResult};
use crate::gc::Propagation;
use crate::store::{DeleteOptions, Deleted};
use axum::response::Response;
use http::HeaderMap;
use serde_json::{Value, json};

pub(super) fn delete_options(
    ctx: &Ctx<'_>,
    bytes: &[u8],
    headers: &HeaderMap,
) -> ApiResult<DeleteOptions> {
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

pub(super) async fn delete(
    ctx: &Ctx<'_>,
    bytes: &[u8],
    headers: &HeaderMap,
) -> ApiResult<Response> {
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

pub(super) async fn delete_collection(
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
