//! Integration tests: machine_deployment (being written).
