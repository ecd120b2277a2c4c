//! Integration tests: machine_set (being written).
