//! Certificate rotation over real TLS, without restarting the server: file mode reload, a bad
//! file keeps the old certificate, readiness follows the certificate.

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use jiff::Timestamp;
use mcm_webhook::self_managed::{self, Policy};
use mcm_webhook::server::{self, AppState};
use mcm_webhook::tls::{CertStore, FileReloader, ReloadOutcome, server_config};
use rustls_pki_types::ServerName;
use serde_json::json;

use crate::common::{client_config, get_admin, install_provider};

const HOST: &str = "mcm-webhook.mcm.svc";

/// POSTs a conversion review over TLS trusting only `ca_pem`; returns the HTTP status and the
/// negotiated ALPN protocol.
async fn call(addr: std::net::SocketAddr, ca_pem: &str) -> Result<(u16, Option<Vec<u8>>), String> {
    let config = client_config(ca_pem)?;
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let body = json!({ "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": { "uid": "u", "desiredAPIVersion": "machine.sapcloud.io/v1beta1", "objects": [] } });
    let request = http::Request::post("/convert")
        .header("host", HOST)
        .header("content-type", "application/json")
        .body(Full::new(bytes_of(&body)))
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await;
    Ok((status, alpn))
}

fn bytes_of(value: &serde_json::Value) -> axum::body::Bytes {
    axum::body::Bytes::from(serde_json::to_vec(value).unwrap())
}

#[tokio::test]
async fn certificates_rotate_without_restart_and_bad_files_keep_the_old_one() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let names = vec![HOST.to_owned()];
    let policy = Policy::default();
    let first = self_managed::rotate(None, Timestamp::now(), &policy, "test-ca", &names).unwrap();

    let store = Arc::new(CertStore::default());
    let state = AppState::new(store.clone());
    let mut reloader = FileReloader::new(&cert_path, &key_path);
    assert!(
        matches!(reloader.reload(&store), ReloadOutcome::Rejected(_)),
        "no files yet"
    );
    assert_eq!(get_admin(&state, "/readyz").await.0, 503);

    std::fs::write(&cert_path, &first.tls_cert).unwrap();
    std::fs::write(&key_path, &first.tls_key).unwrap();
    assert_eq!(reloader.reload(&store), ReloadOutcome::Reloaded);
    assert_eq!(reloader.reload(&store), ReloadOutcome::Unchanged);
    assert_eq!(get_admin(&state, "/readyz").await.0, 200);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(server::serve_tls(
        listener,
        server::router(state.clone()),
        server_config(store.clone()),
    ));

    let (status, alpn) = call(addr, &first.ca_cert).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        alpn.as_deref(),
        Some(&b"http/1.1"[..]),
        "only http/1.1 is offered"
    );

    // Rotate: new CA and serving certificate written over the files.
    let second =
        self_managed::rotate(Some(&first), Timestamp::now(), &policy, "test-ca", &names).unwrap();
    std::fs::write(&cert_path, &second.tls_cert).unwrap();
    std::fs::write(&key_path, &second.tls_key).unwrap();
    assert_eq!(reloader.reload(&store), ReloadOutcome::Reloaded);
    assert_eq!(call(addr, &second.ca_cert).await.unwrap().0, 200);
    assert!(
        call(addr, &first.ca_cert).await.is_err(),
        "the old certificate is no longer served"
    );
    // The bundle with both CAs (what the API server has during the overlap) trusts the new one.
    let both = self_managed::bundle(&second, Timestamp::now());
    assert_eq!(call(addr, &both).await.unwrap().0, 200);

    // A broken write (garbage, or a key of another certificate) keeps the current certificate.
    std::fs::write(
        &cert_path,
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    assert!(matches!(
        reloader.reload(&store),
        ReloadOutcome::Rejected(_)
    ));
    std::fs::write(&cert_path, &first.tls_cert).unwrap();
    assert!(
        matches!(reloader.reload(&store), ReloadOutcome::Rejected(_)),
        "key does not match"
    );
    assert_eq!(call(addr, &second.ca_cert).await.unwrap().0, 200);
    assert_eq!(get_admin(&state, "/readyz").await.0, 200);
    server.abort();
}
