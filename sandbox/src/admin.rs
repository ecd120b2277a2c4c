//! `/sandbox/admin/...`: the fault-injection and counter controls over HTTP (JSON).
//!
//! - `GET counters`, `POST counters/reset`
//! - `POST unavailable` `{"seconds": 5, "mode": "ServiceUnavailable" | "Refuse", "closeWatches": true}`
//!   (open watches are closed unless `closeWatches` is false, as a stopped kube-apiserver closes
//!   them; the node monitor pauses meanwhile), `DELETE unavailable`
//! - `POST latency` `{"millis": 100}`
//! - `POST watch-delay` `{"millis": 300}` (0 turns it off)
//! - `POST errors` (an [`ErrorRule`]), `DELETE errors`
//! - `POST watches/close`
//! - `GET denials` (403 answers per user), `POST denials/reset`
//! - `GET requesters`, `POST requesters/reset` (see [`crate::requesters`])

use crate::error::ApiError;
use crate::faults::{ErrorRule, UnavailableMode};
use crate::state::AppState;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::Method;
use serde_json::{Value, json};
use std::time::Duration;

fn ok(v: Value) -> Response {
    (
        http::StatusCode::OK,
        [(http::header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

/// Handles one admin request (`rest` is the path after `/sandbox/admin`).
pub async fn handle(state: &AppState, method: Method, rest: &str, body: Body) -> Response {
    let bytes = match axum::body::to_bytes(body, 64 * 1024).await {
        Ok(b) => b,
        Err(e) => return ApiError::bad_request(format!("unreadable body: {e}")).into_response(),
    };
    let parse = || -> Result<Value, Box<Response>> {
        if bytes.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            Box::new(ApiError::bad_request(format!("invalid JSON: {e}")).into_response())
        })
    };
    let f = &state.faults;
    match (method, rest.trim_end_matches('/')) {
        (Method::GET, "/counters") => ok(serde_json::to_value(f.counters()).unwrap_or(Value::Null)),
        (Method::GET, "/denials") => ok(json!(state.denials.snapshot())),
        (Method::POST, "/denials/reset") => {
            state.denials.reset();
            ok(json!({"reset": true}))
        }
        (Method::POST, "/counters/reset") => {
            f.reset_counters();
            ok(json!({"reset": true}))
        }
        (Method::POST, "/unavailable") => {
            let v = match parse() {
                Ok(v) => v,
                Err(r) => return *r,
            };
            let secs = v
                .get("seconds")
                .and_then(Value::as_f64)
                .unwrap_or(10.0)
                .max(0.0);
            let mode = match v.get("mode").and_then(Value::as_str) {
                Some("Refuse") => UnavailableMode::Refuse,
                None | Some("ServiceUnavailable") => UnavailableMode::ServiceUnavailable,
                Some(other) => {
                    return ApiError::bad_request(format!("unknown mode {other:?}"))
                        .into_response();
                }
            };
            let close_watches = v
                .get("closeWatches")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            f.set_unavailable(Duration::from_secs_f64(secs), mode);
            if close_watches {
                f.close_all_watches();
            }
            ok(json!({"unavailableSeconds": secs, "closeWatches": close_watches}))
        }
        (Method::DELETE, "/unavailable") => {
            f.clear_unavailable();
            ok(json!({"unavailable": false}))
        }
        (Method::POST, "/latency") => {
            let v = match parse() {
                Ok(v) => v,
                Err(r) => return *r,
            };
            let ms = v.get("millis").and_then(Value::as_u64).unwrap_or(0);
            f.set_latency(Duration::from_millis(ms));
            ok(json!({"millis": ms}))
        }
        (Method::POST, "/watch-delay") => {
            let v = match parse() {
                Ok(v) => v,
                Err(r) => return *r,
            };
            let ms = v.get("millis").and_then(Value::as_u64).unwrap_or(0);
            f.set_watch_delay(Duration::from_millis(ms));
            ok(json!({"millis": ms}))
        }
        (Method::POST, "/errors") => {
            let v = match parse() {
                Ok(v) => v,
                Err(r) => return *r,
            };
            match serde_json::from_value::<ErrorRule>(v) {
                Ok(rule) if (0.0..=1.0).contains(&rule.rate) => {
                    f.inject_errors(rule);
                    ok(json!({"added": true}))
                }
                Ok(_) => ApiError::bad_request("rate must be within 0..=1").into_response(),
                Err(e) => ApiError::bad_request(format!("invalid error rule: {e}")).into_response(),
            }
        }
        (Method::DELETE, "/errors") => {
            f.clear_errors();
            ok(json!({"cleared": true}))
        }
        (Method::GET, "/requesters") => {
            ok(serde_json::to_value(f.requesters.snapshot()).unwrap_or(Value::Null))
        }
        (Method::POST, "/requesters/reset") => {
            f.requesters.reset();
            ok(json!({"reset": true}))
        }
        (Method::POST, "/watches/close") => {
            f.close_all_watches();
            ok(json!({"closed": true}))
        }
        _ => ApiError::not_found_path().into_response(),
    }
}
