//! State shared by the request handlers, the admin endpoints and admission: a module of its own so
//! that `server`, `admin` and `admission` all import it and none of them imports another back.

use crate::faults::Faults;
use crate::store::Store;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

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
}
