//! Integration tests: machine (being written).
