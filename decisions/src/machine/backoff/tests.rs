#![allow(clippy::unwrap_used)]

use jiff::Timestamp;
use mcm_api::duration::Duration;
use mcm_api::keys::retry;
use mcm_api::v1alpha1::{
    LastOperation, Machine, MachineOperationType, MachineState, MachineStatus,
};
use proptest::prelude::*;

use super::*;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn machine_with(description: &str, type_: MachineOperationType, state: MachineState) -> Machine {
    let mut machine = Machine::default();
    machine.metadata.name = Some("m1".to_owned());
    machine.metadata.uid = Some("uid-1".to_owned());
    machine.status = Some(MachineStatus {
        last_operation: Some(LastOperation {
            description: Some(description.to_owned()),
            type_: Some(type_),
            state: Some(state),
            ..LastOperation::default()
        }),
        ..MachineStatus::default()
    });
    machine
}

#[test]
fn mark_round_trips_and_keeps_upstream_text_as_prefix() {
    let upstream =
        "Cloud provider message - machine codes error: code = [Internal] message = [boom]";
    let mark = RetryMark {
        attempt: 3,
        next_retry_at: Some(at("2026-01-02T03:04:05.678901Z")),
    };
    let text = with_mark(upstream, mark);
    assert_eq!(
        text,
        format!("{upstream} (attempt 3, next retry at 2026-01-02T03:04:05.678Z)")
    );
    assert!(text.starts_with(upstream));
    assert_eq!(strip_mark(&text), upstream);
    let parsed = parse_mark(&text).unwrap();
    assert_eq!(parsed.attempt, 3);
    assert_eq!(parsed.next_retry_at, Some(at("2026-01-02T03:04:05.678Z")));
    // Replacing a suffix never stacks two.
    let again = with_mark(
        &text,
        RetryMark {
            attempt: 4,
            next_retry_at: None,
        },
    );
    assert_eq!(again, format!("{upstream} (attempt 4)"));
    // Texts without a suffix (or with a look-alike) are left alone.
    assert_eq!(parse_mark(upstream), None);
    assert_eq!(parse_mark("x (attempt many)"), None);
    assert_eq!(strip_mark("x (attempt many)"), "x (attempt many)");
}

#[test]
fn defaults_start_at_short_retry_double_and_cap_at_a_minute() {
    let settings = BackoffSettings::default();
    assert_eq!(settings.initial, retry::SHORT);
    let delays: Vec<i64> = (1..=8)
        .map(|attempt| backoff_delay(&settings, RetryClass::Short, attempt, "uid").as_secs())
        .collect();
    // Each delay lies in [raw × 0.8, raw] of 5, 10, 20, 40, 60, 60, ...
    for (delay, raw) in delays.iter().zip([5, 10, 20, 40, 60, 60, 60, 60]) {
        assert!(*delay <= raw && *delay * 10 >= raw * 8 - 10, "{delays:?}");
    }
}

#[test]
fn medium_class_is_never_sooner_than_medium_retry() {
    let settings = BackoffSettings::default();
    for attempt in 1..20 {
        let delay = backoff_delay(&settings, RetryClass::Medium, attempt, "uid");
        assert_eq!(delay, retry::MEDIUM, "attempt {attempt}");
    }
}

#[test]
fn factor_one_and_max_initial_is_upstreams_constant_retry_minus_jitter() {
    let settings = BackoffSettings {
        initial: retry::SHORT,
        factor: 1.0,
        max: retry::SHORT,
    };
    for attempt in 1..10 {
        let delay = backoff_delay(&settings, RetryClass::Short, attempt, "uid");
        assert!(delay <= retry::SHORT && delay >= Duration::from_secs(4));
    }
}

#[test]
fn next_backoff_counts_attempts_from_the_stored_description() {
    let settings = BackoffSettings::default();
    let now = at("2026-01-01T00:00:00Z");
    let fresh = machine_with(
        "Calling CreateMachine on cloud provider",
        MachineOperationType::Create,
        MachineState::Processing,
    );
    let first = next_backoff(
        &fresh,
        mark_of(&fresh, &MachineOperationType::Create),
        RetryClass::Short,
        &settings,
        now,
    );
    assert_eq!(first.mark.attempt, 1);
    let stored = with_mark("Cloud provider message - x", first.mark);
    let failed = machine_with(&stored, MachineOperationType::Create, MachineState::Failed);
    let second = next_backoff(
        &failed,
        mark_of(&failed, &MachineOperationType::Create),
        RetryClass::Short,
        &settings,
        now,
    );
    assert_eq!(second.mark.attempt, 2);
    // Another operation type starts over.
    let delete = next_backoff(
        &failed,
        mark_of(&failed, &MachineOperationType::Delete),
        RetryClass::Short,
        &settings,
        now,
    );
    assert_eq!(delete.mark.attempt, 1);
    // The same machine and attempt always get the same jitter.
    assert_eq!(
        second,
        next_backoff(
            &failed,
            mark_of(&failed, &MachineOperationType::Create),
            RetryClass::Short,
            &settings,
            now
        )
    );
}

#[test]
fn wait_before_retry_only_while_failed_and_due_later() {
    let now = at("2026-01-01T00:00:00Z");
    let mark = RetryMark {
        attempt: 2,
        next_retry_at: Some(at("2026-01-01T00:00:10Z")),
    };
    let text = with_mark("VM deletion failed due to - x", mark);
    let failed = machine_with(&text, MachineOperationType::Delete, MachineState::Failed);
    assert_eq!(
        wait_before_retry(
            &failed,
            mark_of(&failed, &MachineOperationType::Delete),
            now
        ),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        wait_before_retry(
            &failed,
            mark_of(&failed, &MachineOperationType::Delete),
            at("2026-01-01T00:00:10Z")
        ),
        None
    );
    assert_eq!(
        wait_before_retry(
            &failed,
            mark_of(&failed, &MachineOperationType::Create),
            now
        ),
        None
    );
    let processing = machine_with(
        &text,
        MachineOperationType::Delete,
        MachineState::Processing,
    );
    assert_eq!(
        wait_before_retry(
            &processing,
            mark_of(&processing, &MachineOperationType::Delete),
            now
        ),
        None
    );
}

proptest! {
    #[test]
    fn prop_delay_is_bounded_and_never_shrinks_much(
        initial_ms in 1i64..20_000,
        factor in 1.0f64..4.0,
        max_ms in 1i64..600_000,
        attempt in 1u32..200,
        seed in "[a-z0-9-]{0,36}",
    ) {
        let settings = BackoffSettings {
            initial: Duration::from_millis(initial_ms),
            factor,
            max: Duration::from_millis(max_ms),
        };
        let cap = std::cmp::max(settings.max, settings.initial);
        let delay = backoff_delay(&settings, RetryClass::Short, attempt, &seed);
        prop_assert!(delay <= cap);
        // Jitter removes at most 20% of the raw delay, and the raw delay never falls.
        #[allow(clippy::cast_precision_loss)]
        let floor = (settings.initial.as_nanos() as f64 * (1.0 - JITTER)) as i64 - 1;
        prop_assert!(delay.as_nanos() >= floor);
        let medium = backoff_delay(&settings, RetryClass::Medium, attempt, &seed);
        prop_assert!(medium >= retry::MEDIUM);
        let fraction = jitter_fraction(&seed, attempt);
        prop_assert!((0.0..1.0).contains(&fraction));
    }

    #[test]
    fn prop_mark_round_trips(attempt in 0u32..100_000, second in 0i64..4_000_000_000, text in "[ -~]{0,60}") {
        let at = Timestamp::from_second(second).unwrap();
        let mark = RetryMark { attempt, next_retry_at: Some(at) };
        let described = with_mark(&text, mark);
        prop_assert_eq!(parse_mark(&described), Some(mark));
        prop_assert_eq!(with_mark(&described, mark), described.clone());
    }
}

/// The closing note's comparison: a provider whose CreateMachine fails 20 times in a row, then
/// succeeds. Upstream calls it every 5s (ShortRetry); the default backoff spaces the calls out.
/// Run with `--nocapture` to print the schedule.
#[test]
fn twenty_failures_schedule_versus_constant_retry() {
    let settings = BackoffSettings::default();
    let start = at("2026-01-01T00:00:00Z");
    let mut machine = machine_with(
        "Calling CreateMachine on cloud provider",
        MachineOperationType::Create,
        MachineState::Processing,
    );
    machine.metadata.uid = Some("6f1c2d9e-4a57-4c1b-9d0e-2b7a8c3f5e10".to_owned());
    let mut now = start;
    let mut calls = vec![now];
    let mut gaps = Vec::new();
    for _ in 0..20 {
        let next = next_backoff(
            &machine,
            mark_of(&machine, &MachineOperationType::Create),
            RetryClass::Short,
            &settings,
            now,
        );
        let text = with_mark("Cloud provider message - unavailable", next.mark);
        machine = machine_with(&text, MachineOperationType::Create, MachineState::Failed);
        machine.metadata.uid = Some("6f1c2d9e-4a57-4c1b-9d0e-2b7a8c3f5e10".to_owned());
        // An early reconcile is held back until the stored retry time.
        assert!(
            wait_before_retry(
                &machine,
                mark_of(&machine, &MachineOperationType::Create),
                now
            )
            .is_some()
        );
        now = next.mark.next_retry_at.unwrap();
        assert_eq!(
            wait_before_retry(
                &machine,
                mark_of(&machine, &MachineOperationType::Create),
                now
            ),
            None
        );
        gaps.push(next.delay.to_std().unwrap().as_secs_f64());
        calls.push(now);
    }
    let total = now.duration_since(start).as_secs_f64();
    let constant_total = 20.0 * retry::SHORT.to_std().unwrap().as_secs_f64();
    // Calls the constant retry would make in the same time.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let constant_calls_in_same_time = (total / 5.0) as u64 + 1;
    println!(
        "backoff: {} calls over {total:.1}s, gaps {gaps:.1?}",
        calls.len()
    );
    println!(
        "constant 5s: 21 calls over {constant_total:.0}s; over {total:.0}s it would make {constant_calls_in_same_time} calls"
    );
    assert_eq!(calls.len(), 21);
    // 5, 10, 20, 40, then at most 60s apart (each minus up to 20% jitter).
    assert!(
        gaps.iter().skip(4).all(|gap| (48.0..=60.0).contains(gap)),
        "{gaps:?}"
    );
    assert!(
        gaps.windows(2).take(4).all(|pair| pair[1] > pair[0]),
        "{gaps:?}"
    );
    assert!(
        constant_calls_in_same_time > 10 * 21 / 2,
        "{constant_calls_in_same_time}"
    );
}
