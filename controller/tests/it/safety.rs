//! Integration tests: safety (being written).
