//! Upstream validation of a MachineSet (docs/behaviour.md#validation): an invalid MachineSet is logged and not
//! planned for.

use mcm_api::v1alpha1::MachineSet;

use super::types::{MachineSetError, name_of};

/// Upstream validation of a MachineSet (docs/behaviour.md#validation), plus a nil-selector check where Go
/// panics.
///
/// # Errors
/// The first violated rule.
pub fn validate(ms: &MachineSet) -> Result<(), MachineSetError> {
    let name = name_of(ms);
    if ms.spec.replicas.unwrap_or(0) < 0 {
        return Err(MachineSetError::NegativeReplicas { name });
    }
    let Some(selector) = ms.spec.selector.as_ref() else {
        return Err(MachineSetError::MissingSelector { name });
    };
    crate::selector::validate(selector).map_err(|source| MachineSetError::Selector {
        name: name.clone(),
        source,
    })?;
    let template_labels = ms
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    for (k, v) in selector.match_labels.iter().flatten() {
        if template_labels.and_then(|l| l.get(k)) != Some(v) {
            return Err(MachineSetError::SelectorTemplateMismatch { name });
        }
    }
    let class = ms
        .spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.class.as_ref());
    if class
        .and_then(|c| c.kind.as_deref())
        .unwrap_or("")
        .is_empty()
    {
        return Err(MachineSetError::MissingClass {
            name,
            field: "kind",
            what: "Kind",
        });
    }
    if class
        .and_then(|c| c.name.as_deref())
        .unwrap_or("")
        .is_empty()
    {
        return Err(MachineSetError::MissingClass {
            name,
            field: "name",
            what: "Name",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
