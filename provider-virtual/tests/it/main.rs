//! Integration tests of provider-virtual: the conformance kit through real gRPC, persistence
//! across restarts, and the virtual kubelet against the in-process sandbox API server.

#![allow(clippy::unwrap_used)]

mod common;
mod conformance;
mod kubelet;
mod outage;
mod restart;
