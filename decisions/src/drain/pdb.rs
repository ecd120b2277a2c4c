//! PodDisruptionBudget rules the drain needs when an eviction is refused with 429 (docs/behaviour.md#drain): which
//! budget covers the pod, and whether that budget is misconfigured (it can never allow a voluntary
//! eviction, so retrying is pointless). Pure functions.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

/// The first budget (in the given order) whose selector matches the pod's labels. Budgets with a
/// malformed selector are skipped.
#[must_use]
pub fn budget_for_pod<'a>(
    pod: &Pod,
    budgets: &'a [PodDisruptionBudget],
) -> Option<&'a PodDisruptionBudget> {
    budgets.iter().find(|budget| {
        let selector = budget.spec.as_ref().and_then(|spec| spec.selector.as_ref());
        crate::selector::matches(selector, pod.metadata.labels.as_ref()).unwrap_or(false)
    })
}

/// Upstream's "misconfigured" budget: observed, expects pods, all of them healthy, none disrupted,
/// and still zero disruptions allowed.
#[must_use]
pub fn is_misconfigured(budget: &PodDisruptionBudget) -> bool {
    let Some(status) = budget.status.as_ref() else {
        return false;
    };
    // Go compares the plain integers: an unset generation is 0 on both sides.
    let observed =
        budget.metadata.generation.unwrap_or(0) == status.observed_generation.unwrap_or(0);
    observed
        && status.expected_pods > 0
        && status.current_healthy >= status.expected_pods
        && status
            .disrupted_pods
            .as_ref()
            .is_none_or(std::collections::BTreeMap::is_empty)
        && status.disruptions_allowed == 0
}

/// `namespace/name` of a budget.
#[must_use]
pub fn budget_key(budget: &PodDisruptionBudget) -> String {
    format!(
        "{}/{}",
        budget.metadata.namespace.as_deref().unwrap_or(""),
        budget.metadata.name.as_deref().unwrap_or("")
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn budget(name: &str, app: &str, status: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "generation": 2},
            "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": 0},
            "status": status,
        }))
        .unwrap()
    }

    fn pod(app: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": app}}
        }))
        .unwrap()
    }

    #[test]
    fn first_matching_budget_wins() {
        let budgets = vec![
            budget("other", "b", serde_json::Value::Null),
            budget("mine", "a", serde_json::Value::Null),
            budget("second", "a", serde_json::Value::Null),
        ];
        assert_eq!(
            budget_for_pod(&pod("a"), &budgets).map(budget_key),
            Some("ns/mine".to_owned())
        );
        assert!(budget_for_pod(&pod("z"), &budgets).is_none());
    }

    #[test]
    fn misconfigured_only_when_every_rule_holds() {
        let healthy = serde_json::json!({
            "observedGeneration": 2, "expectedPods": 2, "currentHealthy": 2,
            "desiredHealthy": 2, "disruptionsAllowed": 0
        });
        assert!(is_misconfigured(&budget("b", "a", healthy.clone())));
        // Not observed yet.
        let mut stale = healthy.clone();
        stale["observedGeneration"] = 1.into();
        assert!(!is_misconfigured(&budget("b", "a", stale)));
        // A pod is unhealthy: the budget blocks only for now.
        let mut unhealthy = healthy.clone();
        unhealthy["currentHealthy"] = 1.into();
        assert!(!is_misconfigured(&budget("b", "a", unhealthy)));
        // Disruptions allowed.
        let mut allowed = healthy.clone();
        allowed["disruptionsAllowed"] = 1.into();
        assert!(!is_misconfigured(&budget("b", "a", allowed)));
        // A disruption in flight.
        let mut disrupted = healthy;
        disrupted["disruptedPods"] = serde_json::json!({"p": "2024-01-01T00:00:00Z"});
        assert!(!is_misconfigured(&budget("b", "a", disrupted)));
        // No status at all.
        assert!(!is_misconfigured(&budget(
            "b",
            "a",
            serde_json::Value::Null
        )));
    }
}
