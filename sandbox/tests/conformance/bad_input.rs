//! Bad requests are answered promptly with `metav1.Status` bodies and the right HTTP code.

use serde_json::json;

use crate::common::{Target, raw};

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_is_400() {
    let t = Target::sandbox_or_env().await;
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[JSON],
        b"{\"apiVersion\": \"v1\", \"kind\": ".to_vec(),
    )
    .await;
    response.assert_status_object(400, "BadRequest", "truncated JSON body");
    let response = raw(&t.client, "POST", &path, &[JSON], b"[1, 2, 3]".to_vec()).await;
    response.assert_status_object(400, "BadRequest", "a JSON array instead of an object");
    let response = raw(
        &t.client,
        "PATCH",
        &format!("{path}/missing-or-not"),
        &[("content-type", "application/merge-patch+json")],
        b"{not json".to_vec(),
    )
    .await;
    assert!(
        response.status == 400 || response.status == 404,
        "a malformed patch body is 400 (or 404 when the object is missing first); got {}",
        response.status
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_kind_or_version_in_body_is_400() {
    let t = Target::sandbox_or_env().await;
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let body = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "k"}});
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[JSON],
        body.to_string().into_bytes(),
    )
    .await;
    response.assert_status_object(
        400,
        "BadRequest",
        "a Secret posted to the configmaps endpoint",
    );
    let body = json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "k"}});
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[JSON],
        body.to_string().into_bytes(),
    )
    .await;
    response.assert_status_object(400, "BadRequest", "a body with another group's apiVersion");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_resource_or_group_is_404() {
    let t = Target::sandbox_or_env().await;
    for path in [
        format!("/api/v1/namespaces/{}/doesnotexist", t.ns),
        "/apis/apps/v9/deployments".to_string(),
    ] {
        let response = raw(&t.client, "GET", &path, &[], vec![]).await;
        response.assert_status_object(404, "NotFound", &format!("GET {path}"));
    }
    // A group nobody serves never reaches an API handler: kube's mux answers in plain text.
    for path in ["/apis/nothing.example.com/v1/things", "/nonsense"] {
        let response = raw(&t.client, "GET", path, &[], vec![]).await;
        assert_eq!(response.status, 404, "GET {path}");
        assert_eq!(
            String::from_utf8_lossy(&response.body).trim_end(),
            "404 page not found",
            "GET {path}: kube's plain-text 404"
        );
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_3_mib_is_413() {
    let t = Target::sandbox_or_env().await;
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let big = "x".repeat(3 * 1024 * 1024 + 1024);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"big": big}});
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[JSON],
        body.to_string().into_bytes(),
    )
    .await;
    response.assert_status_object(413, "RequestEntityTooLarge", "a request body over 3 MiB");
    t.finish().await;
}

/// A body many times the limit is still answered (413 with a Status), not a reset connection:
/// the client is still sending when the server has decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_far_over_the_limit_is_413_not_a_dropped_connection() {
    let t = Target::sandbox_or_env().await;
    let big = "x".repeat(24 * 1024 * 1024);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "huge"}, "data": {"big": big}})
        .to_string()
        .into_bytes();
    for path in [
        format!("/api/v1/namespaces/{}/configmaps", t.ns),
        // Refused before the handler reads anything (no such resource).
        format!("/api/v1/namespaces/{}/nosuchthings", t.ns),
    ] {
        let response = raw(&t.client, "POST", &path, &[JSON], body.clone()).await;
        if path.ends_with("configmaps") || response.status == 413 {
            response.assert_status_object(413, "RequestEntityTooLarge", "a 24 MiB request body");
        } else {
            // kube-apiserver may route first (404); any answer is fine, only a reset is not.
            assert!(
                response.status.is_client_error(),
                "{path}: {}",
                response.status
            );
        }
    }
    // The server still serves (the connection pool recovers, no lasting damage).
    let ok = raw(
        &t.client,
        "GET",
        &format!("/api/v1/namespaces/{}/configmaps", t.ns),
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(ok.status, 200);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_over_1_mib_is_422() {
    let t = Target::sandbox_or_env().await;
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let big = "x".repeat(1024 * 1024 + 10);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"big": big}});
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[JSON],
        body.to_string().into_bytes(),
    )
    .await;
    let status = response.assert_status_object(
        422,
        "Invalid",
        "ConfigMap data over 1 MiB (validation limit)",
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap_or("")
            .contains("may not be more than 1048576 bytes"),
        "{status}"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_media_type_is_415() {
    let t = Target::sandbox_or_env().await;
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m"}})
        .to_string()
        .into_bytes();
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[("content-type", "text/plain")],
        body.clone(),
    )
    .await;
    response.assert_status_object(
        415,
        "UnsupportedMediaType",
        "POST with Content-Type text/plain",
    );
    raw(&t.client, "POST", &path, &[JSON], body).await;
    let response = raw(
        &t.client,
        "PATCH",
        &format!("{path}/m"),
        &[("content-type", "application/json")],
        b"{\"data\": {\"a\": \"b\"}}".to_vec(),
    )
    .await;
    response.assert_status_object(
        415,
        "UnsupportedMediaType",
        "PATCH with plain application/json (not a patch type)",
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_bodies_are_accepted() {
    let t = Target::sandbox_or_env().await;
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  a: b\n";
    let response = raw(
        &t.client,
        "POST",
        &path,
        &[("content-type", "application/yaml")],
        body.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(
        response.status,
        201,
        "kube-apiserver accepts application/yaml: {}",
        String::from_utf8_lossy(&response.body)
    );
    assert_eq!(response.json()["data"]["a"], "b");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_method_is_405() {
    let t = Target::sandbox_or_env().await;
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let response = raw(&t.client, "PUT", &path, &[JSON], b"{}".to_vec()).await;
    response.assert_status_object(405, "MethodNotAllowed", "PUT on a collection");
    let response = raw(
        &t.client,
        "POST",
        &format!("{path}/some-name"),
        &[JSON],
        b"{}".to_vec(),
    )
    .await;
    response.assert_status_object(405, "MethodNotAllowed", "POST on a named object");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_in_builtins_warn_by_default_and_fail_when_strict() {
    let t = Target::sandbox_or_env().await;
    let path = format!("/api/v1/namespaces/{}/configmaps", t.ns);
    let body = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "datta": {"a": "b"}})
            .to_string()
            .into_bytes()
    };
    let response = raw(
        &t.client,
        "POST",
        &format!("{path}?fieldValidation=Strict"),
        &[JSON],
        body("strict"),
    )
    .await;
    let status = response.assert_status_object(
        400,
        "BadRequest",
        "fieldValidation=Strict with an unknown field in a ConfigMap",
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap_or("")
            .contains("unknown field \"datta\""),
        "{status}"
    );
    let response = raw(&t.client, "POST", &path, &[JSON], body("default")).await;
    assert_eq!(
        response.status, 201,
        "without fieldValidation the unknown field is dropped (default Warn)"
    );
    let warnings = crate::common::warning_texts(&response.headers);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("unknown field \"datta\"")),
        "the default fieldValidation is Warn: a Warning header names the dropped field: {warnings:?}"
    );
    assert!(
        response.json().get("datta").is_none(),
        "the unknown field is dropped"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_validation_rejects_invalid_objects() {
    let t = Target::sandbox_or_env().await;
    let ns = t.ns.clone();
    let cases: Vec<(&str, String, serde_json::Value, &str)> = vec![
        (
            "pod without containers",
            format!("/api/v1/namespaces/{ns}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty"}, "spec": {"containers": []}}),
            "spec.containers",
        ),
        (
            "node taint with an unsupported effect",
            "/api/v1/nodes".to_string(),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": t.cluster_name("bad-taint")},
                   "spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}}),
            // kube-apiserver names the field under metadata, although the taints are in spec.
            "metadata.taints[0].effect",
        ),
        (
            "PDB with both minAvailable and maxUnavailable",
            format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"),
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "both"},
                   "spec": {"minAvailable": 1, "maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}}}),
            "spec",
        ),
        (
            "Deployment whose selector does not match its template",
            format!("/apis/apps/v1/namespaces/{ns}/deployments"),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "mismatch"},
                   "spec": {"selector": {"matchLabels": {"app": "a"}},
                            "template": {"metadata": {"labels": {"app": "b"}},
                                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
            "spec.template.metadata.labels",
        ),
        (
            "Lease with a negative duration",
            format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "neg"},
                   "spec": {"leaseDurationSeconds": -1}}),
            "spec.leaseDurationSeconds",
        ),
    ];
    let mut accepted = Vec::new();
    for (what, path, body, field) in cases {
        let response = raw(
            &t.client,
            "POST",
            &path,
            &[JSON],
            body.to_string().into_bytes(),
        )
        .await;
        if response.status != 422 {
            accepted.push(format!(
                "{what}: HTTP {} (kube: 422 Invalid at {field})",
                response.status
            ));
            continue;
        }
        let status = response.json();
        let causes = status["details"]["causes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !causes
            .iter()
            .any(|c| c["field"].as_str().is_some_and(|f| f.starts_with(field)))
        {
            accepted.push(format!("{what}: 422 without a cause at {field}: {status}"));
        }
    }
    assert!(
        accepted.is_empty(),
        "kube-apiserver validates built-in kinds; not rejected as kube does:\n{}",
        accepted.join("\n")
    );
    t.finish().await;
}

/// Over plain HTTP/1.1 a client writes a 24 MiB body and only then reads: it gets the 413 Status,
/// not a reset connection (a server that answers early and closes with the body unread makes the
/// kernel reset the connection, which throws the answer away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_client_that_sends_everything_first_reads_the_413() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if std::env::var_os(crate::common::REAL_CLUSTER_ENV).is_some() {
        eprintln!("SKIPPED (real cluster): needs the sandbox's plain HTTP listener");
        return;
    }
    crate::common::install_crypto();
    let sb = mcm_sandbox::Sandbox::start(mcm_sandbox::SandboxConfig {
        tls: false,
        ..Default::default()
    })
    .await
    .expect("sandbox");
    let body = vec![b'x'; 24 * 1024 * 1024];
    for (label, head) in [
        (
            "announced length",
            format!(
                "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            ),
        ),
        (
            "chunked",
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_owned(),
        ),
    ] {
        let mut conn = tokio::net::TcpStream::connect(sb.address()).await.expect("connect");
        conn.write_all(head.as_bytes()).await.expect("write head");
        let mut write_error = None;
        for piece in body.chunks(64 * 1024) {
            let r = if label == "chunked" {
                let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
                framed.extend_from_slice(piece);
                framed.extend_from_slice(b"\r\n");
                conn.write_all(&framed).await
            } else {
                conn.write_all(piece).await
            };
            if let Err(e) = r {
                write_error = Some(e);
                break;
            }
        }
        if label == "chunked" && write_error.is_none() {
            write_error = conn.write_all(b"0\r\n\r\n").await.err();
        }
        assert!(write_error.is_none(), "{label}: the server stopped reading: {write_error:?}");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            let mut buf = [0u8; 4096];
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) => return Ok(()),
                    Ok(n) => {
                        answer.extend_from_slice(&buf[..n]);
                        if answer.windows(4).any(|w| w == b"\r\n\r\n")
                            && String::from_utf8_lossy(&answer).contains("RequestEntityTooLarge")
                        {
                            return Ok(());
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        })
        .await
        .expect("an answer within 30 s");
        let text = String::from_utf8_lossy(&answer);
        assert!(read.is_ok(), "{label}: the connection was dropped: {read:?}; got {text:?}");
        assert!(text.starts_with("HTTP/1.1 413"), "{label}: {text}");
        assert!(text.contains("\"reason\":\"RequestEntityTooLarge\""), "{label}: {text}");
        assert!(text.contains("\"code\":413"), "{label}: {text}");
    }
}
