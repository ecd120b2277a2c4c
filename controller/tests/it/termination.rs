//! Integration tests: termination (being written).
