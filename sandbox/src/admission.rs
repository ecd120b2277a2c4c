//! Admission webhooks (mutating, then validating) and CRD conversion webhooks, called over HTTPS
//! with caBundle verification, worded as kube-apiserver words their results.

use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceDef;
use crate::selector::LabelSelector;
use crate::state::AppState;
use base64::Engine;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What is being admitted.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionAttrs<'a> {
    /// Resource type.
    pub def: &'a ResourceDef,
    /// Request version.
    pub version: &'a str,
    /// Subresource.
    pub sub: Option<&'a str>,
    /// CREATE, UPDATE, DELETE, CONNECT.
    pub operation: &'a str,
    /// Namespace ("" when cluster-scoped).
    pub namespace: &'a str,
    /// Object name (may be empty on generateName creates).
    pub name: &'a str,
    /// dryRun=All.
    pub dry_run: bool,
}

fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether one webhook's rules select the request (`matchPolicy: Equivalent` ignores the version).
pub fn rules_match(webhook: &Value, a: &AdmissionAttrs<'_>) -> bool {
    let exact = webhook.get("matchPolicy").and_then(Value::as_str) == Some("Exact");
    let resource = match a.sub {
        Some(s) => format!("{}/{s}", a.def.plural),
        None => a.def.plural.clone(),
    };
    let Some(rules) = webhook.get("rules").and_then(Value::as_array) else {
        return false;
    };
    rules.iter().any(|r| {
        let ops = str_list(r.get("operations"));
        let groups = str_list(r.get("apiGroups"));
        let versions = str_list(r.get("apiVersions"));
        let resources = str_list(r.get("resources"));
        let scope = r.get("scope").and_then(Value::as_str).unwrap_or("*");
        let op_ok = ops.iter().any(|o| o == "*" || o == a.operation);
        let group_ok = groups.iter().any(|g| g == "*" || g == &a.def.group);
        let version_ok = !exact || versions.iter().any(|v| v == "*" || v == a.version);
        let res_ok = resources.iter().any(|rr| {
            if rr == "*/*" || rr == &resource {
                return true;
            }
            match (rr.split_once('/'), a.sub) {
                (None, None) => rr == "*",
                (Some(("*", sub)), Some(s)) => sub == s,
                (Some((res, "*")), Some(_)) => res == a.def.plural,
                _ => false,
            }
        });
        let scope_ok = match scope {
            "Cluster" => !a.def.namespaced,
            "Namespaced" => a.def.namespaced,
            _ => true,
        };
        op_ok && group_ok && version_ok && res_ok && scope_ok
    })
}

fn selector_matches(sel: Option<&Value>, labels: Option<&Value>) -> bool {
    match sel {
        None => true,
        Some(s) => LabelSelector::from_object(s)
            .map(|ls| ls.matches(labels))
            .unwrap_or(false),
    }
}

async fn applies(
    state: &AppState,
    wh: &Value,
    a: &AdmissionAttrs<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> bool {
    if !rules_match(wh, a) {
        return false;
    }
    if a.def.namespaced {
        let ns = state
            .store
            .get(&(String::new(), "namespaces".into()), "", a.namespace);
        if !selector_matches(
            wh.get("namespaceSelector"),
            ns.as_ref().and_then(|n| n.pointer("/metadata/labels")),
        ) {
            return false;
        }
    } else if a.def.group.is_empty() && a.def.plural == "namespaces" {
        let labels = obj.or(old).and_then(|o| o.pointer("/metadata/labels"));
        if !selector_matches(wh.get("namespaceSelector"), labels) {
            return false;
        }
    }
    let os = wh.get("objectSelector");
    let new_ok = obj.is_some_and(|o| selector_matches(os, o.pointer("/metadata/labels")));
    let old_ok = old.is_some_and(|o| selector_matches(os, o.pointer("/metadata/labels")));
    new_ok || old_ok
}

fn new_uid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = jiff::Timestamp::now().as_nanosecond() as u64;
    format!(
        "{:08x}-{:04x}-4000-8000-{:012x}",
        (t >> 32) as u32,
        (n & 0xffff) as u16,
        t & 0xffff_ffff_ffff
    )
}

fn review(a: &AdmissionAttrs<'_>, obj: Option<&Value>, old: Option<&Value>, uid: &str) -> Value {
    let kind = json!({"group": a.def.group, "version": a.version, "kind": a.def.kind});
    let resource = json!({"group": a.def.group, "version": a.version, "resource": a.def.plural});
    let options_kind = match a.operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    let mut req = json!({
        "uid": uid, "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
        "name": a.name, "namespace": a.namespace, "operation": a.operation,
        "userInfo": {"username": "sandbox-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": obj.cloned().unwrap_or(Value::Null), "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": a.dry_run, "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"}
    });
    if let Some(s) = a.sub {
        req["subResource"] = json!(s);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// kube-apiserver's rejection wording (`webhookerrors.ToStatusErr`).
pub fn denial(name: &str, result: Option<&Value>) -> ApiError {
    let msg = result
        .and_then(|r| r.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let reason = result
        .and_then(|r| r.get("reason"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let code = result
        .and_then(|r| r.get("code"))
        .and_then(Value::as_u64)
        .unwrap_or(0) as u16;
    let denied_by = format!("admission webhook \"{name}\" denied the request");
    let message = if !msg.is_empty() {
        format!("{denied_by}: {msg}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    };
    let mut e = ApiError::new(code.max(400), reason, message);
    if let Some(d) = result.and_then(|r| r.get("details")) {
        e.details = Some(d.clone());
    }
    e
}

async fn configs(state: &AppState, resource: &str) -> Vec<Arc<Value>> {
    let (_, mut list) = state.store.list(
        &("admissionregistration.k8s.io".into(), resource.into()),
        None,
    );
    list.sort_by(|a, b| {
        a.pointer("/metadata/name")
            .and_then(Value::as_str)
            .cmp(&b.pointer("/metadata/name").and_then(Value::as_str))
    });
    list
}

fn exempt(a: &AdmissionAttrs<'_>) -> bool {
    a.def.group == "admissionregistration.k8s.io"
}

enum CallOutcome {
    Response(Value),
    Skip,
}

async fn call_webhook(
    state: &AppState,
    wh: &Value,
    a: &AdmissionAttrs<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> ApiResult<CallOutcome> {
    let name = wh.get("name").and_then(Value::as_str).unwrap_or_default();
    let side_effects = wh
        .get("sideEffects")
        .and_then(Value::as_str)
        .unwrap_or("Unknown");
    if a.dry_run && !matches!(side_effects, "None" | "NoneOnDryRun") {
        return Err(ApiError::bad_request(format!(
            "admission webhook \"{name}\" does not support dry run"
        )));
    }
    let versions = str_list(wh.get("admissionReviewVersions"));
    let ignore = wh.get("failurePolicy").and_then(Value::as_str) == Some("Ignore");
    let fail = |msg: String| -> ApiResult<CallOutcome> {
        if ignore {
            tracing::warn!(webhook = name, error = %msg, "webhook failed, ignored by failurePolicy");
            Ok(CallOutcome::Skip)
        } else {
            Err(ApiError::internal(format!(
                "failed calling webhook \"{name}\": {msg}"
            )))
        }
    };
    if !versions.is_empty() && !versions.iter().any(|v| v == "v1") {
        return fail("webhook does not accept v1 AdmissionReview".into());
    }
    let timeout = Duration::from_secs(
        wh.get("timeoutSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(10)
            .clamp(1, 30),
    );
    let uid = new_uid();
    let body = review(a, obj, old, &uid);
    let cc = wh.get("clientConfig").cloned().unwrap_or(Value::Null);
    match post_json(state, &cc, &body, timeout).await {
        Ok(resp) => {
            let r = resp.get("response").cloned().unwrap_or(Value::Null);
            if r.get("uid").and_then(Value::as_str) != Some(uid.as_str()) {
                return fail(format!(
                    "expected response.uid={uid:?}, got {:?}",
                    r.get("uid").and_then(Value::as_str).unwrap_or_default()
                ));
            }
            Ok(CallOutcome::Response(r))
        }
        Err(e) => fail(format!("failed to call webhook: {e}")),
    }
}

fn warnings_of(r: &Value) -> Vec<String> {
    str_list(r.get("warnings"))
}

/// Runs mutating webhooks in order, applying their JSON patches.
pub async fn mutate(
    state: &AppState,
    a: &AdmissionAttrs<'_>,
    mut obj: Value,
    old: Option<&Value>,
) -> ApiResult<(Value, Vec<String>)> {
    let mut warnings = Vec::new();
    if exempt(a) {
        return Ok((obj, warnings));
    }
    for cfg in configs(state, "mutatingwebhookconfigurations").await {
        for wh in cfg
            .get("webhooks")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            if !applies(state, &wh, a, Some(&obj), old).await {
                continue;
            }
            let name = wh
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let r = match call_webhook(state, &wh, a, Some(&obj), old).await? {
                CallOutcome::Skip => continue,
                CallOutcome::Response(r) => r,
            };
            warnings.extend(warnings_of(&r));
            if !r.get("allowed").and_then(Value::as_bool).unwrap_or(false) {
                return Err(denial(&name, r.get("status")));
            }
            if let Some(p) = r.get("patch").and_then(Value::as_str) {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(p)
                    .map_err(|e| {
                        ApiError::internal(format!(
                            "webhook \"{name}\" returned a patch that is not base64: {e}"
                        ))
                    })?;
                let ops: json_patch::Patch = serde_json::from_slice(&bytes).map_err(|e| {
                    ApiError::internal(format!(
                        "webhook \"{name}\" returned an invalid JSON patch: {e}"
                    ))
                })?;
                json_patch::patch(&mut obj, &ops).map_err(|e| {
                    ApiError::internal(format!(
                        "webhook \"{name}\" returned a patch that does not apply: {e}"
                    ))
                })?;
            }
        }
    }
    Ok((obj, warnings))
}

/// Runs validating webhooks; any denial fails the request.
pub async fn validate(
    state: &AppState,
    a: &AdmissionAttrs<'_>,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> ApiResult<Vec<String>> {
    let mut warnings = Vec::new();
    if exempt(a) {
        return Ok(warnings);
    }
    for cfg in configs(state, "validatingwebhookconfigurations").await {
        for wh in cfg
            .get("webhooks")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            if !applies(state, &wh, a, obj, old).await {
                continue;
            }
            let name = wh
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let r = match call_webhook(state, &wh, a, obj, old).await? {
                CallOutcome::Skip => continue,
                CallOutcome::Response(r) => r,
            };
            warnings.extend(warnings_of(&r));
            if !r.get("allowed").and_then(Value::as_bool).unwrap_or(false) {
                return Err(denial(&name, r.get("status")));
            }
        }
    }
    Ok(warnings)
}

/// Converts objects through a CRD conversion webhook (ConversionReview v1).
pub async fn convert(
    state: &AppState,
    client_config: &Value,
    objects: Vec<Value>,
    desired: &str,
) -> ApiResult<Vec<Value>> {
    if objects.is_empty() {
        return Ok(objects);
    }
    let uid = new_uid();
    let n = objects.len();
    let body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects}});
    let resp = post_json(state, client_config, &body, Duration::from_secs(30))
        .await
        .map_err(|e| ApiError::internal(format!("conversion webhook for {desired} failed: {e}")))?;
    let r = resp.get("response").cloned().unwrap_or(Value::Null);
    if r.pointer("/result/status").and_then(Value::as_str) != Some("Success") {
        let msg = r
            .pointer("/result/message")
            .and_then(Value::as_str)
            .unwrap_or("conversion failed");
        return Err(ApiError::internal(format!(
            "conversion webhook for {desired} failed: {msg}"
        )));
    }
    let out = r
        .get("convertedObjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if out.len() != n {
        return Err(ApiError::internal(format!(
            "conversion webhook for {desired} returned {} objects, expected {n}",
            out.len()
        )));
    }
    if let Some(bad) = out
        .iter()
        .find(|o| o.get("apiVersion").and_then(Value::as_str) != Some(desired))
    {
        return Err(ApiError::internal(format!(
            "conversion webhook for {desired} returned invalid object: apiVersion {:?}",
            bad.get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
        )));
    }
    Ok(out)
}

/// Where and how to reach a webhook.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// true for https.
    pub tls: bool,
    /// Host for SNI / certificate verification.
    pub host: String,
    /// Address to connect to (host:port).
    pub connect: String,
    /// Path and query.
    pub path: String,
}

/// Resolves `clientConfig.url` or `clientConfig.service` (through the configured service map).
pub fn resolve(
    client_config: &Value,
    services: &std::collections::HashMap<(String, String), std::net::SocketAddr>,
) -> Result<Endpoint, String> {
    if let Some(url) = client_config.get("url").and_then(Value::as_str) {
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!("unsupported webhook URL {url:?}"));
        };
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => (
                h.trim_matches(['[', ']']).to_string(),
                p.parse::<u16>()
                    .map_err(|_| format!("bad port in {url:?}"))?,
            ),
            _ => (
                hostport.trim_matches(['[', ']']).to_string(),
                if tls { 443 } else { 80 },
            ),
        };
        let connect = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        return Ok(Endpoint {
            tls,
            host,
            connect,
            path: path.to_string(),
        });
    }
    if let Some(svc) = client_config.get("service") {
        let ns = svc
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = svc.get("name").and_then(Value::as_str).unwrap_or_default();
        let path = svc.get("path").and_then(Value::as_str).unwrap_or("/");
        let addr = services
            .get(&(ns.to_string(), name.to_string()))
            .ok_or_else(|| format!("service \"{name}\" in namespace \"{ns}\" has no address configured in the sandbox (SandboxConfig::service_addresses)"))?;
        return Ok(Endpoint {
            tls: true,
            host: format!("{name}.{ns}.svc"),
            connect: addr.to_string(),
            path: path.to_string(),
        });
    }
    Err("clientConfig needs url or service".into())
}

fn roots_from_bundle(ca: Option<&str>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(b64) = ca.filter(|c| !c.is_empty()) {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("caBundle is not base64: {e}"))?;
        use rustls_pki_types::pem::PemObject;
        for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("caBundle is not PEM: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("caBundle certificate rejected: {e}"))?;
        }
    }
    Ok(roots)
}

/// The address of a `clientConfig.service` from the Endpoints object of the same name, as
/// kube-apiserver's service resolver finds it (first address, first port).
fn endpoints_address(
    state: &AppState,
    client_config: &Value,
) -> Option<((String, String), std::net::SocketAddr)> {
    let svc = client_config.get("service")?;
    let ns = svc.get("namespace").and_then(Value::as_str)?;
    let name = svc.get("name").and_then(Value::as_str)?;
    let ep = state
        .store
        .get(&(String::new(), "endpoints".to_string()), ns, name)?;
    let subset = ep.get("subsets")?.as_array()?.first()?;
    let ip = subset.pointer("/addresses/0/ip")?.as_str()?;
    let port = subset.pointer("/ports/0/port")?.as_u64()?;
    let addr = format!("{ip}:{port}").parse().ok()?;
    Some(((ns.to_string(), name.to_string()), addr))
}

/// POSTs JSON to a webhook and returns the JSON answer.
pub async fn post_json(
    state: &AppState,
    client_config: &Value,
    body: &Value,
    timeout: Duration,
) -> Result<Value, String> {
    let ep = match resolve(client_config, &state.service_addresses) {
        Ok(ep) => ep,
        Err(e) => match endpoints_address(state, client_config) {
            Some((key, addr)) => resolve(client_config, &HashMap::from([(key, addr)]))?,
            None => return Err(e),
        },
    };
    let payload = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    let fut = async {
        let tcp = tokio::net::TcpStream::connect(&ep.connect)
            .await
            .map_err(|e| format!("dial tcp {}: {e}", ep.connect))?;
        let req = http::Request::builder()
            .method("POST")
            .uri(&ep.path)
            .header(http::header::HOST, ep.host.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(payload)))
            .map_err(|e| e.to_string())?;
        let resp = if ep.tls {
            let roots = roots_from_bundle(client_config.get("caBundle").and_then(Value::as_str))?;
            let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
            let server_name = rustls_pki_types::ServerName::try_from(ep.host.clone())
                .map_err(|e| format!("invalid host {:?}: {e}", ep.host))?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
                .connect(server_name, tcp)
                .await
                .map_err(|e| format!("tls: {e}"))?;
            send(tls, req).await?
        } else {
            send(tcp, req).await?
        };
        Ok::<_, String>(resp)
    };
    let (status, bytes) = tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("context deadline exceeded (timeout {}s)", timeout.as_secs()))??;
    if !(200..300).contains(&status) {
        return Err(format!(
            "the server responded with status {status}: {}",
            String::from_utf8_lossy(&bytes)
                .chars()
                .take(200)
                .collect::<String>()
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("invalid JSON response: {e}"))
}

async fn send<S>(
    io: S,
    req: http::Request<http_body_util::Full<bytes::Bytes>>,
) -> Result<(u16, bytes::Bytes), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "webhook connection ended");
        }
    });
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn def() -> ResourceDef {
        crate::resources::builtins()
            .into_iter()
            .find(|d| d.plural == "pods")
            .unwrap()
    }

    #[test]
    fn rules() {
        let d = def();
        let a = AdmissionAttrs {
            def: &d,
            version: "v1",
            sub: None,
            operation: "CREATE",
            namespace: "ns",
            name: "p",
            dry_run: false,
        };
        let wh = json!({"rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]});
        assert!(rules_match(&wh, &a));
        let wh2 = json!({"rules": [{"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]});
        assert!(!rules_match(&wh2, &a));
        let sub = AdmissionAttrs {
            sub: Some("status"),
            ..a
        };
        assert!(!rules_match(&wh, &sub));
        let wh3 = json!({"rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/status"]}]});
        assert!(rules_match(&wh3, &sub));
        let exact = json!({"matchPolicy": "Exact", "rules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v2"], "resources": ["pods"], "scope": "Namespaced"}]});
        assert!(!rules_match(&exact, &a));
        let equivalent = json!({"rules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v2"], "resources": ["pods"], "scope": "Cluster"}]});
        assert!(!rules_match(&equivalent, &a));
    }

    #[test]
    fn denial_wording() {
        let e = denial(
            "validate.machine.sapcloud.io",
            Some(&json!({"message": "spec.class is required", "code": 422, "reason": "Invalid"})),
        );
        assert_eq!(
            e.message,
            "admission webhook \"validate.machine.sapcloud.io\" denied the request: spec.class is required"
        );
        assert_eq!(e.code, 422);
        let e = denial("w", None);
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                "admission webhook \"w\" denied the request without explanation"
            )
        );
    }

    #[test]
    fn endpoints() {
        let m = std::collections::HashMap::from([(
            ("ns".to_string(), "svc".to_string()),
            "127.0.0.1:9443".parse().unwrap(),
        )]);
        let e = resolve(
            &json!({"service": {"namespace": "ns", "name": "svc", "path": "/validate"}}),
            &m,
        )
        .unwrap();
        assert_eq!(
            (e.host.as_str(), e.connect.as_str(), e.path.as_str(), e.tls),
            ("svc.ns.svc", "127.0.0.1:9443", "/validate", true)
        );
        let e = resolve(&json!({"url": "https://127.0.0.1:8443/convert"}), &m).unwrap();
        assert_eq!(
            (e.host.as_str(), e.connect.as_str(), e.path.as_str()),
            ("127.0.0.1", "127.0.0.1:8443", "/convert")
        );
        assert!(resolve(&json!({"service": {"namespace": "x", "name": "y"}}), &m).is_err());
        assert!(resolve(&json!({"url": "ftp://x"}), &m).is_err());
        assert!(roots_from_bundle(Some("!!")).is_err());
    }
}
