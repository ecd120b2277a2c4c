//! Pure decision logic of the Machine controller (no I/O, no async, no clock: `now` is a
//! parameter). See the module docs of [`crate::machine`] for the map from reference sections to
//! functions and tests.

pub mod backoff;
pub mod common;
pub mod creation;
pub mod deletion;
pub mod health;
pub mod hot_update;
pub mod in_place;
pub mod meltdown;
pub mod node_sync;
pub mod order;
pub mod preservation;
pub mod routing;
pub mod waiting;

/// Builders of Machines, Nodes and times for tests of the decisions and of the shells that call
/// them (`test-support` feature).
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
#[cfg(test)]
mod upstream;
