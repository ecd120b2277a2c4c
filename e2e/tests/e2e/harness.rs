//! Runs scenario lists on a system and reports each one as PASSED, FAILED or SKIPPED.
//!
//! `MCM_E2E_ONLY=name,name` runs only the scenarios whose names contain one of the words.
//! A scenario returns [`Outcome::Skipped`] only for a stated reason (no kubectl, or it needs the
//! sandbox while the suite runs against a cluster); skips are printed loudly, never silent.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use mcm_e2e::{Result, System, SystemConfig};

/// How a scenario ended (errors are `Err`).
#[derive(Debug)]
pub enum Outcome {
    /// Every assertion held.
    Passed,
    /// Not run, for this reason.
    Skipped(String),
}

/// A scenario future.
pub type Run = Pin<Box<dyn Future<Output = Result<Outcome>> + Send>>;

/// A named scenario.
pub struct Scenario {
    /// Name (used by `MCM_E2E_ONLY` and in the report).
    pub name: &'static str,
    /// What the scenario needs beyond a cluster with the system installed.
    pub needs: Needs,
    /// The scenario.
    pub run: fn(Arc<System>) -> Run,
}

/// What a scenario needs of the system it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Any system: processes here against the sandbox or kube-apiserver, or an existing cluster
    /// with the chart installed (`MCM_E2E_KUBECONFIG`).
    AnyCluster,
    /// The processes started here (process control, provider-virtual's admin API, the driver
    /// socket, the manager's metrics): the sandbox or a real control plane.
    LocalProcesses,
    /// The sandbox's admin API (fault injection, request counters, outages on demand).
    Sandbox,
}

/// Why a scenario with `needs` cannot run on the system this run uses, or `None` when it can.
pub fn skip_reason(needs: Needs) -> Option<String> {
    let external = mcm_e2e::system::cluster_kubeconfig().is_some();
    let kube = matches!(
        mcm_e2e::control_plane::ApiServerKind::from_env(),
        Ok(mcm_e2e::control_plane::ApiServerKind::Kube)
    );
    match needs {
        Needs::AnyCluster => None,
        Needs::LocalProcesses if external => {
            Some("needs the processes started here (MCM_E2E_KUBECONFIG is set)".to_owned())
        }
        Needs::LocalProcesses => None,
        Needs::Sandbox if external => {
            Some("needs the sandbox system (MCM_E2E_KUBECONFIG is set)".to_owned())
        }
        Needs::Sandbox if kube => Some(
            "needs the sandbox's admin API (fault injection, counters), which kube-apiserver does not have"
                .to_owned(),
        ),
        Needs::Sandbox => None,
    }
}

fn selected(name: &str) -> bool {
    match std::env::var("MCM_E2E_ONLY") {
        Ok(only) if !only.trim().is_empty() => only
            .split(',')
            .map(str::trim)
            .any(|word| !word.is_empty() && name.contains(word)),
        _ => true,
    }
}

/// Starts a system and runs `scenarios` on it, concurrently or one after the other; panics with
/// a summary when one failed (after printing the end of every process log).
pub async fn run_all(config: SystemConfig, scenarios: Vec<Scenario>, concurrently: bool) {
    let scenarios: Vec<Scenario> = scenarios.into_iter().filter(|s| selected(s.name)).collect();
    if scenarios.is_empty() {
        println!(
            "mcm-e2e[{}]: no scenario selected by MCM_E2E_ONLY",
            config.name
        );
        return;
    }
    let label = config.name.clone();
    // No system is started for scenarios that would all be skipped.
    if let Some(reasons) = scenarios
        .iter()
        .map(|s| skip_reason(s.needs).map(|why| (s.name, why)))
        .collect::<Option<Vec<_>>>()
    {
        println!("\nmcm-e2e[{label}]: results");
        for (name, why) in reasons {
            println!("  SKIPPED {name}: {why}");
        }
        return;
    }
    let system = match System::start(config).await {
        Ok(system) => system,
        Err(e) => panic!("mcm-e2e[{label}]: the system did not start: {e}"),
    };
    // A reused cluster may hold objects of an earlier run (a fresh sandbox holds none).
    if !system.has_local_processes()
        && let Err(e) = mcm_e2e::objects::remove_leftovers(&system).await
    {
        panic!("mcm-e2e[{label}]: cannot remove an earlier run's objects: {e}");
    }
    let shared = Arc::new(system);
    let mut results: Vec<(&'static str, f64, Result<Outcome>)> = Vec::new();
    let run_one = |scenario: &Scenario, system: Arc<System>| {
        let name = scenario.name;
        let skip = skip_reason(scenario.needs);
        let run = scenario.run;
        async move {
            let started = Instant::now();
            println!("mcm-e2e: START {name}");
            let outcome = if let Some(why) = skip {
                Ok(Outcome::Skipped(why))
            } else {
                match tokio::spawn(run(system)).await {
                    Ok(result) => result,
                    Err(e) => Err(mcm_e2e::E2eError::Assertion(format!("panicked: {e}"))),
                }
            };
            (name, started.elapsed().as_secs_f64(), outcome)
        }
    };
    if concurrently {
        let futures: Vec<_> = scenarios
            .iter()
            .map(|s| run_one(s, shared.clone()))
            .collect();
        // A process that dies (e.g. the manager) fails the run at once instead of letting every
        // scenario run into its limit.
        let watchdog = async {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                if let Err(e) = shared.check_processes().await {
                    return e;
                }
            }
        };
        tokio::select! {
            all = futures::future::join_all(futures) => results = all,
            died = watchdog => {
                let message = format!("a process of the system died while the scenarios ran: {died}");
                println!("mcm-e2e[{label}]: {message}");
                results.push(("system", 0.0, Err(mcm_e2e::E2eError::Assertion(message))));
            }
        }
    } else {
        for scenario in &scenarios {
            results.push(run_one(scenario, shared.clone()).await);
        }
    }
    let processes = shared.check_processes().await;
    // The components run under the chart's RBAC: any 403 means the chart misses a grant.
    if shared.has_local_processes() {
        match shared.rbac_denials().await {
            Ok(denials) if denials == serde_json::json!({}) => {}
            Ok(denials) => results.push((
                "rbac",
                0.0,
                Err(mcm_e2e::E2eError::Assertion(format!(
                    "components were refused by RBAC (403s per user): {denials}"
                ))),
            )),
            Err(e) => results.push(("rbac", 0.0, Err(e))),
        }
    }
    let mut failed = Vec::new();
    println!("\nmcm-e2e[{label}]: results");
    for (name, seconds, outcome) in &results {
        match outcome {
            Ok(Outcome::Passed) => println!("  PASSED  {name} ({seconds:.0}s)"),
            Ok(Outcome::Skipped(why)) => println!("  SKIPPED {name}: {why}"),
            Err(e) => {
                println!("  FAILED  {name} ({seconds:.0}s): {e}");
                failed.push(format!("{name}: {e}"));
            }
        }
    }
    if let Err(e) = &processes {
        failed.push(format!("process check after the scenarios: {e}"));
    }
    if !failed.is_empty() {
        shared.report_failure(&failed.join("\n")).await;
        if let Ok(mut system) = Arc::try_unwrap(shared) {
            system.keep_files();
            system.shutdown().await;
        }
        panic!(
            "mcm-e2e[{label}]: {} failure(s):\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
    shared.shutdown().await;
}
