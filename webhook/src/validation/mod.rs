//! Validation rules (docs/behaviour.md#admission-rules) as pure functions over the hub types.
//!
//! Each function takes the new object, the old object on UPDATE and the request context, and
//! returns a [`Report`]: field errors (each tagged with the rule that found it, for the
//! denial metric) and warnings. Field paths are written in the hub's shape, which is the
//! `v1alpha1` shape; [`crate::paths`] translates them for `v1beta1` requests. Ratcheting
//! (docs/behaviour.md#admission-fast-paths) is applied afterwards by [`crate::ratchet`], on the JSON of the request.

pub mod common;
mod machine;
mod machine_class;
mod machine_deployment;
mod machine_set;
mod report;

pub use machine::machine;
pub use machine_class::machine_class;
pub use machine_deployment::{ROLLBACK_ON_CREATE, machine_deployment};
pub use machine_set::machine_set;
pub use report::Report;

pub use crate::request::{Context, Operation};
