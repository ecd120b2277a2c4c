//! State shared by the request handlers, the admin endpoints and admission: a module of its own so
//! that `server`, `admin` and `admission` all import it and none of them imports another back.

use crate::authn::Authenticator;
use crate::faults::Faults;
use crate::store::Store;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Shared state of one sandbox server.
pub struct AppState {
    /// Objects.
    pub store: Arc<Store>,
    /// Faults and counters.
    pub faults: Arc<Faults>,
    /// (namespace, service) -> address for webhook `clientConfig.service`.
    pub service_addresses: HashMap<(String, String), SocketAddr>,
    /// The server's own URL (for discovery's serverAddressByClientCIDRs).
    pub url: String,
    /// Accepted credentials.
    pub authn: Arc<Authenticator>,
    /// Whether authentication is required and RBAC enforced.
    pub authorization: bool,
    /// 403s answered, per user.
    pub denials: Arc<Denials>,
}

/// Counts of 403 Forbidden answers per user, so a test can assert that a component under least
/// privilege was never refused.
#[derive(Debug, Default)]
pub struct Denials(Mutex<BTreeMap<String, u64>>);

impl Denials {
    /// Counts one denial of `user`.
    pub fn record(&self, user: &str) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(user.to_string()).or_default() += 1;
        }
    }
    /// Denials so far, by user.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
    /// Forgets all denials.
    pub fn reset(&self) {
        if let Ok(mut m) = self.0.lock() {
            m.clear();
        }
    }
}
