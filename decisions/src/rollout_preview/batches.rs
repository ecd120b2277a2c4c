//! Batches and the duration estimate.
//!
//! The deployment controller changes at most `maxSurge + maxUnavailable` machines at a time
//! (rolling: surge machines come up while unavailable ones go; in place: the selection budget of
//! `reconcileOldMachineSetsInPlace` is the same sum), so a roll of `n` machines takes
//! `ceil(n / (maxSurge + maxUnavailable))` batches. The fenceposts themselves come from
//! [`crate::machine_deployment::fencepost`].

use jiff::SignedDuration;

use super::types::{Estimate, MeasuredDurations, Roll};

/// Machines changed per batch (at least 1: the fenceposts never resolve to 0 and 0).
#[must_use]
pub fn per_batch(roll: &Roll, machines: usize) -> usize {
    let width = match roll {
        Roll::Rolling {
            max_surge,
            max_unavailable,
        }
        | Roll::InPlace {
            max_surge,
            max_unavailable,
            ..
        } => usize::try_from(i64::from(*max_surge) + i64::from(*max_unavailable)).unwrap_or(1),
        Roll::Recreate => machines,
    };
    width.max(1)
}

/// Number of batches for `machines` machines, `per_batch` at a time.
#[must_use]
pub fn batch_count(machines: usize, per_batch: usize) -> usize {
    machines.div_ceil(per_batch.max(1))
}

/// An estimate of a roll's duration, with its explanation; `None` without history. A batch of a
/// rolling or recreating roll creates machines, waits for them to join, then drains old ones; a
/// batch in place drains, lets the node agent update (not measured) and waits for the rejoin.
#[must_use]
pub fn estimate(roll: &Roll, batches: usize, durations: &MeasuredDurations) -> Option<Estimate> {
    let batches_i32 = i32::try_from(batches).unwrap_or(i32::MAX);
    let in_place = matches!(roll, Roll::InPlace { .. });
    let one_batch = |creation: SignedDuration, join: SignedDuration, drain: SignedDuration| {
        if in_place {
            drain.checked_add(join)
        } else {
            creation.checked_add(join)?.checked_add(drain)
        }
    };
    let (creation, join, drain) = (durations.creation?, durations.join?, durations.drain?);
    let typical = one_batch(creation, join, drain)?.checked_mul(batches_i32)?;
    let slow = durations
        .slow
        .and_then(|s| one_batch(s.creation, s.join, s.drain)?.checked_mul(batches_i32))
        .filter(|slow| *slow > typical);
    let steps = |c: SignedDuration, j: SignedDuration, d: SignedDuration| {
        if in_place {
            format!("drain {} + join {}", human(d), human(j))
        } else {
            format!(
                "creation {} + join {} + drain {}",
                human(c),
                human(j),
                human(d)
            )
        }
    };
    let agent = if in_place {
        "; the node agent's update time is not measured"
    } else {
        ""
    };
    let why = match (slow, durations.slow) {
        (Some(_), Some(s)) => format!(
            "{batches} batch(es) × ({}{agent}) at the median, × ({}) at the 90th percentile, from {}",
            steps(creation, join, drain),
            steps(s.creation, s.join, s.drain),
            durations.source
        ),
        _ => format!(
            "{batches} batch(es) × ({}{agent}), from {}",
            steps(creation, join, drain),
            durations.source
        ),
    };
    Some(Estimate { typical, slow, why })
}

/// `1h2m3s`-style text of a duration: whole seconds, but tenths below 10 s, so that the steps of
/// a short estimate add up to the total it prints (three steps of 0.4 s, 1.3 s and 0.3 s are not
/// "0s + 1s + 0s" of a 2 s total).
#[must_use]
pub fn human(duration: SignedDuration) -> String {
    let millis = duration.as_millis().max(0);
    if millis < 10_000 {
        let tenths = (millis + 50) / 100;
        return format!("{}.{}s", tenths / 10, tenths % 10);
    }
    let total = duration.as_secs().max(0);
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}
