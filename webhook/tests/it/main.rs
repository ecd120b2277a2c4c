//! Integration tests of `mcm-webhook`: handler tables for every rule (through the axum router),
//! property tests (defaulting, malformed reviews), certificate rotation over real TLS, connection
//! limits (idle, slow and surplus connections; one client flooding the listener; oversized
//! bodies), and
//! kubectl against the sandbox API server calling this webhook.

#![allow(clippy::unwrap_used)]

mod body_limit;
mod class_record;
mod common;
mod flood;
mod handlers;
mod kubectl;
mod limits;
mod properties;
mod self_managed;
mod tls;
