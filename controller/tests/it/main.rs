//! Integration tests of the controller shells against the sandbox (control and target clusters
//! apart) with provider-virtual in-process. One binary; one module per area.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod harness;
mod machine;
mod machine_deployment;
mod machine_set;
mod outage;
mod safety;
mod split;
mod termination;
