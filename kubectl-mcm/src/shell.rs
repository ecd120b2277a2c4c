//! The thin I/O shell: connects like kubectl, reads the objects, calls the pure functions of
//! [`crate::rollout`], [`crate::status`] and [`crate::preserve`], sends their patches and prints.

use std::io::{IsTerminal, Write};
use std::time::{Duration as StdDuration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use mcm_api::duration::Duration;
use mcm_api::keys::label;
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachineSet};
use mcm_decisions::rollout_preview::types::{HotPaths, MeasuredDurations};
use serde_json::Value;

mod context;

use self::context::{Context, connect};
use crate::cli::{Cli, Command, Rollout, joined};
use crate::error::CliError;
use crate::plan::{self, PlanKind};
use crate::preserve;
use crate::rollout::{self, Progress, UndoPlan, Verdict};
use crate::status;
use crate::target::{Target, TargetKind, parse_target};

/// How often `rollout status` looks again.
const POLL: StdDuration = StdDuration::from_secs(1);

/// Width of the terminal progress bar, in cells.
const BAR_WIDTH: usize = 30;

fn deployments(ctx: &Context) -> Api<MachineDeployment> {
    Api::namespaced(ctx.control.clone(), &ctx.namespace)
}

fn md_target(target: &str, name: Option<&str>) -> Result<Target, CliError> {
    parse_target(&joined(target, name), &[TargetKind::MachineDeployment])
}

fn parse_go_duration(flag: &str, text: &str) -> Result<StdDuration, CliError> {
    text.parse::<Duration>()
        .ok()
        .and_then(Duration::to_std)
        .ok_or_else(|| {
            CliError::Usage(format!(
                "invalid {flag} {text:?}: expected a duration such as 90s, 5m or 1h"
            ))
        })
}

async fn sets_of(ctx: &Context) -> Result<Vec<MachineSet>, CliError> {
    let api: Api<MachineSet> = Api::namespaced(ctx.control.clone(), &ctx.namespace);
    Ok(api.list(&ListParams::default()).await?.items)
}

async fn merge_patch<K>(api: &Api<K>, name: &str, patch: &Value) -> Result<(), CliError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// Runs the parsed command line.
///
/// # Errors
/// Whatever the command fails with; [`CliError::exit_code`] gives the exit code.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    // Arguments are checked before connecting, so usage errors never wait for a server.
    let mut plan_request = None;
    match &cli.command {
        Command::Rollout(Rollout::Plan {
            target,
            name,
            file,
            patch,
            metrics_file,
        }) => {
            plan_request = Some(PlanRequest::read(
                &joined(target, name.as_deref()),
                file.as_deref(),
                patch.as_deref(),
                metrics_file.as_deref(),
            )?);
        }
        Command::Rollout(r) => {
            let (target, name) = match r {
                Rollout::Status { target, name, .. }
                | Rollout::History { target, name, .. }
                | Rollout::Undo { target, name, .. }
                | Rollout::Restart { target, name }
                | Rollout::Pause { target, name }
                | Rollout::Resume { target, name } => (target, name),
                Rollout::Plan { target, name, .. } => (target, name),
            };
            md_target(target, name.as_deref())?;
        }
        Command::Status {
            target: Some(t),
            name,
            ..
        } => {
            md_target(t, name.as_deref())?;
        }
        Command::Status { .. } => {}
        Command::Preserve { target, name, .. } | Command::Unpreserve { target, name } => {
            parse_target(
                &joined(target, name.as_deref()),
                &[TargetKind::Node, TargetKind::Machine],
            )?;
        }
    }
    let ctx = connect(&cli.global).await?;
    if let Some(request) = &plan_request {
        return plan_cmd(&ctx, request).await;
    }
    match cli.command {
        Command::Rollout(Rollout::Status {
            target,
            name,
            timeout,
            watch,
        }) => {
            let target = md_target(&target, name.as_deref())?;
            let timeout = parse_go_duration("--timeout", &timeout)?;
            rollout_status(&ctx, &target.name, timeout, watch).await
        }
        Command::Rollout(Rollout::History {
            target,
            name,
            revision,
            explain,
        }) => {
            let target = md_target(&target, name.as_deref())?;
            if explain {
                explain_history(&ctx, &target.name).await
            } else {
                history(&ctx, &target.name, revision).await
            }
        }
        // Previewed above, from what was read before connecting.
        Command::Rollout(Rollout::Plan { .. }) => Ok(()),
        Command::Rollout(Rollout::Undo {
            target,
            name,
            to_revision,
        }) => {
            let target = md_target(&target, name.as_deref())?;
            undo(&ctx, &target.name, to_revision).await
        }
        Command::Rollout(Rollout::Restart { target, name }) => {
            let target = md_target(&target, name.as_deref())?;
            let api = deployments(&ctx);
            let md = api.get(&target.name).await?;
            let patch =
                rollout::plan_restart(&md, jiff::Timestamp::now()).map_err(CliError::Refused)?;
            merge_patch(&api, &target.name, &patch).await?;
            println!("{target} restarted");
            Ok(())
        }
        Command::Rollout(Rollout::Pause { target, name }) => {
            pause(&ctx, &md_target(&target, name.as_deref())?, true).await
        }
        Command::Rollout(Rollout::Resume { target, name }) => {
            pause(&ctx, &md_target(&target, name.as_deref())?, false).await
        }
        Command::Status {
            target,
            name,
            stuck_after,
            all_namespaces,
        } => {
            let stuck_after = parse_go_duration("--stuck-after", &stuck_after)?;
            let only = match target {
                Some(t) => Some(md_target(&t, name.as_deref())?.name),
                None => None,
            };
            fleet_status(&ctx, only.as_deref(), all_namespaces, stuck_after).await
        }
        Command::Preserve {
            target,
            name,
            duration,
            when_failed,
        } => {
            let target = parse_target(
                &joined(&target, name.as_deref()),
                &[TargetKind::Node, TargetKind::Machine],
            )?;
            let duration = duration
                .map(|d| preserve::parse_duration(&d).map_err(CliError::Usage))
                .transpose()?;
            preserve_cmd(
                &ctx,
                &target,
                Some(preserve::preserve_value(when_failed)),
                duration,
            )
            .await
        }
        Command::Unpreserve { target, name } => {
            let target = parse_target(
                &joined(&target, name.as_deref()),
                &[TargetKind::Node, TargetKind::Machine],
            )?;
            preserve_cmd(&ctx, &target, None, None).await
        }
    }
}

/// Server trouble worth waiting out while watching (the API server restarts, answers 5xx);
/// anything else (NotFound, Forbidden) ends the watch.
fn transient(error: &CliError) -> bool {
    match error {
        CliError::Unreachable(_) => true,
        CliError::Api { code, .. } => *code >= 500 || *code == 429,
        _ => false,
    }
}

async fn rollout_status(
    ctx: &Context,
    name: &str,
    timeout: StdDuration,
    watch: bool,
) -> Result<(), CliError> {
    let api = deployments(ctx);
    let deadline = (!timeout.is_zero()).then(|| Instant::now() + timeout);
    let tty = std::io::stdout().is_terminal();
    let mut out = std::io::stdout().lock();
    let mut last_message = String::new();
    let mut last_line = String::new();
    let mut bar_drawn = false;
    loop {
        let md = match api.get(name).await.map_err(CliError::from) {
            Ok(md) => md,
            Err(e) if watch && transient(&e) && deadline.is_none_or(|d| Instant::now() < d) => {
                eprintln!("warning: {e} (retrying)");
                tokio::time::sleep(POLL).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let progress = Progress::of(&md);
        let verdict = rollout::verdict(&progress);
        if tty && bar_drawn {
            write!(out, "\r\x1b[2K")?;
            bar_drawn = false;
        }
        match verdict {
            Verdict::Complete(message) => {
                writeln!(out, "{message}")?;
                return Ok(());
            }
            Verdict::DeadlineExceeded(message) => return Err(CliError::RolloutFailed(message)),
            Verdict::Frozen(message) => return Err(CliError::Frozen(message)),
            Verdict::Waiting(message) => {
                let line = progress.line();
                if tty {
                    if message != last_message {
                        writeln!(out, "{message}")?;
                    }
                    write!(out, "{} {line}", progress.bar(BAR_WIDTH))?;
                    bar_drawn = true;
                } else if message != last_message || line != last_line {
                    writeln!(out, "{message} ({line})")?;
                }
                out.flush()?;
                last_message = message;
                last_line = line;
                if !watch {
                    if bar_drawn {
                        writeln!(out)?;
                    }
                    return Ok(());
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    if bar_drawn {
                        writeln!(out)?;
                    }
                    return Err(CliError::Timeout(format!(
                        "machinedeployment {name:?} did not finish its rollout within {}s: {last_message} ({last_line})",
                        timeout.as_secs()
                    )));
                }
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

async fn history(ctx: &Context, name: &str, revision: Option<i64>) -> Result<(), CliError> {
    let md = deployments(ctx).get(name).await?;
    let sets = sets_of(ctx).await?;
    let revisions = rollout::history(&md, &sets);
    match revision {
        None => print!("{}", rollout::render_history(name, &revisions)),
        Some(n) => {
            let Some(found) = revisions.iter().find(|r| r.number == n) else {
                return Err(CliError::Refused(format!(
                    "unable to find the specified revision {n}"
                )));
            };
            let template = sets
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(found.machine_set.as_str()))
                .and_then(|s| s.spec.template.clone());
            let yaml = serde_saphyr::to_string(&template).map_err(|e| CliError::Decode {
                what: format!("template of machineset {}", found.machine_set),
                message: e.to_string(),
            })?;
            println!(
                "machinedeployment.machine.sapcloud.io/{name} with revision #{n} (machineset {})\n{yaml}",
                found.machine_set
            );
        }
    }
    Ok(())
}

async fn machines_of(ctx: &Context) -> Result<Vec<Machine>, CliError> {
    let api: Api<Machine> = Api::namespaced(ctx.control.clone(), &ctx.namespace);
    Ok(api.list(&ListParams::default()).await?.items)
}

fn classes(ctx: &Context) -> Api<MachineClass> {
    Api::namespaced(ctx.control.clone(), &ctx.namespace)
}

async fn explain_history(ctx: &Context, name: &str) -> Result<(), CliError> {
    let md = deployments(ctx).get(name).await?;
    let sets = sets_of(ctx).await?;
    let machines = machines_of(ctx).await?;
    let classes = classes(ctx).list(&ListParams::default()).await?.items;
    let revisions = rollout::history(&md, &sets);
    print!(
        "{}",
        plan::explain_history(name, &md, &revisions, &sets, &machines, &classes)
    );
    Ok(())
}

/// What `rollout plan` was asked: the target, the change and the measured durations, all read
/// and parsed before connecting.
struct PlanRequest {
    kind: PlanKind,
    name: String,
    change: plan::Change,
    durations: MeasuredDurations,
}

impl PlanRequest {
    /// Reads `-f FILE` and `--metrics-file` and parses the change: a usage error (exit 2) for a
    /// bad target, an unreadable file or a change that does not parse.
    fn read(
        target: &str,
        file: Option<&std::path::Path>,
        patch: Option<&str>,
        metrics_file: Option<&std::path::Path>,
    ) -> Result<Self, CliError> {
        let read = |path: &std::path::Path| {
            std::fs::read_to_string(path)
                .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))
        };
        let (kind, name) = plan::plan_target(target).map_err(CliError::Usage)?;
        let file = file.map(read).transpose()?;
        let change = plan::parse_change(file.as_deref(), patch).map_err(CliError::Usage)?;
        let durations = match metrics_file {
            Some(path) => {
                plan::durations_from_metrics(&read(path)?, &path.display().to_string(), &name)
            }
            None => MeasuredDurations::default(),
        };
        Ok(Self {
            kind,
            name,
            change,
            durations,
        })
    }
}

/// `rollout plan`: reads the stored object and what it would touch, and prints the preview.
/// The manager does not publish the driver's capabilities, so the providerSpec rules apply; the
/// estimate uses the durations from `--metrics-file`, else it says "no history".
async fn plan_cmd(ctx: &Context, request: &PlanRequest) -> Result<(), CliError> {
    let now = jiff::Timestamp::now();
    let encode = |what: &str, e: serde_json::Error| CliError::Decode {
        what: what.to_owned(),
        message: e.to_string(),
    };
    let PlanRequest {
        kind,
        name,
        change,
        durations,
    } = request;
    let report = match kind {
        PlanKind::MachineDeployment => {
            let md = deployments(ctx).get(name).await?;
            let current = serde_json::to_value(&md).map_err(|e| encode(name, e))?;
            let new = plan::changed_object(&current, change);
            let sets = sets_of(ctx).await?;
            let machines = machines_of(ctx).await?;
            plan::deployment_plan(&md, &new, &sets, &machines, durations, now)
                .map_err(CliError::Refused)?
        }
        PlanKind::MachineClass => {
            let class = classes(ctx).get(name).await?;
            let current = serde_json::to_value(&class).map_err(|e| encode(name, e))?;
            let new = plan::changed_object(&current, change);
            let mds = deployments(ctx).list(&ListParams::default()).await?.items;
            let sets = sets_of(ctx).await?;
            let machines = machines_of(ctx).await?;
            plan::class_plan(&class, &new, &mds, &sets, &machines, HotPaths::Rules, now)
                .map_err(CliError::Refused)?
        }
    };
    print!("{report}");
    Ok(())
}

async fn undo(ctx: &Context, name: &str, to_revision: i64) -> Result<(), CliError> {
    let api = deployments(ctx);
    let md = api.get(name).await?;
    let revisions = rollout::history(&md, &sets_of(ctx).await?);
    match rollout::plan_undo(&md, &revisions, Some(to_revision)).map_err(CliError::Refused)? {
        UndoPlan::Skip(message) => {
            println!("machinedeployment.machine.sapcloud.io/{name} {message}")
        }
        UndoPlan::Patch { revision, patch } => {
            merge_patch(&api, name, &patch).await?;
            println!(
                "machinedeployment.machine.sapcloud.io/{name} rolled back (to revision {revision})"
            );
        }
    }
    Ok(())
}

async fn pause(ctx: &Context, target: &Target, pause: bool) -> Result<(), CliError> {
    let api = deployments(ctx);
    let md = api.get(&target.name).await?;
    let patch = rollout::plan_pause(&md, pause).map_err(CliError::Refused)?;
    merge_patch(&api, &target.name, &patch).await?;
    println!("{target} {}", if pause { "paused" } else { "resumed" });
    Ok(())
}

async fn fleet_status(
    ctx: &Context,
    only: Option<&str>,
    all_namespaces: bool,
    stuck_after: StdDuration,
) -> Result<(), CliError> {
    fn api<K>(ctx: &Context, all: bool) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        if all {
            Api::all(ctx.control.clone())
        } else {
            Api::namespaced(ctx.control.clone(), &ctx.namespace)
        }
    }
    let deployments: Api<MachineDeployment> = api(ctx, all_namespaces);
    let mds = match only {
        Some(name) => vec![deployments.get(name).await?],
        None => deployments.list(&ListParams::default()).await?.items,
    };
    if mds.is_empty() {
        if all_namespaces {
            println!("No machinedeployments found.");
        } else {
            println!(
                "No machinedeployments found in {} namespace.",
                ctx.namespace
            );
        }
        return Ok(());
    }
    let sets = api::<MachineSet>(ctx, all_namespaces)
        .list(&ListParams::default())
        .await?
        .items;
    let machines = api::<Machine>(ctx, all_namespaces)
        .list(&ListParams::default())
        .await?
        .items;
    let nodes = match Api::<Node>::all(ctx.target.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Some(list.items),
        Err(e) => {
            eprintln!(
                "warning: cannot list nodes, node readiness is unknown: {}",
                CliError::from(e)
            );
            None
        }
    };
    // The classes' validation records; without them the status is shown all the same.
    let classes = match api::<MachineClass>(ctx, all_namespaces)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            eprintln!(
                "warning: cannot list machine classes, their validation is not shown: {}",
                CliError::from(e)
            );
            Vec::new()
        }
    };
    let now = jiff::Timestamp::now();
    let stuck_after = i64::try_from(stuck_after.as_secs()).unwrap_or(i64::MAX);
    let texts: Vec<String> = mds
        .iter()
        .map(|md| {
            let mut summary =
                status::summarize(md, &sets, &machines, nodes.as_deref(), now, stuck_after);
            summary.invalid_class = status::invalid_class(md, &classes);
            status::render_summary(&summary, all_namespaces)
        })
        .collect();
    print!("{}", texts.join("\n"));
    Ok(())
}

/// How long `preserve` waits to report the expiry MCM set.
const PRESERVE_REPORT_WAIT: StdDuration = StdDuration::from_secs(20);

/// The machine of a node (label `node=<name>` in the namespace); `None` when there is none.
async fn machine_of_node(
    machines: &Api<Machine>,
    ns: &str,
    node: &str,
) -> Result<Option<String>, CliError> {
    let selector = format!("{}={node}", label::NODE);
    let found = machines
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(one.metadata.name.clone()),
        _ => Err(CliError::Refused(format!(
            "{} machines in namespace {ns:?} have label {selector}",
            found.len()
        ))),
    }
}

async fn preserve_cmd(
    ctx: &Context,
    target: &Target,
    value: Option<&str>,
    duration: Option<Duration>,
) -> Result<(), CliError> {
    let machines: Api<Machine> = Api::namespaced(ctx.control.clone(), &ctx.namespace);
    let nodes = Api::<Node>::all(ctx.target.clone());
    let machine = match target.kind {
        TargetKind::Node => {
            // Fail on an unknown node before changing any machine.
            nodes.get(&target.name).await?;
            machine_of_node(&machines, &ctx.namespace, &target.name).await?
        }
        _ => Some(
            machines
                .get(&target.name)
                .await?
                .metadata
                .name
                .unwrap_or_default(),
        ),
    };
    let started = jiff::Timestamp::now();
    if let Some(duration) = duration {
        let Some(machine) = &machine else {
            return Err(CliError::Refused(format!(
                "--duration needs the node's machine, but no machine in namespace {:?} has label {}={} (use -n for the machines' namespace)",
                ctx.namespace,
                label::NODE,
                target.name
            )));
        };
        preserve::check_duration_allowed(&machines.get(machine).await?)
            .map_err(CliError::Refused)?;
        merge_patch(&machines, machine, &preserve::duration_patch(duration)).await?;
        // MCM computes the expiry once, when it first sees the annotation; give its machine
        // cache a moment to hold the new timeout before the annotation arrives.
        tokio::time::sleep(StdDuration::from_secs(2)).await;
    }
    let annotation = preserve::annotation_patch(value);
    match target.kind {
        TargetKind::Node => merge_patch(&nodes, &target.name, &annotation).await?,
        _ => merge_patch(&machines, &target.name, &annotation).await?,
    }
    let key = mcm_api::keys::annotation::PRESERVE;
    match value {
        None => println!("{target} unpreserved ({key} removed)"),
        Some(v) => {
            println!("{target} preserved ({key}={v})");
            // `now` starts at once: report what MCM made of it.
            if let (Some(machine), true) = (&machine, v == mcm_api::keys::preserve::NOW) {
                let deadline = Instant::now() + PRESERVE_REPORT_WAIT;
                loop {
                    if let Some(expiry) = status::preserve_expiry(&machines.get(machine).await?) {
                        println!("machine {machine} preserved until {expiry}");
                        if let Some(warning) =
                            duration.and_then(|d| preserve::expiry_warning(expiry, d, started))
                        {
                            eprintln!("{warning}");
                        }
                        break;
                    }
                    if Instant::now() >= deadline {
                        eprintln!(
                            "warning: MCM has not started preserving machine {machine} yet (no preserveExpiryTime after {}s)",
                            PRESERVE_REPORT_WAIT.as_secs()
                        );
                        break;
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }
    Ok(())
}
