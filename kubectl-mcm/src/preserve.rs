//! Pure plans of `preserve` and `unpreserve`: which merge patches to send to the node or machine
//! (the upstream `node.machine.sapcloud.io/preserve` annotation) and to the machine's
//! `machinePreserveTimeout` for `--duration`.

use mcm_api::duration::Duration;
use mcm_api::keys::{annotation, preserve};
use serde_json::{Value, json};

/// The preserve annotation patch: `Some(value)` sets it, `None` removes it.
#[must_use]
pub fn annotation_patch(value: Option<&str>) -> Value {
    json!({"metadata": {"annotations": {annotation::PRESERVE: value}}})
}

/// The machine patch for `--duration`: the machine's own preserve timeout, which MCM uses
/// instead of `--machine-preserve-timeout` when it starts the preservation.
#[must_use]
pub fn duration_patch(duration: Duration) -> Value {
    json!({"spec": {"machinePreserveTimeout": duration.to_string()}})
}

/// The annotation value for `preserve` (`--when-failed` waits for the machine to fail).
#[must_use]
pub fn preserve_value(when_failed: bool) -> &'static str {
    if when_failed {
        preserve::WHEN_FAILED
    } else {
        preserve::NOW
    }
}

/// Parses `--duration` (Go duration text such as `2h`, `90m`, `1h30m`), which must be positive.
///
/// # Errors
/// A message naming the bad value.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration: Duration = text
        .parse()
        .map_err(|e| format!("invalid --duration {text:?}: {e}"))?;
    match duration.to_std() {
        Some(d) if !d.is_zero() => Ok(duration),
        _ => Err(format!("invalid --duration {text:?}: must be positive")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn patches_use_the_upstream_annotation() {
        assert_eq!(
            annotation_patch(Some(preserve_value(false))),
            json!({"metadata": {"annotations": {"node.machine.sapcloud.io/preserve": "now"}}})
        );
        assert_eq!(
            annotation_patch(Some(preserve_value(true)))["metadata"]["annotations"]
                [annotation::PRESERVE],
            "when-failed"
        );
        assert_eq!(
            annotation_patch(None)["metadata"]["annotations"][annotation::PRESERVE],
            Value::Null
        );
    }

    #[test]
    fn duration_round_trips_as_go_text() {
        let d = parse_duration("2h").unwrap();
        let patch = duration_patch(d);
        let text = patch["spec"]["machinePreserveTimeout"].as_str().unwrap();
        assert_eq!(text.parse::<Duration>().unwrap(), d);
        assert_eq!(d.to_std().unwrap().as_secs(), 7200);
    }

    #[test]
    fn bad_durations_are_refused_with_the_value() {
        for bad in ["", "two hours", "0s", "-1h"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
    }
}
