//! The clients and namespace `kubectl mcm` works with, resolved like kubectl's from the global
//! flags (kubeconfig, context, namespace, target kubeconfig).

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cli::Global;
use crate::error::CliError;

/// Clients and namespace resolved from the global flags.
pub(super) struct Context {
    pub(super) control: Client,
    pub(super) target: Client,
    pub(super) namespace: String,
}

/// Adds our User-Agent (client-go's form, see [`mcm_api::user_agent`]) to `config`.
fn with_user_agent(mut config: Config) -> Config {
    let agent = mcm_api::user_agent::user_agent("kubectl-mcm", env!("CARGO_PKG_VERSION"));
    // The header types are kube's `http` crate's, named through the element type.
    if let (Ok(name), Ok(value)) = (
        TryFrom::try_from("user-agent"),
        TryFrom::try_from(agent.as_str()),
    ) {
        config.headers.push((name, value));
    }
    config
}

async fn config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<Config, CliError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .map_err(|e| CliError::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| CliError::Config(format!("{}: {e}", path.display())))
        }
        None if context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| CliError::Config(e.to_string())),
        None => Config::infer()
            .await
            .map_err(|e| CliError::Config(e.to_string())),
    }
}

pub(super) async fn connect(global: &Global) -> Result<Context, CliError> {
    let control_config = config(global.kubeconfig.as_deref(), global.context.as_deref()).await?;
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| control_config.default_namespace.clone());
    let control = Client::try_from(with_user_agent(control_config))?;
    let target = match &global.target_kubeconfig {
        Some(path) => Client::try_from(with_user_agent(config(Some(path), None).await?))?,
        None => control.clone(),
    };
    Ok(Context {
        control,
        target,
        namespace,
    })
}
