//! kubectl (the one on PATH) against the system's kubeconfig. Scenarios that need it call
//! [`Kubectl::find`] and report `SKIPPED: kubectl not found` when it is missing.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::error::{E2eError, Result};

/// What kubectl printed.
#[derive(Debug, Clone)]
pub struct KubectlOutput {
    /// Whether it exited 0.
    pub success: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl KubectlOutput {
    fn from(output: Output) -> Self {
        Self {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Both streams, for messages.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// kubectl bound to a kubeconfig.
#[derive(Debug, Clone)]
pub struct Kubectl {
    program: PathBuf,
    kubeconfig: PathBuf,
}

/// The kubectl on PATH, if any.
pub fn kubectl_on_path() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())
    })
}

impl Kubectl {
    /// kubectl from PATH for `kubeconfig`; `None` when kubectl is not installed.
    pub fn find(kubeconfig: &Path) -> Option<Self> {
        kubectl_on_path().map(|program| Self {
            program,
            kubeconfig: kubeconfig.to_path_buf(),
        })
    }

    /// Runs `kubectl --kubeconfig <k> args...` (off the async runtime's worker threads).
    pub async fn run(&self, args: &[&str]) -> Result<KubectlOutput> {
        let program = self.program.clone();
        let kubeconfig = self.kubeconfig.clone();
        let owned: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let shown = owned.join(" ");
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(program)
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(&owned)
                .output()
        })
        .await
        .map_err(|e| E2eError::Kubectl {
            args: shown.clone(),
            message: format!("task failed: {e}"),
        })?
        .map_err(|e| E2eError::Kubectl {
            args: shown.clone(),
            message: format!("cannot run kubectl: {e}"),
        })?;
        Ok(KubectlOutput::from(output))
    }

    /// Runs kubectl and prints a transcript (`$ kubectl ...` and both streams).
    pub async fn transcript(&self, args: &[&str]) -> Result<KubectlOutput> {
        let output = self.run(args).await?;
        println!("$ kubectl {}\n{}", args.join(" "), output.text());
        Ok(output)
    }

    /// Runs kubectl and fails unless it succeeds.
    pub async fn ok(&self, args: &[&str]) -> Result<KubectlOutput> {
        let output = self.run(args).await?;
        if output.success {
            Ok(output)
        } else {
            Err(E2eError::Kubectl {
                args: args.join(" "),
                message: output.text(),
            })
        }
    }
}
