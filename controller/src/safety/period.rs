//! The period floor of the safety controllers' timers: a flag of `0s` (or less) must not become
//! a busy loop.

use std::time::Duration;

/// Shortest period used, whatever the flags say: a `0s` period must not become a busy loop.
pub const MIN_PERIOD: Duration = Duration::from_millis(100);

/// Converts a flag duration to a timer period (negative values are refused by flag validation;
/// they and zero become [`MIN_PERIOD`]).
#[must_use]
pub fn period(duration: mcm_api::duration::Duration) -> Duration {
    duration.to_std().unwrap_or_default().max(MIN_PERIOD)
}
