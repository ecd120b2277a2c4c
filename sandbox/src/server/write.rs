//! Writes: create, update, patch (and the scale subresource, which writes through update),
//! with validation, defaulting, pruning and admission.

use super::common::*;
use crate::admission::{self, AdmissionAttrs};
use crate::error::{ApiError, ApiResult, Cause};
use crate::patch::{self, PatchKind};
use crate::resource_path::ResourcePath;
use crate::resources::ResourceDef;
use crate::schema;
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;

/// CRD pruning and defaulting in the given version; returns the pruned unknown field paths.
pub(super) fn prune_and_default(def: &ResourceDef, version: &str, obj: &mut Value) -> Vec<String> {
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

pub(super) fn diff_removed(before: &Value, after: &Value, prefix: &str, out: &mut Vec<String>) {
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

pub(super) fn validate_object(
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
    causes.extend(scale_causes(&ctx.def, obj));
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

/// kube-apiserver's checks of a custom resource with a scale subresource, before any validating
/// webhook: the replicas at `specReplicasPath` and `statusReplicasPath` are non-negative integers
/// (reported at the path as written, `.spec.replicas`), the label selector is a string.
fn scale_causes(def: &ResourceDef, obj: &Value) -> Vec<crate::error::Cause> {
    let Some(scale) = &def.scale else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    let invalid = |path: &str, value: &Value, detail: &str| crate::error::Cause {
        reason: "FieldValueInvalid".into(),
        field: path.to_owned(),
        detail: detail.to_owned(),
        value: Some(value.to_string()),
    };
    for path in [&scale.spec_replicas, &scale.status_replicas] {
        let Some(value) = crate::table::jsonpath(obj, path).into_iter().next() else {
            continue;
        };
        match value.as_i64() {
            Some(n) if n < 0 => {
                causes.push(invalid(path, &value, "should be a non-negative integer"))
            }
            Some(_) => {}
            None if value.is_null() => {}
            None => causes.push(invalid(path, &value, "should be an integer")),
        }
    }
    if let Some(path) = &scale.label_selector
        && let Some(value) = crate::table::jsonpath(obj, path).into_iter().next()
        && !value.is_string()
        && !value.is_null()
    {
        causes.push(invalid(path, &value, "should be a string"));
    }
    causes
}

pub(super) fn check_type(ctx: &Ctx<'_>, obj: &Value) -> ApiResult<()> {
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

pub(super) fn normalise(ctx: &Ctx<'_>, obj: &mut Value) {
    obj["apiVersion"] = json!(ctx.def.api_version(&ctx.rp.version));
    obj["kind"] = json!(ctx.def.kind);
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    if ctx.def.namespaced {
        obj["metadata"]["namespace"] = json!(ctx.ns);
    }
}

pub(super) fn attrs<'a>(ctx: &'a Ctx<'a>, operation: &'a str, name: &'a str) -> AdmissionAttrs<'a> {
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

pub(super) async fn to_storage(ctx: &Ctx<'_>, obj: &Value) -> ApiResult<Value> {
    if ctx.def.group == "events.k8s.io" {
        return Ok(crate::builtin::event_new_to_core(obj));
    }
    to_version(ctx.state, &ctx.def, obj, &ctx.def.storage_version).await
}

pub(super) async fn create(ctx: &Ctx<'_>, mut obj: Value) -> ApiResult<Response> {
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
pub(super) fn merge_for_subresource(
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

pub(super) async fn write_update(
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

pub(super) async fn update(ctx: &Ctx<'_>, mut obj: Value) -> ApiResult<Response> {
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

pub(super) async fn update_scale(ctx: &Ctx<'_>, name: &str, scale: Value) -> ApiResult<Response> {
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
        user: ctx.user,
    };
    let (updated, warnings) = write_update(&sub_ctx, name, &old_v, next, expected, true).await?;
    let out = to_version(ctx.state, &ctx.def, &updated, &ctx.rp.version).await?;
    Ok(json_response(200, &scale_of(&ctx.def, &out), &warnings))
}

pub(super) async fn patch(ctx: &Ctx<'_>, kind: PatchKind, p: Value) -> ApiResult<Response> {
    let name = ctx.rp.name.clone().unwrap_or_default();
    if kind == PatchKind::Apply && ctx.query.get("fieldManager").is_none_or(String::is_empty) {
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            &[Cause {
                reason: "FieldValueRequired".into(),
                field: "fieldManager".into(),
                detail: "is required for apply patch".into(),
                value: None,
            }],
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
                let empty = json!({"apiVersion": ctx.def.api_version(&ctx.rp.version), "kind": ctx.def.kind, "metadata": {"name": name}});
                let obj = apply_to(ctx, &empty, &p)?;
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
            apply_to(ctx, &old_v, &p)?
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

/// Server-side apply of `patch` onto `base` with the request's field manager and `force`; field
/// conflicts answer 409 as kube-apiserver does.
fn apply_to(ctx: &Ctx<'_>, base: &Value, patch: &Value) -> ApiResult<Value> {
    let manager = ctx.query.get("fieldManager").cloned().unwrap_or_default();
    let force = ctx.query.get("force").is_some_and(|f| f == "true");
    let now = crate::store::now_rfc3339();
    match crate::apply::server_side_apply(
        base,
        patch,
        &manager,
        force,
        &ctx.def.api_version(&ctx.rp.version),
        &now,
    )
    .map_err(ApiError::bad_request)?
    {
        crate::apply::ApplyOutcome::Apply(object) => Ok(object),
        crate::apply::ApplyOutcome::Conflicts(conflicts) => Err(ApiError::new(
            409,
            "Conflict",
            crate::apply::conflict_message(&conflicts),
        )),
    }
}
