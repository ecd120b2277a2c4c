//! End-to-end framework of machine-controller-manager: runs the real binaries (`mcm-sandbox
//! serve`, `machine-webhook`, `provider-virtual`, `machine-controller-manager`) as processes
//! against the sandbox API server, or uses an existing cluster where the Helm chart is installed
//! (`MCM_E2E_KUBECONFIG`), and offers what scenarios need: object helpers, kubectl, `eventually`
//! waits and fault controls (sandbox admin API, provider-virtual admin endpoint, process
//! restarts). The scenarios live in `tests/e2e/`; see `README.md`.

pub mod admin_http;
pub mod binaries;
pub mod control_plane;
pub mod error;
pub mod gardener;
pub mod kubectl;
pub mod objects;
pub mod ports;
pub mod process;
pub mod system;
pub mod wait;

pub use error::{E2eError, Result, ensure};
pub use system::{ProviderKind, System, SystemConfig};
pub use wait::{Probe, consistently, eventually};
