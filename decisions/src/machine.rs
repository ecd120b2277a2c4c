//! Decisions of the Machine controller: creation, initialization, health, node sync, hot and
//! in-place updates, preservation and deletion ([`plan`]).

pub mod class;
pub mod plan;
