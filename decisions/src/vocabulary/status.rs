//! Writes of `machine.status` and the "similar status" rule that suppresses redundant ones (docs/behaviour.md#machine-reconcile).

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::v1alpha1::{
    CurrentStatus, LastOperation, Machine, MachineOperationType, MachinePhase, MachineState,
    MachineStatus,
};

use super::timestamps::time;

/// How long after a status write the "similar status" suppression stops applying (docs/behaviour.md#machine-reconcile).
pub const SIMILARITY_FRESHNESS: SignedDuration = SignedDuration::from_mins(30);

/// Descriptions are treated as equal above this Levenshtein similarity ratio (docs/behaviour.md#machine-reconcile).
pub const SIMILARITY_RATIO: f64 = 0.75;

/// A write of `machine.status` (through the status subresource).
///
/// `last_operation` and `current_status` replace the old values; `None` in the other fields means
/// "keep what is there".
#[derive(Clone, Debug, PartialEq)]
pub struct StatusWrite {
    /// New `status.lastOperation`.
    pub last_operation: LastOperation,
    /// New `status.currentStatus`.
    pub current_status: CurrentStatus,
    /// New `status.lastKnownState` (`Some("")` clears it).
    pub last_known_state: Option<String>,
    /// New `status.addresses` (only written without a target cluster).
    pub addresses: Option<Vec<NodeAddress>>,
    /// New `status.conditions` (copied from the Node by the health check).
    pub conditions: Option<Vec<NodeCondition>>,
    /// Skip the write when the result is "similar" to the current status (docs/behaviour.md#machine-reconcile); upstream's
    /// `machineStatusUpdate`. Termination and health writes always go through.
    pub skip_if_similar: bool,
}

impl StatusWrite {
    /// A write of lastOperation and currentStatus only.
    #[must_use]
    pub fn new(last_operation: LastOperation, current_status: CurrentStatus) -> Self {
        Self {
            last_operation,
            current_status,
            last_known_state: None,
            addresses: None,
            conditions: None,
            skip_if_similar: false,
        }
    }

    /// Same, with the similarity check of `machineStatusUpdate`.
    #[must_use]
    pub fn similar_checked(last_operation: LastOperation, current_status: CurrentStatus) -> Self {
        Self {
            skip_if_similar: true,
            ..Self::new(last_operation, current_status)
        }
    }

    /// The status after the write.
    #[must_use]
    pub fn apply(&self, old: Option<&MachineStatus>) -> MachineStatus {
        let mut status = old.cloned().unwrap_or_default();
        status.last_operation = Some(self.last_operation.clone());
        status.current_status = Some(self.current_status.clone());
        if let Some(state) = &self.last_known_state {
            status.last_known_state = Some(state.clone());
        }
        if let Some(addresses) = &self.addresses {
            status.addresses = Some(addresses.clone());
        }
        if let Some(conditions) = &self.conditions {
            status.conditions = Some(conditions.clone());
        }
        status
    }

    /// Whether the shell may skip this write because nothing meaningful would change.
    #[must_use]
    pub fn is_redundant(&self, machine: &Machine, now: Timestamp) -> bool {
        if !self.skip_if_similar {
            return false;
        }
        let Some(old) = machine.status.as_ref() else {
            return false;
        };
        let new = self.apply(Some(old));
        is_status_similar(old, &new, now)
    }
}

/// A `LastOperation` stamped `now`.
#[must_use]
pub fn last_operation(
    description: impl Into<String>,
    state: MachineState,
    type_: MachineOperationType,
    now: Timestamp,
) -> LastOperation {
    LastOperation {
        description: Some(description.into()),
        error_code: None,
        last_update_time: Some(time(now)),
        state: Some(state),
        type_: Some(type_),
    }
}

/// A `CurrentStatus` with the given phase stamped `now`.
#[must_use]
pub fn current_status(
    phase: MachinePhase,
    timeout_active: bool,
    now: Timestamp,
    preserve_expiry_time: Option<Time>,
) -> CurrentStatus {
    CurrentStatus {
        phase: Some(phase),
        timeout_active: Some(timeout_active),
        last_update_time: Some(time(now)),
        preserve_expiry_time,
    }
}

/// Levenshtein distance counted in bytes, not characters: upstream compares Go strings, which
/// are bytes, so a two-byte character against an ASCII one is two edits.
#[must_use]
pub fn byte_levenshtein(a: &str, b: &str) -> usize {
    // `strsim::levenshtein` counts chars; its generic form over the bytes counts what Go counts.
    strsim::generic_levenshtein(&a.as_bytes().to_vec(), &b.as_bytes().to_vec())
}

/// `1 − distance / mean length`, both in bytes (as upstream); identical texts (including two
/// empty ones) are 1.
#[must_use]
pub fn similarity_ratio(a: &str, b: &str) -> f64 {
    if a == b {
        return 1.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let mean = (a.len() + b.len()) as f64 / 2.0;
    #[allow(clippy::cast_precision_loss)]
    let distance = byte_levenshtein(a, b) as f64;
    1.0 - distance / mean
}

/// Upstream `isMachineStatusSimilar`: both lastOperation timestamps are younger than 30 minutes,
/// the descriptions are more than 75% similar, and everything else of lastOperation and
/// currentStatus is equal ignoring the two `lastUpdateTime` fields. `lastKnownState`, addresses and
/// conditions are not compared (as upstream).
#[must_use]
pub fn is_status_similar(old: &MachineStatus, new: &MachineStatus, now: Timestamp) -> bool {
    let fresh = |operation: Option<&LastOperation>| {
        operation
            .and_then(|operation| operation.last_update_time.as_ref())
            .is_some_and(|at| at.0 >= now - SIMILARITY_FRESHNESS)
    };
    if !fresh(old.last_operation.as_ref()) || !fresh(new.last_operation.as_ref()) {
        return false;
    }
    let old_operation = old.last_operation.clone().unwrap_or_default();
    let new_operation = new.last_operation.clone().unwrap_or_default();
    let old_text = old_operation.description.clone().unwrap_or_default();
    let new_text = new_operation.description.clone().unwrap_or_default();
    if similarity_ratio(&old_text, &new_text) <= SIMILARITY_RATIO {
        return false;
    }
    let strip_operation = |operation: LastOperation| LastOperation {
        description: None,
        last_update_time: None,
        ..operation
    };
    let strip_current = |current: Option<CurrentStatus>| CurrentStatus {
        last_update_time: None,
        ..current.unwrap_or_default()
    };
    strip_operation(old_operation) == strip_operation(new_operation)
        && strip_current(old.current_status.clone()) == strip_current(new.current_status.clone())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcm_api::v1alpha1::MachineSpec;
    use proptest::prelude::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn status(description: &str, written: Timestamp, phase: MachinePhase) -> MachineStatus {
        MachineStatus {
            last_operation: Some(last_operation(
                description,
                MachineState::Failed,
                MachineOperationType::Create,
                written,
            )),
            current_status: Some(current_status(phase, false, written, None)),
            ..MachineStatus::default()
        }
    }

    #[test]
    fn levenshtein_table() {
        assert_eq!(byte_levenshtein("", ""), 0);
        assert_eq!(byte_levenshtein("kitten", "sitting"), 3);
        assert_eq!(byte_levenshtein("abc", ""), 3);
        assert_eq!(byte_levenshtein("flaw", "lawn"), 2);
        // Byte based: a two-byte character counts as two edits against ASCII.
        assert_eq!(byte_levenshtein("µ", "u"), 2);
    }

    #[test]
    fn similar_descriptions_within_30_minutes_are_skipped() {
        let old = status(
            "Cloud provider message - quota exceeded in zone a",
            at(0),
            MachinePhase::CrashLoopBackOff,
        );
        let new = status(
            "Cloud provider message - quota exceeded in zone b",
            at(60),
            MachinePhase::CrashLoopBackOff,
        );
        assert!(is_status_similar(&old, &new, at(60)));
        // The same change 31 minutes after the old write goes through.
        let late = status(
            "Cloud provider message - quota exceeded in zone b",
            at(31 * 60),
            MachinePhase::CrashLoopBackOff,
        );
        assert!(!is_status_similar(&old, &late, at(31 * 60)));
    }

    #[test]
    fn different_phase_or_text_is_not_similar() {
        let old = status("Creating machine", at(0), MachinePhase::CrashLoopBackOff);
        let other_phase = status("Creating machine", at(10), MachinePhase::Failed);
        assert!(!is_status_similar(&old, &other_phase, at(10)));
        let other_text = status(
            "VM deletion was successful",
            at(10),
            MachinePhase::CrashLoopBackOff,
        );
        assert!(!is_status_similar(&old, &other_text, at(10)));
        // Without a timestamp on the old status there is nothing fresh to compare with.
        let mut no_time = old.clone();
        no_time.last_operation.as_mut().unwrap().last_update_time = None;
        assert!(!is_status_similar(&no_time, &old, at(10)));
    }

    #[test]
    fn redundant_writes_are_detected_only_when_asked() {
        let mut machine = Machine::new("m", MachineSpec::default());
        machine.status = Some(status(
            "Cloud provider message - quota a",
            at(0),
            MachinePhase::CrashLoopBackOff,
        ));
        let similar = StatusWrite::similar_checked(
            last_operation(
                "Cloud provider message - quota b",
                MachineState::Failed,
                MachineOperationType::Create,
                at(30),
            ),
            current_status(MachinePhase::CrashLoopBackOff, false, at(30), None),
        );
        assert!(similar.is_redundant(&machine, at(30)));
        let forced = StatusWrite {
            skip_if_similar: false,
            ..similar.clone()
        };
        assert!(!forced.is_redundant(&machine, at(30)));
        // lastKnownState is not compared (as upstream).
        let mut with_state = similar.clone();
        with_state.last_known_state = Some("x".into());
        assert!(with_state.is_redundant(&machine, at(30)));
        // A machine without status always gets the write.
        assert!(!similar.is_redundant(&Machine::new("m", MachineSpec::default()), at(30)));
        let applied = similar.apply(machine.status.as_ref());
        assert_eq!(applied.last_operation, Some(similar.last_operation.clone()));
    }

    /// Distances counted by hand, byte for byte (Go strings are bytes): a multi-byte character
    /// costs one edit per differing byte, not one per character.
    #[test]
    fn byte_distances_count_bytes_not_characters() {
        assert_eq!(byte_levenshtein("kitten", "sitting"), 3);
        assert_eq!(byte_levenshtein("sitting", "kitten"), 3);
        assert_eq!(byte_levenshtein("Saturday", "Sunday"), 3);
        // `ü` is C3 BC: against `u` one substitution and one deletion (one char edit).
        assert_eq!(byte_levenshtein("Zürich", "Zurich"), 2);
        // `語` is three bytes: appending it is three insertions.
        assert_eq!(byte_levenshtein("日本", "日本語"), 3);
        // `é` (C3 A9) and `è` (C3 A8) share their first byte.
        assert_eq!(byte_levenshtein("café", "cafè"), 1);
        assert_eq!(byte_levenshtein("", "語"), 3);
    }

    #[test]
    fn similarity_ratios_use_byte_lengths() {
        let close = |actual: f64, expected: f64| (actual - expected).abs() < 1e-12;
        assert!(close(similarity_ratio("", ""), 1.0));
        assert!(close(similarity_ratio("same text", "same text"), 1.0));
        assert!(close(
            similarity_ratio("kitten", "sitting"),
            1.0 - 3.0 / 6.5
        ));
        assert!(close(similarity_ratio("abc", ""), 1.0 - 3.0 / 1.5));
        // 7 and 6 bytes, 2 byte edits: 0.69, below the threshold (counted in characters it would
        // be 1 − 1/6 = 0.83, above it).
        let zurich = similarity_ratio("Zürich", "Zurich");
        assert!(close(zurich, 1.0 - 2.0 / 6.5), "{zurich}");
        assert!(zurich <= SIMILARITY_RATIO);
        assert!(close(
            similarity_ratio("quota exceeded in zone a", "quota exceeded in zone b"),
            1.0 - 1.0 / 24.0
        ));
    }

    proptest! {
        #[test]
        fn prop_levenshtein_is_a_metric(a in "[a-c]{0,8}", b in "[a-c]{0,8}", c in "[a-c]{0,8}") {
            prop_assert_eq!(byte_levenshtein(&a, &b), byte_levenshtein(&b, &a));
            prop_assert_eq!(byte_levenshtein(&a, &a), 0);
            prop_assert!(byte_levenshtein(&a, &c) <= byte_levenshtein(&a, &b) + byte_levenshtein(&b, &c));
            prop_assert!(byte_levenshtein(&a, &b) <= a.len().max(b.len()));
        }

        #[test]
        fn prop_identical_fresh_status_is_similar(text in ".{0,40}", offset in 0i64..1800) {
            let old = status(&text, at(0), MachinePhase::Pending);
            let new = status(&text, at(offset), MachinePhase::Pending);
            prop_assert!(is_status_similar(&old, &new, at(offset)));
        }
    }
}
