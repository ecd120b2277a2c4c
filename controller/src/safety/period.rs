//! The period floor of the safety controllers' timers: a flag of `0s` (or less) must not become
//! a busy loop.

use mcm_api::duration::Duration;

/// Shortest period used, whatever the flags say: a `0s` period must not become a busy loop.
pub const MIN_PERIOD: Duration = Duration::from_millis(100);

/// A flag duration as a loop period (negative values are refused by flag validation; they and
/// zero become [`MIN_PERIOD`]).
#[must_use]
pub fn period(duration: Duration) -> Duration {
    duration.max(MIN_PERIOD)
}
