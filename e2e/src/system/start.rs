//! Starting a sandbox system: the API server (`mcm-sandbox serve` or a real control plane), then
//! the namespaces, CRDs and webhook configurations, the webhook, the provider and the manager,
//! each waited for until ready.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::sync::Mutex;

use super::install::{
    create_identities, create_namespace, install_crds, install_webhook_configurations,
    wait_ca_injected,
};
use super::kubeconfig::client_for;
use super::{
    Addresses, ApiServer, KINDS, Processes, ProviderKind, SandboxParts, System, SystemConfig,
    WEBHOOK_CONFIGURATION, WEBHOOK_NAMESPACE, WEBHOOK_SERVICE,
};
use crate::admin_http;
use crate::binaries::{binary, go_provider};
use crate::control_plane::{ApiServerKind, ControlPlane};
use crate::error::{E2eError, Result};
use crate::ports::free_port;
use crate::process::Process;

impl System {
    pub(super) async fn start_sandbox(config: SystemConfig) -> Result<Self> {
        let api_kind = ApiServerKind::from_env()?;
        let sandbox_bin = binary("mcm-sandbox")?;
        let webhook_bin = binary("machine-webhook")?;
        let provider_bin = match config.provider {
            ProviderKind::Virtual => binary("provider-virtual")?,
            ProviderKind::GoBridge => go_provider()?,
        };
        let manager_bin = binary("machine-controller-manager")?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("mcm-e2e-{}-", config.name))
            .tempdir()
            .map_err(E2eError::io("create a temp dir in", std::env::temp_dir()))?;
        let dir_path = dir.path().to_path_buf();
        let logs = dir_path.join("logs");
        std::fs::create_dir_all(&logs).map_err(E2eError::io("create", &logs))?;
        std::fs::create_dir_all(dir_path.join("provider"))
            .map_err(E2eError::io("create", dir_path.join("provider")))?;
        let kubeconfig = dir_path.join("kubeconfig");
        let addresses = Addresses {
            webhook: free_port()?,
            webhook_admin: free_port()?,
            provider_admin: free_port()?,
            manager_admin: free_port()?,
        };
        let socket = dir_path.join("driver.sock");
        let name = config.name.clone();
        println!(
            "mcm-e2e[{name}]: starting the system in {}",
            dir_path.display()
        );

        // 1. API server.
        let (api, kubeconfig, client) = match api_kind {
            ApiServerKind::Sandbox => {
                let mut sandbox_args: Vec<String> = vec![
                    "serve".into(),
                    "--port".into(),
                    "0".into(),
                    "--kubeconfig".into(),
                    kubeconfig.display().to_string(),
                    "--service".into(),
                    format!(
                        "{WEBHOOK_NAMESPACE}/{WEBHOOK_SERVICE}={}",
                        addresses.webhook
                    ),
                ];
                sandbox_args.extend(config.sandbox_flags.iter().cloned());
                let mut sandbox = Process::start(
                    "sandbox",
                    sandbox_bin,
                    sandbox_args,
                    vec![],
                    logs.join("sandbox.log"),
                )?;
                let client = match wait_sandbox_ready(&mut sandbox, &kubeconfig).await {
                    Ok(client) => client,
                    Err(e) => {
                        eprintln!("--- sandbox log ---\n{}", sandbox.tail(60));
                        return Err(e);
                    }
                };
                (ApiServer::Sandbox(sandbox), kubeconfig, client)
            }
            ApiServerKind::Kube => {
                // The sandbox's node-monitor grace period is kube-controller-manager's flag of
                // the same name.
                let grace = config
                    .sandbox_flags
                    .iter()
                    .find_map(|flag| flag.strip_prefix("--node-monitor-grace-period="));
                let control_plane = ControlPlane::start(
                    &dir_path.join("control-plane"),
                    grace,
                    &logs.join("control-plane.log"),
                )
                .await?;
                let kubeconfig = control_plane.admin_kubeconfig();
                let client = client_for(&kubeconfig).await?;
                (ApiServer::Kube(control_plane), kubeconfig, client)
            }
        };
        // Webhooks and conversion: through the Service as the chart registers them (the sandbox
        // resolves it to the local port), or by URL on a real API server, which would resolve
        // the Service to a cluster address this host does not have.
        let webhook_url = (api_kind == ApiServerKind::Kube)
            .then(|| format!("https://127.0.0.1:{}", addresses.webhook.port()));

        // 2. Namespaces, CRDs, webhook configurations.
        for ns in [config.namespace.as_str(), WEBHOOK_NAMESPACE] {
            create_namespace(&client, ns).await?;
        }
        install_crds(&client, config.serve_v1beta1, webhook_url.as_deref()).await?;
        install_webhook_configurations(&client, webhook_url.as_deref()).await?;
        // Each component runs as its own ServiceAccount bound to the chart's RBAC.
        let identities = dir_path.join("identities");
        create_identities(&kubeconfig, &identities, &config.namespace, &logs).await?;

        // 3. Webhook (self-managed certificates, injected into configurations and CRDs).
        let mut webhook_args: Vec<String> = [
            "--cert-mode",
            "self-managed",
            "--namespace",
            WEBHOOK_NAMESPACE,
            "--service-name",
            WEBHOOK_SERVICE,
            "--secret-name",
            "machine-controller-manager-webhook-certs",
            "--lease-name",
            "machine-controller-manager-webhook-certs",
            "--identity",
            "machine-webhook-e2e",
            "--mutating-webhook-configuration",
            WEBHOOK_CONFIGURATION,
            "--validating-webhook-configuration",
            WEBHOOK_CONFIGURATION,
            "--cert-reload-seconds",
            "2",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        // The CA goes into the CRDs' conversion stanzas, which only the v1beta1 CRDs have.
        for (_, plural) in KINDS.iter().filter(|_| config.serve_v1beta1) {
            webhook_args.push("--crd".into());
            webhook_args.push(format!("{plural}.machine.sapcloud.io"));
        }
        if webhook_url.is_some() {
            webhook_args.extend(["--certificate-host".into(), "127.0.0.1".into()]);
        }
        webhook_args.extend([
            "--bind-address".into(),
            addresses.webhook.to_string(),
            "--admin-address".into(),
            addresses.webhook_admin.to_string(),
        ]);
        let webhook = Process::start(
            "webhook",
            webhook_bin,
            webhook_args,
            vec![(
                "KUBECONFIG".into(),
                identities.join("webhook.kubeconfig").display().to_string(),
            )],
            logs.join("webhook.log"),
        )?;

        // 4. Provider.
        let provider_kubeconfig = identities.join("provider.kubeconfig").display().to_string();
        let provider_args: Vec<String> = match config.provider {
            ProviderKind::Virtual => vec![
                "--endpoint".into(),
                format!("unix://{}", socket.display()),
                "--target-kubeconfig".into(),
                provider_kubeconfig,
                "--state-file".into(),
                dir_path.join("provider/state.json").display().to_string(),
                "--metrics-address".into(),
                addresses.provider_admin.to_string(),
            ],
            ProviderKind::GoBridge => vec![
                "--endpoint".into(),
                format!("unix://{}", socket.display()),
                "--target-kubeconfig".into(),
                provider_kubeconfig,
                "--admin-address".into(),
                addresses.provider_admin.to_string(),
                // Short heartbeats, for the sandbox's short node-monitor grace period.
                "--lease-interval=2s".into(),
                "--status-interval=10s".into(),
            ],
        };
        let provider = Process::start(
            "provider",
            provider_bin,
            provider_args,
            vec![],
            logs.join("provider.log"),
        )?;

        let mut processes = Processes {
            api,
            webhook,
            provider,
            manager: None,
        };
        let ready = async {
            wait_http_ready(&mut processes.webhook, addresses.webhook_admin, "/readyz").await?;
            if config.serve_v1beta1 {
                wait_ca_injected(&client).await?;
            }
            wait_http_ready(
                &mut processes.provider,
                addresses.provider_admin,
                "/healthz",
            )
            .await
        }
        .await;
        let system_parts = |processes| SandboxParts {
            dir: Some(dir),
            dir_path: dir_path.clone(),
            addresses,
            socket: socket.clone(),
            processes: Mutex::new(processes),
        };
        if let Err(e) = ready {
            let system = Self {
                name,
                namespace: config.namespace,
                kubeconfig,
                client,
                api_kind,
                sandbox: Some(system_parts(processes)),
            };
            system.report_failure(&e.to_string()).await;
            return Err(e);
        }

        // 5. Manager.
        let manager_kubeconfig = identities.join("manager.kubeconfig").display().to_string();
        let mut manager_args = vec![
            "--control-kubeconfig".to_owned(),
            manager_kubeconfig.clone(),
            "--target-kubeconfig".into(),
            manager_kubeconfig,
            "--namespace".into(),
            config.namespace.clone(),
            "--driver-endpoint".into(),
            format!("unix://{}", socket.display()),
            "--address".into(),
            addresses.manager_admin.ip().to_string(),
            "--port".into(),
            addresses.manager_admin.port().to_string(),
            // Every series on the admin port (several systems may run side by side).
            "--machine-metrics-port=0".into(),
        ];
        manager_args.extend(config.manager_flags.iter().cloned());
        // A scenario that starts its own manager (`gardener`) gets none.
        let ready = if config.start_manager {
            let mut manager = Process::start(
                "manager",
                manager_bin,
                manager_args,
                vec![],
                logs.join("manager.log"),
            )?;
            let ready = wait_http_ready(&mut manager, addresses.manager_admin, "/readyz").await;
            processes.manager = Some(manager);
            ready
        } else {
            Ok(())
        };
        let system = Self {
            name,
            namespace: config.namespace,
            kubeconfig,
            client,
            api_kind,
            sandbox: Some(system_parts(processes)),
        };
        if let Err(e) = ready {
            system.report_failure(&e.to_string()).await;
            return Err(e);
        }
        system.ensure_userdata_secret().await?;
        println!("mcm-e2e[{}]: system ready", system.name);
        Ok(system)
    }
}

pub(super) async fn wait_http_ready(
    process: &mut Process,
    address: SocketAddr,
    path: &str,
) -> Result<()> {
    let what = format!("{} answers {path} on {address}", process.name());
    let deadline = tokio::time::Instant::now() + crate::wait::limit(90);
    let mut last: String;
    loop {
        process.check_alive()?;
        match admin_http::call(::http::Method::GET, address, path, None).await {
            Ok(answer) if answer.ok() => return Ok(()),
            Ok(answer) => last = format!("{}: {}", answer.status, answer.body),
            Err(e) => last = e.to_string(),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(E2eError::Timeout {
                what,
                seconds: 90,
                last: format!("{last}\n--- log ---\n{}", process.tail(40)),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_sandbox_ready(sandbox: &mut Process, kubeconfig: &Path) -> Result<kube::Client> {
    let deadline = tokio::time::Instant::now() + crate::wait::limit(60);
    let mut last = String::from("no kubeconfig yet");
    loop {
        sandbox.check_alive()?;
        let written = std::fs::metadata(kubeconfig).is_ok_and(|m| m.len() > 0);
        if written {
            let client = client_for(kubeconfig).await?;
            let request = ::http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| E2eError::Assertion(e.to_string()))?;
            match client.request_text(request).await {
                Ok(_) => return Ok(client),
                Err(e) => last = e.to_string(),
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(E2eError::Timeout {
                what: "the sandbox API server answers /readyz".to_owned(),
                seconds: 60,
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
