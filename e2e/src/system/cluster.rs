//! Connecting to an existing cluster where the chart is installed (`MCM_E2E_KUBECONFIG`), and the
//! user data Secret every system gets.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::kubeconfig::client_for;
use super::{System, USERDATA_SECRET};
use crate::control_plane::ApiServerKind;
use crate::error::{E2eError, Result};

impl System {
    /// Uses an existing cluster where the chart is installed.
    pub(super) async fn connect(name: &str, kubeconfig: PathBuf) -> Result<Self> {
        let namespace = std::env::var("MCM_E2E_NAMESPACE")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "machine-controller-manager".to_owned());
        let client = client_for(&kubeconfig).await?;
        let system = Self {
            name: name.to_owned(),
            namespace,
            kubeconfig,
            client,
            api_kind: ApiServerKind::Sandbox,
            sandbox: None,
        };
        let crds: Api<CustomResourceDefinition> = Api::all(system.client.clone());
        crds.get("machines.machine.sapcloud.io")
            .await
            .map_err(E2eError::kube(
                "get CRD machines.machine.sapcloud.io (is the chart installed?)",
            ))?;
        system.ensure_userdata_secret().await?;
        println!(
            "mcm-e2e[{name}]: using the cluster of {} (namespace {})",
            system.kubeconfig.display(),
            system.namespace
        );
        Ok(system)
    }

    pub(super) async fn ensure_userdata_secret(&self) -> Result<()> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": USERDATA_SECRET, "namespace": self.namespace},
            "type": "Opaque",
            "stringData": {"userData": "#cloud-config\nhostname: <<MACHINE_NAME>>\n"}
        }))
        .map_err(E2eError::decode("the user data Secret"))?;
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(e) => Err(E2eError::kube(format!("create Secret {USERDATA_SECRET}"))(
                e,
            )),
        }
    }
}
