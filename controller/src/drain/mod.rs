//! Node drain: which pods to evict, in which order, and when a drain is done or must be forced.
//!
//! Map of reference sections (docs/behaviour.md) to decisions, shell parts and tests:
//! docs/decision-maps.md#drain.

pub mod reconcile;
