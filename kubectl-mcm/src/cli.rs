//! Command line of `kubectl-mcm`, shaped like kubectl's: global `--kubeconfig`, `--context`,
//! `-n/--namespace` anywhere on the line, `TYPE/NAME` or `TYPE NAME` arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// kubectl plugin for machine-controller-manager: `kubectl mcm <command>`.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-mcm",
    bin_name = "kubectl mcm",
    version,
    about = "Rollouts, fleet status and node preservation for machine-controller-manager",
    after_help = "Exit codes: 0 ok, 1 error, 2 usage, 3 rollout failed (progress deadline \
                  exceeded), 4 machinedeployment frozen, 5 --timeout elapsed."
)]
pub struct Cli {
    /// Connection flags, as kubectl's.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Namespace of the Machine* objects (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Kubeconfig of the target cluster that holds the Nodes, when it is not the control cluster.
    #[arg(long, global = true, value_name = "PATH")]
    pub target_kubeconfig: Option<PathBuf>,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage the rollout of a MachineDeployment.
    #[command(subcommand)]
    Rollout(Rollout),
    /// Machines by phase, nodes Ready, frozen, preserved and stuck machines, per MachineDeployment.
    Status {
        /// `machinedeployment/<name>` (all of the namespace when absent).
        target: Option<String>,
        /// The name, when the type is given as a separate word.
        name: Option<String>,
        /// A machine not Running for this long counts as stuck (Failed and CrashLoopBackOff
        /// count at once). Go duration text.
        #[arg(long, default_value = "10m")]
        stuck_after: String,
        /// Every MachineDeployment of every namespace (one control namespace per cluster in
        /// Gardener seeds).
        #[arg(short = 'A', long, conflicts_with = "target")]
        all_namespaces: bool,
    },
    /// Preserve a node (or machine) for diagnosis: MCM keeps it, even when it fails.
    Preserve {
        /// `node/<name>` or `machine/<name>`.
        target: String,
        /// The name, when the type is given as a separate word.
        name: Option<String>,
        /// How long to preserve (sets the machine's machinePreserveTimeout; default: the
        /// manager's --machine-preserve-timeout). Go duration text, e.g. `2h`.
        #[arg(long)]
        duration: Option<String>,
        /// Preserve only once the machine fails (`when-failed` instead of `now`).
        #[arg(long)]
        when_failed: bool,
    },
    /// Stop preserving a node (or machine): removes the preserve annotation.
    Unpreserve {
        /// `node/<name>` or `machine/<name>`.
        target: String,
        /// The name, when the type is given as a separate word.
        name: Option<String>,
    },
}

/// `rollout` subcommands.
#[derive(Debug, Subcommand)]
pub enum Rollout {
    /// Watch the rollout until it completes, fails or times out.
    Status {
        /// `machinedeployment/<name>`.
        target: String,
        /// The name, when the type is given as a separate word.
        name: Option<String>,
        /// Give up after this long (Go duration text; 0 waits forever).
        #[arg(long, default_value = "0s")]
        timeout: String,
        /// Keep watching until the end (`--watch=false` prints the state once).
        #[arg(short = 'w', long, default_value_t = true, action = clap::ArgAction::Set)]
        watch: bool,
    },
    /// Revisions with their MachineSet, MachineClass and change-cause.
    History {
        /// `machinedeployment/<name>`.
        target: String,
        /// The name, when the type is given as a separate word.
        name: Option<String>,
        /// Print the machine template of this revision.
        #[arg(long)]
        revision: Option<i64>,
        /// Per revision, the template fields that differ from the previous one (why it rolled).
        #[arg(long, conflicts_with = "revision")]
        explain: bool,
    },
    /// What a change to a MachineDeployment or MachineClass would do to the machines (changed
    /// fields, replaced or updated machines, batches, deletion order, estimate); changes nothing.
    Plan {
        /// `machinedeployment/<name>` (`mcd/<name>`) or `machineclass/<name>` (`mc/<name>`).
        target: String,
        /// The name, when the type is given as a separate word.
        name: Option<String>,
        /// The object as it would be (YAML or JSON).
        #[arg(
            short = 'f',
            long = "filename",
            value_name = "FILE",
            conflicts_with = "patch"
        )]
        file: Option<PathBuf>,
        /// A JSON merge patch to apply to the stored object.
        #[arg(long, value_name = "JSON", required_unless_present = "file")]
        patch: Option<String>,
        /// The manager's `/metrics` text saved in a file (e.g. `curl <manager>:10258/metrics`):
        /// the estimate uses the creation, join and drain durations it measured.
        #[arg(long, value_name = "FILE")]
        metrics_file: Option<PathBuf>,
    },
    /// Roll back to the previous revision (or `--to-revision`).
    Undo {
        /// `machinedeployment/<name>`.
        target: String,
        /// The name, when the type is given as a separate word.
        name: Option<String>,
        /// The revision to go back to (0: the previous one).
        #[arg(long, default_value_t = 0)]
        to_revision: i64,
    },
    /// Replace every machine: a new revision through a template annotation.
    Restart {
        /// `machinedeployment/<name>`.
        target: String,
        /// The name, when the type is given as a separate word.
        name: Option<String>,
    },
    /// Pause the rollout (the deployment still scales).
    Pause {
        /// `machinedeployment/<name>`.
        target: String,
        /// The name, when the type is given as a separate word.
        name: Option<String>,
    },
    /// Resume a paused rollout.
    Resume {
        /// `machinedeployment/<name>`.
        target: String,
        /// The name, when the type is given as a separate word.
        name: Option<String>,
    },
}

/// `TYPE/NAME` from kubectl's two spellings (`mcd/web` or `mcd web`).
#[must_use]
pub fn joined(target: &str, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{target}/{name}"),
        None => target.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn global_flags_may_follow_the_command_like_kubectl() {
        let cli = Cli::try_parse_from([
            "kubectl-mcm",
            "rollout",
            "status",
            "mcd/web",
            "-n",
            "shoot",
            "--timeout",
            "5m",
            "--kubeconfig",
            "/tmp/k",
        ])
        .unwrap();
        assert_eq!(cli.global.namespace.as_deref(), Some("shoot"));
        assert_eq!(cli.global.kubeconfig, Some(PathBuf::from("/tmp/k")));
        match cli.command {
            Command::Rollout(Rollout::Status {
                target,
                timeout,
                watch,
                ..
            }) => {
                assert_eq!(
                    (target.as_str(), timeout.as_str(), watch),
                    ("mcd/web", "5m", true)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn type_and_name_as_two_words() {
        let cli = Cli::try_parse_from([
            "kubectl-mcm",
            "rollout",
            "undo",
            "machinedeployment",
            "web",
            "--to-revision",
            "2",
        ])
        .unwrap();
        match cli.command {
            Command::Rollout(Rollout::Undo {
                target,
                name,
                to_revision,
            }) => {
                assert_eq!(joined(&target, name.as_deref()), "machinedeployment/web");
                assert_eq!(to_revision, 2);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn plan_takes_a_file_or_a_patch_and_history_explains() {
        let cli = Cli::try_parse_from([
            "kubectl-mcm",
            "rollout",
            "plan",
            "mc/small",
            "--patch",
            "{}",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Command::Rollout(Rollout::Plan {
                file: None,
                patch: Some(_),
                ..
            })
        ));
        let cli = Cli::try_parse_from([
            "kubectl-mcm",
            "rollout",
            "plan",
            "mcd/web",
            "-f",
            "new.yaml",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Command::Rollout(Rollout::Plan {
                file: Some(_),
                patch: None,
                ..
            })
        ));
        for bad in [
            vec!["kubectl-mcm", "rollout", "plan", "mcd/web"],
            vec![
                "kubectl-mcm",
                "rollout",
                "plan",
                "mcd/web",
                "-f",
                "x",
                "--patch",
                "{}",
            ],
            vec![
                "kubectl-mcm",
                "rollout",
                "history",
                "mcd/web",
                "--explain",
                "--revision",
                "2",
            ],
        ] {
            assert_eq!(Cli::try_parse_from(bad).unwrap_err().exit_code(), 2);
        }
        let cli =
            Cli::try_parse_from(["kubectl-mcm", "rollout", "history", "mcd/web", "--explain"])
                .unwrap();
        assert!(matches!(
            cli.command,
            Command::Rollout(Rollout::History { explain: true, .. })
        ));
    }

    #[test]
    fn unknown_flag_is_a_usage_error() {
        let error = Cli::try_parse_from(["kubectl-mcm", "rollout", "status", "mcd/web", "--bogus"])
            .unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }

    #[test]
    fn all_namespaces_excludes_a_target() {
        let cli = Cli::try_parse_from(["kubectl-mcm", "status", "-A"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Status {
                all_namespaces: true,
                target: None,
                ..
            }
        ));
        let error = Cli::try_parse_from(["kubectl-mcm", "status", "mcd/web", "-A"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }
}
