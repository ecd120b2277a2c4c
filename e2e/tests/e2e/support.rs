//! Small helpers shared by the scenario modules.

use std::path::PathBuf;

use mcm_e2e::System;
use mcm_e2e::kubectl::Kubectl;

use crate::harness::Outcome;

/// kubectl for the system, or the loud skip when it is not installed.
pub fn kubectl(system: &System) -> Result<Kubectl, Outcome> {
    match Kubectl::find(system.kubeconfig()) {
        Some(k) => Ok(k),
        None => {
            println!("SKIPPED: kubectl not found");
            Err(Outcome::Skipped("SKIPPED: kubectl not found".to_owned()))
        }
    }
}

/// Writes `content` to a fresh temp file named `name` and returns its path (the directory lives
/// as long as the returned guard).
pub fn temp_file(name: &str, content: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, content).unwrap();
    (dir, path)
}
