//! The clusters' credentials: the kubeconfig flags' special values and [`KubeconfigSource`].

use std::path::PathBuf;

/// The value of `--target-kubeconfig` that disables the target cluster.
pub const TARGET_KUBECONFIG_DISABLED: &str = "none";
/// The value of `--control-kubeconfig` (and, as an extension, `--target-kubeconfig`) that selects
/// the service-account credentials of the pod.
pub const IN_CLUSTER_CONFIG: &str = "inClusterConfig";

/// Where a cluster's credentials come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeconfigSource {
    /// Empty flag: `KUBECONFIG`, then `~/.kube/config`, then the in-cluster service account.
    Default,
    /// `inClusterConfig`: the pod's service account.
    InCluster,
    /// A kubeconfig file.
    File(PathBuf),
}

pub(super) fn kubeconfig_source(flag_value: &str) -> KubeconfigSource {
    match flag_value {
        "" => KubeconfigSource::Default,
        IN_CLUSTER_CONFIG => KubeconfigSource::InCluster,
        path => KubeconfigSource::File(PathBuf::from(path)),
    }
}
