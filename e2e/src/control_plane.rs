//! A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager built from Go
//! modules) as the API server of a system: `MCM_E2E_API_SERVER=kube`. Each system starts its own
//! through `scripts/control-plane.sh` in its temp dir, so systems stay independent as with the
//! sandbox, and an API outage is kube-apiserver really stopped and started again on the same etcd
//! (docs/testing.md#the-real-control-plane).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{E2eError, Result};

/// Which API server a system runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiServerKind {
    /// `mcm-sandbox serve` (the default).
    Sandbox,
    /// kube-apiserver, etcd and kube-controller-manager from `scripts/control-plane.sh`.
    Kube,
}

impl ApiServerKind {
    /// From `MCM_E2E_API_SERVER` (`sandbox`, the default, or `kube`).
    pub fn from_env() -> Result<Self> {
        match std::env::var("MCM_E2E_API_SERVER").as_deref() {
            Err(_) | Ok("" | "sandbox") => Ok(Self::Sandbox),
            Ok("kube") => Ok(Self::Kube),
            Ok(other) => Err(E2eError::Assertion(format!(
                "MCM_E2E_API_SERVER={other}: expected sandbox or kube"
            ))),
        }
    }
}

/// One control plane started by `scripts/control-plane.sh start <dir>`.
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/control-plane.sh")
}

async fn run_script(args: &[&str], envs: &[(&str, String)], log: &Path) -> Result<()> {
    let script = script();
    let mut command = tokio::process::Command::new(&script);
    command.args(args);
    for (key, value) in envs {
        command.env(key, value);
    }
    let output = command
        .output()
        .await
        .map_err(E2eError::io("run", &script))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    use std::io::Write as _;
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = file.write_all(text.as_bytes());
    }
    if output.status.success() {
        Ok(())
    } else {
        Err(E2eError::Process {
            name: format!("control-plane.sh {}", args.join(" ")),
            message: text,
        })
    }
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager with their state in `dir`;
    /// `node_grace` is kube-controller-manager's `--node-monitor-grace-period`.
    pub async fn start(dir: &Path, node_grace: Option<&str>, log: &Path) -> Result<Self> {
        let dir_text = dir.display().to_string();
        let envs: Vec<(&str, String)> = node_grace
            .map(|grace| ("CONTROL_PLANE_NODE_GRACE", grace.to_owned()))
            .into_iter()
            .collect();
        run_script(&["start", &dir_text], &envs, log).await?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// The admin kubeconfig (client certificate in `system:masters`).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// The folder of its logs (`etcd.log`, `kube-apiserver.log`, `audit.log`, …).
    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// Stops one component (`kube-apiserver` for an outage).
    pub async fn stop_component(&self, component: &str) -> Result<()> {
        let dir = self.dir.display().to_string();
        run_script(
            &["stop", &dir, component],
            &[],
            &self.logs().join("control-plane.log"),
        )
        .await
    }

    /// Starts a stopped component again with the same flags, ports and data.
    pub async fn start_component(&self, component: &str) -> Result<()> {
        let dir = self.dir.display().to_string();
        run_script(
            &["start", &dir, component],
            &[],
            &self.logs().join("control-plane.log"),
        )
        .await
    }

    /// Stops everything; nothing is left running.
    pub async fn stop(&self) -> Result<()> {
        let dir = self.dir.display().to_string();
        run_script(&["stop", &dir], &[], &self.logs().join("control-plane.log")).await
    }

    /// The requests kube-apiserver's authorizer refused (403), per user whose name starts with
    /// `user_prefix`, counted per `verb resource` from the audit log: the same question the
    /// sandbox's `/sandbox/admin/denials` answers.
    pub fn denials(&self, user_prefix: &str) -> Result<Value> {
        let path = self.logs().join("audit.log");
        let text = std::fs::read_to_string(&path).map_err(E2eError::io("read", &path))?;
        let mut denials: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let code = event
                .pointer("/responseStatus/code")
                .and_then(Value::as_u64);
            let user = event
                .pointer("/user/username")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if code != Some(403) || !user.starts_with(user_prefix) {
                continue;
            }
            let text = |pointer: &str| {
                event
                    .pointer(pointer)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let what = format!(
                "{} {} {}",
                text("/verb"),
                text("/objectRef/resource"),
                text("/requestURI")
            );
            *denials
                .entry(user.to_owned())
                .or_default()
                .entry(what)
                .or_default() += 1;
        }
        serde_json::to_value(denials).map_err(E2eError::decode("the audit log's 403s"))
    }
}
