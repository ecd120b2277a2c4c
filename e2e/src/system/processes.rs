//! The processes of a system started here: checking they still run, reporting a failure with
//! the ends of their logs, keeping the temp dir, and shutting them down.

use std::time::Duration;

use super::{ApiServer, System};
use crate::error::Result;

impl System {
    /// Fails when a process of the system has exited.
    pub async fn check_processes(&self) -> Result<()> {
        let Some(parts) = &self.sandbox else {
            return Ok(());
        };
        let mut processes = parts.processes.lock().await;
        if let ApiServer::Sandbox(sandbox) = &mut processes.api {
            sandbox.check_alive()?;
        }
        processes.webhook.check_alive()?;
        processes.provider.check_alive()?;
        match processes.manager.as_mut() {
            Some(manager) => manager.check_alive(),
            None => Ok(()),
        }
    }

    /// Prints why the system failed, the end of every log, and keeps the temp dir.
    pub async fn report_failure(&self, why: &str) {
        eprintln!("mcm-e2e[{}]: FAILED: {why}", self.name);
        let Some(parts) = &self.sandbox else {
            return;
        };
        let processes = parts.processes.lock().await;
        let sandbox = match &processes.api {
            ApiServer::Sandbox(sandbox) => Some(sandbox),
            ApiServer::Kube(control_plane) => {
                eprintln!(
                    "----- logs of the control plane: {} -----",
                    control_plane.logs().display()
                );
                None
            }
        };
        for process in [
            sandbox,
            Some(&processes.webhook),
            Some(&processes.provider),
            processes.manager.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            eprintln!(
                "----- last lines of {} ({}) -----\n{}",
                process.name(),
                process.log_path().display(),
                process.tail(80)
            );
        }
        eprintln!(
            "mcm-e2e[{}]: logs and state kept in {}",
            self.name,
            parts.dir_path.display()
        );
    }

    /// Keeps the temp dir (logs, state file, kubeconfig) after the system is dropped.
    pub fn keep_files(&mut self) {
        if let Some(parts) = self.sandbox.as_mut()
            && let Some(dir) = parts.dir.take()
        {
            let _ = dir.keep();
        }
    }

    /// Stops every process, the manager first and the API server last.
    pub async fn shutdown(&self) {
        let Some(parts) = &self.sandbox else {
            return;
        };
        let mut processes = parts.processes.lock().await;
        let grace = Duration::from_secs(10);
        if let Some(manager) = processes.manager.as_mut() {
            let _ = manager.stop(grace).await;
        }
        let _ = processes.provider.stop(grace).await;
        let _ = processes.webhook.stop(grace).await;
        match &mut processes.api {
            ApiServer::Sandbox(sandbox) => {
                let _ = sandbox.stop(grace).await;
            }
            ApiServer::Kube(control_plane) => {
                if let Err(error) = control_plane.stop().await {
                    eprintln!(
                        "mcm-e2e[{}]: stopping the control plane: {error}",
                        self.name
                    );
                }
            }
        }
    }
}
