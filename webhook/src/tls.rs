//! Serving certificates: a rustls certificate resolver over an atomically swappable
//! certificate, loading from PEM, and the file-mode reloader (mounted Secret, e.g. from
//! cert-manager) that keeps serving the previous certificate when the files are bad.

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The certificate PEM has no certificate or does not parse.
    #[error("certificate PEM is invalid: {0}")]
    Certificate(String),
    /// The key PEM does not parse or is of an unsupported type.
    #[error("private key PEM is invalid: {0}")]
    Key(String),
    /// The key does not belong to the certificate.
    #[error("private key does not match the certificate: {0}")]
    Mismatch(String),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Parses a PEM certificate chain and private key into a rustls `CertifiedKey` (ring).
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, CertError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::Certificate(e.to_string()))?;
    if chain.is_empty() {
        return Err(CertError::Certificate("no CERTIFICATE block".to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| CertError::Key(e.to_string()))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, key, &provider).map_err(|e| CertError::Mismatch(e.to_string()))
}

/// The current serving certificate, swapped atomically on reload; new TLS handshakes pick up
/// the new certificate, open connections are unaffected.
#[derive(Default)]
pub struct CertStore {
    current: ArcSwapOption<CertifiedKey>,
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("loaded", &self.is_loaded())
            .finish()
    }
}

impl CertStore {
    /// Installs a certificate.
    pub fn set(&self, key: CertifiedKey) {
        self.current.store(Some(Arc::new(key)));
    }

    /// Whether a certificate is loaded (readiness).
    #[must_use]
    pub fn is_loaded(&self) -> bool {
        self.current.load().is_some()
    }

    /// Parses and installs PEM data; on error the previous certificate stays.
    pub fn set_pem(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), CertError> {
        self.set(certified_key(cert_pem, key_pem)?);
        Ok(())
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.load_full()
    }
}

/// A rustls server config serving the store's certificate: TLS 1.2 and 1.3 (ring), ALPN
/// `http/1.1` only, no client authentication.
#[must_use]
pub fn server_config(store: Arc<CertStore>) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12]);
    // Both versions are compiled in (features ring + tls12), so this cannot fail; fall back to
    // the default protocol set rather than panicking.
    let builder = match builder {
        Ok(builder) => builder,
        Err(_) => rustls::ServerConfig::builder(),
    };
    let mut config = builder.with_no_client_auth().with_cert_resolver(store);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// What one reload attempt did.
#[derive(Debug, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The files did not change since the last successful look.
    Unchanged,
    /// A new certificate is being served.
    Reloaded,
    /// The files changed but are unusable; the previous certificate is still served.
    Rejected(String),
}

/// Polls a certificate/key file pair (a mounted Secret: kubelet swaps the `..data` symlink
/// atomically, so content hashes, not inotify events, tell that something changed).
#[derive(Debug)]
pub struct FileReloader {
    cert_path: PathBuf,
    key_path: PathBuf,
    last_hash: Option<u64>,
}

impl FileReloader {
    /// A reloader for the two files.
    #[must_use]
    pub fn new(cert_path: impl Into<PathBuf>, key_path: impl Into<PathBuf>) -> Self {
        Self {
            cert_path: cert_path.into(),
            key_path: key_path.into(),
            last_hash: None,
        }
    }

    /// Reads the files and installs the certificate if they changed and are valid.
    pub fn reload(&mut self, store: &CertStore) -> ReloadOutcome {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| CertError::Read {
                path: path.to_owned(),
                source,
            })
        };
        let (cert, key) = match (read(&self.cert_path), read(&self.key_path)) {
            (Ok(cert), Ok(key)) => (cert, key),
            (Err(e), _) | (_, Err(e)) => return ReloadOutcome::Rejected(e.to_string()),
        };
        let mut hasher = DefaultHasher::new();
        (&cert, &key).hash(&mut hasher);
        let hash = hasher.finish();
        if self.last_hash == Some(hash) {
            return ReloadOutcome::Unchanged;
        }
        match store.set_pem(&cert, &key) {
            Ok(()) => {
                self.last_hash = Some(hash);
                ReloadOutcome::Reloaded
            }
            Err(e) => ReloadOutcome::Rejected(e.to_string()),
        }
    }

    /// Reloads every `interval` until the task is dropped, logging changes and rejections.
    pub async fn run(mut self, store: Arc<CertStore>, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        let mut last_rejection = None;
        loop {
            ticker.tick().await;
            match self.reload(&store) {
                ReloadOutcome::Unchanged => {}
                ReloadOutcome::Reloaded => {
                    last_rejection = None;
                    tracing::info!(cert = %self.cert_path.display(), "serving certificate loaded");
                }
                ReloadOutcome::Rejected(reason) => {
                    if last_rejection.as_ref() != Some(&reason) {
                        tracing::warn!(
                            cert = %self.cert_path.display(),
                            %reason,
                            still_serving_previous = store.is_loaded(),
                            "certificate files rejected"
                        );
                    }
                    last_rejection = Some(reason);
                }
            }
        }
    }
}
