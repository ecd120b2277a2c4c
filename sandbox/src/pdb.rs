//! PodDisruptionBudget arithmetic for evictions and PDB status (pure functions).

use crate::selector::LabelSelector;
use serde_json::{Value, json};

/// Resolves an int-or-percent against a total (percentages round up, as kube does for minAvailable
/// and maxUnavailable).
pub fn resolve_int_or_percent(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            if let Some(p) = s.strip_suffix('%') {
                let p: i64 = p.trim().parse().ok()?;
                Some((p * total + 99) / 100)
            } else {
                s.parse().ok()
            }
        }
        _ => None,
    }
}

/// Whether a pod counts as healthy for a PDB: Running with condition Ready=True and not deleting.
pub fn pod_healthy(pod: &Value) -> bool {
    let ready = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        });
    ready && pod.pointer("/metadata/deletionTimestamp").is_none()
}

/// Computes a PDB's status from the pods of its namespace.
pub fn compute_status(pdb: &Value, pods: &[&Value]) -> Value {
    let selector = pdb
        .pointer("/spec/selector")
        .map(LabelSelector::from_object);
    let matching: Vec<&&Value> = match selector {
        Some(Ok(sel)) if !sel.is_empty() => pods
            .iter()
            .filter(|p| sel.matches(p.pointer("/metadata/labels")))
            .collect(),
        _ => Vec::new(),
    };
    let expected = matching.len() as i64;
    let healthy = matching.iter().filter(|p| pod_healthy(p)).count() as i64;
    let desired = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        resolve_int_or_percent(min, expected).unwrap_or(0)
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        (expected - resolve_int_or_percent(max, expected).unwrap_or(0)).max(0)
    } else {
        0
    };
    let allowed = (healthy - desired).max(0);
    let generation = pdb
        .pointer("/metadata/generation")
        .cloned()
        .unwrap_or(json!(1));
    let mut status = pdb.get("status").cloned().unwrap_or_else(|| json!({}));
    status["observedGeneration"] = generation;
    status["currentHealthy"] = json!(healthy);
    status["desiredHealthy"] = json!(desired);
    status["expectedPods"] = json!(expected);
    status["disruptionsAllowed"] = json!(allowed);
    let (cond_status, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    status["conditions"] = json!([{"type": "DisruptionAllowed", "status": cond_status, "reason": reason, "message": "", "observedGeneration": status["observedGeneration"], "lastTransitionTime": pdb.pointer("/metadata/creationTimestamp").cloned().unwrap_or(json!(null))}]);
    status
}

/// Which PDBs (by index) select the pod.
pub fn matching_pdbs(pod: &Value, pdbs: &[Value]) -> Vec<usize> {
    pdbs.iter()
        .enumerate()
        .filter(|(_, pdb)| {
            match pdb
                .pointer("/spec/selector")
                .map(LabelSelector::from_object)
            {
                Some(Ok(sel)) if !sel.is_empty() => sel.matches(pod.pointer("/metadata/labels")),
                _ => false,
            }
        })
        .map(|(i, _)| i)
        .collect()
}

/// Eviction decision as kube-apiserver makes it.
#[derive(Debug, Clone, PartialEq)]
pub enum EvictionDecision {
    /// Evict; the listed PDB (index) has its disruptionsAllowed decremented.
    Allow(Option<usize>),
    /// 429; the text is the `DisruptionBudget` cause message.
    Deny(String),
    /// 500: more than one PDB selects the pod.
    MultiplePdbs,
}

/// Decides an eviction from the pod and the status of PDBs selecting it.
pub fn decide_eviction(pod: &Value, pdbs: &[Value], statuses: &[Value]) -> EvictionDecision {
    // Pods that are already terminal or not yet running can always be evicted.
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if matches!(phase, "Succeeded" | "Failed" | "Pending")
        || pod.pointer("/metadata/deletionTimestamp").is_some()
    {
        return EvictionDecision::Allow(None);
    }
    let idx = matching_pdbs(pod, pdbs);
    match idx.as_slice() {
        [] => EvictionDecision::Allow(None),
        [i] => {
            let st = &statuses[*i];
            let allowed = st
                .get("disruptionsAllowed")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            // An unhealthy pod may be evicted when the budget is already met (IfHealthyBudget policy).
            if !pod_healthy(pod) {
                let healthy = st
                    .get("currentHealthy")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let desired = st
                    .get("desiredHealthy")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if healthy >= desired {
                    return EvictionDecision::Allow(None);
                }
            }
            if allowed > 0 {
                EvictionDecision::Allow(Some(*i))
            } else {
                let name = pdbs[*i]
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                EvictionDecision::Deny(format!(
                    "The disruption budget {name} needs {} healthy pods and has {} currently",
                    st.get("desiredHealthy")
                        .and_then(Value::as_i64)
                        .unwrap_or(0),
                    st.get("currentHealthy")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                ))
            }
        }
        _ => EvictionDecision::MultiplePdbs,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool) -> Value {
        json!({"metadata": {"name": name, "labels": {"app": "a"}}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
    }

    #[test]
    fn status_and_decision() {
        let pdb = json!({"metadata": {"name": "b", "generation": 1}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "a"}}}});
        let pods = [pod("p1", true), pod("p2", true)];
        let refs: Vec<&Value> = pods.iter().collect();
        let st = compute_status(&pdb, &refs);
        assert_eq!(st["disruptionsAllowed"], 0);
        assert_eq!(st["expectedPods"], 2);
        match decide_eviction(
            &pods[0],
            std::slice::from_ref(&pdb),
            std::slice::from_ref(&st),
        ) {
            EvictionDecision::Deny(m) => assert_eq!(
                m,
                "The disruption budget b needs 2 healthy pods and has 2 currently"
            ),
            other => panic!("{other:?}"),
        }
        let pdb2 = json!({"metadata": {"name": "b"}, "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "a"}}}});
        let st2 = compute_status(&pdb2, &refs);
        assert_eq!(st2["disruptionsAllowed"], 1);
        assert_eq!(
            decide_eviction(
                &pods[0],
                std::slice::from_ref(&pdb2),
                std::slice::from_ref(&st2)
            ),
            EvictionDecision::Allow(Some(0))
        );
        assert_eq!(
            decide_eviction(
                &pods[0],
                &[pdb.clone(), pdb2.clone()],
                &[st.clone(), st2.clone()]
            ),
            EvictionDecision::MultiplePdbs
        );
        assert_eq!(
            decide_eviction(&pods[0], &[], &[]),
            EvictionDecision::Allow(None)
        );
    }

    #[test]
    fn percentages_round_up() {
        assert_eq!(resolve_int_or_percent(&json!("50%"), 3), Some(2));
        assert_eq!(resolve_int_or_percent(&json!(1), 3), Some(1));
        assert_eq!(resolve_int_or_percent(&json!("x%"), 3), None);
    }
}
