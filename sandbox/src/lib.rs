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
pub mod authn;
pub mod builtin;
pub mod discovery;
pub mod error;
pub mod faults;
pub mod gc;
pub mod names;
pub mod node_lifecycle;
pub mod openapi;
pub mod patch;
pub mod pdb;
pub mod proto;
pub mod rbac;
pub mod requesters;
pub mod resource_path;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod server;
pub mod state;
pub mod store;
pub mod table;
pub mod verb;

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
    /// Bound of that history per type in estimated JSON bytes (the newest event is always kept).
    pub watch_history_bytes: usize,
    /// (namespace, service) -> address used for webhook `clientConfig.service`.
    pub service_addresses: HashMap<(String, String), SocketAddr>,
    /// Optional persistence directory: not supported yet (objects live in memory only).
    pub data_dir: Option<PathBuf>,
    /// Require authentication and enforce RBAC (kube-apiserver's behaviour). Off by default so
    /// tests run as the admin; `mcm-sandbox serve` turns it on.
    pub authorization: bool,
    /// Mark Nodes whose kubelet stopped heartbeating `Unknown` and taint them, as
    /// kube-controller-manager's node lifecycle controller does (see [`node_lifecycle`]). Off by
    /// default so in-process tests may keep Nodes nobody heartbeats; `mcm-sandbox serve` turns it
    /// on with kube's 40 s grace period.
    pub node_monitor: Option<node_lifecycle::NodeMonitorConfig>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            port: 0,
            tls: true,
            kubeconfig_path: None,
            name: "mcm-sandbox".into(),
            watch_history: 10_000,
            watch_history_bytes: store::DEFAULT_HISTORY_BYTES,
            service_addresses: HashMap::new(),
            data_dir: None,
            authorization: false,
            node_monitor: None,
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
    ca: Option<Arc<rcgen::CertifiedIssuer<'static, rcgen::KeyPair>>>,
    authn: Arc<authn::Authenticator>,
    denials: Arc<state::Denials>,
    name: String,
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
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
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
        ca,
    })
}

fn kubeconfig(name: &str, url: &str, ca_pem: Option<&str>) -> String {
    kubeconfig_for(
        name,
        url,
        ca_pem,
        "admin",
        &format!("    token: {}\n", authn::ADMIN_TOKEN),
    )
}

/// A kubeconfig for one user; `credentials` are the indented lines under `user:`.
fn kubeconfig_for(
    name: &str,
    url: &str,
    ca_pem: Option<&str>,
    user: &str,
    credentials: &str,
) -> String {
    let ca_line = match ca_pem {
        Some(pem) => format!(
            "    certificate-authority-data: {}\n",
            base64::engine::general_purpose::STANDARD.encode(pem)
        ),
        None => String::new(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {url}\n{ca_line}contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-{user}\n    namespace: default\ncurrent-context: {name}\nusers:\n- name: {name}-{user}\n  user:\n{credentials}preferences: {{}}\n"
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
        let store = Arc::new(store::Store::with_history_bounds(
            config.watch_history,
            config.watch_history_bytes,
        ));
        let faults = Arc::new(Faults::default());
        let authn = Arc::new(authn::Authenticator::default());
        let denials = Arc::new(state::Denials::default());
        if config.authorization {
            for (resource, obj) in rbac::bootstrap_policy() {
                let gr = (
                    "rbac.authorization.k8s.io".to_string(),
                    resource.to_string(),
                );
                if let Err(e) = store.create(&gr, obj, false) {
                    tracing::warn!(error = %e, "seeding the bootstrap RBAC policy");
                }
            }
        }
        let state = Arc::new(server::AppState {
            store: store.clone(),
            faults: faults.clone(),
            service_addresses: config.service_addresses.clone(),
            url: url.clone(),
            authn: authn.clone(),
            authorization: config.authorization,
            denials: denials.clone(),
        });
        let router = axum::Router::new()
            .fallback(server::dispatch)
            .with_state(state);
        let shutdown = CancellationToken::new();

        let (acceptor, ca_pem, ca) = if config.tls {
            let certs = make_certs(&config.name)?;
            // Client certificates are optional (tokens are the other way in) but, when sent, must
            // chain to the sandbox CA, as kube-apiserver's --client-ca-file demands.
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(certs.ca.der().clone())
                .map_err(|e| SandboxError::Tls(e.to_string()))?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(rustls::crypto::ring::default_provider()),
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| SandboxError::Tls(e.to_string()))?;
            let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| SandboxError::Tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs.chain, certs.key)
            .map_err(|e| SandboxError::Tls(e.to_string()))?;
            tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            (
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(tls))),
                certs.ca_pem,
                Some(Arc::new(certs.ca)),
            )
        } else {
            (None, String::new(), None)
        };
        tokio::spawn(serve(
            listener,
            acceptor,
            router,
            faults.clone(),
            shutdown.clone(),
        ));
        tokio::spawn(background(store.clone(), shutdown.clone()));
        if let Some(monitor) = config.node_monitor {
            tokio::spawn(node_monitor(
                store.clone(),
                faults.clone(),
                monitor,
                shutdown.clone(),
            ));
        }

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
        // Injected 429/503 answers must reach the caller, so this client does not retry them.
        let client = Self::client_from_kubeconfig(&yaml).await?;
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
            ca,
            authn,
            denials,
            name: config.name.clone(),
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
    /// The credentials this sandbox accepts (add static tokens here).
    pub fn authenticator(&self) -> &Arc<authn::Authenticator> {
        &self.authn
    }
    /// 403 answers so far, per user (only counted with authorization on).
    pub fn denials(&self) -> &Arc<state::Denials> {
        &self.denials
    }
    /// A kubeconfig that authenticates with a bearer token (static or ServiceAccount).
    pub fn kubeconfig_for_token(&self, user: &str, token: &str) -> String {
        let ca = (!self.ca_pem.is_empty()).then_some(self.ca_pem.as_str());
        kubeconfig_for(
            &self.name,
            &self.url,
            ca,
            user,
            &format!("    token: {token}\n"),
        )
    }
    /// A kubeconfig with a client certificate signed by the sandbox CA: CN = `user`, O = each of
    /// `groups` (at most two: the certificate generator keeps one value per attribute type, and
    /// the second group goes in under the raw O object identifier).
    pub fn kubeconfig_for_certificate(
        &self,
        user: &str,
        groups: &[&str],
    ) -> Result<String, SandboxError> {
        let ca = self
            .ca
            .as_ref()
            .ok_or_else(|| SandboxError::Certificate("client certificates need TLS".into()))?;
        if groups.len() > 2 {
            return Err(SandboxError::Certificate(
                "at most two groups per client certificate".into(),
            ));
        }
        let err = |e: rcgen::Error| SandboxError::Certificate(e.to_string());
        let key = rcgen::KeyPair::generate().map_err(err)?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, user);
        let o_types = [
            rcgen::DnType::OrganizationName,
            rcgen::DnType::CustomDnType(vec![2, 5, 4, 10]),
        ];
        for (ty, g) in o_types.into_iter().zip(groups) {
            params.distinguished_name.push(ty, *g);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, ca.as_ref()).map_err(err)?;
        let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
        Ok(kubeconfig_for(
            &self.name,
            &self.url,
            Some(&self.ca_pem),
            user,
            &format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(cert.pem()),
                b64(key.serialize_pem())
            ),
        ))
    }
    /// A kube client from kubeconfig YAML (no 429/503 retry, like [`Sandbox::client`]).
    pub async fn client_from_kubeconfig(yaml: &str) -> Result<kube::Client, SandboxError> {
        let kc = kube::config::Kubeconfig::from_yaml(yaml)
            .map_err(|e| SandboxError::Client(e.to_string()))?;
        let mut kconf =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| SandboxError::Client(e.to_string()))?;
        kconf.default_retry = false;
        // Tests tell the sandbox's own requests from the components' by it.
        if let Ok(agent) = http::HeaderValue::from_str(&format!(
            "mcm-sandbox/{} ({}/{})",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH
        )) {
            kconf.headers.push((http::header::USER_AGENT, agent));
        }
        kube::Client::try_from(kconf).map_err(|e| SandboxError::Client(e.to_string()))
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

/// An accepted connection, after the TLS handshake if any.
enum Conn {
    Tls(Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>),
    Plain(tokio::net::TcpStream),
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
            // The TLS handshake comes first so that the client certificate's user can ride
            // along with every request of the connection.
            let (tls, peer) = match acceptor {
                Some(acc) => match acc.accept(tcp).await {
                    Ok(t) => {
                        let peer = t
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .and_then(|c| authn::user_from_certificate(c))
                            .map(server::PeerUser);
                        (Conn::Tls(Box::new(t)), peer)
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        return;
                    }
                },
                None => (Conn::Plain(tcp), None),
            };
            // Requests that arrive on an open connection during a Refuse window abort the
            // connection (no response), as a dead server would.
            let svc =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let router = router.clone();
                    let faults = conn_faults.clone();
                    let peer = peer.clone();
                    async move {
                        if faults.unavailable() == Some(UnavailableMode::Refuse) {
                            return Err(std::io::Error::other(
                                "sandbox refuses connections (fault injection)",
                            ));
                        }
                        let mut req = req.map(axum::body::Body::new);
                        // A body announced over the limit is refused before routing (401, 403
                        // or 404 answers would drop the connection the same way), after reading
                        // it, so that the client gets to read the answer.
                        let announced = req
                            .headers()
                            .get(http::header::CONTENT_LENGTH)
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse::<u64>().ok());
                        if announced.is_some_and(|n| n > server::MAX_BODY as u64) {
                            server::discard_body(req.into_body()).await;
                            return Ok(axum::response::IntoResponse::into_response(
                                server::too_large(),
                            ));
                        }
                        if let Some(p) = peer {
                            req.extensions_mut().insert(p);
                        }
                        let resp = tower::ServiceExt::oneshot(router, req).await;
                        match resp {
                            Ok(r) => Ok(r),
                            Err(never) => match never {},
                        }
                    }
                });
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let closed = async {
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = closer.changed() => {}
                }
            };
            let r = match tls {
                Conn::Tls(t) => {
                    let conn = builder
                        .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(t), svc);
                    tokio::select! { r = conn => r, () = closed => Ok(()) }
                }
                Conn::Plain(t) => {
                    let conn = builder
                        .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(t), svc);
                    tokio::select! { r = conn => r, () = closed => Ok(()) }
                }
            };
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
}

/// The shortest pause between a write that concerns the garbage collector and its pass.
const GC_MIN_PAUSE: Duration = Duration::from_millis(100);

/// The garbage collector and PDB status keeper.
async fn background(store: Arc<store::Store>, shutdown: CancellationToken) {
    let gc_store = store.clone();
    let gc_shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut pause = GC_MIN_PAUSE;
        loop {
            tokio::select! {
                _ = gc_shutdown.cancelled() => break,
                _ = gc_store.gc_wake.notified() => {}
            }
            // Coalesce bursts of writes into one pass: a pass scans every object, so the pause
            // grows with the last pass, keeping the collector below a fifth of a core on a
            // large store under constant deletions (docs/performance.md).
            tokio::time::sleep(pause.max(GC_MIN_PAUSE)).await;
            let s = gc_store.clone();
            let started = std::time::Instant::now();
            let _ = tokio::task::spawn_blocking(move || s.collect_garbage()).await;
            pause = started.elapsed() * 4;
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

/// The node lifecycle monitor: one pass every `config.period`.
///
/// kube-controller-manager cannot write while the API server is down, and its node lifecycle
/// controller starts its grace periods afresh when it reaches the API server again (as after its
/// own restart), so no Node is marked for heartbeats the outage itself kept from arriving. While
/// the sandbox plays an outage (`/sandbox/admin/unavailable`) the monitor does nothing and
/// forgets what it saw; the first pass after the outage counts every Node's grace from then.
async fn node_monitor(
    store: Arc<store::Store>,
    faults: Arc<Faults>,
    config: node_lifecycle::NodeMonitorConfig,
    shutdown: CancellationToken,
) {
    let mut monitor = node_lifecycle::NodeMonitor::default();
    let mut ticker = tokio::time::interval(config.period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut paused = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = ticker.tick() => {}
        }
        if faults.unavailable().is_some() {
            if !paused {
                tracing::info!("API server unavailable: node monitor paused");
                paused = true;
            }
            monitor = node_lifecycle::NodeMonitor::default();
            continue;
        }
        if paused {
            tracing::info!("API server back: node monitor resumed, grace periods count from now");
            paused = false;
        }
        let s = store.clone();
        match tokio::task::spawn_blocking(move || {
            monitor.pass(&s, &config, jiff::Timestamp::now());
            monitor
        })
        .await
        {
            Ok(m) => monitor = m,
            Err(e) => {
                tracing::warn!(error = %e, "node monitor pass failed");
                monitor = node_lifecycle::NodeMonitor::default();
            }
        }
    }
}
