//! POST subresources: pod eviction (honouring PodDisruptionBudgets) and binding.

use super::common::*;
use crate::error::{ApiError, ApiResult};
use crate::pdb::{self, EvictionDecision};
use crate::store::{DeleteOptions, GroupResource};
use axum::response::Response;
use http::HeaderMap;
use serde_json::{Value, json};

pub(super) async fn evict(ctx: &Ctx<'_>, bytes: &[u8], headers: &HeaderMap) -> ApiResult<Response> {
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

pub(super) async fn bind(ctx: &Ctx<'_>, bytes: &[u8], headers: &HeaderMap) -> ApiResult<Response> {
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
