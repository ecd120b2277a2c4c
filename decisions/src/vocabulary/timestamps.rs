//! Time arithmetic of the plans: timestamps plus Go-style durations, saturating instead of
//! failing at the ends of representable time.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::duration::Duration;

/// Converts a timestamp to the Kubernetes wire type.
#[must_use]
pub fn time(at: Timestamp) -> Time {
    Time(at)
}

/// `at + duration`, saturating at the end of representable time.
#[must_use]
pub fn add(at: Timestamp, duration: Duration) -> Timestamp {
    at.checked_add(duration.to_signed_duration())
        .unwrap_or(Timestamp::MAX)
}

/// `later − earlier` as a Go-style duration (for texts and comparisons).
#[must_use]
pub fn elapsed(earlier: Timestamp, later: Timestamp) -> Duration {
    go_duration(later.duration_since(earlier))
}

/// A `jiff` duration as a Go-style one, saturating at Go's range (±292 years).
#[must_use]
pub fn go_duration(duration: SignedDuration) -> Duration {
    let nanos = duration.as_nanos();
    Duration::from_nanos(i64::try_from(nanos).unwrap_or(if nanos < 0 {
        i64::MIN
    } else {
        i64::MAX
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_keep_nanoseconds_and_saturate() {
        assert_eq!(
            go_duration(SignedDuration::new(290, 5)),
            Duration::from_nanos(290_000_000_005)
        );
        assert_eq!(
            go_duration(SignedDuration::from_secs(-1)),
            Duration::from_secs(-1)
        );
        assert_eq!(
            go_duration(SignedDuration::MAX),
            Duration::from_nanos(i64::MAX)
        );
        assert_eq!(
            go_duration(SignedDuration::MIN),
            Duration::from_nanos(i64::MIN)
        );
    }

    #[test]
    fn elapsed_and_add_saturate() {
        let start = Timestamp::from_second(1_800_000_000).unwrap();
        let later = Timestamp::from_second(1_800_000_090).unwrap();
        assert_eq!(elapsed(start, later), Duration::from_secs(90));
        assert_eq!(elapsed(later, start), Duration::from_secs(-90));
        assert_eq!(
            elapsed(Timestamp::MIN, Timestamp::MAX),
            Duration::from_nanos(i64::MAX)
        );
        assert_eq!(add(start, Duration::from_secs(90)), later);
        assert_eq!(add(Timestamp::MAX, Duration::from_secs(1)), Timestamp::MAX);
    }
}
