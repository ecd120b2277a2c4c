//! Upstream validation of a MachineDeployment (docs/behaviour.md#validation) plus nil-selector and selector
//! syntax: an invalid deployment is logged and not planned for.

use mcm_api::v1alpha1::{MachineDeployment, MachineDeploymentStrategyType as Strategy};

use super::fencepost::{self, FencepostError, replicas};
use super::types::{DeploymentError, md_name};
use crate::selector;

/// Upstream validation of a deployment (docs/behaviour.md#validation) plus nil-selector and selector syntax.
///
/// # Errors
/// The first violated rule.
pub fn validate(md: &MachineDeployment) -> Result<(), DeploymentError> {
    let name = md_name(md);
    if replicas(md) < 0 {
        return Err(DeploymentError::NegativeReplicas { name });
    }
    let strategy = md.spec.strategy.as_ref().and_then(|s| s.type_.as_ref());
    match strategy {
        Some(Strategy::Recreate) => {}
        Some(Strategy::RollingUpdate | Strategy::InPlaceUpdate) => {
            let cfg =
                fencepost::update_configuration(md).ok_or_else(|| DeploymentError::Fencepost {
                    name: name.clone(),
                    source: FencepostError::Missing("update configuration"),
                })?;
            fencepost::resolve_fenceposts(
                cfg.max_surge.as_ref(),
                cfg.max_unavailable.as_ref(),
                replicas(md),
            )
            .map_err(|source| DeploymentError::Fencepost {
                name: name.clone(),
                source,
            })?;
            if strategy == Some(&Strategy::InPlaceUpdate) {
                let orchestration = md
                    .spec
                    .strategy
                    .as_ref()
                    .and_then(|s| s.in_place_update.as_ref())
                    .and_then(|i| i.orchestration_type.as_ref());
                if !orchestration.is_some_and(mcm_api::v1alpha1::OrchestrationType::is_known) {
                    return Err(DeploymentError::InvalidStrategy { name });
                }
            }
        }
        _ => return Err(DeploymentError::InvalidStrategy { name }),
    }
    let Some(sel) = md.spec.selector.as_ref() else {
        return Err(DeploymentError::MissingSelector { name });
    };
    selector::validate(sel).map_err(|source| DeploymentError::Selector {
        name: name.clone(),
        source,
    })?;
    let template_labels = md
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref());
    for (k, v) in sel.match_labels.iter().flatten() {
        if template_labels.and_then(|l| l.get(k)) != Some(v) {
            return Err(DeploymentError::SelectorTemplateMismatch { name });
        }
    }
    let class = md
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.class.as_ref());
    if class
        .and_then(|c| c.kind.as_deref())
        .unwrap_or("")
        .is_empty()
    {
        return Err(DeploymentError::MissingClass {
            name,
            field: "kind",
        });
    }
    if class
        .and_then(|c| c.name.as_deref())
        .unwrap_or("")
        .is_empty()
    {
        return Err(DeploymentError::MissingClass {
            name,
            field: "name",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
