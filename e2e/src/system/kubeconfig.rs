//! Which cluster the tests use (`MCM_E2E_KUBECONFIG`) and kube clients for kubeconfig files.

use std::path::{Path, PathBuf};

use crate::error::{E2eError, Result};

/// The kubeconfig of an existing cluster when `MCM_E2E_KUBECONFIG` is set.
pub fn cluster_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("MCM_E2E_KUBECONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// A kube client for a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> Result<kube::Client> {
    let fail = |message: String| E2eError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        message,
    };
    let config =
        kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| fail(e.to_string()))?;
    let config =
        kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| fail(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| fail(e.to_string()))
}
