//! Integration tests of `mcm-webhook`: handler tables for every rule (through the axum router),
//! property tests (defaulting, malformed reviews), certificate rotation over real TLS, and
//! kubectl against the sandbox API server calling this webhook.

#![allow(clippy::unwrap_used)]

mod common;
mod handlers;
mod kubectl;
mod properties;
mod self_managed;
mod tls;
