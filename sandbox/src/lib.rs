//! An embedded, Kubernetes-API-compatible server for local runs and tests.
//!
//! A development and test tool, never a production control plane: it speaks the Kubernetes REST
//! API well enough for kube-rs, kubectl and our controllers and webhooks (see `README.md` for the
//! known differences from kube-apiserver, which is always right).
//!
//! ```no_run
//! # async fn demo() -> Result<(), mcm_sandbox::SandboxError> {
//! let sb = mcm_sandbox::Sandbox::start(mcm_sandbox::SandboxConfig::default()).await?;
//! let client = sb.client();
//! # let _ = client; Ok(()) }
//! ```

pub mod admin;
pub mod admission;
pub mod apply;
pub mod builtin;
pub mod discovery;
pub mod error;
pub mod faults;
pub mod gc;
pub mod names;
pub mod openapi;
pub mod patch;
pub mod pdb;
pub mod proto;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod server;
pub mod store;
pub mod table;

pub use faults::{ErrorRule, Faults, RequestCounters, UnavailableMode, Verb};

use base64::Engine;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Errors starting a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Binding the listener failed.
    #[error("binding 127.0.0.1:{port}: {source}")]
    Bind {
        /// Requested port.
        port: u16,
        /// Cause.
        source: std::io::Error,
    },
    /// Certificate generation failed.
    #[error("generating the self-signed certificate: {0}")]
    Certificate(String),
    /// TLS setup failed.
    #[error("configuring TLS: {0}")]
    Tls(String),
    /// Writing the kubeconfig failed.
    #[error("writing kubeconfig {path}: {source}")]
    Kubeconfig {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Building the kube client failed.
    #[error("building the kube client: {0}")]
    Client(String),
}

/// How to start a sandbox.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Serve HTTPS with a self-signed certificate (default) or plain HTTP.
    pub tls: bool,
    /// Where to write the kubeconfig (a temporary directory when None).
    pub kubeconfig_path: Option<PathBuf>,
    /// Cluster/context name in the kubeconfig.
    pub name: String,
    /// Events kept per resource type for watch replay and for serving past list states
    /// (continue pages, `resourceVersionMatch=Exact`).
    pub watch_history: usize,
    /// (namespace, service) -> address used for webhook `clientConfig.service`.
    pub service_addresses: HashMap<(String, String), SocketAddr>,
    /// Optional persistence directory: not supported yet (objects live in memory only).
    pub data_dir: Option<PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            port: 0,
            tls: true,
            kubeconfig_path: None,
            name: "mcm-sandbox".into(),
            watch_history: 10_000,
            service_addresses: HashMap::new(),
            data_dir: None,
        }
    }
}

/// A running sandbox API server.
pub struct Sandbox {
    addr: SocketAddr,
    url: String,
    kubeconfig_path: PathBuf,
    kubeconfig_yaml: String,
    client: kube::Client,
    faults: Arc<Faults>,
    store: Arc<store::Store>,
    ca_pem: String,
    shutdown: CancellationToken,
    _tempdir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("url", &self.url)
            .field("kubeconfig", &self.kubeconfig_path)
            .finish()
    }
}

struct Certs {
    ca_pem: String,
    chain: Vec<rustls_pki_types::CertificateDer<'static>>,
    key: rustls_pki_types::PrivateKeyDer<'static>,
}

fn make_certs(name: &str) -> Result<Certs, SandboxError> {
    let err = |e: rcgen::Error| SandboxError::Certificate(e.to_string());
    let ca_key = rcgen::KeyPair::generate().map_err(err)?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name}-ca"));
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(err)?;
    let leaf_key = rcgen::KeyPair::generate().map_err(err)?;
    let mut leaf_params = rcgen::CertificateParams::new(vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        "::1".to_string(),
    ])
    .map_err(err)?;
    leaf_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver");
    leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &ca).map_err(err)?;
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(rustls_pki_types::PrivatePkcs8KeyDer::from(
        leaf_key.serialize_der(),
    ));
    Ok(Certs {
        ca_pem: ca.pem(),
        chain: vec![leaf.der().clone(), ca.der().clone()],
        key,
    })
}

fn kubeconfig(name: &str, url: &str, ca_pem: Option<&str>) -> String {
    let ca_line = match ca_pem {
        Some(pem) => format!(
            "    certificate-authority-data: {}\n",
            base64::engine::general_purpose::STANDARD.encode(pem)
        ),
        None => String::new(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {url}\n{ca_line}contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-admin\n    namespace: default\ncurrent-context: {name}\nusers:\n- name: {name}-admin\n  user:\n    token: sandbox-admin-token\npreferences: {{}}\n"
    )
}

impl Sandbox {
    /// Starts serving; returns once the listener is bound and the client is ready.
    pub async fn start(config: SandboxConfig) -> Result<Sandbox, SandboxError> {
        if config.data_dir.is_some() {
            tracing::warn!(
                "SandboxConfig::data_dir is not supported: objects are kept in memory only"
            );
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", config.port))
            .await
            .map_err(|source| SandboxError::Bind {
                port: config.port,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SandboxError::Bind {
            port: config.port,
            source,
        })?;
        let scheme = if config.tls { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let store = Arc::new(store::Store::new(config.watch_history));
        let faults = Arc::new(Faults::default());
        let state = Arc::new(server::AppState {
            store: store.clone(),
            faults: faults.clone(),
            service_addresses: config.service_addresses.clone(),
            url: url.clone(),
        });
        let router = axum::Router::new()
            .fallback(server::dispatch)
            .with_state(state);
        let shutdown = CancellationToken::new();

        let (acceptor, ca_pem) = if config.tls {
            let certs = make_certs(&config.name)?;
            let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| SandboxError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs.chain, certs.key)
            .map_err(|e| SandboxError::Tls(e.to_string()))?;
            tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            (
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(tls))),
                certs.ca_pem,
            )
        } else {
            (None, String::new())
        };
        tokio::spawn(serve(
            listener,
            acceptor,
            router,
            faults.clone(),
            shutdown.clone(),
        ));
        tokio::spawn(background(store.clone(), shutdown.clone()));

        let yaml = kubeconfig(&config.name, &url, config.tls.then_some(ca_pem.as_str()));
        let (kubeconfig_path, tempdir) = match &config.kubeconfig_path {
            Some(p) => (p.clone(), None),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("mcm-sandbox-")
                    .tempdir()
                    .map_err(|source| SandboxError::Kubeconfig {
                        path: std::env::temp_dir(),
                        source,
                    })?;
                (dir.path().join("kubeconfig"), Some(dir))
            }
        };
        if let Some(parent) = kubeconfig_path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent).map_err(|source| SandboxError::Kubeconfig {
                path: kubeconfig_path.clone(),
                source,
            })?;
        }
        std::fs::write(&kubeconfig_path, &yaml).map_err(|source| SandboxError::Kubeconfig {
            path: kubeconfig_path.clone(),
            source,
        })?;
        let kc = kube::config::Kubeconfig::from_yaml(&yaml)
            .map_err(|e| SandboxError::Client(e.to_string()))?;
        let mut kconf =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| SandboxError::Client(e.to_string()))?;
        // Injected 429/503 answers must reach the caller, so this client does not retry them.
        kconf.default_retry = false;
        let client =
            kube::Client::try_from(kconf).map_err(|e| SandboxError::Client(e.to_string()))?;
        tracing::info!(%url, kubeconfig = %kubeconfig_path.display(), "sandbox API server started");
        Ok(Sandbox {
            addr,
            url,
            kubeconfig_path,
            kubeconfig_yaml: yaml,
            client,
            faults,
            store,
            ca_pem,
            shutdown,
            _tempdir: tempdir,
        })
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.addr
    }
    /// `https://127.0.0.1:PORT` (or http).
    pub fn url(&self) -> &str {
        &self.url
    }
    /// The kubeconfig file.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }
    /// The kubeconfig contents.
    pub fn kubeconfig_yaml(&self) -> String {
        self.kubeconfig_yaml.clone()
    }
    /// A kube client for this sandbox.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }
    /// Fault injection and counters.
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }
    /// PEM of the CA that signed the serving certificate (empty without TLS).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
    /// The object store (for white-box tests).
    pub fn store(&self) -> &Arc<store::Store> {
        &self.store
    }
    /// Stops serving (open connections and watches end).
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        tokio::task::yield_now().await;
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    router: axum::Router,
    faults: Arc<Faults>,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let (tcp, _) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        if faults.unavailable() == Some(UnavailableMode::Refuse) {
            drop(tcp);
            continue;
        }
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let router = router.clone();
        let shutdown = shutdown.clone();
        let mut closer = faults.connection_closer();
        let conn_faults = faults.clone();
        tokio::spawn(async move {
            // Requests that arrive on an open connection during a Refuse window abort the
            // connection (no response), as a dead server would.
            let svc =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let router = router.clone();
                    let faults = conn_faults.clone();
                    async move {
                        if faults.unavailable() == Some(UnavailableMode::Refuse) {
                            return Err(std::io::Error::other(
                                "sandbox refuses connections (fault injection)",
                            ));
                        }
                        let resp =
                            tower::ServiceExt::oneshot(router, req.map(axum::body::Body::new))
                                .await;
                        match resp {
                            Ok(r) => Ok(r),
                            Err(never) => match never {},
                        }
                    }
                });
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            match acceptor {
                Some(acc) => {
                    let tls = match acc.accept(tcp).await {
                        Ok(t) => t,
                        Err(e) => {
                            tracing::debug!(error = %e, "TLS handshake failed");
                            return;
                        }
                    };
                    let conn = builder
                        .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(tls), svc);
                    tokio::select! {
                        r = conn => if let Err(e) = r { tracing::debug!(error = %e, "connection ended") },
                        _ = shutdown.cancelled() => {}
                        _ = closer.changed() => {}
                    }
                }
                None => {
                    let conn = builder
                        .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(tcp), svc);
                    tokio::select! {
                        r = conn => if let Err(e) = r { tracing::debug!(error = %e, "connection ended") },
                        _ = shutdown.cancelled() => {}
                        _ = closer.changed() => {}
                    }
                }
            }
        });
    }
}

/// The garbage collector and PDB status keeper.
async fn background(store: Arc<store::Store>, shutdown: CancellationToken) {
    let gc_store = store.clone();
    let gc_shutdown = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = gc_shutdown.cancelled() => break,
                _ = gc_store.gc_wake.notified() => {}
            }
            // Coalesce bursts of writes into one pass (a pass scans every object).
            tokio::time::sleep(Duration::from_millis(100)).await;
            let s = gc_store.clone();
            let _ = tokio::task::spawn_blocking(move || s.collect_garbage()).await;
        }
    });
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = store.pdb_wake.notified() => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let s = store.clone();
        let _ = tokio::task::spawn_blocking(move || s.refresh_pdbs()).await;
    }
}
