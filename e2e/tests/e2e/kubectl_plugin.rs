//! `kubectl mcm`: the plugin binary found by the kubectl on PATH (plugin directory prepended to
//! PATH), driving real rollouts: `rollout status` until complete, `history`, `undo`, `pause` /
//! `resume`, `restart`, `status`, and its failures (progress deadline, `--timeout`, unknown
//! object, unreachable server, a change that does not parse) with their exit codes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mcm_api::keys::{annotation, label as label_key};
use mcm_e2e::kubectl::kubectl_on_path;
use mcm_e2e::objects::{
    Kind, create, create_class, delete, delete_deployment_and_wait, deployment, label, machines,
    merge_patch, must_get, name, node, phase, terminating,
};
use mcm_e2e::{E2eError, Probe, Result, System, ensure, eventually};
use serde_json::{Value, json};

use crate::harness::Outcome;

/// What one `kubectl mcm ...` printed.
pub(crate) struct Ran {
    code: Option<i32>,
    pub(crate) stdout: String,
    stderr: String,
}

impl Ran {
    fn text(&self) -> String {
        format!("exit {:?}\n{}{}", self.code, self.stdout, self.stderr)
    }
}

/// The kubectl on PATH with a plugin directory holding `kubectl-mcm` in front of PATH.
pub(crate) struct Plugin {
    kubectl: PathBuf,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    namespace: String,
}

impl Plugin {
    /// The plugin for the system, or the loud skip when kubectl is missing.
    pub(crate) fn new(s: &System) -> Result<std::result::Result<Self, Outcome>> {
        let Some(kubectl) = kubectl_on_path() else {
            println!("SKIPPED: kubectl not found");
            return Ok(Err(Outcome::Skipped(
                "SKIPPED: kubectl not found".to_owned(),
            )));
        };
        let binary = mcm_e2e::binaries::binary("kubectl-mcm")?;
        let dir = tempfile::tempdir().map_err(E2eError::io("create a plugin dir in", "/tmp"))?;
        let link = dir.path().join("kubectl-mcm");
        std::os::unix::fs::symlink(&binary, &link).map_err(E2eError::io("symlink", &link))?;
        Ok(Ok(Self {
            kubectl,
            dir,
            kubeconfig: s.kubeconfig().to_path_buf(),
            namespace: s.namespace().to_owned(),
        }))
    }

    /// `kubectl mcm <args> --kubeconfig <k> -n <namespace>`, transcript printed.
    async fn run(&self, args: &[&str]) -> Result<Ran> {
        self.run_with(&self.kubeconfig, args).await
    }

    async fn run_with(&self, kubeconfig: &Path, args: &[&str]) -> Result<Ran> {
        let mut path = std::ffi::OsString::from(self.dir.path());
        if let Some(rest) = std::env::var_os("PATH") {
            path.push(":");
            path.push(rest);
        }
        let mut command = std::process::Command::new(&self.kubectl);
        command
            .arg("mcm")
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["-n", &self.namespace])
            .env("PATH", path);
        let shown = format!("kubectl mcm {}", args.join(" "));
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .map_err(|e| E2eError::Assertion(format!("{shown}: task failed: {e}")))?
            .map_err(|e| E2eError::Assertion(format!("{shown}: cannot run kubectl: {e}")))?;
        let ran = Ran {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        println!("$ {shown}\n{}", ran.text());
        Ok(ran)
    }

    /// Runs and requires exit 0.
    pub(crate) async fn ok(&self, args: &[&str]) -> Result<Ran> {
        let ran = self.run(args).await?;
        ensure(ran.code == Some(0), || {
            format!("kubectl mcm {} failed: {}", args.join(" "), ran.text())
        })?;
        Ok(ran)
    }
}

fn class_of(machine: &Value) -> &str {
    machine["spec"]["class"]["name"].as_str().unwrap_or("")
}

/// Running machines of the deployment on `class` (not being deleted).
async fn running_on(s: &System, md: &str, class: &str) -> Result<Vec<String>> {
    Ok(machines(s, md)
        .await?
        .iter()
        .filter(|m| phase(m) == "Running" && !terminating(m) && class_of(m) == class)
        .map(|m| name(m).to_owned())
        .collect())
}

/// Checks what `rollout status` promised when it exited 0: every desired machine Running on the
/// new class, at once; and the old class's machines going away.
async fn rolled_to(s: &System, md: &str, replicas: usize, class: &str, old: &str) -> Result<()> {
    let running = running_on(s, md, class).await?;
    ensure(running.len() == replicas, || {
        format!("rollout status said complete, but {md} has {running:?} Running on {class}")
    })?;
    eventually(
        &format!("{md}: no machine of {old} left"),
        60,
        || async move {
            let left: Vec<String> = machines(s, md)
                .await?
                .iter()
                .filter(|m| class_of(m) == old && !terminating(m))
                .map(|m| name(m).to_owned())
                .collect();
            Ok(if left.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("{left:?}"))
            })
        },
    )
    .await
}

fn history_has(history: &str, revision: &str, class: &str) -> bool {
    history.lines().any(|line| {
        let columns: Vec<&str> = line.split_whitespace().collect();
        columns.first() == Some(&revision) && columns.get(2) == Some(&class)
    })
}

/// A rollout watched to completion with `kubectl mcm rollout status`, its history, `undo`,
/// `pause`/`resume`, `restart`, `status`, and the errors for an unknown object, an unknown
/// revision and an unreachable server.
pub async fn rollout_status_history_undo(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    let plugin = match Plugin::new(s)? {
        Ok(plugin) => plugin,
        Err(skipped) => return Ok(skipped),
    };
    create_class(s, "kp-a", json!({"bootDelay": "1s"}), "2").await?;
    create_class(s, "kp-b", json!({"bootDelay": "1s"}), "4").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "kp-md", 2, "kp-a", json!({})),
    )
    .await?;

    // The first rollout, watched from the start.
    let first = plugin
        .ok(&[
            "rollout",
            "status",
            "machinedeployment/kp-md",
            "--timeout",
            "4m",
        ])
        .await?;
    ensure(
        first
            .stdout
            .contains("machinedeployment \"kp-md\" successfully rolled out"),
        || first.text(),
    )?;
    let running = running_on(s, "kp-md", "kp-a").await?;
    ensure(running.len() == 2, || {
        format!("complete, but Running on kp-a: {running:?}")
    })?;

    // A class change with a change-cause, watched with the two-word spelling.
    merge_patch(
        s,
        Kind::MachineDeployment,
        "kp-md",
        json!({"metadata": {"annotations": {"kubernetes.io/change-cause": "move to kp-b"}},
               "spec": {"template": {"spec": {"class": {"name": "kp-b"}}}}}),
    )
    .await?;
    let watched = plugin
        .ok(&[
            "rollout",
            "status",
            "machinedeployment",
            "kp-md",
            "--timeout",
            "5m",
        ])
        .await?;
    ensure(
        watched
            .stdout
            .contains("Waiting for machinedeployment \"kp-md\" rollout to finish"),
        || format!("no progress shown: {}", watched.text()),
    )?;
    ensure(watched.stdout.contains("old machines left"), || {
        watched.text()
    })?;
    ensure(
        watched
            .stdout
            .trim_end()
            .ends_with("successfully rolled out"),
        || watched.text(),
    )?;
    rolled_to(s, "kp-md", 2, "kp-b", "kp-a").await?;

    let history = plugin.ok(&["rollout", "history", "mcd/kp-md"]).await?;
    ensure(
        history_has(&history.stdout, "1", "kp-a") && history_has(&history.stdout, "2", "kp-b"),
        || {
            format!(
                "history without revisions 1 (kp-a) and 2 (kp-b): {}",
                history.text()
            )
        },
    )?;
    ensure(history.stdout.contains("move to kp-b"), || {
        format!("change-cause missing: {}", history.text())
    })?;

    // Errors: unknown revision, unknown object, unreachable server.
    let bad_revision = plugin
        .run(&["rollout", "undo", "mcd/kp-md", "--to-revision", "9"])
        .await?;
    ensure(
        bad_revision.code == Some(1)
            && bad_revision
                .stderr
                .contains("unable to find specified revision 9"),
        || bad_revision.text(),
    )?;
    let missing = plugin.run(&["rollout", "status", "mcd/kp-missing"]).await?;
    ensure(
        missing.code == Some(1)
            && missing.stderr.contains("(NotFound)")
            && missing.stderr.contains("kp-missing"),
        || missing.text(),
    )?;
    let unreachable_dir =
        tempfile::tempdir().map_err(E2eError::io("create a temp dir in", "/tmp"))?;
    let unreachable = unreachable_dir.path().join("kubeconfig");
    std::fs::write(
        &unreachable,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n\
         current-context: x\n",
    )
    .map_err(E2eError::io("write", &unreachable))?;
    let down = plugin
        .run_with(
            &unreachable,
            &["rollout", "status", "mcd/kp-md", "--watch=false"],
        )
        .await?;
    ensure(
        down.code == Some(1) && down.stderr.contains("Unable to connect to the server"),
        || down.text(),
    )?;
    // A change that does not parse is a usage error found before connecting: exit 2, not 1.
    let bad_patch = plugin
        .run_with(
            &unreachable,
            &["rollout", "plan", "mcd/kp-md", "--patch", "{bad"],
        )
        .await?;
    ensure(
        bad_patch.code == Some(2) && bad_patch.stderr.contains("--patch is not JSON"),
        || bad_patch.text(),
    )?;

    // Undo to the previous revision (1): class kp-a again, as revision 3.
    let undo = plugin.ok(&["rollout", "undo", "mcd/kp-md"]).await?;
    ensure(undo.stdout.contains("rolled back (to revision 1)"), || {
        undo.text()
    })?;
    plugin
        .ok(&["rollout", "status", "mcd/kp-md", "--timeout", "5m"])
        .await?;
    rolled_to(s, "kp-md", 2, "kp-a", "kp-b").await?;
    let md = must_get(s, Kind::MachineDeployment, "kp-md").await?;
    ensure(
        md["metadata"]["annotations"][annotation::REVISION] == "3",
        || format!("revision after undo: {}", md["metadata"]["annotations"]),
    )?;

    // Pause refuses a second pause; resume; restart replaces every machine.
    plugin.ok(&["rollout", "pause", "mcd/kp-md"]).await?;
    let md = must_get(s, Kind::MachineDeployment, "kp-md").await?;
    ensure(md["spec"]["paused"] == true, || {
        format!("not paused: {}", md["spec"])
    })?;
    let again = plugin.run(&["rollout", "pause", "mcd/kp-md"]).await?;
    ensure(
        again.code == Some(1) && again.stderr.contains("already paused"),
        || again.text(),
    )?;
    plugin.ok(&["rollout", "resume", "mcd/kp-md"]).await?;
    let before: Vec<String> = running_on(s, "kp-md", "kp-a").await?;
    let restart = plugin.ok(&["rollout", "restart", "mcd/kp-md"]).await?;
    ensure(restart.stdout.contains("restarted"), || restart.text())?;
    plugin
        .ok(&["rollout", "status", "mcd/kp-md", "--timeout", "5m"])
        .await?;
    let after = running_on(s, "kp-md", "kp-a").await?;
    ensure(
        after.len() == 2 && after.iter().all(|m| !before.contains(m)),
        || format!("restart kept machines: before {before:?}, after {after:?}"),
    )?;

    let status = plugin.ok(&["status", "mcd/kp-md"]).await?;
    ensure(
        status.stdout.contains("Nodes Ready 2/2") && status.stdout.contains("Running"),
        || status.text(),
    )?;

    // Preserve a node for 2h through the plugin, see it in `status`, then release it.
    let machine = machines(s, "kp-md")
        .await?
        .into_iter()
        .find(|m| phase(m) == "Running" && !terminating(m))
        .ok_or_else(|| E2eError::Assertion("no Running machine to preserve".to_owned()))?;
    let machine_name = name(&machine).to_owned();
    let node_name = label(&machine, label_key::NODE)
        .unwrap_or_default()
        .to_owned();
    // A per-machine duration would be reset by the MachineSet (upstream syncMachinesConfig).
    let refused = plugin
        .run(&["preserve", &format!("node/{node_name}"), "--duration", "2h"])
        .await?;
    ensure(
        refused.code == Some(1) && refused.stderr.contains("machinePreserveTimeout"),
        || refused.text(),
    )?;
    let preserved = plugin
        .ok(&["preserve", &format!("node/{node_name}")])
        .await?;
    ensure(preserved.stdout.contains("preserved until"), || {
        preserved.text()
    })?;
    let node_object = node(s, &node_name).await?.unwrap_or(Value::Null);
    ensure(
        node_object["metadata"]["annotations"][annotation::PRESERVE] == "now",
        || {
            format!(
                "node annotations: {}",
                node_object["metadata"]["annotations"]
            )
        },
    )?;
    let machine_ref = &machine_name;
    eventually(&format!("{machine_name} preserved"), 60, || async move {
        let m = must_get(s, Kind::Machine, machine_ref).await?;
        let expiry = &m["status"]["currentStatus"]["preserveExpiryTime"];
        Ok(if expiry.is_string() {
            Probe::Done(())
        } else {
            Probe::Waiting(format!("{}", m["status"]))
        })
    })
    .await?;
    let status = plugin.ok(&["status", "-A"]).await?;
    ensure(
        status.stdout.contains("PRESERVED MACHINE")
            && status.stdout.contains(&machine_name)
            && status
                .stdout
                .contains(&format!("namespace {}", s.namespace())),
        || status.text(),
    )?;
    let released = plugin.ok(&["unpreserve", "node", &node_name]).await?;
    ensure(released.stdout.contains("unpreserved"), || released.text())?;
    eventually(
        &format!("{machine_name} no longer preserved"),
        60,
        || async move {
            let m = must_get(s, Kind::Machine, machine_ref).await?;
            let expiry = &m["status"]["currentStatus"]["preserveExpiryTime"];
            Ok(if expiry.is_null() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("expiry {expiry}"))
            })
        },
    )
    .await?;
    let unknown = plugin.run(&["preserve", "node/kp-no-such-node"]).await?;
    ensure(
        unknown.code == Some(1) && unknown.stderr.contains("(NotFound)"),
        || unknown.text(),
    )?;

    delete_deployment_and_wait(s, "kp-md").await?;
    delete(s, Kind::MachineClass, "kp-a").await?;
    delete(s, Kind::MachineClass, "kp-b").await?;
    Ok(Outcome::Passed)
}

/// A deployment whose VMs can never be created: `--timeout` ends the watch with exit 5, the
/// progress deadline with exit 3, and `status` lists the machine as stuck with its last
/// operation.
pub async fn deadline_exceeded_and_stuck(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    let plugin = match Plugin::new(s)? {
        Ok(plugin) => plugin,
        Err(skipped) => return Ok(skipped),
    };
    create_class(
        s,
        "kd-bad",
        json!({"failures": {"create": {"code": "ResourceExhausted", "times": 100000}}}),
        "2",
    )
    .await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(
            s,
            "kd-md",
            1,
            "kd-bad",
            json!({"spec": {"progressDeadlineSeconds": 20}}),
        ),
    )
    .await?;
    let short = plugin
        .run(&["rollout", "status", "mcd/kd-md", "--timeout", "3s"])
        .await?;
    ensure(
        short.code == Some(5) && short.stderr.contains("timed out"),
        || short.text(),
    )?;
    let failed = plugin
        .run(&["rollout", "status", "mcd/kd-md", "--timeout", "4m"])
        .await?;
    ensure(
        failed.code == Some(3) && failed.stderr.contains("exceeded its progress deadline"),
        || failed.text(),
    )?;
    let status = plugin
        .ok(&["status", "mcd/kd-md", "--stuck-after", "1s"])
        .await?;
    let machine = machines(s, "kd-md")
        .await?
        .first()
        .map(|m| name(m).to_owned())
        .unwrap_or_default();
    ensure(
        !machine.is_empty()
            && status.stdout.contains("STUCK MACHINE")
            && status.stdout.lines().any(|l| l.starts_with(&machine)),
        || format!("machine {machine:?} not listed as stuck: {}", status.text()),
    )?;
    delete_deployment_and_wait(s, "kd-md").await?;
    delete(s, Kind::MachineClass, "kd-bad").await?;
    Ok(Outcome::Passed)
}
