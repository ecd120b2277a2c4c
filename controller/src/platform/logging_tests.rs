#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::*;

/// A writer into a shared buffer.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn captured(log: impl FnOnce()) -> String {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(Level::TRACE)
        .event_format(Klog::new())
        .finish();
    tracing::subscriber::with_default(subscriber, log);
    let bytes = buffer.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn header_follows_klog() {
    let at: jiff::Timestamp = "2026-11-25T10:00:00.123456789Z".parse().unwrap();
    assert_eq!(
        header(
            &Level::INFO,
            at,
            12345,
            "controller/src/machine/reconcile.rs",
            123
        ),
        "I1125 10:00:00.123456   12345 reconcile.rs:123] "
    );
    assert!(header(&Level::WARN, at, 1, "a.rs", 1).starts_with("W1125 "));
    assert!(header(&Level::ERROR, at, 1, "a.rs", 1).starts_with("E1125 "));
    // klog has no debug severity: V(n) lines are info lines.
    assert!(header(&Level::DEBUG, at, 1, "a.rs", 1).starts_with("I1125 "));
    assert!(header(&Level::TRACE, at, 1, "a.rs", 1).contains("       1 a.rs:1] "));
}

#[test]
fn lines_carry_the_quoted_message_and_klog_pairs() {
    let error = std::io::Error::other("boom \"quoted\"");
    let text = captured(|| {
        tracing::warn!(machine = "m-1", replicas = 3, ready = true, %error, "scaled \"up\"");
    });
    let line = text.lines().next().unwrap();
    let (head, body) = line.split_once("] ").unwrap();
    // Header: severity+date, time, pid, file:line.
    let parts: Vec<&str> = head.split_whitespace().collect();
    assert_eq!(parts.len(), 4, "{line}");
    assert!(parts[0].starts_with('W') && parts[0].len() == 5, "{line}");
    assert_eq!(parts[1].len(), "10:00:00.000000".len(), "{line}");
    assert_eq!(parts[2], std::process::id().to_string());
    assert!(parts[3].starts_with("logging_tests.rs:"), "{line}");
    assert_eq!(
        body,
        r#""scaled \"up\"" machine="m-1" replicas=3 ready=true error="boom \"quoted\"""#
    );
}

#[test]
fn verbosity_maps_like_klog() {
    for v in 0..=3 {
        assert_eq!(level_for_verbosity(v), Level::INFO, "--v={v}");
    }
    assert_eq!(level_for_verbosity(4), Level::DEBUG);
    assert_eq!(level_for_verbosity(5), Level::TRACE);
    assert_eq!(level_for_verbosity(10), Level::TRACE);
    assert_eq!(level_for_verbosity(-1), Level::INFO);
    assert!(filter_directives(3).contains("mcm_controller=info"));
    assert!(filter_directives(4).contains("mcm_controller=debug"));
    // The directives parse.
    EnvFilter::try_new(filter_directives(5)).unwrap();
}

#[test]
fn flag_names_are_normalised_like_pflag() {
    let args = normalize_flag_names(
        [
            "mcm",
            "--kube_api_qps=150",
            "--leader_elect",
            "--namespace=a_b",
            "-v",
            "3",
            "value_with_underscore",
        ]
        .map(std::ffi::OsString::from),
    );
    let args: Vec<&str> = args.iter().map(|arg| arg.to_str().unwrap()).collect();
    assert_eq!(
        args,
        [
            "mcm",
            "--kube-api-qps=150",
            "--leader-elect",
            "--namespace=a_b",
            "-v",
            "3",
            "value_with_underscore"
        ]
    );
}

#[test]
fn vmodule_syntax_is_checked() {
    validate_vmodule("").unwrap();
    validate_vmodule("reconcile=4,plan*=5").unwrap();
    assert!(
        validate_vmodule("reconcile")
            .unwrap_err()
            .contains("pattern=N")
    );
    assert!(
        validate_vmodule("=3")
            .unwrap_err()
            .contains("empty pattern")
    );
    assert!(
        validate_vmodule("a=x")
            .unwrap_err()
            .contains("non-negative")
    );
}

#[test]
fn vmodule_raises_the_level_of_matching_files_first_match_wins() {
    let rules = parse_vmodule("reconcile=4,plan*=5,*=0").unwrap();
    let file = "controller/src/machine/reconcile.rs";
    assert!(vmodule_enables(&rules, file, &Level::DEBUG));
    assert!(!vmodule_enables(&rules, file, &Level::TRACE));
    assert!(vmodule_enables(
        &rules,
        "src/machine_set/plan_tests.rs",
        &Level::TRACE
    ));
    // `*=0` matches everything else: info only.
    assert!(vmodule_enables(&rules, "src/other.rs", &Level::INFO));
    assert!(!vmodule_enables(&rules, "src/other.rs", &Level::DEBUG));
    // No rule for a file: nothing enabled by vmodule (the --v filter decides).
    let only = parse_vmodule("health=5").unwrap();
    assert!(!vmodule_enables(&only, "src/other.rs", &Level::ERROR));
    assert!(vmodule_enables(
        &only,
        "src\\machine\\health.rs",
        &Level::TRACE
    ));
    assert!(parse_vmodule("x").is_err());
}

#[test]
fn globs_match_like_klog() {
    for (pattern, text, expected) in [
        ("reconcile", "reconcile", true),
        ("reconcile", "reconciler", false),
        ("rec*", "reconcile", true),
        ("*cile", "reconcile", true),
        ("r?conc*e", "reconcile", true),
        ("*", "", true),
        ("?", "", false),
        ("a*b*c", "axxbyyc", true),
        ("a*b*c", "axxbyy", false),
    ] {
        assert_eq!(glob_matches(pattern, text), expected, "{pattern} ~ {text}");
    }
}
