//! When a controller comes back to an object: the one "come back later" type of every plan and of
//! the controller's work queue (upstream's ShortRetry, MediumRetry, LongRetry, ConflictRetry and
//! computed periods).

use mcm_api::duration::Duration;
use mcm_api::keys::retry;

/// When the next reconcile of an object is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Right away (upstream returns a zero period, e.g. after skipping the volume-attachment
    /// stage).
    Immediate,
    /// After an API conflict: 200ms.
    Conflict,
    /// After a successful write or a transient error: 5s.
    Short,
    /// 3m.
    Medium,
    /// Steady state: 10m.
    Long,
    /// A computed period (a deadline, `--resource-exhausted-retry`, the 1-minute health poll).
    After(Duration),
}

impl Retry {
    /// The period as a duration.
    #[must_use]
    pub fn period(self) -> Duration {
        match self {
            Retry::Immediate => Duration::ZERO,
            Retry::Conflict => retry::CONFLICT,
            Retry::Short => retry::SHORT,
            Retry::Medium => retry::MEDIUM,
            Retry::Long => retry::LONG,
            Retry::After(period) => period,
        }
    }

    /// The earlier of two retries (a pass that produced several wishes honours the soonest).
    #[must_use]
    pub fn min(self, other: Retry) -> Retry {
        if other.period() < self.period() {
            other
        } else {
            self
        }
    }

    /// This retry, or `floor` when it is due sooner (a shell that must not spin on tiny periods).
    #[must_use]
    pub fn at_least(self, floor: Duration) -> Retry {
        if self.period() < floor {
            Retry::After(floor)
        } else {
            self
        }
    }

    /// The period as a timer delay: a negative period (a deadline already past) is due now.
    #[must_use]
    pub fn delay(self) -> std::time::Duration {
        self.period().to_std().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_periods_match_upstream() {
        assert_eq!(Retry::Conflict.period(), Duration::from_millis(200));
        assert_eq!(Retry::Short.period(), Duration::from_secs(5));
        assert_eq!(Retry::Medium.period(), Duration::from_mins(3));
        assert_eq!(Retry::Long.period(), Duration::from_mins(10));
        assert_eq!(Retry::Long.min(Retry::Short), Retry::Short);
    }

    #[test]
    fn timer_delays_are_the_periods_and_never_negative() {
        assert_eq!(Retry::Immediate.delay(), std::time::Duration::ZERO);
        assert_eq!(
            Retry::Conflict.delay(),
            std::time::Duration::from_millis(200)
        );
        assert_eq!(Retry::Long.delay(), std::time::Duration::from_secs(600));
        assert_eq!(
            Retry::After(Duration::from_nanos(1_500)).delay(),
            std::time::Duration::from_nanos(1_500)
        );
        assert_eq!(
            Retry::After(Duration::from_secs(-3)).delay(),
            std::time::Duration::ZERO
        );
    }

    #[test]
    fn a_floor_raises_only_sooner_retries() {
        let floor = Duration::from_millis(100);
        assert_eq!(
            Retry::After(Duration::from_millis(1)).at_least(floor),
            Retry::After(floor)
        );
        assert_eq!(Retry::Immediate.at_least(floor), Retry::After(floor));
        assert_eq!(
            Retry::After(Duration::from_secs(-1)).at_least(floor),
            Retry::After(floor)
        );
        assert_eq!(Retry::Conflict.at_least(floor), Retry::Conflict);
        assert_eq!(Retry::Long.at_least(floor), Retry::Long);
        assert_eq!(
            Retry::After(floor).at_least(floor),
            Retry::After(floor),
            "a period equal to the floor stays"
        );
    }

    #[test]
    fn the_sooner_of_two_computed_periods_wins() {
        let short = Retry::After(Duration::from_secs(290));
        let long = Retry::After(Duration::from_mins(10));
        assert_eq!(long.min(short), short);
        assert_eq!(short.min(long), short);
        assert_eq!(Retry::Long.min(long), Retry::Long, "a tie keeps the first");
    }
}
