//! The drain executor: runs the drain plan against the target cluster (being written).
