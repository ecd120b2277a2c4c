//! Text the way Go reads and prints it: `strconv.ParseBool`, `time.Time.String()` and `%+v` of
//! node conditions, which upstream's status descriptions embed.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Go's `strconv.ParseBool`: `None` for text it rejects.
#[must_use]
pub fn parse_go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A time as Go's `time.Time.String()` prints it (`fmt`'s `%v` of a `metav1.Time`), which
/// upstream's texts embed: `2023-11-15 00:13:20 +0000 UTC`, with the nanoseconds after the seconds
/// only when they are not zero (`00:13:20.5 +0000 UTC`, trailing zeros dropped).
///
/// Upstream prints the time in the process's local zone; the controllers run in containers without
/// a zone database or `TZ`, where local time is UTC, so this prints UTC. Upstream's times come from
/// the API server (whole seconds), so the fraction rarely shows.
#[must_use]
pub fn go_time_string(at: Timestamp) -> String {
    let civil = at.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    let year = i32::from(civil.year());
    let year = if year < 0 {
        format!("-{:04}", year.unsigned_abs())
    } else {
        format!("{year:04}")
    };
    let nanos = civil.subsec_nanosecond();
    let fraction = if nanos == 0 {
        String::new()
    } else {
        let digits = format!("{nanos:09}");
        format!(".{}", digits.trim_end_matches('0'))
    };
    format!(
        "{year}-{:02}-{:02} {:02}:{:02}:{:02}{fraction} +0000 UTC",
        civil.month(),
        civil.day(),
        civil.hour(),
        civil.minute(),
        civil.second()
    )
}

/// Go's `time.Time{}.String()`: what `%v` prints for an unset `metav1.Time`.
const GO_ZERO_TIME: &str = "0001-01-01 00:00:00 +0000 UTC";

/// Renders node conditions as upstream's `%+v` of `[]v1.NodeCondition` does, field by field in
/// the Go struct's order, times as [`go_time_string`]:
/// `[{Type:Ready Status:False LastHeartbeatTime:2023-11-15 00:13:20 +0000 UTC LastTransitionTime:…
/// Reason:KubeletNotReady Message:…}]`.
#[must_use]
pub fn render_conditions(conditions: &[NodeCondition]) -> String {
    let time_text = |time: Option<&Time>| {
        time.map_or_else(|| GO_ZERO_TIME.to_owned(), |time| go_time_string(time.0))
    };
    let parts: Vec<String> = conditions
        .iter()
        .map(|condition| {
            format!(
                "{{Type:{} Status:{} LastHeartbeatTime:{} LastTransitionTime:{} Reason:{} Message:{}}}",
                condition.type_,
                condition.status,
                time_text(condition.last_heartbeat_time.as_ref()),
                time_text(condition.last_transition_time.as_ref()),
                condition.reason.as_deref().unwrap_or(""),
                condition.message.as_deref().unwrap_or("")
            )
        })
        .collect();
    format!("[{}]", parts.join(" "))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Expected values are Go's own output (`time.Unix(s, ns).UTC().String()`, `fmt.Sprintf("%+v",
    /// []v1.NodeCondition{...})`), as upstream's tests compare them.
    #[test]
    fn times_print_like_go_time_string() {
        let time = |seconds: i64, nanos: i32| Timestamp::new(seconds, nanos).unwrap();
        assert_eq!(
            go_time_string(time(1_700_007_200, 0)),
            "2023-11-15 00:13:20 +0000 UTC"
        );
        assert_eq!(
            go_time_string(time(1_700_007_200, 500_000_000)),
            "2023-11-15 00:13:20.5 +0000 UTC"
        );
        assert_eq!(
            go_time_string(time(1_700_007_200, 120)),
            "2023-11-15 00:13:20.00000012 +0000 UTC"
        );
        assert_eq!(go_time_string(time(0, 0)), "1970-01-01 00:00:00 +0000 UTC");
        assert_eq!(go_time_string(time(-62_135_596_800, 0)), GO_ZERO_TIME);
        assert_eq!(
            go_time_string(time(-62_198_755_200, 0)),
            "-0001-01-01 00:00:00 +0000 UTC",
            "Go pads negative years to four digits after the sign"
        );
    }

    #[test]
    fn conditions_render_like_go_plus_v() {
        assert_eq!(render_conditions(&[]), "[]");
        let ready = NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            last_heartbeat_time: Some(Time(Timestamp::new(1_700_007_200, 0).unwrap())),
            last_transition_time: Some(Time(Timestamp::new(1_700_000_000, 0).unwrap())),
            reason: Some("KubeletNotReady".into()),
            message: Some("kubelet stopped posting node status.".into()),
        };
        let disk = NodeCondition {
            type_: "DiskPressure".into(),
            status: "Unknown".into(),
            ..NodeCondition::default()
        };
        assert_eq!(
            render_conditions(&[ready, disk]),
            "[{Type:Ready Status:False LastHeartbeatTime:2023-11-15 00:13:20 +0000 UTC \
             LastTransitionTime:2023-11-14 22:13:20 +0000 UTC Reason:KubeletNotReady \
             Message:kubelet stopped posting node status.} {Type:DiskPressure Status:Unknown \
             LastHeartbeatTime:0001-01-01 00:00:00 +0000 UTC LastTransitionTime:0001-01-01 \
             00:00:00 +0000 UTC Reason: Message:}]"
        );
    }

    #[test]
    fn go_parse_bool() {
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(text), Some(true), "{text}");
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(text), Some(false), "{text}");
        }
        for text in ["yes", "", "tRUE", " true"] {
            assert_eq!(parse_go_bool(text), None, "{text}");
        }
    }
}
