//! Per-machine exponential backoff with jitter for failing CreateMachine, InitializeMachine and
//! DeleteMachine calls.
//!
//! Upstream retries a failing call after a constant ShortRetry (5s) or MediumRetry (3m), so a
//! broken provider is called every 5 seconds per machine for as long as it fails. Here the n-th
//! consecutive failure of one machine waits `initial × factor^(n−1)`, capped at `max`, minus a
//! deterministic jitter of up to [`JITTER`] of that delay (derived from the machine UID and the
//! attempt, so tests are reproducible and a fleet that failed together does not retry together).
//!
//! The attempt count and the next retry time are stored in the Machine's `lastOperation.description`
//! as a suffix `" (attempt N, next retry at <RFC 3339>)"` after upstream's unchanged text, so they
//! survive restarts and `kubectl get machine -o yaml` shows them; upstream matches these texts by
//! substring, which the suffix keeps working. The write-before-CreateMachine intent carries
//! `" (attempt N)"` so the count is not lost between two attempts.

use jiff::Timestamp;
use mcm_api::duration::Duration;
use mcm_api::keys::retry;
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachineState};

use crate::vocabulary::add;

/// Largest share of a delay removed by the jitter.
pub const JITTER: f64 = 0.2;

/// Marker that starts the suffix in a description.
const MARK_START: &str = " (attempt ";

// The flags' type lives with the other effective settings, which backoff reads (one-way).
pub use crate::vocabulary::BackoffSettings;

/// The retry period upstream would use for an error, which sets the backoff's floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryClass {
    /// Upstream ShortRetry (transient codes, InitializeMachine failures): backoff from `initial`.
    Short,
    /// Upstream MediumRetry (other CreateMachine codes): backoff from MediumRetry, never sooner.
    Medium,
}

/// The suffix parsed from a description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryMark {
    /// Consecutive failed attempts so far.
    pub attempt: u32,
    /// When the next call is due (absent in the intent written before CreateMachine).
    pub next_retry_at: Option<Timestamp>,
}

/// Upstream's text without the suffix.
#[must_use]
pub fn strip_mark(description: &str) -> &str {
    match description.rfind(MARK_START) {
        Some(index) if parse_mark(description).is_some() => &description[..index],
        _ => description,
    }
}

/// The suffix of a description, if it has one.
#[must_use]
pub fn parse_mark(description: &str) -> Option<RetryMark> {
    let index = description.rfind(MARK_START)?;
    let rest = description[index + MARK_START.len()..].strip_suffix(')')?;
    match rest.split_once(", next retry at ") {
        Some((attempt, at)) => Some(RetryMark {
            attempt: attempt.parse().ok()?,
            next_retry_at: Some(at.parse().ok()?),
        }),
        None => Some(RetryMark {
            attempt: rest.parse().ok()?,
            next_retry_at: None,
        }),
    }
}

/// `description` with the suffix for `mark` (any previous suffix replaced).
#[must_use]
pub fn with_mark(description: &str, mark: RetryMark) -> String {
    let text = strip_mark(description);
    match mark.next_retry_at {
        // Milliseconds, rounded down: short enough to read, and a retry requeued for the exact
        // delay is never held back by a stored time that lies after it.
        Some(at) => format!(
            "{text}{MARK_START}{}, next retry at {})",
            mark.attempt,
            Timestamp::from_millisecond(at.as_millisecond()).unwrap_or(at)
        ),
        None => format!("{text}{MARK_START}{})", mark.attempt),
    }
}

/// The machine's suffix when its last operation is of type `operation` (a success of that
/// operation, or any other operation, leaves no suffix and so resets the count).
#[must_use]
pub fn mark_of(machine: &Machine, operation: &MachineOperationType) -> Option<RetryMark> {
    let last = machine.last_operation()?;
    if last.type_.as_ref() != Some(operation) {
        return None;
    }
    parse_mark(last.description.as_deref()?)
}

/// How long the machine must still wait before the operation whose stored suffix is `mark`
/// ([`mark_of`], read once with the machine) may call the driver again: `Some` while the last
/// failure's next retry time lies in the future. Reconciles triggered early (a watch event, a
/// resync, a restart) therefore never call a failing provider sooner.
#[must_use]
pub fn wait_before_retry(
    machine: &Machine,
    mark: Option<RetryMark>,
    now: Timestamp,
) -> Option<Duration> {
    let last = machine.last_operation()?;
    if last.state != Some(MachineState::Failed) {
        return None;
    }
    let at = mark?.next_retry_at?;
    (at > now).then(|| crate::vocabulary::elapsed(now, at))
}

/// FNV-1a with a final mix, stable across Rust versions and platforms (std's hasher is not guaranteed to be).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in *part {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    // FNV's high bits barely depend on the last byte (the attempt); a final avalanche step
    // (MurmurHash3's fmix64) spreads every input bit over the whole word.
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// A fraction in `[0, 1)` drawn from the machine's UID and the attempt.
#[must_use]
pub fn jitter_fraction(seed: &str, attempt: u32) -> f64 {
    let hash = fnv1a(&[seed.as_bytes(), &attempt.to_le_bytes()]);
    // The top 53 bits fit an f64 mantissa exactly.
    #[allow(clippy::cast_precision_loss)]
    let fraction = (hash >> 11) as f64 / (1u64 << 53) as f64;
    fraction
}

/// The delay after the `attempt`-th consecutive failure (attempt ≥ 1).
#[must_use]
pub fn backoff_delay(
    settings: &BackoffSettings,
    class: RetryClass,
    attempt: u32,
    seed: &str,
) -> Duration {
    let (base, floor) = match class {
        RetryClass::Short => (settings.initial, Duration::ZERO),
        RetryClass::Medium => (
            std::cmp::max(settings.initial, retry::MEDIUM),
            retry::MEDIUM,
        ),
    };
    let cap = std::cmp::max(settings.max, base);
    let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
    #[allow(clippy::cast_precision_loss)]
    let base_nanos = base.as_nanos() as f64;
    #[allow(clippy::cast_precision_loss)]
    let cap_nanos = cap.as_nanos() as f64;
    let raw = (base_nanos * settings.factor.max(1.0).powi(exponent)).min(cap_nanos);
    let jittered = raw * (1.0 - JITTER * jitter_fraction(seed, attempt));
    #[allow(clippy::cast_possible_truncation)]
    let nanos = jittered as i64;
    std::cmp::max(Duration::from_nanos(nanos), floor)
}

/// The backoff decision for one failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Suffix to write (attempt and next retry time).
    pub mark: RetryMark,
    /// Requeue period.
    pub delay: Duration,
}

/// The backoff after a failure at `now`: one more attempt than `previous`, the suffix the machine
/// stores for the failing operation ([`mark_of`], read once with the machine; `None`: none yet).
#[must_use]
pub fn next_backoff(
    machine: &Machine,
    previous: Option<RetryMark>,
    class: RetryClass,
    settings: &BackoffSettings,
    now: Timestamp,
) -> Backoff {
    let attempt = previous.map_or(0, |mark| mark.attempt).saturating_add(1);
    let seed = machine.metadata.uid.as_deref().unwrap_or_else(|| {
        // Without a UID (tests, dry runs) the name still spreads machines apart.
        machine.metadata.name.as_deref().unwrap_or("")
    });
    let delay = backoff_delay(settings, class, attempt, seed);
    Backoff {
        mark: RetryMark {
            attempt,
            next_retry_at: Some(add(now, delay)),
        },
        delay,
    }
}

#[cfg(test)]
mod tests;
