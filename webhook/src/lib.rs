//! The `machine-webhook` server: validating and mutating admission for Machine, MachineSet,
//! MachineDeployment and MachineClass, the CRD conversion endpoint, and serving-certificate
//! management.
//!
//! - [`request`]: the shared request vocabulary (kind, version, operation);
//!   [`field`]: Kubernetes field errors; [`decode`]: lenient decoding, one error per bad field;
//!   [`validation`]: the rules (pure); [`ratchet`]: UPDATE ratcheting; [`defaulting`]: JSON
//!   Patch defaults; [`paths`]: field paths per version.
//! - [`admission`]: AdmissionReview in, AdmissionReview out (pure); [`preview`]: what an
//!   update of a MachineDeployment or MachineClass will do to the machines, as warnings.
//! - [`server`]: axum routers and the TLS accept loop; [`limits`]: connection timeouts, caps
//!   and which connection to give up (pure); [`pool`]: the books of open connections;
//!   [`metrics`]: Prometheus metrics.
//! - [`tls`]: certificate store, file mode with hot reload; [`self_managed`]: own CA with
//!   rotation and caBundle injection.

pub mod admission;
pub mod decode;
pub mod defaulting;
pub mod field;
pub mod limits;
pub mod metrics;
pub mod paths;
pub mod pool;
pub mod preview;
pub mod ratchet;
pub mod request;
pub mod self_managed;
pub mod server;
pub mod tls;
pub mod validation;
