//! Batches and the duration estimate.
//!
//! The deployment controller changes at most `maxSurge + maxUnavailable` machines at a time
//! (rolling: surge machines come up while unavailable ones go; in place: the selection budget of
//! `reconcileOldMachineSetsInPlace` is the same sum), so a roll of `n` machines takes
//! `ceil(n / (maxSurge + maxUnavailable))` batches. The fenceposts themselves come from
//! [`crate::machine_deployment::fencepost`].

use jiff::SignedDuration;

use super::types::{MeasuredDurations, Roll};

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

/// An estimate of a roll's duration, with its explanation; `None` without history.
#[must_use]
pub fn estimate(
    roll: &Roll,
    batches: usize,
    durations: &MeasuredDurations,
) -> Option<(SignedDuration, String)> {
    let batches_i32 = i32::try_from(batches).unwrap_or(i32::MAX);
    match roll {
        // A batch: new machines are created and join, then old ones are drained.
        Roll::Rolling { .. } | Roll::Recreate => {
            let one = durations
                .creation?
                .checked_add(durations.join?)?
                .checked_add(durations.drain?)?;
            Some((
                one.checked_mul(batches_i32)?,
                format!(
                    "{batches} batch(es) × (creation {} + join {} + drain {}), from {}",
                    human(durations.creation?),
                    human(durations.join?),
                    human(durations.drain?),
                    durations.source
                ),
            ))
        }
        // A batch: the node is drained, updated by the node agent and rejoins; the agent's own
        // time is not measured, so only the drain and the rejoin count.
        Roll::InPlace { .. } => {
            let one = durations.drain?.checked_add(durations.join?)?;
            Some((
                one.checked_mul(batches_i32)?,
                format!(
                    "{batches} batch(es) × (drain {} + join {}; the node agent's update time is not measured), from {}",
                    human(durations.drain?),
                    human(durations.join?),
                    durations.source
                ),
            ))
        }
    }
}

/// `1h2m3s`-style text of a duration (whole seconds).
#[must_use]
pub fn human(duration: SignedDuration) -> String {
    let total = duration.as_secs().max(0);
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}
