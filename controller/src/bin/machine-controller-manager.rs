//! `machine-controller-manager`: runs the controllers of the machine lifecycle: upstream's
//! machine-controller-manager share, the machine-controller share, or both (`--controllers`).
//!
//! Exit codes: 0 after a requested shutdown (SIGTERM/SIGINT), 1 when something fatal happened
//! (a controller stopped, the machine API is not served), 2 for invalid flags (every violation is
//! printed), 130 when a second signal forces the exit. An unreachable API server and a lost Lease
//! are not fatal: the manager waits, campaigns again and reports not-ready meanwhile
//! (`docs/operations.md`).

use anyhow::Context as _;
use clap::Parser as _;
use mcm_controller::manager::{self, RunOptions, compose, leader};
use mcm_controller::platform::config::{self, Args};
use mcm_controller::platform::logging;
use mcm_controller::platform::selection::Share;
use tokio_util::sync::CancellationToken;

/// mimalloc returns freed memory to the system; with glibc's allocator the RSS stayed at the
/// peak of a rollout or a mass deletion long after it (see `make bench`). The image sets
/// `MIMALLOC_PURGE_DELAY=0` so that it does so at once (docs/performance.md). The
/// `system-allocator` feature turns it off for heap profilers that hook malloc.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Go's pflag normalises `_` to `-` in flag names; Kubernetes components accept both.
    let args = Args::parse_from(logging::normalize_flag_names(std::env::args_os()));
    let config = match config::validate(&args) {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("invalid flags ({}):", errors.len());
            for error in &errors {
                eprintln!("  {error}");
            }
            return std::process::ExitCode::from(2);
        }
    };
    logging::init(config.log_format, config.verbosity, &config.vmodule);
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    match run(config) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(
                error = format!("{error:#}"),
                "machine-controller-manager failed"
            );
            std::process::ExitCode::FAILURE
        }
    }
}

/// Says loudly which upstream binary this process stands in for.
fn log_selection(config: &config::Config) {
    let names = config.controllers.names.join(",");
    let lease = config.controllers.lease_name();
    let manager_share = config.controllers.runs(Share::ControllerManager);
    let machine_share = config.controllers.runs(Share::MachineController);
    match (manager_share, machine_share) {
        (true, false) => tracing::info!(
            controllers = %names,
            lease,
            "running upstream's machine-controller-manager share only: Machines, Nodes, MachineClass finalizers, orphan VMs and the API-server check are left to a machine-controller (set --driver-endpoint to run them here)"
        ),
        (false, true) => tracing::info!(
            controllers = %names,
            lease,
            "running the machine-controller share only: MachineSets and MachineDeployments are left to a machine-controller-manager"
        ),
        _ => tracing::info!(controllers = %names, lease, "running the controllers"),
    }
}

fn run(config: config::Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            match manager::shutdown_signal().await {
                Ok(signal) => {
                    tracing::info!(signal, "shutting down gracefully (send it again to force)");
                    on_signal.cancel();
                }
                Err(error) => {
                    tracing::error!(%error, "cannot listen for signals");
                    return;
                }
            }
            if let Ok(signal) = manager::shutdown_signal().await {
                tracing::warn!(signal, "second signal: exiting now");
                std::process::exit(130);
            }
        });
        let options = RunOptions::new(leader::default_identity(config.admin_address.port()));
        log_selection(&config);
        let set = compose::ControllerSet::with(compose::named(&config.controllers.names));
        let controllers: Vec<Box<dyn manager::Controller>> = vec![Box::new(set)];
        manager::run(config, controllers, options, shutdown)
            .await
            .context("the manager stopped")
    })
}
