//! Compatibility tests of `mcm-api` against upstream: generated CRD schemas compared with the
//! upstream CRDs, JSON round trips of realistic and generated objects, and malformed input.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod malformed;
mod roundtrip;
mod schema;
