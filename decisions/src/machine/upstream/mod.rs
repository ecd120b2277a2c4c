//! Upstream conformance tables: the table-driven cases (Ginkgo `DescribeTable`/`Entry`) of
//! upstream MCM's `pkg/util/provider/machinecontroller` tests, restated as data rows and replayed
//! against our pure plan functions. Every row names the upstream entry it comes from; the map from
//! upstream tests to these rows, with the result of each, is `docs/upstream-conformance.md`.
//!
//! Upstream runs its cases against fake clientsets and a real clock; here a row holds the observed
//! state (phases, labels, annotations, node conditions, ages relative to `now`) and the expected
//! outcome (phase written, retry class, error text), and the plan function is called with a fixed
//! `now`.

mod creation;
mod deletion;
mod health;
mod in_place;
mod machineclass;
mod node_sync;
mod preservation;
mod status;
mod userdata;
mod validation;
