//! The commands our documents tell a user to run against `make run`'s system do what the
//! documents say: every `kubectl` and `curl` command printed by `scripts/run.sh` or
//! shown in `README.md`, `docs/*.md` and `examples/README.md` is either in [`STEPS`], where it
//! runs as written (through `bash -c`, placeholders such as `<node>` filled in) against a system
//! set up like `make run` and its effect is checked, or in [`EXCLUDED`] with the reason.
//!
//! Two tests: [`every_documented_command_is_covered`] (no system: reads the files, fails on a
//! command that is in neither list, and on list entries no file shows any more) and
//! `documented_commands_on_a_make_run_system` in `main.rs` ([`run_on_make_run_system`]).
//!
//! "Set up like `make run`": the CRDs serve only `v1alpha1` (`make run`'s and the chart's
//! default, so kubectl's default version is v1alpha1), the objects of `examples/` in namespace
//! `default` (applied by the documented `kubectl apply -f examples/`), the manager with its
//! default timeouts (the examples set their own) and leader election. Differences from
//! `scripts/run.sh`, which needs helm to render the chart: the e2e harness installs the same
//! generated CRDs and webhook configurations directly (`make crds-check` keeps the chart's copies
//! equal), picks free ports (the documented provider port 19259 is replaced by the harness's),
//! and does not restart a component that exits.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mcm_e2e::objects::{
    Kind, annotation, get, label, machines, merge_patch, must_get, name, names, node,
    of_deployment, patch_node, phase, terminating, vms_with_prefix, wait_running,
};
use mcm_e2e::{E2eError, Probe, Result, System, ensure, eventually};
use serde_json::{Value, json};

use crate::harness::Outcome;
use crate::support::kubectl;

/// The deployment of `examples/`.
const DEPLOYMENT: &str = "worker-a";
/// Namespace of `examples/` (the manager's `--namespace` in `make run`).
pub const NAMESPACE: &str = "default";
/// The provider admin address the documents show (`make run`'s MCM_RUN_PROVIDER_PORT default).
const DOCUMENTED_PROVIDER: &str = "127.0.0.1:19259";
/// Annotation of provider-virtual that overrides a node's conditions.
const CONDITIONS: &str = "provider-virtual.mcm.gardener.cloud/conditions";
/// The preserve annotation.
const PRESERVE: &str = "node.machine.sapcloud.io/preserve";

/// What a step checks after its command ran (and prepares before).
#[derive(Debug, Clone, Copy)]
enum Check {
    /// `examples/` applied: both classes and the deployment exist, 3 machines get Running.
    ApplyExamples,
    /// Exits 0 and the output contains every fragment (`{machine}`, `{node}` filled in).
    Output(&'static [&'static str]),
    /// Runs until killed (a watch) and prints the fragments meanwhile.
    Watch(&'static [&'static str]),
    /// The class's stored `providerSpec.tags.team` becomes `b` and the VMs of the deployment
    /// get it through UpdateMachine, no machine replaced (prepared: `team: a`).
    HotUpdateTags,
    /// provider-virtual's `/admin/vms` lists the deployment's VMs with `tags.team: b`.
    VmsTaggedB,
    /// `spec.replicas` becomes `to` and exactly `to` machines run (prepared: `from` replicas).
    Scale { from: Option<i32>, to: i32 },
    /// The machine's `machinepriority` annotation is `1`.
    Priority,
    /// A scale-down to 1 removes the machine annotated with priority 1.
    ScaleDownTakesLowPriority,
    /// The template's class becomes `virtual-medium` and a MachineSet of that class appears
    /// (prepared: class `virtual-small`, rolled out); with `cause`, the change-cause
    /// annotation is set; with `revert`, the template goes back to `virtual-small` afterwards.
    Roll { cause: bool, revert: bool },
    /// `kubectl mcm rollout status` ended with success and the rollout is complete.
    RolledOut,
    /// The history lists both classes and the change cause.
    History,
    /// `rollout undo` put the template back to `virtual-small`.
    Undone,
    /// After the undo, the newest revision is `virtual-small` (the guide's revision 3; here
    /// the earlier steps' rollouts made more revisions).
    HistoryAfterUndo,
    /// `spec.paused` is true (resumed afterwards).
    Paused,
    /// Refused; stderr contains the message; nothing stored.
    Rejected(&'static str),
    /// The node's preserve annotation is this value; `now` also sets `preserveExpiryTime`,
    /// `false` clears it.
    Preserve(&'static str),
    /// Prints the machine's `preserveExpiryTime` (RFC 3339).
    PreserveExpiryPrinted,
    /// The machine turns Unknown (prepared: Running, no injected condition).
    Unhealthy,
    /// The machine is Running again.
    Recovered,
    /// The machine is deleted and replaced.
    MachineReplaced,
    /// The machine carries `force-deletion=true`.
    ForceDeletionLabel,
    /// The deployment, its machines and nodes are gone; with `reapply`, `examples/` is applied
    /// again afterwards.
    DeploymentDeleted { reapply: bool },
    /// The API server refuses requests, and serves again afterwards.
    ApiOutage,
}

/// Every covered command, as the documents show it (normalised: `$ ` prompt, trailing `# ...`
/// comment and line continuations removed, blanks collapsed), in the order the test runs them.
const STEPS: &[(&str, Check)] = &[
    ("kubectl apply -f examples/", Check::ApplyExamples),
    // --- looking around ---
    (
        "kubectl get mcd,mcs,mc,nodes",
        Check::Output(&[
            "machinedeployment.machine.sapcloud.io/worker-a",
            "machineset.machine.sapcloud.io/worker-a-",
            "machine.machine.sapcloud.io/{machine}",
            "node/{node}",
        ]),
    ),
    (
        "kubectl get machinedeployments,machinesets,machines,nodes",
        Check::Output(&[
            "machinedeployment.machine.sapcloud.io/worker-a",
            "machine.machine.sapcloud.io/{machine}",
            "node/{node}",
        ]),
    ),
    (
        "kubectl get mc -o wide",
        Check::Output(&["{machine}", "virtual:///default/"]),
    ),
    (
        "kubectl get events --sort-by=.lastTimestamp",
        Check::Output(&["SuccessfulCreate"]),
    ),
    (
        "kubectl get nodes -L node.kubernetes.io/instance-type",
        Check::Output(&["INSTANCE-TYPE", "{node}", "v.small"]),
    ),
    (
        "kubectl describe mc <machine>",
        Check::Output(&["{machine}", "machine.sapcloud.io/v1alpha1", "Running"]),
    ),
    (
        r#"kubectl get mc <machine> -o jsonpath='{.status.currentStatus}{"\n"}{.status.lastOperation}{"\n"}'"#,
        Check::Output(&[r#""phase":"Running""#, "successfully joined the cluster"]),
    ),
    (
        "kubectl get mc <machine> -o jsonpath='{.status.lastOperation}'",
        Check::Output(&[r#""description":"#, "successfully joined the cluster"]),
    ),
    (
        "kubectl get events --field-selector involvedObject.name=<machine>",
        // A Running machine has no events of its own (routine steps write none).
        Check::Output(&[]),
    ),
    (
        "kubectl get events --field-selector involvedObject.kind=MachineSet",
        Check::Output(&["SuccessfulCreate", "Created"]),
    ),
    (
        r#"kubectl get mc <machine> -o jsonpath='{range .status.conditions[?(@.type=="Blocked")]}{.reason}: {.message}{"\n"}{end}'"#,
        // Running: no Blocked condition, so nothing printed; what matters is that it runs.
        Check::Output(&[]),
    ),
    (
        r#"kubectl get mcd <deployment> -o jsonpath='{range .status.conditions[?(@.type=="MeltdownProtection")]}{.reason}: {.message}{"\n"}{end}'"#,
        Check::Output(&[]),
    ),
    (
        "kubectl get lease machine-controller-manager -n <namespace>",
        Check::Output(&["machine-controller-manager"]),
    ),
    (
        "kubectl get node <machine's node label>",
        // (The sandbox prints the Ready condition's status, `True`, where kube-apiserver's
        // table says `Ready`: sandbox/README.md.)
        Check::Output(&["{node}"]),
    ),
    ("kubectl mcm --help", Check::Output(&["rollout", "status"])),
    (
        "kubectl mcm status",
        Check::Output(&[
            "machinedeployment.machine.sapcloud.io/worker-a",
            "Desired 3",
            "Running",
        ]),
    ),
    (
        "kubectl mcm rollout status machinedeployment/worker-a",
        Check::Output(&["successfully rolled out"]),
    ),
    // --- hot update ---
    (
        r#"kubectl patch machineclass virtual-small --type=merge -p '{"providerSpec":{"tags":{"team":"b"}}}'"#,
        Check::HotUpdateTags,
    ),
    (
        r#"kubectl patch mcc virtual-small --type=merge -p '{"providerSpec":{"tags":{"team":"b"}}}'"#,
        Check::HotUpdateTags,
    ),
    (
        r#"kubectl patch machineclasses.v1alpha1.machine.sapcloud.io virtual-small --type=merge -p '{"providerSpec":{"tags":{"team":"b"}}}'"#,
        Check::HotUpdateTags,
    ),
    (
        "curl -s http://127.0.0.1:19259/admin/vms",
        Check::VmsTaggedB,
    ),
    // --- preservation ---
    (
        "kubectl annotate node <node> node.machine.sapcloud.io/preserve=now",
        Check::Preserve("now"),
    ),
    (
        "kubectl get mc <machine> -o jsonpath='{.status.currentStatus.preserveExpiryTime}'",
        Check::PreserveExpiryPrinted,
    ),
    (
        "kubectl annotate node <node> node.machine.sapcloud.io/preserve=when-failed --overwrite",
        Check::Preserve("when-failed"),
    ),
    (
        "kubectl annotate node <node> node.machine.sapcloud.io/preserve=false --overwrite",
        Check::Preserve("false"),
    ),
    // --- unhealthy nodes ---
    (
        "kubectl annotate node <node> provider-virtual.mcm.gardener.cloud/conditions='Ready=False'",
        Check::Unhealthy,
    ),
    ("kubectl get mc -w", Check::Watch(&["{machine}", "Unknown"])),
    (
        "kubectl annotate node <node> provider-virtual.mcm.gardener.cloud/conditions='Ready=False,DiskPressure=True'",
        Check::Unhealthy,
    ),
    (
        "kubectl annotate node <node> provider-virtual.mcm.gardener.cloud/conditions-",
        Check::Recovered,
    ),
    (
        r#"curl -X PUT -d '{"Ready":"False"}' http://127.0.0.1:19259/admin/nodes/<node>/conditions"#,
        Check::Unhealthy,
    ),
    (
        "curl -X DELETE http://127.0.0.1:19259/admin/nodes/<node>/conditions",
        Check::Recovered,
    ),
    (
        r#"curl -X PUT -d '{"Ready":"False"}' http://<metrics-address>/admin/nodes/<node>/conditions"#,
        Check::Unhealthy,
    ),
    (
        "curl -X DELETE http://<metrics-address>/admin/nodes/<node>/conditions",
        Check::Recovered,
    ),
    // --- scaling ---
    (
        "kubectl scale machinedeployment worker-a --replicas=5",
        Check::Scale {
            from: Some(3),
            to: 5,
        },
    ),
    (
        "kubectl scale mcd worker-a --replicas=5",
        Check::Scale {
            from: Some(3),
            to: 5,
        },
    ),
    (
        "kubectl scale mcd worker-a --replicas=2",
        Check::Scale { from: None, to: 2 },
    ),
    (
        "kubectl annotate mc <machine> machinepriority.machine.sapcloud.io=1 --overwrite",
        Check::Priority,
    ),
    (
        "kubectl scale mcd worker-a --replicas=1",
        Check::ScaleDownTakesLowPriority,
    ),
    // --- pause, rejected objects ---
    (
        r#"kubectl patch mcd worker-a --type=merge -p '{"spec":{"paused":true}}'"#,
        Check::Paused,
    ),
    (
        r#"kubectl patch mcd worker-a --type=merge -p '{"spec":{"replicas":-1}}'"#,
        Check::Rejected(
            r#"The MachineDeployment "worker-a" is invalid: .spec.replicas: Invalid value: -1: should be a non-negative integer"#,
        ),
    ),
    // --- rollouts ---
    (
        r#"kubectl patch machinedeployment worker-a --type=merge -p '{"spec":{"template":{"spec":{"class":{"name":"virtual-medium"}}}}}'"#,
        Check::Roll {
            cause: false,
            revert: true,
        },
    ),
    (
        r#"kubectl patch mcd worker-a --type=merge -p '{"spec":{"template":{"spec":{"class":{"name":"virtual-medium"}}}}}'"#,
        Check::Roll {
            cause: false,
            revert: false,
        },
    ),
    (
        "kubectl get mcs -w",
        Check::Watch(&["worker-a-", "DESIRED"]),
    ),
    (
        r#"kubectl patch mcd worker-a --type=merge -p '{"metadata":{"annotations":{"kubernetes.io/change-cause":"roll to virtual-medium"}},"spec":{"template":{"spec":{"class":{"name":"virtual-medium"}}}}}'"#,
        Check::Roll {
            cause: true,
            revert: false,
        },
    ),
    (
        "kubectl mcm rollout status machinedeployment/worker-a --timeout 5m",
        Check::RolledOut,
    ),
    ("kubectl mcm rollout history mcd/worker-a", Check::History),
    ("kubectl mcm rollout undo mcd/worker-a", Check::Undone),
    // The same command again, after the undo (the guide shows both outputs).
    (
        "kubectl mcm rollout history mcd/worker-a",
        Check::HistoryAfterUndo,
    ),
    // --- deletion ---
    ("kubectl delete mc <machine>", Check::MachineReplaced),
    ("kubectl delete machine <machine>", Check::MachineReplaced),
    (
        "kubectl label mc <machine> force-deletion=true",
        Check::ForceDeletionLabel,
    ),
    (
        "kubectl delete mcd worker-a",
        Check::DeploymentDeleted { reapply: true },
    ),
    (
        "kubectl delete machinedeployment worker-a",
        Check::DeploymentDeleted { reapply: false },
    ),
    // Last: it makes the API server refuse everything for 20 seconds.
    (
        r#"kubectl create --raw /sandbox/admin/unavailable -f - <<<'{"seconds": 20}'"#,
        Check::ApiOutage,
    ),
];

/// Commands the documents show that are not meant for `make run`'s system, with the reason.
/// Prefix entries end with `*` and exclude every command starting with the rest.
const EXCLUDED: &[(&str, &str)] = &[
    (
        "kubectl --kubeconfig DIR/admin.kubeconfig version",
        "docs/testing.md: the real control plane's server version, checked by scripts/test-kube.sh",
    ),
    // Prose that names a command or a tool rather than showing one to run.
    (
        "kubectl mcm rollout plan",
        "docs/behaviour.md: says the plan prints the controller's deletion order",
    ),
    (
        "kubectl describe",
        "docs/operations.md: names where an aggregated event's count shows",
    ),
    (
        "kubectl mcm rollout undo",
        "user guide and webhook rules: name what undo writes (spec.rollbackTo)",
    ),
    (
        "kubectl / Gardener / cluster-autoscaler",
        "docs/architecture.md: a diagram box",
    ),
    (
        "kubectl mcm",
        "README.md: the plugin's name in the layout table",
    ),
    (
        "kubectl scale",
        "user guide: names the scale subresource's client",
    ),
    (
        "kubectl get",
        "user guide: names the verbs that speak v1alpha1",
    ),
    (
        "kubectl rollout",
        "user guide: says kubectl rollout does not know MachineDeployments",
    ),
    (
        "kubectl rollout status",
        "user guide: the kubectl command the plugin mirrors",
    ),
    ("kubectl <name>", "user guide: how kubectl finds plugins"),
    (
        "kubectl describe machine",
        "docs/provider-authoring.md: where a provider's message shows",
    ),
    // Transcripts of e2e scenarios: their objects (kp-*, kd-*) exist only in those scenarios,
    // which run these commands and check their output (kubectl_plugin.rs).
    (
        "kubectl mcm rollout status machinedeployment kp-md *",
        "e2e transcript (kubectl_plugin_rollout_status_history_undo)",
    ),
    (
        "kubectl mcm rollout * mcd/kp-*",
        "e2e transcript (kubectl_plugin_rollout_status_history_undo)",
    ),
    (
        "kubectl mcm status mcd/kp-md",
        "e2e transcript (kubectl_plugin_rollout_status_history_undo)",
    ),
    (
        "kubectl mcm * mcd/kd-md *",
        "e2e transcript (kubectl_plugin_deadline_exceeded_and_stuck)",
    ),
    (
        "kubectl mcm *preserve node/kp-md-*",
        "e2e transcript (kubectl_plugin_rollout_status_history_undo)",
    ),
    (
        "kubectl -n e2e-preview *",
        "e2e transcript (rollout_preview_matches_what_happened)",
    ),
    (
        "kubectl mcm rollout *pv-*",
        "e2e transcript (rollout_preview_matches_what_happened)",
    ),
    // Other clusters: Gardener seeds and shoots, a cluster with the chart, production.
    (
        "kubectl -n $ns *",
        "docs/gardener.md: a Gardener seed's shoot namespace",
    ),
    (
        "kubectl annotate shoot *",
        "docs/gardener.md: a Gardener garden cluster",
    ),
    (
        "kubectl apply -f charts/machine-controller-manager/files/crds/v1alpha1/",
        "docs/helm-chart.md: installing the CRDs on a cluster without the chart",
    ),
    (
        "kubectl apply --dry-run=server",
        "docs/helm-chart.md: what make chart-check does",
    ),
    (
        "kubectl scale deployment machine-controller-manager --replicas=0",
        "docs/operations.md: migrating a production cluster from the Go MCM",
    ),
    (
        "kubectl get mc",
        "docs/operations.md: the check after that migration (covered in spirit by kubectl get mc -o wide)",
    ),
    // Illustrations of a rejected object whose manifest the page shows only in part.
    (
        "kubectl apply -f invalid-md.yaml",
        "docs/webhook-rules.md: the manifest is not a file of the repository",
    ),
    (
        "kubectl apply -f md.yaml",
        "docs/webhook-rules.md: the manifest is not a file of the repository",
    ),
];

/// A command found in a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Documented {
    /// Repository-relative path.
    pub file: String,
    /// 1-based line (of the command's first line).
    pub line: usize,
    /// The normalised command.
    pub command: String,
}

/// Removes a trailing shell comment (`#` after a blank, outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' && previous.is_whitespace() => return &line[..at],
            None => {}
        }
        previous = c;
    }
    line
}

fn normalise(command: &str) -> String {
    command.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_command(text: &str) -> bool {
    ["kubectl", "curl"].iter().any(|tool| {
        text.strip_prefix(tool)
            .is_some_and(|rest| rest.starts_with(char::is_whitespace))
    })
}

/// Commands of a Markdown text: lines of fenced code blocks starting with `kubectl ` or `curl `
/// (after an optional `$ ` prompt; `\` continues a line) and inline code spans starting so (a
/// bare tool name is prose, not a command).
pub fn markdown_commands(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut in_fence = false;
    // Prose with code blocks blanked, so spans are searched outside fences only.
    let mut prose = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            prose.push("");
            i += 1;
            continue;
        }
        if in_fence {
            let trimmed = line.trim();
            let trimmed = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
            if is_command(trimmed) {
                let first = i + 1;
                let mut command = strip_comment(trimmed).trim_end().to_owned();
                while command.ends_with('\\') && i + 1 < lines.len() {
                    command.pop();
                    i += 1;
                    command.push(' ');
                    command.push_str(strip_comment(lines[i].trim()));
                }
                found.push((first, normalise(&command)));
            }
            prose.push("");
        } else {
            prose.push(line);
        }
        i += 1;
    }
    let prose = prose.join("\n");
    let mut rest = prose.as_str();
    let mut offset = 0;
    while let Some(open) = rest.find('`') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('`') else { break };
        let span = &after[..close];
        if is_command(span.trim_start()) {
            let line = prose[..offset + open].matches('\n').count() + 1;
            found.push((line, normalise(span)));
        }
        let consumed = open + 1 + close + 1;
        offset += consumed;
        rest = &rest[consumed..];
    }
    found
}

/// Commands `scripts/run.sh` prints when everything runs (its `cat <<EOT` block), with the
/// script's variables replaced by the values they have in `make run`.
pub fn run_sh_commands(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut in_block = false;
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if line.starts_with("cat <<EOT") {
            in_block = true;
        } else if line == "EOT" {
            in_block = false;
        } else if in_block && is_command(line) {
            let first = i + 1;
            let mut command = strip_comment(line).trim_end().to_owned();
            // An unquoted here-document prints `\\` as `\`.
            while command.ends_with("\\\\") && i + 1 < lines.len() {
                command.truncate(command.len() - 2);
                i += 1;
                command.push(' ');
                command.push_str(strip_comment(lines[i].trim()));
            }
            let command = command
                .replace("$deployment", DEPLOYMENT)
                .replace("$provider_port", "19259")
                .replace("\\$", "$");
            found.push((first, normalise(&command)));
        }
        i += 1;
    }
    found
}

/// Every command of the documents (duplicates included, each with its place).
pub fn documented_commands(root: &Path) -> Vec<Documented> {
    let mut files: Vec<PathBuf> = vec![root.join("README.md"), root.join("examples/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let relative = |p: &Path| p.strip_prefix(root).unwrap().display().to_string();
    let mut all = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, command) in markdown_commands(&text) {
            all.push(Documented {
                file: relative(&file),
                line,
                command,
            });
        }
    }
    let run_sh = root.join("scripts/run.sh");
    let text = std::fs::read_to_string(&run_sh).unwrap();
    for (line, command) in run_sh_commands(&text) {
        all.push(Documented {
            file: relative(&run_sh),
            line,
            command,
        });
    }
    all
}

/// Whether `command` matches an [`EXCLUDED`] pattern (`*` matches any run of characters).
fn excluded(command: &str) -> Option<&'static str> {
    EXCLUDED
        .iter()
        .find(|(pattern, _)| glob_match(pattern, command))
        .map(|(pattern, _)| *pattern)
}

fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let Some(mut rest) = text.strip_prefix(parts[0]) else {
        return false;
    };
    for (i, part) in parts.iter().enumerate().skip(1) {
        if i == parts.len() - 1 {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_documented_command_is_covered() {
    let documented = documented_commands(&root());
    // The extraction itself works: these are shown today.
    for known in [
        "kubectl apply -f examples/",
        "kubectl mcm status",
        "kubectl get mc -w",
    ] {
        assert!(
            documented.iter().any(|d| d.command == known),
            "extraction lost {known:?}: {documented:#?}"
        );
    }
    let covered: BTreeSet<&str> = STEPS.iter().map(|(c, _)| *c).collect();
    let uncovered: Vec<String> = documented
        .iter()
        .filter(|d| !covered.contains(d.command.as_str()) && excluded(&d.command).is_none())
        .map(|d| format!("{}:{}: {}", d.file, d.line, d.command))
        .collect();
    assert!(
        uncovered.is_empty(),
        "commands shown to users that documented_commands.rs neither runs (STEPS) nor excludes \
         with a reason (EXCLUDED):\n{}",
        uncovered.join("\n")
    );
    let shown: BTreeSet<&str> = documented.iter().map(|d| d.command.as_str()).collect();
    let stale: Vec<&str> = covered
        .iter()
        .copied()
        .filter(|c| !shown.contains(c))
        .chain(
            EXCLUDED
                .iter()
                .map(|(p, _)| *p)
                .filter(|p| !documented.iter().any(|d| glob_match(p, &d.command))),
        )
        .collect();
    assert!(
        stale.is_empty(),
        "STEPS or EXCLUDED entries no document shows any more: {stale:#?}"
    );
}

#[test]
fn extraction_reads_fences_prompts_continuations_comments_and_spans() {
    let md = "Text `kubectl get mc` and `not kubectl` and `curl -s x`.\n\
              ```sh\n\
              $ kubectl scale mcd a \\\n  --replicas=2   # comment\n\
              kubectl get x -o jsonpath='{a # b}'  # real comment\n\
              NAME   READY\n\
              ```\n\
              `kubectl\nwrapped span`\n";
    let found = markdown_commands(md);
    let commands: Vec<&str> = found.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(
        commands,
        [
            "kubectl scale mcd a --replicas=2",
            "kubectl get x -o jsonpath='{a # b}'",
            "kubectl get mc",
            "curl -s x",
            "kubectl wrapped span",
        ]
    );
    assert_eq!(found[0].0, 3);
    assert_eq!(found[4].0, 7);
    let sh = "x\ncat <<EOT\n  kubectl scale machinedeployment $deployment --replicas=5\n  \
              kubectl patch a \\\\\n    -p '{}'   # hot\n  \
              curl http://127.0.0.1:$provider_port/x\n  export PATH=$bin:\\$PATH\nEOT\n\
              kubectl outside\n";
    let commands: Vec<String> = run_sh_commands(sh).into_iter().map(|(_, c)| c).collect();
    assert_eq!(
        commands,
        [
            "kubectl scale machinedeployment worker-a --replicas=5",
            "kubectl patch a -p '{}'",
            "curl http://127.0.0.1:19259/x",
        ]
    );
    assert!(glob_match(
        "kubectl mcm * mcd/kd-md *",
        "kubectl mcm status mcd/kd-md --stuck-after 1s"
    ));
    assert!(!glob_match(
        "kubectl mcm * mcd/kd-md *",
        "kubectl mcm status mcd/kd-md"
    ));
    assert!(glob_match("kubectl -n $ns *", "kubectl -n $ns get lease a"));
}

// ------------------------------------------------------------------------------------------------
// Running the steps.

/// What a command printed.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn text(&self) -> String {
        format!(
            "exit {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

struct Context<'a> {
    system: &'a System,
    provider: String,
    bin_dir: PathBuf,
    /// The machine and node placeholders stand for.
    machine: String,
    node: String,
    /// Machine annotated with priority 1.
    low_priority: Option<String>,
}

impl Context<'_> {
    fn fill(&self, text: &str) -> String {
        text.replace("<machine's node label>", &self.node)
            .replace("<machine>", &self.machine)
            .replace("<node>", &self.node)
            .replace("<deployment>", DEPLOYMENT)
            .replace("<namespace>", NAMESPACE)
            .replace("<metrics-address>", &self.provider)
            .replace(DOCUMENTED_PROVIDER, &self.provider)
            .replace("{machine}", &self.machine)
            .replace("{node}", &self.node)
    }

    /// Runs a command as a user would type it (bash, `KUBECONFIG` exported, the plugin on
    /// PATH, in the repository); a watch is stopped after `watch_seconds`.
    async fn shell(&self, command: &str, watch_seconds: Option<u64>) -> Result<Ran> {
        let ran = self.shell_quiet(command, watch_seconds).await?;
        println!("$ {command}\n{}", ran.text());
        Ok(ran)
    }

    /// [`Self::shell`] without the transcript (for polls).
    async fn shell_quiet(&self, command: &str, watch_seconds: Option<u64>) -> Result<Ran> {
        let command = match watch_seconds {
            Some(seconds) => format!("timeout {seconds} {command}"),
            None => command.to_owned(),
        };
        let path = std::env::join_paths(
            std::iter::once(self.bin_dir.clone()).chain(
                std::env::var_os("PATH")
                    .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                    .unwrap_or_default(),
            ),
        )
        .map_err(|e| E2eError::Assertion(e.to_string()))?;
        let output = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(&command)
            .current_dir(root())
            .env("KUBECONFIG", self.system.kubeconfig())
            .env("PATH", path)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(E2eError::io("run bash for", &command))?;
        Ok(Ran {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// Picks a Running machine of the deployment (and its node) for the placeholders.
    async fn pick_machine(&mut self) -> Result<()> {
        let running =
            wait_running(self.system, DEPLOYMENT, replicas(self.system).await?, 240).await?;
        let machine = running
            .first()
            .ok_or_else(|| E2eError::Assertion("no machine of worker-a".to_owned()))?;
        self.machine = name(machine).to_owned();
        self.node = label(machine, "node").unwrap_or(name(machine)).to_owned();
        Ok(())
    }

    async fn machine_phase(&self) -> Result<String> {
        Ok(get(self.system, Kind::Machine, &self.machine)
            .await?
            .map(|m| phase(&m).to_owned())
            .unwrap_or_default())
    }

    async fn wait_phase(&self, want: &'static str, seconds: u64) -> Result<()> {
        let machine = self.machine.clone();
        eventually(
            &format!("machine {machine} {want}"),
            seconds,
            || async move {
                let seen = self.machine_phase().await?;
                Ok(if seen == want {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("phase {seen:?}"))
                })
            },
        )
        .await
    }
}

async fn replicas(system: &System) -> Result<usize> {
    let md = must_get(system, Kind::MachineDeployment, DEPLOYMENT).await?;
    Ok(usize::try_from(md["spec"]["replicas"].as_i64().unwrap_or(0)).unwrap_or(0))
}

fn template_class(md: &Value) -> &str {
    md["spec"]["template"]["spec"]["class"]["name"]
        .as_str()
        .unwrap_or("")
}

/// Waits until every machine of the deployment runs the template's class, `replicas` of them.
async fn wait_rolled_out(system: &System, class: &str) -> Result<Vec<Value>> {
    let want = replicas(system).await?;
    eventually(
        &format!("worker-a: {want} machines of class {class} Running"),
        300,
        || async move {
            let current = machines(system, DEPLOYMENT).await?;
            let classes: Vec<&str> = current
                .iter()
                .map(|m| m["spec"]["class"]["name"].as_str().unwrap_or(""))
                .collect();
            let done = current.len() == want
                && current
                    .iter()
                    .all(|m| phase(m) == "Running" && !terminating(m))
                && classes.iter().all(|c| *c == class);
            Ok(if done {
                Probe::Done(current)
            } else {
                Probe::Waiting(format!(
                    "{:?} classes {classes:?}",
                    current
                        .iter()
                        .map(|m| format!("{} {}", name(m), phase(m)))
                        .collect::<Vec<_>>()
                ))
            })
        },
    )
    .await
}

async fn set_replicas(system: &System, n: i32) -> Result<()> {
    merge_patch(
        system,
        Kind::MachineDeployment,
        DEPLOYMENT,
        json!({"spec": {"replicas": n}}),
    )
    .await?;
    wait_running(system, DEPLOYMENT, usize::try_from(n).unwrap_or(0), 300).await?;
    Ok(())
}

async fn vm_teams(system: &System) -> Result<Vec<String>> {
    Ok(vms_with_prefix(system, "worker-a-")
        .await?
        .iter()
        .map(|vm| vm["spec"]["tags"]["team"].as_str().unwrap_or("").to_owned())
        .collect())
}

async fn wait_vm_teams(system: &System, team: &'static str) -> Result<()> {
    eventually(
        &format!("every VM of worker-a tagged team={team}"),
        120,
        || async move {
            let teams = vm_teams(system).await?;
            Ok(if !teams.is_empty() && teams.iter().all(|t| t == team) {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("VM teams {teams:?}"))
            })
        },
    )
    .await
}

fn succeeded(ran: &Ran, command: &str) -> Result<()> {
    ensure(ran.code == Some(0), || {
        format!("`{command}` failed:\n{}", ran.text())
    })?;
    // kubectl drops fields the served version does not know and still exits 0.
    ensure(!ran.stderr.contains("unknown field"), || {
        format!(
            "`{command}` hit a field the served version does not know:\n{}",
            ran.text()
        )
    })
}

async fn remove_injected_conditions(ctx: &Context<'_>) -> Result<()> {
    patch_node(
        ctx.system,
        &ctx.node,
        json!({"metadata": {"annotations": {CONDITIONS: null}}}),
    )
    .await?;
    ctx.system.set_node_conditions(&ctx.node, None).await?;
    ctx.wait_phase("Running", 120).await
}

/// Makes the state a step's check needs: a machine for the placeholders, the value the command
/// changes set to something else, a healthy machine, a finished rollout.
async fn prepare(ctx: &mut Context<'_>, check: Check) -> Result<()> {
    let s = ctx.system;
    // Steps that change or delete their machine take a fresh one; others reuse the current one
    // while it exists.
    let fresh_machine = matches!(
        check,
        Check::Priority | Check::MachineReplaced | Check::ForceDeletionLabel
    );
    let uses_machine = matches!(
        check,
        Check::Output(_)
            | Check::Preserve(_)
            | Check::Unhealthy
            | Check::Recovered
            | Check::Watch(_)
    );
    if fresh_machine
        || (uses_machine
            && (ctx.machine.is_empty() || get(s, Kind::Machine, &ctx.machine).await?.is_none()))
    {
        ctx.pick_machine().await?;
    }
    match check {
        Check::HotUpdateTags => {
            merge_patch(
                s,
                Kind::MachineClass,
                "virtual-small",
                json!({"providerSpec": {"tags": {"team": "a"}}}),
            )
            .await?;
            wait_vm_teams(s, "a").await?;
        }
        Check::Unhealthy => {
            let healthy = ctx.machine_phase().await? == "Running";
            if !healthy {
                remove_injected_conditions(ctx).await?;
            }
        }
        Check::Scale { from: Some(n), .. } => set_replicas(s, n).await?,
        Check::Roll { .. } => {
            let md = must_get(s, Kind::MachineDeployment, DEPLOYMENT).await?;
            if template_class(&md) != "virtual-small" {
                merge_patch(
                    s,
                    Kind::MachineDeployment,
                    DEPLOYMENT,
                    json!({"spec": {"template": {"spec": {"class": {"name": "virtual-small"}}}}}),
                )
                .await?;
            }
            wait_rolled_out(s, "virtual-small").await?;
        }
        _ => {}
    }
    Ok(())
}

/// Runs one step: preparation, the command, the check.
async fn run_step(ctx: &mut Context<'_>, documented: &str, check: Check) -> Result<()> {
    let s = ctx.system;
    prepare(ctx, check).await?;
    let command = ctx.fill(documented);
    let watch = matches!(check, Check::Watch(_)).then_some(10);
    let ran = ctx.shell(&command, watch).await?;
    let fail = |what: String| E2eError::Assertion(format!("`{command}`: {what}\n{}", ran.text()));
    match check {
        Check::ApplyExamples => {
            succeeded(&ran, &command)?;
            for class in ["virtual-small", "virtual-medium"] {
                must_get(s, Kind::MachineClass, class).await?;
            }
            wait_running(s, DEPLOYMENT, 3, 240).await?;
        }
        Check::Output(fragments) => {
            succeeded(&ran, &command)?;
            for fragment in fragments {
                let fragment = ctx.fill(fragment);
                if !ran.stdout.contains(&fragment) {
                    return Err(fail(format!("output lacks {fragment:?}")));
                }
            }
        }
        Check::Watch(fragments) => {
            // `timeout` ends the watch with 124.
            if ran.code != Some(124) {
                return Err(fail("the watch did not keep running".to_owned()));
            }
            for fragment in fragments {
                let fragment = ctx.fill(fragment);
                if !ran.stdout.contains(&fragment) {
                    return Err(fail(format!("output lacks {fragment:?}")));
                }
            }
        }
        Check::HotUpdateTags => {
            succeeded(&ran, &command)?;
            let before = names(&machines(s, DEPLOYMENT).await?);
            let class = must_get(s, Kind::MachineClass, "virtual-small").await?;
            ensure(class["providerSpec"]["tags"]["team"] == "b", || {
                format!(
                    "stored providerSpec after `{command}`: {}",
                    class["providerSpec"]
                )
            })?;
            ensure(
                class["providerSpec"]["tags"]["cost-center"] == "1234",
                || format!("the merge patch lost other tags: {}", class["providerSpec"]),
            )?;
            wait_vm_teams(s, "b").await?;
            let after = names(&machines(s, DEPLOYMENT).await?);
            ensure(before == after, || {
                format!("machines replaced by a hot update: {before:?} -> {after:?}")
            })?;
        }
        Check::VmsTaggedB => {
            succeeded(&ran, &command)?;
            let vms: Value =
                serde_json::from_str(&ran.stdout).map_err(|e| fail(format!("not JSON: {e}")))?;
            let teams: Vec<&Value> = vms
                .as_array()
                .map(|vms| {
                    vms.iter()
                        .filter(|vm| {
                            vm["machineName"]
                                .as_str()
                                .is_some_and(|m| m.starts_with("worker-a-"))
                        })
                        .map(|vm| &vm["spec"]["tags"]["team"])
                        .collect()
                })
                .unwrap_or_default();
            if teams.is_empty() || teams.iter().any(|t| **t != "b") {
                return Err(fail(format!("VM tags team {teams:?}")));
            }
        }
        Check::Scale { to, .. } => {
            succeeded(&ran, &command)?;
            let md = must_get(s, Kind::MachineDeployment, DEPLOYMENT).await?;
            ensure(md["spec"]["replicas"] == to, || {
                format!("spec.replicas {} after `{command}`", md["spec"]["replicas"])
            })?;
            wait_running(s, DEPLOYMENT, usize::try_from(to).unwrap_or(0), 300).await?;
        }
        Check::Priority => {
            succeeded(&ran, &command)?;
            let m = must_get(s, Kind::Machine, &ctx.machine).await?;
            ensure(
                annotation(&m, "machinepriority.machine.sapcloud.io") == Some("1"),
                || format!("annotations {}", m["metadata"]["annotations"]),
            )?;
            ctx.low_priority = Some(ctx.machine.clone());
        }
        Check::ScaleDownTakesLowPriority => {
            succeeded(&ran, &command)?;
            let low = ctx.low_priority.clone().unwrap_or_default();
            let left = wait_running(s, DEPLOYMENT, 1, 300).await?;
            ensure(!names(&left).contains(&low), || {
                format!("the priority-1 machine {low} stayed: {:?}", names(&left))
            })?;
            set_replicas(s, 3).await?;
        }
        Check::Paused => {
            succeeded(&ran, &command)?;
            let md = must_get(s, Kind::MachineDeployment, DEPLOYMENT).await?;
            ensure(md["spec"]["paused"] == true, || {
                format!("spec.paused {}", md["spec"]["paused"])
            })?;
            merge_patch(
                s,
                Kind::MachineDeployment,
                DEPLOYMENT,
                json!({"spec": {"paused": false}}),
            )
            .await?;
        }
        Check::Rejected(message) => {
            if ran.code == Some(0) || !ran.stderr.contains(message) {
                return Err(fail(format!("want a refusal saying {message:?}")));
            }
            let md = must_get(s, Kind::MachineDeployment, DEPLOYMENT).await?;
            ensure(
                md["spec"]["replicas"].as_i64().is_some_and(|r| r >= 0),
                || format!("stored replicas {}", md["spec"]["replicas"]),
            )?;
        }
        Check::Roll { cause, revert } => {
            succeeded(&ran, &command)?;
            let md = must_get(s, Kind::MachineDeployment, DEPLOYMENT).await?;
            ensure(template_class(&md) == "virtual-medium", || {
                format!(
                    "template class after `{command}`: {}",
                    md["spec"]["template"]
                )
            })?;
            if cause {
                ensure(
                    annotation(&md, "kubernetes.io/change-cause") == Some("roll to virtual-medium"),
                    || format!("annotations {}", md["metadata"]["annotations"]),
                )?;
            }
            eventually("a MachineSet of class virtual-medium", 120, || async move {
                let sets = of_deployment(s, Kind::MachineSet, DEPLOYMENT).await?;
                let classes: Vec<&str> = sets.iter().map(template_class).collect();
                Ok(if classes.contains(&"virtual-medium") {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("MachineSet classes {classes:?}"))
                })
            })
            .await?;
            if revert {
                merge_patch(
                    s,
                    Kind::MachineDeployment,
                    DEPLOYMENT,
                    json!({"spec": {"template": {"spec": {"class": {"name": "virtual-small"}}}}}),
                )
                .await?;
            }
        }
        Check::RolledOut => {
            succeeded(&ran, &command)?;
            if !ran.stdout.contains("successfully rolled out") {
                return Err(fail("no success line".to_owned()));
            }
            wait_rolled_out(s, "virtual-medium").await?;
        }
        Check::History => {
            succeeded(&ran, &command)?;
            let lines: Vec<&str> = ran.stdout.lines().collect();
            let row = |class: &str, cause: &str| {
                lines
                    .iter()
                    .any(|l| l.contains(class) && l.trim_end().ends_with(cause))
            };
            if !(row("virtual-small", "<none>") && row("virtual-medium", "roll to virtual-medium"))
            {
                return Err(fail(
                    "want a revision per class, with the change cause".to_owned(),
                ));
            }
        }
        Check::Undone => {
            succeeded(&ran, &command)?;
            // The plugin asks for the rollback (as upstream, `spec.rollbackTo`); the controller
            // copies the revision's template.
            eventually(
                "worker-a's template back to virtual-small",
                120,
                || async move {
                    let md = must_get(s, Kind::MachineDeployment, DEPLOYMENT).await?;
                    Ok(if template_class(&md) == "virtual-small" {
                        Probe::Done(())
                    } else {
                        Probe::Waiting(format!("template {}", md["spec"]["template"]))
                    })
                },
            )
            .await?;
            wait_rolled_out(s, "virtual-small").await?;
        }
        Check::HistoryAfterUndo => {
            succeeded(&ran, &command)?;
            // REVISION MACHINESET MACHINECLASS MACHINES CHANGE-CAUSE
            let newest = ran
                .stdout
                .lines()
                .filter_map(|l| {
                    let words: Vec<&str> = l.split_whitespace().collect();
                    let revision = words.first()?.parse::<u64>().ok()?;
                    Some((revision, words.get(2).copied().unwrap_or("")))
                })
                .max();
            if newest.map(|(_, class)| class) != Some("virtual-small") {
                return Err(fail(format!(
                    "newest revision {newest:?} is not virtual-small"
                )));
            }
        }
        Check::Preserve(value) => {
            succeeded(&ran, &command)?;
            let n = node(s, &ctx.node)
                .await?
                .ok_or_else(|| fail("node gone".to_owned()))?;
            ensure(annotation(&n, PRESERVE) == Some(value), || {
                format!("node annotations {}", n["metadata"]["annotations"])
            })?;
            let machine = ctx.machine.clone();
            let machine_ref = &machine;
            let want_expiry = match value {
                "now" => Some(true),
                "false" => Some(false),
                _ => None,
            };
            if let Some(want) = want_expiry {
                eventually(
                    &format!("machine {machine} preserved: {want}"),
                    60,
                    || async move {
                        let m = must_get(s, Kind::Machine, machine_ref).await?;
                        let expiry = &m["status"]["currentStatus"]["preserveExpiryTime"];
                        Ok(if expiry.is_string() == want {
                            Probe::Done(())
                        } else {
                            Probe::Waiting(format!("preserveExpiryTime {expiry}"))
                        })
                    },
                )
                .await?;
            }
        }
        Check::PreserveExpiryPrinted => {
            succeeded(&ran, &command)?;
            if ran.stdout.trim().parse::<jiff::Timestamp>().is_err() {
                return Err(fail("not an RFC 3339 time".to_owned()));
            }
        }
        Check::Unhealthy => {
            succeeded(&ran, &command)?;
            // The example's healthTimeout (2m) fails the machine later; it recovers before.
            ctx.wait_phase("Unknown", 90).await?;
        }
        Check::Recovered => {
            succeeded(&ran, &command)?;
            ctx.wait_phase("Running", 90).await?;
        }
        Check::MachineReplaced => {
            succeeded(&ran, &command)?;
            let gone = ctx.machine.clone();
            let gone_ref = &gone;
            eventually(&format!("machine {gone} deleted"), 180, || async move {
                Ok(match get(s, Kind::Machine, gone_ref).await? {
                    None => Probe::Done(()),
                    Some(m) => Probe::Waiting(format!("phase {}", phase(&m))),
                })
            })
            .await?;
            let now = wait_running(s, DEPLOYMENT, 3, 240).await?;
            ensure(!names(&now).contains(&gone), || "not replaced".to_owned())?;
        }
        Check::ForceDeletionLabel => {
            succeeded(&ran, &command)?;
            let m = must_get(s, Kind::Machine, &ctx.machine).await?;
            ensure(label(&m, "force-deletion") == Some("true"), || {
                format!("labels {}", m["metadata"]["labels"])
            })?;
        }
        Check::DeploymentDeleted { reapply } => {
            succeeded(&ran, &command)?;
            eventually(
                "worker-a deleted with its machines and nodes",
                300,
                || async move {
                    let left = machines(s, DEPLOYMENT).await?;
                    let md = get(s, Kind::MachineDeployment, DEPLOYMENT).await?;
                    let mut nodes = Vec::new();
                    for m in &left {
                        if node(s, name(m)).await?.is_some() {
                            nodes.push(name(m).to_owned());
                        }
                    }
                    Ok(if left.is_empty() && md.is_none() {
                        Probe::Done(())
                    } else {
                        Probe::Waiting(format!(
                            "deployment present: {}, machines {:?}, nodes {nodes:?}",
                            md.is_some(),
                            names(&left)
                        ))
                    })
                },
            )
            .await?;
            if node(s, &ctx.node).await?.is_some() {
                return Err(fail(format!("node {} left behind", ctx.node)));
            }
            if reapply {
                let again = ctx.shell("kubectl apply -f examples/", None).await?;
                succeeded(&again, "kubectl apply -f examples/")?;
                wait_running(s, DEPLOYMENT, 3, 240).await?;
                ctx.pick_machine().await?;
            }
        }
        Check::ApiOutage => {
            succeeded(&ran, &command)?;
            let refused = ctx.shell("kubectl get --raw /readyz", None).await?;
            ensure(refused.code != Some(0), || {
                format!(
                    "the API server still answers during the outage:\n{}",
                    refused.text()
                )
            })?;
            let shared: &Context<'_> = ctx;
            eventually("the API server serves again", 90, || async move {
                let again = shared
                    .shell_quiet("kubectl get --raw /readyz", None)
                    .await?;
                Ok(if again.code == Some(0) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(again.text())
                })
            })
            .await?;
        }
    }
    // Leave no injected fault behind a step that only made a node unhealthy for its check.
    if let Check::Unhealthy = check {
        let next_recovers = STEPS
            .iter()
            .position(|(c, k)| *c == documented && matches!(k, Check::Unhealthy))
            .and_then(|i| STEPS.get(i + 1))
            .is_some_and(|(_, k)| matches!(k, Check::Recovered | Check::Watch(_)));
        if !next_recovers {
            remove_injected_conditions(ctx).await?;
        }
    }
    Ok(())
}

/// Checks beyond the documents' commands: kubectl's default version is the guide's v1alpha1,
/// and a field of the v1alpha1 template (`creationTimeout`) is stored when patched.
async fn default_version_is_v1alpha1(ctx: &Context<'_>) -> Result<()> {
    let explained = ctx
        .shell("kubectl explain machinedeployment.spec", None)
        .await?;
    succeeded(&explained, "kubectl explain machinedeployment.spec")?;
    let version = explained
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("VERSION:"))
        .map(str::trim)
        .unwrap_or_default()
        .to_owned();
    ensure(version == "v1alpha1", || {
        format!(
            "kubectl explain shows version {version:?}:\n{}",
            explained.stdout
        )
    })?;
    let yaml = ctx.shell("kubectl get mcd worker-a -o yaml", None).await?;
    succeeded(&yaml, "kubectl get mcd worker-a -o yaml")?;
    ensure(
        yaml.stdout
            .contains("apiVersion: machine.sapcloud.io/v1alpha1"),
        || format!("-o yaml is not v1alpha1:\n{}", yaml.stdout),
    )?;
    let patch = r#"kubectl patch mcd worker-a --type=merge -p '{"spec":{"template":{"spec":{"creationTimeout":"6m"}}}}'"#;
    let patched = ctx.shell(patch, None).await?;
    succeeded(&patched, patch)?;
    let md = must_get(ctx.system, Kind::MachineDeployment, DEPLOYMENT).await?;
    ensure(
        md["spec"]["template"]["spec"]["creationTimeout"] == "6m",
        || {
            format!(
                "creationTimeout not stored: {}",
                md["spec"]["template"]["spec"]
            )
        },
    )?;
    // Back to the example's value (a template change rolls the machines).
    merge_patch(
        ctx.system,
        Kind::MachineDeployment,
        DEPLOYMENT,
        json!({"spec": {"template": {"spec": {"creationTimeout": "5m"}}}}),
    )
    .await?;
    wait_rolled_out(ctx.system, "virtual-small").await?;
    Ok(())
}

/// The manager flags of `make run` (none: defaults), except a longer leader lease, so a loaded
/// test machine does not make the only manager lose it.
pub fn make_run_manager_flags() -> Vec<String> {
    [
        "--leader-elect-lease-duration=60s",
        "--leader-elect-renew-deadline=45s",
        "--leader-elect-retry-period=5s",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// Every step of [`STEPS`] in order, on a system set up like `make run`.
pub async fn run_on_make_run_system(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    if let Err(skip) = kubectl(s) {
        return Ok(skip);
    }
    let Some(addresses) = s.addresses() else {
        return Ok(Outcome::Skipped(
            "needs the sandbox system (the documents' provider admin port)".to_owned(),
        ));
    };
    // The plugin binary is built with the others.
    let bin_dir = mcm_e2e::binaries::binary("kubectl-mcm")?
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| E2eError::Assertion("kubectl-mcm has no directory".to_owned()))?;
    let mut ctx = Context {
        system: s,
        provider: addresses.provider_admin.to_string(),
        bin_dir,
        machine: String::new(),
        node: String::new(),
        low_priority: None,
    };
    let mut done: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (command, check)) in STEPS.iter().enumerate() {
        println!("--- step {}/{}: {command}", i + 1, STEPS.len());
        run_step(&mut ctx, command, *check)
            .await
            .map_err(|e| E2eError::Assertion(format!("step {} `{command}`: {e}", i + 1)))?;
        *done.entry(*command).or_default() += 1;
        if i == 0 {
            ctx.pick_machine().await?;
            default_version_is_v1alpha1(&ctx).await?;
            ctx.pick_machine().await?;
        }
    }
    println!("documented commands checked: {}", done.len());
    Ok(Outcome::Passed)
}
