//! CRD types of the `machine.sapcloud.io` API group.
//!
//! - [`v1alpha1`]: the upstream API, wire-compatible with the upstream CRDs (the storage version).
//! - [`v1beta1`]: the cleaned-up served version.
//! - [`internal`]: the unversioned hub every version converts through (`mcm-conversion`).
//! - [`keys`]: well-known finalizers, labels, annotations, taints, condition types and reasons,
//!   and the load-bearing `lastOperation` texts.
//! - [`duration`]: Go `time.Duration` strings as used by every timeout field.
//! - [`user_agent`]: the User-Agent every binary sends to API servers.
//! - [`crd`]: the CustomResourceDefinitions generated from the types (written by `crdgen`).
//! - `arbitrary` (feature `proptest`): proptest strategies for typed objects.

#[cfg(feature = "proptest")]
pub mod arbitrary;
pub mod crd;
pub mod duration;
pub mod internal;
pub mod keys;
pub mod user_agent;
pub mod v1alpha1;
pub mod v1beta1;
