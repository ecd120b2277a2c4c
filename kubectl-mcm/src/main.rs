//! `kubectl-mcm`: a kubectl plugin for machine-controller-manager. On PATH as `kubectl-mcm`,
//! kubectl runs it for `kubectl mcm ...`.
//!
//! Pure logic lives in [`rollout`], [`plan`], [`status`], [`preserve`], [`target`] and [`table`]; the I/O
//! shell in [`shell`].

mod cli;
mod error;
mod keys;
mod plan;
mod preserve;
mod rollout;
mod shell;
mod status;
mod table;
mod target;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    // kube is built with ring; a second installation attempt is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(shell::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error}");
            ExitCode::from(error.exit_code())
        }
    }
}
