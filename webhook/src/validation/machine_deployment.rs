//! MachineDeployment rules (docs/behaviour.md#admission-rules rules 1–15, docs/behaviour.md#further-admission-rules).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use mcm_api::internal::{MachineDeployment, MachineDeploymentSpec, MachineTemplateSpec};
use mcm_api::v1alpha1::{MachineDeploymentStrategyType, OrchestrationType};
use serde_json::json;

use super::common::{self, Amount};
use super::report::Report;
use crate::field::FieldError;
use crate::request::{Context, Operation};

/// The warning for `spec.rollbackTo` on CREATE.
pub const ROLLBACK_ON_CREATE: &str = "spec.rollbackTo on a new machinedeployment has no earlier revision: the controller clears it (event DeploymentRollbackRevisionNotFound) and rolls nothing back";

const STRATEGY_TYPES: &[&str] = &["RollingUpdate", "Recreate", "InPlaceUpdate"];
const ORCHESTRATION_TYPES: &[&str] = &["Auto", "Manual"];
/// Longer names make MachineSet and Machine names exceed 63 characters.
const NAME_WARNING_LENGTH: usize = 51;

/// Validates a MachineDeployment (and, on UPDATE, the change from `old`).
#[must_use]
pub fn machine_deployment(
    new: &MachineDeployment,
    old: Option<&MachineDeployment>,
    context: &Context<'_>,
) -> Report {
    let mut report = Report::default();
    common::control_annotations(&mut report, new.metadata.annotations.as_ref());
    if context.operation == Operation::Create {
        let name = new.metadata.name.as_deref().unwrap_or_default();
        if name.len() > NAME_WARNING_LENGTH {
            report.warn(format!(
                "metadata.name is longer than {NAME_WARNING_LENGTH} characters; machine names will be truncated"
            ));
        }
    }
    let Some(spec) = &new.spec else {
        report.error("spec-required", FieldError::required("spec", ""));
        return report;
    };
    common::non_negative(&mut report, "replicas", "spec.replicas", spec.replicas);
    let selector_usable = common::selector(&mut report, "spec.selector", spec.selector.as_ref());
    template(
        &mut report,
        "spec.template",
        &spec.template,
        spec.selector.as_ref().filter(|_| selector_usable),
    );
    strategy(&mut report, spec);
    common::non_negative(
        &mut report,
        "durations",
        "spec.minReadySeconds",
        spec.min_ready_seconds,
    );
    common::non_negative(
        &mut report,
        "durations",
        "spec.revisionHistoryLimit",
        spec.revision_history_limit,
    );
    common::non_negative(
        &mut report,
        "durations",
        "spec.progressDeadlineSeconds",
        spec.progress_deadline_seconds,
    );
    if let Some(deadline) = spec.progress_deadline_seconds.filter(|d| *d >= 0) {
        let min_ready = spec.min_ready_seconds.unwrap_or(0);
        if deadline <= min_ready {
            report.error(
                "durations",
                FieldError::invalid(
                    "spec.progressDeadlineSeconds",
                    json!(deadline),
                    "must be greater than minReadySeconds",
                ),
            );
        }
    }
    auto_preserve(
        &mut report,
        spec.auto_preserve_failed_machine_max,
        spec.replicas,
    );
    // The controller carries a rollbackTo out (docs/behaviour.md#rollback); an UPDATE's is
    // predicted by the rollout preview. A new deployment has no revision to go back to.
    if spec.rollback_to.is_some() && context.operation == Operation::Create {
        report.warn(ROLLBACK_ON_CREATE.to_owned());
    }
    if let (Operation::Update, Some(old)) = (context.operation, old)
        && let Some(old_spec) = &old.spec
    {
        update_rules(&mut report, spec, old_spec, old);
    }
    report
}

/// Rules 3, 13, 15 on a machine template (shared with MachineSet).
pub(super) fn template(
    report: &mut Report,
    path: &str,
    template: &MachineTemplateSpec,
    selector: Option<&LabelSelector>,
) {
    common::embedded_metadata(
        report,
        "template-metadata",
        &format!("{path}.metadata"),
        template.metadata.as_ref(),
    );
    if let Some(selector) = selector {
        let labels = template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        if !common::selector_matches(selector, &labels) {
            report.error(
                "selector-matches-template",
                FieldError::invalid(
                    format!("{path}.metadata.labels"),
                    json!(labels),
                    "`selector` does not match template `labels`",
                ),
            );
        }
    }
    let Some(spec) = &template.spec else {
        report.error(
            "class-reference",
            FieldError::required(format!("{path}.spec"), ""),
        );
        return;
    };
    common::class_reference(report, &format!("{path}.spec.class"), spec.class.as_ref());
    common::node_template(
        report,
        &format!("{path}.spec.nodeTemplate"),
        spec.node_template.as_ref(),
    );
    common::configuration(report, &format!("{path}.spec"), &spec.configuration);
}

fn is_in_place(type_: Option<&MachineDeploymentStrategyType>) -> bool {
    matches!(type_, Some(MachineDeploymentStrategyType::InPlaceUpdate))
}

/// Rules 6–11.
fn strategy(report: &mut Report, spec: &MachineDeploymentSpec) {
    let Some(strategy) = &spec.strategy else {
        report.error("strategy", FieldError::required("spec.strategy", ""));
        return;
    };
    let Some(type_) = &strategy.type_ else {
        report.error("strategy", FieldError::required("spec.strategy.type", ""));
        return;
    };
    if !type_.is_known() {
        report.error(
            "strategy",
            FieldError::not_supported("spec.strategy.type", type_.as_str(), STRATEGY_TYPES),
        );
        return;
    }
    let rolling = matches!(type_, MachineDeploymentStrategyType::RollingUpdate);
    let in_place = is_in_place(Some(type_));
    if strategy.rolling_update.is_some() && !rolling {
        report.error(
            "strategy",
            FieldError::forbidden(
                "spec.strategy.rollingUpdate",
                format!("may not be specified when strategy `type` is '{type_}'"),
            ),
        );
    }
    if strategy.in_place_update.is_some() && !in_place {
        report.error(
            "strategy",
            FieldError::forbidden(
                "spec.strategy.inPlaceUpdate",
                format!("may not be specified when strategy `type` is '{type_}'"),
            ),
        );
    }
    if rolling {
        match &strategy.rolling_update {
            None => report.error(
                "strategy",
                FieldError::required(
                    "spec.strategy.rollingUpdate",
                    "this should be defaulted and never be nil",
                ),
            ),
            Some(params) => surge_and_unavailable(
                report,
                "spec.strategy.rollingUpdate",
                &params.update_configuration,
                false,
            ),
        }
    }
    if in_place {
        match &strategy.in_place_update {
            None => report.error(
                "strategy",
                FieldError::required(
                    "spec.strategy.inPlaceUpdate",
                    "this should be defaulted and never be nil",
                ),
            ),
            Some(params) => {
                let manual = matches!(params.orchestration_type, Some(OrchestrationType::Manual));
                if let Some(orchestration) = &params.orchestration_type
                    && !orchestration.is_known()
                {
                    report.error(
                        "strategy",
                        FieldError::not_supported(
                            "spec.strategy.inPlaceUpdate.orchestrationType",
                            orchestration.as_str(),
                            ORCHESTRATION_TYPES,
                        ),
                    );
                }
                let limits = &params.update_configuration;
                if manual && (limits.max_surge.is_some() || limits.max_unavailable.is_some()) {
                    report.warn(
                        "spec.strategy.inPlaceUpdate: maxSurge and maxUnavailable are ignored with orchestrationType Manual"
                            .to_owned(),
                    );
                }
                surge_and_unavailable(report, "spec.strategy.inPlaceUpdate", limits, manual);
            }
        }
    }
    let template_config = spec.template.spec.as_ref().map(|s| &s.configuration);
    if !in_place {
        if template_config.is_some_and(|c| c.in_place_update_timeout.is_some()) {
            report.warn("spec.template.spec.inPlaceUpdateTimeout is ignored unless strategy is InPlaceUpdate".to_owned());
        }
        if template_config.is_some_and(|c| c.disable_health_timeout == Some(true)) {
            report.warn("spec.template.spec.disableHealthTimeout is ignored unless strategy is InPlaceUpdate".to_owned());
        }
    }
}

/// Rules 8–10.
fn surge_and_unavailable(
    report: &mut Report,
    path: &str,
    limits: &mcm_api::v1alpha1::UpdateConfiguration,
    manual: bool,
) {
    let surge = common::int_or_percent(
        report,
        &format!("{path}.maxSurge"),
        limits.max_surge.as_ref(),
        false,
    );
    let unavailable = common::int_or_percent(
        report,
        &format!("{path}.maxUnavailable"),
        limits.max_unavailable.as_ref(),
        true,
    );
    if manual {
        return;
    }
    let zero = |amount: Option<Amount>| amount.is_none_or(Amount::is_zero);
    // Both given (or defaulted) and both zero: the rollout could never start. Unparsable values
    // were reported above, so only judge values that parsed or are absent.
    let surge_ok = limits.max_surge.is_none() || surge.is_some();
    let unavailable_ok = limits.max_unavailable.is_none() || unavailable.is_some();
    if surge_ok && unavailable_ok && zero(surge) && zero(unavailable) {
        let value = limits
            .max_unavailable
            .as_ref()
            .map_or(json!(0), |v| serde_json::to_value(v).unwrap_or(json!(0)));
        report.error(
            "surge-unavailable-not-both-zero",
            FieldError::invalid(
                format!("{path}.maxUnavailable"),
                value,
                "may not be 0 when `maxSurge` is 0",
            ),
        );
    }
}

pub(super) fn auto_preserve(report: &mut Report, max: Option<i32>, replicas: Option<i32>) {
    common::non_negative(
        report,
        "auto-preserve",
        "spec.autoPreserveFailedMachineMax",
        max,
    );
    if let Some(max) = max.filter(|m| *m > replicas.unwrap_or(0)) {
        report.warn(format!(
            "spec.autoPreserveFailedMachineMax ({max}) is greater than spec.replicas"
        ));
    }
}

/// Rules 4 and 12 and the in-place class warning.
fn update_rules(
    report: &mut Report,
    spec: &MachineDeploymentSpec,
    old_spec: &MachineDeploymentSpec,
    old: &MachineDeployment,
) {
    if old_spec.selector.is_some() && spec.selector != old_spec.selector {
        report.error(
            "selector-immutable",
            FieldError::invalid(
                "spec.selector",
                serde_json::to_value(&spec.selector).unwrap_or_default(),
                "field is immutable",
            ),
        );
    }
    let old_type = old_spec.strategy.as_ref().and_then(|s| s.type_.as_ref());
    let new_type = spec.strategy.as_ref().and_then(|s| s.type_.as_ref());
    let rollout_in_progress = old.status.as_ref().is_some_and(|status| {
        status.updated_replicas.unwrap_or(0) < old_spec.replicas.unwrap_or(0)
    });
    if old_type.is_some() && new_type.is_some() && is_in_place(old_type) != is_in_place(new_type) {
        if rollout_in_progress {
            report.error(
                "strategy-switch",
                FieldError::invalid(
                    "spec.strategy.type",
                    json!(new_type.map(|t| t.as_str().to_owned())),
                    "may not switch between InPlaceUpdate and the replacing strategies while a rollout is in progress",
                ),
            );
        } else {
            report.warn(
                "spec.strategy.type switches between in-place and replacing updates".to_owned(),
            );
        }
    }
    let class_name = |s: &MachineDeploymentSpec| {
        s.template
            .spec
            .as_ref()
            .and_then(|t| t.class.as_ref())
            .and_then(|c| c.name.clone())
    };
    if is_in_place(old_type) && rollout_in_progress && class_name(spec) != class_name(old_spec) {
        report.warn(
            "spec.template.spec.class.name changed while an in-place update is still in progress"
                .to_owned(),
        );
    }
}
