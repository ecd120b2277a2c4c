//! Integration tests of `mcm-conversion`: property-tested round trips, review handling, golden
//! fixtures and malformed input.

#![allow(clippy::unwrap_used)]

mod golden;
mod review;
mod roundtrip;
