//! Integration tests of the driver SDK over real gRPC (Unix socket and TCP) and of the conformance
//! kit against an in-memory reference driver, correct and with deliberate flaws.

#![allow(clippy::unwrap_used)]

mod conformance_kit;
mod memory_driver;
mod sdk;
