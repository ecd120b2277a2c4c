//! Conformance suite for `mcm-sandbox`: every test states one kube-apiserver behaviour against a
//! `kube::Client`.
//!
//! By default each test runs against a fresh in-process sandbox. With
//! `SANDBOX_CONFORMANCE_KUBECONFIG=<path>` the same tests run against that cluster instead (each in
//! its own namespace); tests that need sandbox-only controls (fault injection, a webhook server on
//! this host) print `SKIPPED (real cluster): ...` and return. Where the sandbox and a real
//! kube-apiserver differ, the real API server is right: assertion messages say what it does.

mod admission;
mod authz;
mod bad_input;
mod common;
mod crds;
mod crud;
mod deletion;
mod discovery;
mod eviction;
mod faults;
mod kubectl;
mod names;
mod node_lifecycle;
mod patches;
mod sandbox_config;
mod selectors;
mod watch;
