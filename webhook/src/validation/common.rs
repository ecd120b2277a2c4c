//! Checks shared by several kinds: Kubernetes name and label syntax, selectors, int-or-percent
//! values, node templates and machine configuration.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mcm_api::internal::{ClassSpec, MachineConfiguration, NodeTemplateSpec};
use serde_json::json;

use super::report::Report;
use crate::field::FieldError;

const QUALIFIED_NAME_MAX: usize = 63;
const DNS_SUBDOMAIN_MAX: usize = 253;
const LABEL_VALUE_MAX: usize = 63;
/// Total size limit of an object's annotations (keys plus values), as the API server enforces.
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the name part of a qualified name and the
/// syntax of non-empty label values.
fn is_name_part(text: &str) -> bool {
    let (Some(first), Some(last)) = (text.chars().next(), text.chars().last()) else {
        return false;
    };
    is_alnum(first)
        && is_alnum(last)
        && text
            .chars()
            .all(|c| is_alnum(c) || c == '-' || c == '_' || c == '.')
}

/// Problems of `name` as a DNS-1123 subdomain (empty when valid).
#[must_use]
pub fn dns1123_subdomain_problems(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if name.len() > DNS_SUBDOMAIN_MAX {
        problems.push(format!(
            "must be no more than {DNS_SUBDOMAIN_MAX} characters"
        ));
    }
    let label_ok = |label: &str| {
        let (Some(first), Some(last)) = (label.chars().next(), label.chars().last()) else {
            return false;
        };
        let lower_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        lower_alnum(first) && lower_alnum(last) && label.chars().all(|c| lower_alnum(c) || c == '-')
    };
    if !name.split('.').all(label_ok) {
        problems.push(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
                .to_owned(),
        );
    }
    problems
}

/// Problems of `key` as a qualified name (`[prefix/]name`), as label and annotation keys must be.
#[must_use]
pub fn qualified_name_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            problems.push("prefix part must be non-empty".to_owned());
        } else {
            problems.extend(
                dns1123_subdomain_problems(prefix)
                    .into_iter()
                    .map(|p| format!("prefix part {p}")),
            );
        }
    }
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else {
        if name.len() > QUALIFIED_NAME_MAX {
            problems.push(format!(
                "name part must be no more than {QUALIFIED_NAME_MAX} characters"
            ));
        }
        if !is_name_part(name) {
            problems.push(
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc')"
                    .to_owned(),
            );
        }
    }
    problems
}

/// Problems of `value` as a label value (empty is allowed).
#[must_use]
pub fn label_value_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.is_empty() {
        return problems;
    }
    if value.len() > LABEL_VALUE_MAX {
        problems.push(format!("must be no more than {LABEL_VALUE_MAX} characters"));
    }
    if !is_name_part(value) {
        problems.push(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345')"
                .to_owned(),
        );
    }
    problems
}

/// Label keys and values (errors at `path`, with the offending key or value, like Go).
pub fn labels(
    report: &mut Report,
    rule: &'static str,
    path: &str,
    labels: Option<&BTreeMap<String, String>>,
) {
    for (key, value) in labels.into_iter().flatten() {
        for problem in qualified_name_problems(key) {
            report.error(rule, FieldError::invalid(path, json!(key), problem));
        }
        for problem in label_value_problems(value) {
            report.error(rule, FieldError::invalid(path, json!(value), problem));
        }
    }
}

/// Annotation keys and total size.
pub fn annotations(
    report: &mut Report,
    rule: &'static str,
    path: &str,
    annotations: Option<&BTreeMap<String, String>>,
) {
    let mut total = 0;
    for (key, value) in annotations.into_iter().flatten() {
        total += key.len() + value.len();
        for problem in qualified_name_problems(&key.to_ascii_lowercase()) {
            report.error(rule, FieldError::invalid(path, json!(key), problem));
        }
    }
    if total > ANNOTATIONS_MAX_BYTES {
        report.error(
            rule,
            FieldError::too_long(
                path,
                format!("may not be more than {ANNOTATIONS_MAX_BYTES} bytes"),
            ),
        );
    }
}

/// Labels and annotations of embedded metadata (templates, node templates).
pub fn embedded_metadata(
    report: &mut Report,
    rule: &'static str,
    path: &str,
    metadata: Option<&ObjectMeta>,
) {
    let Some(metadata) = metadata else {
        return;
    };
    labels(
        report,
        rule,
        &format!("{path}.labels"),
        metadata.labels.as_ref(),
    );
    annotations(
        report,
        rule,
        &format!("{path}.annotations"),
        metadata.annotations.as_ref(),
    );
}

const SELECTOR_OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist"];

/// Rule 1 and 2: the selector is present, non-empty and well-formed. Returns whether it is usable
/// for matching.
pub fn selector(report: &mut Report, path: &str, selector: Option<&LabelSelector>) -> bool {
    let Some(selector) = selector else {
        report.error("selector-required", FieldError::required(path, ""));
        return false;
    };
    let no_labels = selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty);
    let no_expressions = selector
        .match_expressions
        .as_ref()
        .is_none_or(Vec::is_empty);
    if no_labels && no_expressions {
        report.error(
            "selector-required",
            FieldError::invalid(path, json!({}), "empty selector is not valid"),
        );
        return false;
    }
    let before = report.error_count();
    labels(
        report,
        "selector-syntax",
        &format!("{path}.matchLabels"),
        selector.match_labels.as_ref(),
    );
    for (i, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        for problem in qualified_name_problems(&requirement.key) {
            report.error(
                "selector-syntax",
                FieldError::invalid(format!("{at}.key"), json!(requirement.key), problem),
            );
        }
        let values = requirement.values.as_deref().unwrap_or_default();
        match requirement.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    report.error(
                        "selector-syntax",
                        FieldError::required(
                            format!("{at}.values"),
                            "must be specified when `operator` is 'In' or 'NotIn'",
                        ),
                    );
                }
                for value in values {
                    for problem in label_value_problems(value) {
                        report.error(
                            "selector-syntax",
                            FieldError::invalid(format!("{at}.values"), json!(value), problem),
                        );
                    }
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    report.error(
                        "selector-syntax",
                        FieldError::forbidden(
                            format!("{at}.values"),
                            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                        ),
                    );
                }
            }
            other => report.error(
                "selector-syntax",
                FieldError::not_supported(format!("{at}.operator"), other, SELECTOR_OPERATORS),
            ),
        }
    }
    report.error_count() == before
}

/// Whether `labels` satisfy the whole selector (matchLabels and matchExpressions).
#[must_use]
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|r| {
        let values = r.values.as_deref().unwrap_or_default();
        let current = labels.get(&r.key);
        match r.operator.as_str() {
            "In" => current.is_some_and(|v| values.contains(v)),
            "NotIn" => current.is_none_or(|v| !values.contains(v)),
            "Exists" => current.is_some(),
            "DoesNotExist" => current.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

/// A parsed int-or-percent value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    /// An absolute number.
    Int(i64),
    /// A percentage.
    Percent(i64),
}

impl Amount {
    /// True for `0` and `0%`.
    #[must_use]
    pub fn is_zero(self) -> bool {
        matches!(self, Self::Int(0) | Self::Percent(0))
    }
}

/// Rule 8 and 9: a non-negative integer or `N%`; percentages of `maxUnavailable` ≤ 100.
pub fn int_or_percent(
    report: &mut Report,
    path: &str,
    value: Option<&IntOrString>,
    at_most_100_percent: bool,
) -> Option<Amount> {
    let value = value?;
    let amount = match value {
        IntOrString::Int(n) => Amount::Int(i64::from(*n)),
        IntOrString::String(text) => {
            let parsed = text
                .strip_suffix('%')
                .filter(|digits| !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()))
                .and_then(|digits| digits.parse::<i64>().ok());
            match parsed {
                Some(percent) => Amount::Percent(percent),
                None => {
                    report.error(
                        "int-or-percent",
                        FieldError::invalid(
                            path,
                            json!(text),
                            "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%')",
                        ),
                    );
                    return None;
                }
            }
        }
    };
    if let Amount::Int(n) = amount
        && n < 0
    {
        report.error(
            "int-or-percent",
            FieldError::invalid(path, json!(n), "must be greater than or equal to 0"),
        );
        return None;
    }
    if let Amount::Percent(p) = amount
        && at_most_100_percent
        && p > 100
    {
        report.error(
            "max-unavailable-percent",
            FieldError::invalid(
                path,
                json!(format!("{p}%")),
                "must not be greater than 100%",
            ),
        );
        return None;
    }
    Some(amount)
}

/// A non-negative integer field.
pub fn non_negative(report: &mut Report, rule: &'static str, path: &str, value: Option<i32>) {
    if let Some(value) = value.filter(|v| *v < 0) {
        report.error(
            rule,
            FieldError::invalid(path, json!(value), "must be greater than or equal to 0"),
        );
    }
}

/// Rule 13: the class reference names a `MachineClass` by a valid name.
pub fn class_reference(report: &mut Report, path: &str, class: Option<&ClassSpec>) {
    let Some(class) = class else {
        report.error("class-reference", FieldError::required(path, ""));
        return;
    };
    match class.kind.as_deref() {
        None | Some("") => report.error(
            "class-reference",
            FieldError::required(format!("{path}.kind"), ""),
        ),
        Some("MachineClass") => {}
        Some(other) => report.error(
            "class-reference",
            FieldError::not_supported(format!("{path}.kind"), other, &["MachineClass"]),
        ),
    }
    match class.name.as_deref() {
        None | Some("") => report.error(
            "class-reference",
            FieldError::required(format!("{path}.name"), ""),
        ),
        Some(name) => {
            for problem in dns1123_subdomain_problems(name) {
                report.error(
                    "class-reference",
                    FieldError::invalid(format!("{path}.name"), json!(name), problem),
                );
            }
        }
    }
}

const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// Rule 15 (node template part): metadata syntax, taints with known effects, no duplicates.
pub fn node_template(report: &mut Report, path: &str, template: Option<&NodeTemplateSpec>) {
    let Some(template) = template else {
        return;
    };
    embedded_metadata(
        report,
        "node-template",
        &format!("{path}.metadata"),
        template.metadata.as_ref(),
    );
    let taints: &[Taint] = template
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.as_deref())
        .unwrap_or_default();
    let mut seen = BTreeSet::new();
    for (i, taint) in taints.iter().enumerate() {
        let at = format!("{path}.spec.taints[{i}]");
        if taint.key.is_empty() {
            report.error(
                "node-template",
                FieldError::required(format!("{at}.key"), ""),
            );
        } else {
            for problem in qualified_name_problems(&taint.key) {
                report.error(
                    "node-template",
                    FieldError::invalid(format!("{at}.key"), json!(taint.key), problem),
                );
            }
        }
        if let Some(value) = taint.value.as_deref() {
            for problem in label_value_problems(value) {
                report.error(
                    "node-template",
                    FieldError::invalid(format!("{at}.value"), json!(value), problem),
                );
            }
        }
        if !TAINT_EFFECTS.contains(&taint.effect.as_str()) {
            report.error(
                "node-template",
                FieldError::not_supported(format!("{at}.effect"), &taint.effect, TAINT_EFFECTS),
            );
        }
        if !seen.insert((taint.key.clone(), taint.effect.clone())) {
            report.error(
                "node-template",
                FieldError::duplicate(at, json!({ "key": taint.key, "effect": taint.effect })),
            );
        }
    }
    let reserved = [
        mcm_api::keys::label::CANDIDATE_FOR_UPDATE,
        mcm_api::keys::label::SELECTED_FOR_UPDATE,
        mcm_api::keys::label::UPDATE_RESULT,
    ];
    if let Some(labels) = template.metadata.as_ref().and_then(|m| m.labels.as_ref()) {
        for key in reserved.iter().filter(|k| labels.contains_key(**k)) {
            report.warn(format!(
                "{path}.metadata.labels: {key} is set by the controller; in a template every new node looks selected"
            ));
        }
    }
}

/// Rule 15 (configuration part): timeouts positive, eviction retries non-negative.
/// `path` is the machine spec; the fields are inlined there (hub and v1alpha1 paths).
pub fn configuration(report: &mut Report, path: &str, configuration: &MachineConfiguration) {
    let timeouts = [
        ("drainTimeout", configuration.drain_timeout),
        ("healthTimeout", configuration.health_timeout),
        ("creationTimeout", configuration.creation_timeout),
        (
            "inPlaceUpdateTimeout",
            configuration.in_place_update_timeout,
        ),
        (
            "machinePreserveTimeout",
            configuration.machine_preserve_timeout,
        ),
    ];
    for (name, value) in timeouts {
        if let Some(value) = value.filter(|d| d.as_nanos() <= 0) {
            report.error(
                "positive-timeouts",
                FieldError::invalid(
                    format!("{path}.{name}"),
                    json!(value.to_string()),
                    "must be greater than 0",
                ),
            );
        }
    }
    non_negative(
        report,
        "positive-timeouts",
        &format!("{path}.maxEvictRetries"),
        configuration.max_evict_retries,
    );
}

/// Checks the control annotations that are parsed at runtime (MachineDeployment, MachineSet).
pub(super) fn control_annotations(
    report: &mut Report,
    annotations: Option<&BTreeMap<String, String>>,
) {
    use mcm_api::keys::annotation::{EFFECTIVE_CREATION_TIMEOUT, TRIGGER_DELETION_BY_MCM};
    let Some(annotations) = annotations else {
        return;
    };
    if let Some(value) = annotations.get(EFFECTIVE_CREATION_TIMEOUT)
        && value.parse::<mcm_api::duration::Duration>().is_err()
    {
        report.error(
            "control-annotations",
            FieldError::invalid(
                format!("metadata.annotations[{EFFECTIVE_CREATION_TIMEOUT}]"),
                json!(value),
                "must be a duration such as 20m or 1h30m",
            ),
        );
    }
    if let Some(value) = annotations.get(TRIGGER_DELETION_BY_MCM)
        && value.split(',').any(|entry| entry.trim().is_empty())
    {
        report.warn(format!(
            "metadata.annotations[{TRIGGER_DELETION_BY_MCM}] has empty entries; they are ignored"
        ));
    }
}
