//! Label selector matching over k8s-openapi's [`LabelSelector`]: `matchLabels` and
//! `matchExpressions` with the `In`, `NotIn`, `Exists` and `DoesNotExist` operators, as the API
//! server and client-go's `LabelSelectorAsSelector` interpret them.
//!
//! Semantics (kept from Kubernetes because users rely on them):
//! - an absent selector (`None`) matches nothing;
//! - an empty selector (`{}`) matches everything;
//! - all requirements are ANDed;
//! - `NotIn` and `DoesNotExist` match objects that lack the key.
//!
//! Malformed selectors (unknown operator, `In`/`NotIn` without values, `Exists`/`DoesNotExist`
//! with values) are errors, never panics: the controllers treat them like upstream treats a
//! selector conversion error (the object is skipped).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Why a label selector cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The operator of a `matchExpressions` entry is not one of the four known ones.
    #[error("label selector requirement on key {key:?} has unknown operator {operator:?}")]
    UnknownOperator {
        /// Key of the requirement.
        key: String,
        /// The operator as written.
        operator: String,
    },
    /// `In` or `NotIn` without any value.
    #[error("label selector requirement on key {key:?} with operator {operator} needs values")]
    MissingValues {
        /// Key of the requirement.
        key: String,
        /// The operator as written.
        operator: String,
    },
    /// `Exists` or `DoesNotExist` with values.
    #[error(
        "label selector requirement on key {key:?} with operator {operator} must not have values"
    )]
    UnexpectedValues {
        /// Key of the requirement.
        key: String,
        /// The operator as written.
        operator: String,
    },
}

/// A parsed `matchExpressions` operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

fn parse_requirement(req: &LabelSelectorRequirement) -> Result<Operator, SelectorError> {
    let operator = match req.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => {
            return Err(SelectorError::UnknownOperator {
                key: req.key.clone(),
                operator: other.to_owned(),
            });
        }
    };
    let has_values = req.values.as_ref().is_some_and(|v| !v.is_empty());
    match operator {
        Operator::In | Operator::NotIn if !has_values => Err(SelectorError::MissingValues {
            key: req.key.clone(),
            operator: req.operator.clone(),
        }),
        Operator::Exists | Operator::DoesNotExist if has_values => {
            Err(SelectorError::UnexpectedValues {
                key: req.key.clone(),
                operator: req.operator.clone(),
            })
        }
        _ => Ok(operator),
    }
}

/// Checks that every requirement of `selector` is well formed.
///
/// # Errors
/// The first malformed `matchExpressions` entry.
pub fn validate(selector: &LabelSelector) -> Result<(), SelectorError> {
    for req in selector.match_expressions.iter().flatten() {
        parse_requirement(req)?;
    }
    Ok(())
}

/// True when the selector has neither `matchLabels` nor `matchExpressions` entries (it selects
/// everything; the MachineDeployment controller refuses such selectors).
#[must_use]
pub fn is_empty(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// Whether `labels` satisfy `selector`. `None` selects nothing, an empty selector everything.
///
/// # Errors
/// A malformed requirement (checked even when an earlier one already fails to match, so a bad
/// selector is reported consistently whatever the labels).
pub fn matches(
    selector: Option<&LabelSelector>,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, SelectorError> {
    let Some(selector) = selector else {
        return Ok(false);
    };
    validate(selector)?;
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    if !labels_ok {
        return Ok(false);
    }
    for req in selector.match_expressions.iter().flatten() {
        let operator = parse_requirement(req)?;
        let values = req.values.as_deref().unwrap_or_default();
        let value = labels.get(&req.key);
        let ok = match operator {
            Operator::In => value.is_some_and(|v| values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|v| (*v).to_owned()).collect())
            },
        }
    }

    fn sel(ml: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: if ml.is_empty() {
                None
            } else {
                Some(labels(ml))
            },
            match_expressions: if exprs.is_empty() { None } else { Some(exprs) },
        }
    }

    #[test]
    fn none_matches_nothing_and_empty_matches_everything() {
        let l = labels(&[("a", "1")]);
        assert!(!matches(None, Some(&l)).unwrap());
        assert!(matches(Some(&LabelSelector::default()), Some(&l)).unwrap());
        assert!(matches(Some(&LabelSelector::default()), None).unwrap());
        assert!(is_empty(&LabelSelector::default()));
        assert!(!is_empty(&sel(&[("a", "1")], vec![])));
    }

    #[test]
    fn table_of_operators() {
        let l = labels(&[("role", "worker"), ("zone", "a")]);
        let cases: Vec<(LabelSelector, bool)> = vec![
            (sel(&[("role", "worker")], vec![]), true),
            (sel(&[("role", "master")], vec![]), false),
            (sel(&[("role", "worker"), ("missing", "x")], vec![]), false),
            (sel(&[], vec![req("zone", "In", &["a", "b"])]), true),
            (sel(&[], vec![req("zone", "In", &["b"])]), false),
            (sel(&[], vec![req("nokey", "In", &["a"])]), false),
            (sel(&[], vec![req("zone", "NotIn", &["b"])]), true),
            (sel(&[], vec![req("zone", "NotIn", &["a"])]), false),
            (sel(&[], vec![req("nokey", "NotIn", &["a"])]), true),
            (sel(&[], vec![req("zone", "Exists", &[])]), true),
            (sel(&[], vec![req("nokey", "Exists", &[])]), false),
            (sel(&[], vec![req("nokey", "DoesNotExist", &[])]), true),
            (sel(&[], vec![req("zone", "DoesNotExist", &[])]), false),
            (
                sel(
                    &[("role", "worker")],
                    vec![req("zone", "In", &["a"]), req("x", "DoesNotExist", &[])],
                ),
                true,
            ),
        ];
        for (i, (s, want)) in cases.iter().enumerate() {
            assert_eq!(
                matches(Some(s), Some(&l)).unwrap(),
                *want,
                "case {i}: {s:?}"
            );
        }
    }

    #[test]
    fn malformed_requirements_are_errors() {
        let l = labels(&[("a", "1")]);
        let bad_op = sel(&[], vec![req("a", "Equals", &["1"])]);
        assert!(matches!(
            matches(Some(&bad_op), Some(&l)),
            Err(SelectorError::UnknownOperator { .. })
        ));
        let no_values = sel(&[], vec![req("a", "In", &[])]);
        assert!(matches!(
            matches(Some(&no_values), Some(&l)),
            Err(SelectorError::MissingValues { .. })
        ));
        let extra_values = sel(&[], vec![req("a", "Exists", &["1"])]);
        assert!(matches!(
            validate(&extra_values),
            Err(SelectorError::UnexpectedValues { .. })
        ));
        // Reported even if matchLabels already fails.
        let both = sel(&[("a", "2")], vec![req("a", "Bogus", &[])]);
        assert!(matches(Some(&both), Some(&l)).is_err());
    }

    proptest! {
        /// A selector made of an object's own labels always matches it, and adding an `In`
        /// requirement with a value the object does not have makes it fail.
        #[test]
        fn own_labels_match(map in proptest::collection::btree_map("[a-c]{1,2}", "[x-z]{1,2}", 0..5)) {
            let s = LabelSelector { match_labels: Some(map.clone()), match_expressions: None };
            prop_assert!(matches(Some(&s), Some(&map)).unwrap());
            let mut s2 = s.clone();
            s2.match_expressions = Some(vec![req("a", "In", &["not-a-value"])]);
            prop_assert!(!matches(Some(&s2), Some(&map)).unwrap());
        }
    }
}
