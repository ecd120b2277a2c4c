//! Logging as Kubernetes components do it, so log pipelines built for the Go manager (Gardener's
//! parses klog text lines) read ours unchanged:
//! * `--log-format=text` (default): klog's header and structured message,
//!   `I1125 10:00:00.000000   12345 reconcile.rs:123] "msg" key="value" count=3`
//!   (severity `I`/`W`/`E`, month and day, UTC time with microseconds, process id right-aligned
//!   in 7 columns, source file base name and line);
//! * `--log-format=json`: one JSON object per line;
//! * `--v` as klog's verbosity: 0–3 info (klog's 2–3 add details, which our info lines always
//!   carry as fields), 4 debug, 5 and more trace, for our crates; dependencies stay at info.
//!   `RUST_LOG` replaces the whole filter;
//! * `--vmodule=pattern=N,...` raises the verbosity of the files whose base name matches (as
//!   klog, first match wins); `--log-flush-frequency` is accepted (lines are written unbuffered);
//!   RUST_LOG, when set, still replaces the `--v` filter.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use clap::ValueEnum;

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// The tracing level our crates log at for a klog `--v` value.
pub fn level_for_verbosity(verbosity: i32) -> Level {
    match verbosity {
        ..=3 => Level::INFO,
        4 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// The filter for `--v`: our crates at [`level_for_verbosity`], everything else at info.
pub fn filter_directives(verbosity: i32) -> String {
    let level = level_for_verbosity(verbosity).as_str().to_ascii_lowercase();
    format!(
        "info,mcm_controller={level},machine_controller_manager={level},mcm_provider_proto={level}"
    )
}

/// Installs the global subscriber for `format`, `verbosity` and `vmodule` (already validated by
/// [`validate_vmodule`]; an invalid value is ignored).
pub fn init(format: LogFormat, verbosity: i32, vmodule: &str) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{Layer as _, filter::FilterExt as _};

    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(filter_directives(verbosity)));
    let rules = parse_vmodule(vmodule).unwrap_or_default();
    let by_file = tracing_subscriber::filter::filter_fn(move |metadata| {
        metadata
            .file()
            .is_some_and(|file| vmodule_enables(&rules, file, metadata.level()))
    });
    let filter = filter.or(by_file);
    let layer = tracing_subscriber::fmt::layer();
    let layer: Box<dyn tracing_subscriber::Layer<_> + Send + Sync> = match format {
        LogFormat::Json => layer.json().flatten_event(true).boxed(),
        LogFormat::Text => layer.event_format(Klog::new()).boxed(),
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .init();
}

/// One `--vmodule` rule: files whose base name (without `.rs`) matches `pattern` (`*` and `?`
/// globs, as klog) log up to the level of `verbosity`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmoduleRule {
    /// Glob over the file's base name without extension.
    pub pattern: String,
    /// klog verbosity for those files.
    pub verbosity: u32,
}

/// Parses `--vmodule` (`pattern=N,...`).
pub fn parse_vmodule(value: &str) -> Result<Vec<VmoduleRule>, String> {
    validate_vmodule(value)?;
    Ok(value
        .split(',')
        .filter(|item| !item.is_empty())
        .filter_map(|item| {
            let (pattern, level) = item.split_once('=')?;
            Some(VmoduleRule {
                pattern: pattern.to_owned(),
                verbosity: level.parse().ok()?,
            })
        })
        .collect())
}

/// Whether an event at `level` from `file` is enabled by the first rule matching the file, as
/// klog applies `--vmodule` (the first match decides; no match enables nothing here).
pub fn vmodule_enables(rules: &[VmoduleRule], file: &str, level: &Level) -> bool {
    let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
    let stem = base.strip_suffix(".rs").unwrap_or(base);
    rules
        .iter()
        .find(|rule| glob_matches(&rule.pattern, stem))
        .is_some_and(|rule| {
            let allowed = level_for_verbosity(i32::try_from(rule.verbosity).unwrap_or(i32::MAX));
            // tracing orders levels by verbosity: TRACE is the "largest".
            *level <= allowed
        })
}

/// `*` (any run) and `?` (one character) globbing.
fn glob_matches(pattern: &str, text: &str) -> bool {
    let (pattern, text): (Vec<char>, Vec<char>) =
        (pattern.chars().collect(), text.chars().collect());
    let (mut p, mut t, mut star, mut mark) = (0, 0, None, 0);
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some(p);
                mark = t;
                p += 1;
            }
            Some(c) if *c == '?' || *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some(at) => {
                    p = at + 1;
                    mark += 1;
                    t = mark;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// klog's text layout as a tracing-subscriber event formatter.
#[derive(Clone, Debug)]
pub struct Klog {
    pid: u32,
}

impl Klog {
    /// A formatter stamping this process's id.
    pub fn new() -> Self {
        Self {
            pid: std::process::id(),
        }
    }
}

impl Default for Klog {
    fn default() -> Self {
        Self::new()
    }
}

/// klog's severity letter: klog has no debug or trace severities (those are `V(n)` info lines).
pub fn severity(level: &Level) -> char {
    match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

/// klog's line header up to and including `] `: severity, `mmdd hh:mm:ss.uuuuuu` (UTC), the
/// process id right-aligned in 7 columns, `file:line`.
pub fn header(level: &Level, at: jiff::Timestamp, pid: u32, file: &str, line: u32) -> String {
    let time = jiff::tz::TimeZone::UTC.to_datetime(at);
    let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
    format!(
        "{}{:02}{:02} {:02}:{:02}:{:02}.{:06} {:>7} {}:{}] ",
        severity(level),
        time.month(),
        time.day(),
        time.hour(),
        time.minute(),
        time.second(),
        time.subsec_nanosecond() / 1000,
        pid,
        base,
        line
    )
}

/// Collects an event's message and fields in klog's structured form: the message quoted, then
/// `key=value` pairs with strings (and anything formatted) quoted, numbers and booleans bare.
#[derive(Default)]
struct KlogFields {
    message: Option<String>,
    pairs: String,
}

impl KlogFields {
    fn pair(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        let _ = write!(self.pairs, " {}={}", field.name(), value);
    }
}

impl Visit for KlogFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_owned());
        } else {
            self.pair(field, format_args!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = Some(text);
        } else {
            self.pair(field, format_args!("{text:?}"));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.pair(field, format_args!("{value}"));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.pair(field, format_args!("{value}"));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.pair(field, format_args!("{value}"));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.pair(field, format_args!("{value}"));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let text = value.to_string();
        self.pair(field, format_args!("{text:?}"));
    }
}

impl<S, N> FormatEvent<S, N> for Klog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut fields = KlogFields::default();
        event.record(&mut fields);
        let file = metadata.file().unwrap_or(metadata.target());
        writer.write_str(&header(
            metadata.level(),
            jiff::Timestamp::now(),
            self.pid,
            file,
            metadata.line().unwrap_or(0),
        ))?;
        let message = fields.message.unwrap_or_default();
        write!(writer, "{message:?}")?;
        writer.write_str(&fields.pairs)?;
        writeln!(writer)
    }
}

/// Rewrites `--flag_name[=value]` to `--flag-name[=value]` (the part after `=` is left alone), as
/// Go's pflag normalises flag names for Kubernetes components. Other arguments pass unchanged.
pub fn normalize_flag_names<I>(args: I) -> Vec<std::ffi::OsString>
where
    I: IntoIterator<Item = std::ffi::OsString>,
{
    args.into_iter()
        .map(|arg| {
            let Some(text) = arg.to_str() else {
                return arg;
            };
            let Some(flag) = text.strip_prefix("--") else {
                return arg;
            };
            match flag.split_once('=') {
                Some((name, value)) => format!("--{}={value}", name.replace('_', "-")).into(),
                None => format!("--{}", flag.replace('_', "-")).into(),
            }
        })
        .collect()
}

/// Validates a `--vmodule` value: comma-separated `pattern=N` with a non-empty pattern and a
/// non-negative level (klog's syntax).
pub fn validate_vmodule(value: &str) -> Result<(), String> {
    for item in value.split(',').filter(|item| !item.is_empty()) {
        let Some((pattern, level)) = item.split_once('=') else {
            return Err(format!("{item:?} is not pattern=N"));
        };
        if pattern.is_empty() {
            return Err(format!("{item:?} has an empty pattern"));
        }
        if level.parse::<u32>().is_err() {
            return Err(format!(
                "{item:?} has a level that is not a non-negative integer"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "logging_tests.rs"]
mod tests;
