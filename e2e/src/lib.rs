//! End-to-end scenarios.
//!
//! Filled by the integration issue: scenarios run as real processes against the sandbox, or against
//! an existing cluster when `MCM_E2E_KUBECONFIG` is set.
