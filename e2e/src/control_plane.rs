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
    /// Each stop of kube-apiserver and the moment it was ready again: a restarting
    /// kube-apiserver answers requests before its authorizer has synced and refuses some with
    /// 403 that RBAC allows, so [`ControlPlane::denials`] leaves those windows out.
    restarts: std::sync::Mutex<Vec<(jiff::Timestamp, jiff::Timestamp)>>,
}

/// How long after kube-apiserver's readiness its authorizer may still refuse allowed requests.
const AUTHORIZER_SETTLING: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

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
        let starting = jiff::Timestamp::now();
        run_script(&["start", &dir_text], &envs, log).await?;
        Ok(Self {
            dir: dir.to_path_buf(),
            restarts: std::sync::Mutex::new(vec![(starting, jiff::Timestamp::now())]),
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
        let stopping = jiff::Timestamp::now();
        run_script(
            &["stop", &dir, component],
            &[],
            &self.logs().join("control-plane.log"),
        )
        .await?;
        if component == "kube-apiserver"
            && let Ok(mut restarts) = self.restarts.lock()
        {
            // Open until the start: the end is set when it is ready again.
            restarts.push((stopping, jiff::Timestamp::MAX));
        }
        Ok(())
    }

    /// Starts a stopped component again with the same flags, ports and data.
    pub async fn start_component(&self, component: &str) -> Result<()> {
        let dir = self.dir.display().to_string();
        run_script(
            &["start", &dir, component],
            &[],
            &self.logs().join("control-plane.log"),
        )
        .await?;
        if component == "kube-apiserver"
            && let Ok(mut restarts) = self.restarts.lock()
            && let Some(last) = restarts.last_mut()
        {
            last.1 = jiff::Timestamp::now();
        }
        Ok(())
    }

    /// Whether `at` falls into a start or restart of kube-apiserver (see `restarts`).
    fn restarting(&self, at: jiff::Timestamp) -> bool {
        self.restarts.lock().is_ok_and(|restarts| {
            restarts.iter().any(|(stopped, ready)| {
                let settled = ready
                    .checked_add(AUTHORIZER_SETTLING)
                    .unwrap_or(jiff::Timestamp::MAX);
                *stopped <= at && at <= settled
            })
        })
    }

    /// Stops everything; nothing is left running.
    pub async fn stop(&self) -> Result<()> {
        let dir = self.dir.display().to_string();
        run_script(&["stop", &dir], &[], &self.logs().join("control-plane.log")).await
    }

    /// The requests of the audit log that completed with `code`, as `(verb, resource, namespace,
    /// name)`: what kube-apiserver did, for questions a restarted API server's watch history
    /// no longer answers (e.g. how many objects were created across an outage).
    pub fn completed_requests(&self, code: u64) -> Result<Vec<(String, String, String, String)>> {
        let mut requests = Vec::new();
        for event in self.audit_events()? {
            if event.pointer("/stage").and_then(Value::as_str) != Some("ResponseComplete")
                || event
                    .pointer("/responseStatus/code")
                    .and_then(Value::as_u64)
                    != Some(code)
            {
                continue;
            }
            requests.push((
                audit_text(&event, "/verb"),
                audit_text(&event, "/objectRef/resource"),
                audit_text(&event, "/objectRef/namespace"),
                audit_text(&event, "/objectRef/name"),
            ));
        }
        Ok(requests)
    }

    /// Every event of kube-apiserver's audit log (lines that are not JSON are skipped).
    fn audit_events(&self) -> Result<Vec<Value>> {
        let path = self.logs().join("audit.log");
        let text = std::fs::read_to_string(&path).map_err(E2eError::io("read", &path))?;
        Ok(text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .collect())
    }

    /// The requests kube-apiserver's authorizer refused (403), per user whose name starts with
    /// `user_prefix`, counted per `verb resource` from the audit log: the same question the
    /// sandbox's `/sandbox/admin/denials` answers. Refusals while kube-apiserver (re)starts are
    /// left out (printed): it serves before its authorizer has synced.
    pub fn denials(&self, user_prefix: &str) -> Result<Value> {
        let mut denials: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        let mut startup = 0u64;
        for event in self.audit_events()? {
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
            let received = event
                .pointer("/requestReceivedTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            if received.is_some_and(|at| self.restarting(at)) {
                startup += 1;
                continue;
            }
            let what = format!(
                "{} {} {}",
                audit_text(&event, "/verb"),
                audit_text(&event, "/objectRef/resource"),
                audit_text(&event, "/requestURI")
            );
            *denials
                .entry(user.to_owned())
                .or_default()
                .entry(what)
                .or_default() += 1;
        }
        if startup > 0 {
            println!(
                "mcm-e2e: {startup} refusal(s) (403) of the system's identities while kube-apiserver restarted, left out of the RBAC check"
            );
        }
        serde_json::to_value(denials).map_err(E2eError::decode("the audit log's 403s"))
    }
}

/// A string field of an audit event ("" when absent).
fn audit_text(event: &Value, pointer: &str) -> String {
    event
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn event(user: &str, code: u16, at: &str, verb: &str) -> String {
        serde_json::json!({
            "user": {"username": user},
            "verb": verb,
            "objectRef": {"resource": "machines"},
            "requestURI": "/apis/machine.sapcloud.io/v1alpha1/machines",
            "responseStatus": {"code": code},
            "requestReceivedTimestamp": at,
        })
        .to_string()
    }

    #[test]
    fn denials_count_403s_of_our_identities_outside_restarts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let ours = "system:serviceaccount:mcm-system:machine-controller-manager";
        let lines = [
            event(ours, 403, "2026-01-01T10:00:01Z", "watch"),
            event(ours, 403, "2026-01-01T10:00:30Z", "list"),
            event(ours, 200, "2026-01-01T10:00:40Z", "list"),
            event(
                "system:serviceaccount:kube-system:x",
                403,
                "2026-01-01T10:00:40Z",
                "get",
            ),
            event(ours, 403, "2026-01-01T10:01:03Z", "update"),
            "not json".to_owned(),
        ];
        std::fs::write(dir.path().join("logs/audit.log"), lines.join("\n")).unwrap();
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        let plane = ControlPlane {
            dir: dir.path().to_path_buf(),
            restarts: std::sync::Mutex::new(vec![
                (at("2026-01-01T09:59:58Z"), at("2026-01-01T10:00:00Z")),
                (at("2026-01-01T10:00:50Z"), at("2026-01-01T10:01:00Z")),
            ]),
        };
        let denials = plane.denials("system:serviceaccount:mcm-system:").unwrap();
        let by_user = denials[ours].as_object().unwrap();
        let verbs: Vec<&str> = by_user
            .keys()
            .map(|k| k.split(' ').next().unwrap())
            .collect();
        // 10:00:01 is within 5 s of the first readiness and 10:01:03 within 5 s of the second:
        // left out. The 200 and the other namespace's 403 never count.
        assert_eq!(verbs, vec!["list"], "{denials}");
        assert_eq!(denials.as_object().unwrap().len(), 1, "{denials}");
    }
}
