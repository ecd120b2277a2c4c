//! The admission and conversion webhook server.
//!
//! Filled by the webhooks issue: axum + tokio-rustls HTTPS server, validation and defaulting rules,
//! certificate management.
