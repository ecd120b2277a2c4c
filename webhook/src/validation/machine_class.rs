//! MachineClass rules (docs/behaviour.md#machine-class-admission-rules).

use k8s_openapi::api::core::v1::SecretReference;
use mcm_api::internal::MachineClass;
use mcm_api::keys::finalizer;
use serde_json::{Value, json};

use super::report::Report;
use crate::field::FieldError;
use crate::request::{Context, Operation};

const KNOWN_ARCHITECTURES: &[&str] = &["amd64", "arm64"];

/// Validates a MachineClass (and, on UPDATE, the change from `old`).
#[must_use]
pub fn machine_class(
    new: &MachineClass,
    old: Option<&MachineClass>,
    context: &Context<'_>,
) -> Report {
    let mut report = Report::default();
    let Some(spec) = &new.spec else {
        report.error("provider-spec", FieldError::required("providerSpec", ""));
        return report;
    };
    match &spec.provider_spec {
        Value::Object(_) => {}
        Value::Null => report.error("provider-spec", FieldError::required("providerSpec", "")),
        other => report.error(
            "provider-spec",
            FieldError::invalid("providerSpec", other.clone(), "must be a JSON object"),
        ),
    }
    let provider_empty = spec.provider.as_deref().is_none_or(str::is_empty);
    if provider_empty {
        match context.operation {
            Operation::Create => report.error(
                "provider",
                FieldError::required("provider", "selects the driver that creates the machines"),
            ),
            Operation::Update => {
                report.warn("provider is empty; no driver will pick up this class".to_owned())
            }
        }
    }
    secret_reference(&mut report, "secretRef", spec.secret_ref.as_ref());
    secret_reference(
        &mut report,
        "credentialsSecretRef",
        spec.credentials_secret_ref.as_ref(),
    );
    if spec.secret_ref.is_none() && spec.credentials_secret_ref.is_none() {
        report.error(
            "secret-references",
            FieldError::required(
                "secretRef",
                "one of secretRef or credentialsSecretRef must be set",
            ),
        );
    }
    if let Some(template) = &spec.node_template {
        if template.capacity.is_empty() {
            report.error(
                "node-template",
                FieldError::required("nodeTemplate.capacity", ""),
            );
        }
        for (resource, quantity) in &template.capacity {
            match parse_quantity_sign(&quantity.0) {
                Some(false) => {}
                Some(true) => report.error(
                    "node-template",
                    FieldError::invalid(
                        format!("nodeTemplate.capacity[{resource}]"),
                        json!(quantity.0),
                        "must be greater than or equal to 0",
                    ),
                ),
                None => report.error(
                    "node-template",
                    FieldError::invalid(
                        format!("nodeTemplate.capacity[{resource}]"),
                        json!(quantity.0),
                        "must be a quantity such as 2, 500m or 8Gi",
                    ),
                ),
            }
        }
        for (field, value) in [
            ("instanceType", &template.instance_type),
            ("region", &template.region),
            ("zone", &template.zone),
        ] {
            if value.is_empty() {
                report.error(
                    "node-template",
                    FieldError::required(format!("nodeTemplate.{field}"), ""),
                );
            }
        }
        if let Some(arch) = template.architecture.as_deref()
            && !KNOWN_ARCHITECTURES.contains(&arch)
        {
            report.warn(format!(
                "nodeTemplate.architecture {arch:?} is not one of amd64, arm64"
            ));
        }
    }
    if let (Operation::Update, Some(old_spec)) =
        (context.operation, old.and_then(|o| o.spec.as_ref()))
        && old_spec.provider_spec != spec.provider_spec
    {
        // Hot-updatable fields (the provider's GetCapabilities) are pushed to running machines;
        // a change of any other field makes the controller warn on each machine that a new
        // class (a rollout) is needed.
        report.warn(
            "providerSpec change: hot-updatable fields reach existing machines via UpdateMachine, other fields only new ones"
                .to_owned(),
        );
    }
    if let (Operation::Update, Some(old)) = (context.operation, old)
        && let Some(old_spec) = old.spec.as_ref()
        && old_spec.provider != spec.provider
        && in_use(old)
    {
        // Not refused: fixing a wrong provider is how a class whose machines are stuck in
        // deletion is repaired (docs/webhook-rules.md).
        report.warn(format!(
            "provider {:?} -> {:?} on a class machines use: their VMs are now handled by the new driver, which may not know them; use a new MachineClass",
            old_spec.provider.as_deref().unwrap_or_default(),
            spec.provider.as_deref().unwrap_or_default(),
        ));
    }
    report
}

/// Whether machines use the class: the machine controller keeps its finalizer on a class exactly
/// while at least one Machine references it.
fn in_use(class: &MachineClass) -> bool {
    class
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == finalizer::MACHINE_CONTROLLER_MANAGER))
}

fn secret_reference(report: &mut Report, path: &str, reference: Option<&SecretReference>) {
    let Some(reference) = reference else {
        return;
    };
    if reference.name.as_deref().is_none_or(str::is_empty) {
        report.error(
            "secret-references",
            FieldError::required(format!("{path}.name"), ""),
        );
    }
    if reference.namespace.as_deref().is_none_or(str::is_empty) {
        report.error(
            "secret-references",
            FieldError::required(format!("{path}.namespace"), ""),
        );
    }
}

/// `Some(is_negative)` when `text` is a Kubernetes quantity, `None` when it is not.
fn parse_quantity_sign(text: &str) -> Option<bool> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let valid_number = !number.is_empty() && number != "." && number.matches('.').count() <= 1;
    let valid_suffix = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
        .is_some_and(|digits| !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()));
    let is_zero = number.chars().all(|c| c == '0' || c == '.');
    (valid_number && valid_suffix).then_some(negative && !is_zero)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::parse_quantity_sign;

    #[test]
    fn quantities() {
        for ok in ["2", "500m", "8Gi", "1.5", "+3", "1e3", "0"] {
            assert_eq!(parse_quantity_sign(ok), Some(false), "{ok}");
        }
        assert_eq!(parse_quantity_sign("-1"), Some(true));
        assert_eq!(parse_quantity_sign("-0"), Some(false));
        for bad in ["", "abc", "1..2", "5X", "Gi", "."] {
            assert_eq!(parse_quantity_sign(bad), None, "{bad}");
        }
    }
}
