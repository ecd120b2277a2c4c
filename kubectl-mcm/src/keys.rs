//! Keys that belong to kubectl, not to machine-controller-manager (those live in
//! [`mcm_api::keys`] and are used from there).

/// Annotation kubectl users set on an object to record why it changed; MCM copies it from the
/// MachineDeployment to its new MachineSet, so each revision keeps its cause.
pub const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";

/// Template annotation `kubectl rollout restart` writes on Deployments; changing any template
/// annotation of a MachineDeployment starts a new revision, so the same key restarts it.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
