//! Scaling (upstream `deployment_sync.go`: `sync`, `scale`, `isScalingEvent`, `scaleMachineSet`):
//! a deployment whose replicas changed, or that is paused, has its MachineSets resized
//! proportionally within `replicas + maxSurge`, without a rollout.

use std::collections::BTreeMap;

use mcm_api::keys::annotation;
use mcm_api::v1alpha1::{MachineDeployment, MachineDeploymentStrategyType as Strategy, MachineSet};

use super::fencepost::replicas;
use super::revision;
use super::types::{ann, spec_replicas, status_of};
use super::work::Work;
use crate::vocabulary::Event;

/// `isScalingEvent` (docs/behaviour.md#scaling).
#[must_use]
pub fn is_scaling_event(md: &MachineDeployment, sets: &[MachineSet]) -> bool {
    if revision::find_new_machine_set(md, sets).is_none() {
        return false;
    }
    let active: Vec<&MachineSet> = sets.iter().filter(|s| spec_replicas(s) > 0).collect();
    if active.is_empty() {
        return replicas(md) > 0;
    }
    active.iter().any(|s| {
        ann(&s.metadata, annotation::DESIRED_REPLICAS)
            .and_then(|d| d.parse::<i32>().ok())
            .is_some_and(|d| d != replicas(md))
    })
}

/// Go's `math.Round` of `numerator / denominator` (half away from zero); `None` for a zero
/// denominator.
fn round_half_away(numerator: i64, denominator: i64) -> Option<i64> {
    if denominator == 0 {
        return None;
    }
    let (n, d) = if denominator < 0 {
        (-numerator, -denominator)
    } else {
        (numerator, denominator)
    };
    Some(if n >= 0 {
        (2 * n + d) / (2 * d)
    } else {
        -((-2 * n + d) / (2 * d))
    })
}

/// Proportional scale-in (docs/behaviour.md#scaling step 3, `toAdd < 0`): new sizes for `sets` (active ones), given
/// the deployment's `replicas`, `max_surge` and the fallback `status.replicas`.
///
/// A set whose divisor (its `max-replicas` annotation, else `status.replicas`) is 0 takes no
/// proportional share: the others shrink by theirs and the leftover step sizes it, which is
/// upstream's outcome when that set is the largest; upstream divides by zero there and, when the
/// set is not the largest, writes an out-of-range size (docs/upstream-conformance.md#deviations,
/// D7).
///
/// Deviations that keep the total exact (D7 too): a set never grows during a scale-in (a stale
/// `max-replicas` annotation could make upstream's fraction positive), and a leftover the largest
/// set cannot absorb is taken from the next ones, so the sizes always sum to the allowed total.
#[must_use]
pub fn proportional_scale_in(
    sets: &[(i32, Option<i32>)],
    md_replicas: i32,
    max_surge: i32,
    status_replicas: i32,
) -> Vec<i32> {
    let allowed = if md_replicas == 0 {
        0
    } else {
        md_replicas + max_surge
    };
    let total: i32 = sets.iter().map(|(r, _)| *r).sum();
    let to_add = allowed - total;
    let mut sizes: Vec<i32> = sets.iter().map(|(r, _)| *r).collect();
    if to_add >= 0 {
        return sizes;
    }
    let mut added = 0i32;
    for (i, (size, annotated_max)) in sets.iter().enumerate() {
        if added == to_add {
            break;
        }
        let fraction = if md_replicas == 0 {
            -size
        } else {
            let max = annotated_max.unwrap_or(status_replicas);
            round_half_away(i64::from(*size) * i64::from(allowed), i64::from(max)).map_or(
                0,
                |scaled| {
                    i32::try_from(scaled)
                        .unwrap_or(i32::MAX)
                        .saturating_sub(*size)
                },
            )
        };
        let proportion = fraction.max(to_add - added).min(0);
        sizes[i] += proportion;
        added += proportion;
    }
    let mut leftover = to_add - added;
    for size in &mut sizes {
        if leftover == 0 {
            break;
        }
        let take = leftover.max(-*size);
        *size += take;
        leftover -= take;
    }
    sizes
}

impl Work<'_> {
    /// `scaleMachineSet`: size plus desired/max annotations; returns whether the size changed.
    pub(super) fn scale(&mut self, i: usize, size: i32) -> bool {
        let desired = replicas(&self.md);
        let max = desired.saturating_add(self.max_surge);
        let ms = &mut self.sets[i];
        let annotations = ms.metadata.annotations.get_or_insert_with(BTreeMap::new);
        let mut changed = false;
        for (k, v) in [
            (annotation::DESIRED_REPLICAS, desired.to_string()),
            (annotation::MAX_REPLICAS, max.to_string()),
        ] {
            if annotations.get(k) != Some(&v) {
                annotations.insert(k.to_owned(), v);
                changed = true;
            }
        }
        let old = spec_replicas(ms);
        let size_changed = old != size;
        if size_changed || changed {
            ms.spec.replicas = Some(size);
            self.mark_dirty(i);
        }
        if size_changed {
            let direction = if size > old { "up" } else { "down" };
            let name = self.set_name(i);
            self.event(Event::normal(
                "ScalingMachineSet",
                format!("Scaled {direction} machine set {name} to {size}"),
            ));
        }
        size_changed
    }

    /// `scale` (docs/behaviour.md#scaling).
    pub(super) fn scale_deployment(&mut self) {
        let active: Vec<usize> = (0..self.sets.len())
            .filter(|&i| spec_replicas(&self.sets[i]) > 0)
            .collect();
        let want = replicas(&self.md);
        if active.len() <= 1 {
            let target = active.first().copied().or(self.new).or_else(|| {
                let mut olds = self.olds();
                olds.sort_by(|&a, &b| revision::creation_order(&self.sets[a], &self.sets[b]));
                olds.last().copied()
            });
            if let Some(i) = target {
                let size = self.grow_within_surge(i, want);
                self.scale(i, size);
            }
            return;
        }
        if let Some(n) = self.new {
            let ms = &self.sets[n];
            let saturated = spec_replicas(ms) == want
                && ann(&ms.metadata, annotation::DESIRED_REPLICAS)
                    .and_then(|d| d.parse::<i32>().ok())
                    == Some(want)
                && status_of(ms).available_replicas.unwrap_or(0) == want;
            if saturated {
                for i in active.into_iter().filter(|&i| i != n) {
                    self.scale(i, 0);
                }
                return;
            }
        }
        if self
            .md
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.type_.as_ref())
            != Some(&Strategy::RollingUpdate)
        {
            return;
        }
        let allowed = if want == 0 { 0 } else { want + self.max_surge };
        let total: i32 = active.iter().map(|&i| spec_replicas(&self.sets[i])).sum();
        let to_add = allowed - total;
        let mut sizes: BTreeMap<usize, i32> = active
            .iter()
            .map(|&i| (i, spec_replicas(&self.sets[i])))
            .collect();
        if to_add > 0 {
            // Machines of inactive sets that are still terminating occupy surge room too.
            let room = (allowed - self.existing_total()).max(0);
            if let Some(n) = self.new {
                *sizes.entry(n).or_insert(0) += to_add.min(room);
            }
        } else if to_add < 0 {
            // Largest first, ties older first.
            let mut order = active.clone();
            order.sort_by(|&a, &b| {
                spec_replicas(&self.sets[b])
                    .cmp(&spec_replicas(&self.sets[a]))
                    .then_with(|| revision::creation_order(&self.sets[a], &self.sets[b]))
            });
            let inputs: Vec<(i32, Option<i32>)> = order
                .iter()
                .map(|&i| {
                    (
                        spec_replicas(&self.sets[i]),
                        ann(&self.sets[i].metadata, annotation::MAX_REPLICAS)
                            .and_then(|v| v.parse().ok()),
                    )
                })
                .collect();
            let status_replicas = self
                .md
                .status
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(0);
            let new_sizes = proportional_scale_in(&inputs, want, self.max_surge, status_replicas);
            for (i, size) in order.into_iter().zip(new_sizes) {
                sizes.insert(i, size);
            }
        }
        for (i, size) in sizes {
            self.scale(i, size);
        }
    }

    /// The size set `i` may grow to on its way to `want`: for rolling strategies no further than
    /// the room left under `replicas + maxSurge` by the machines that exist (terminating machines
    /// of sets already scaled to 0 included); later passes grow it as that room frees. Recreate
    /// and shrinking are not capped.
    pub(super) fn grow_within_surge(&self, i: usize, want: i32) -> i32 {
        let current = spec_replicas(&self.sets[i]);
        let recreate = self
            .md
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.type_.as_ref())
            == Some(&Strategy::Recreate);
        if recreate || want <= current {
            return want;
        }
        let room = (replicas(&self.md) + self.max_surge - self.existing_total()).max(0);
        current + (want - current).min(room)
    }

    /// `sync` (docs/behaviour.md#scaling): scale, cleanup when paused, status.
    pub(super) fn sync(&mut self) {
        self.sync_revision(false);
        self.scale_deployment();
        if self.md.spec.paused.unwrap_or(false) && self.md.spec.rollback_to.is_none() {
            self.cleanup();
        }
        self.sync_status();
    }
}

#[cfg(test)]
mod tests;
