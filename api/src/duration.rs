//! Go `time.Duration` strings, as carried by `metav1.Duration` fields.
//!
//! Upstream writes every timeout (`drainTimeout`, `healthTimeout`, ...) with Go's
//! `time.Duration.String()` and reads it with `time.ParseDuration`. Operators compare these strings
//! in manifests and the controllers put them into status texts, so both directions must match Go
//! exactly: `10m` parses, `10m0s` is printed, `1.5h` is `1h30m0s`, sub-second values use `ms`, `µs`
//! or `ns`, negative values keep their sign and values beyond ±2^63 ns are rejected.
//!
//! kube-core has a `Duration` too, but it prints in Rust's `Debug` format (`600s`), which would make
//! status texts and rewritten objects differ from upstream; hence this type.

use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// Nanoseconds per unit, as in Go's `time` package.
const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

/// Magnitude of `i64::MIN`, the largest magnitude a negative Go duration can have.
const MAX_MAGNITUDE: u64 = 1 << 63;

/// A signed duration with nanosecond resolution, equal in range and text form to Go's
/// `time.Duration` (and so to `metav1.Duration`).
///
/// Serialized as a string (`"10m0s"`); deserialized from any string `time.ParseDuration` accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(i64);

/// Why a duration string was rejected. The messages follow Go's `time.ParseDuration`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseDurationError {
    /// Empty input, a component without digits, or a value beyond the range of `time.Duration`.
    #[error("time: invalid duration {input:?}")]
    Invalid {
        /// The whole input as given.
        input: String,
    },
    /// A number is not followed by a unit (`"10"`).
    #[error("time: missing unit in duration {input:?}")]
    MissingUnit {
        /// The whole input as given.
        input: String,
    },
    /// A unit other than `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`.
    #[error("time: unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit {
        /// The unit found.
        unit: String,
        /// The whole input as given.
        input: String,
    },
}

impl Duration {
    /// The zero duration (printed `0s`).
    pub const ZERO: Duration = Duration(0);

    /// A duration of `nanos` nanoseconds.
    #[must_use]
    pub const fn from_nanos(nanos: i64) -> Self {
        Duration(nanos)
    }

    /// A duration of `millis` milliseconds, saturating at the range of `time.Duration`.
    #[must_use]
    pub const fn from_millis(millis: i64) -> Self {
        Duration(millis.saturating_mul(MILLISECOND as i64))
    }

    /// A duration of `secs` seconds, saturating at the range of `time.Duration`.
    #[must_use]
    pub const fn from_secs(secs: i64) -> Self {
        Duration(secs.saturating_mul(SECOND as i64))
    }

    /// A duration of `mins` minutes, saturating at the range of `time.Duration`.
    #[must_use]
    pub const fn from_mins(mins: i64) -> Self {
        Duration(mins.saturating_mul(MINUTE as i64))
    }

    /// A duration of `hours` hours, saturating at the range of `time.Duration`.
    #[must_use]
    pub const fn from_hours(hours: i64) -> Self {
        Duration(hours.saturating_mul(HOUR as i64))
    }

    /// The duration in nanoseconds.
    #[must_use]
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// Whole seconds, truncated toward zero (Go's `int64(d / time.Second)`).
    #[must_use]
    pub const fn as_secs(self) -> i64 {
        self.0 / SECOND as i64
    }

    /// Whether the duration is below zero.
    #[must_use]
    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// The duration as a `std::time::Duration`, or `None` when it is negative.
    #[must_use]
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }

    /// The duration as a `jiff::SignedDuration`, for arithmetic with `jiff::Timestamp`
    /// (which is what k8s-openapi's `Time` wraps).
    #[must_use]
    pub fn to_signed_duration(self) -> jiff::SignedDuration {
        jiff::SignedDuration::from_nanos(self.0)
    }
}

impl From<Duration> for jiff::SignedDuration {
    fn from(value: Duration) -> Self {
        value.to_signed_duration()
    }
}

impl TryFrom<std::time::Duration> for Duration {
    type Error = std::num::TryFromIntError;

    /// Fails when the value exceeds the ~292 years a `time.Duration` can hold.
    fn try_from(value: std::time::Duration) -> Result<Self, Self::Error> {
        i64::try_from(value.as_nanos()).map(Duration)
    }
}

impl FromStr for Duration {
    type Err = ParseDurationError;

    /// Parses like Go's `time.ParseDuration`: `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, or `0` alone.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        parse(input)
    }
}

fn invalid(input: &str) -> ParseDurationError {
    ParseDurationError::Invalid {
        input: input.to_owned(),
    }
}

fn parse(input: &str) -> Result<Duration, ParseDurationError> {
    let mut rest = input;
    let mut negative = false;
    if let Some(stripped) = rest.strip_prefix('-') {
        negative = true;
        rest = stripped;
    } else if let Some(stripped) = rest.strip_prefix('+') {
        rest = stripped;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid(input));
    }

    // Accumulated as a magnitude in u64 so that `-2562047h47m16.854775808s` (i64::MIN) fits.
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let first = rest.as_bytes()[0];
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(invalid(input));
        }

        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let whole = leading_int(&rest[..int_len]).ok_or_else(|| invalid(input))?;
        rest = &rest[int_len..];

        let mut fraction: u64 = 0;
        let mut scale: f64 = 1.0;
        let mut has_fraction_digits = false;
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            (fraction, scale) = leading_fraction(&after_dot[..frac_len]);
            has_fraction_digits = frac_len > 0;
            rest = &after_dot[frac_len..];
        }
        if int_len == 0 && !has_fraction_digits {
            return Err(invalid(input));
        }

        let unit_len = rest
            .char_indices()
            .find(|&(_, c)| c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        if unit_len == 0 {
            return Err(ParseDurationError::MissingUnit {
                input: input.to_owned(),
            });
        }
        let unit_text = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit = unit_nanos(unit_text).ok_or_else(|| ParseDurationError::UnknownUnit {
            unit: unit_text.to_owned(),
            input: input.to_owned(),
        })?;

        if whole > MAX_MAGNITUDE / unit {
            return Err(invalid(input));
        }
        let mut value = whole * unit;
        if fraction > 0 {
            // Go uses float64 here as well; it is nanosecond-exact for fractions of an hour.
            // The product is at most 3.6e12 (one hour in ns), so the cast cannot truncate.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let fraction_nanos = (fraction as f64 * (unit as f64 / scale)) as u64;
            value = value
                .checked_add(fraction_nanos)
                .ok_or_else(|| invalid(input))?;
            if value > MAX_MAGNITUDE {
                return Err(invalid(input));
            }
        }
        total = total.checked_add(value).ok_or_else(|| invalid(input))?;
        if total > MAX_MAGNITUDE {
            return Err(invalid(input));
        }
    }

    if negative {
        // total <= 2^63, so the negation is within i64.
        let magnitude = i128::from(total);
        i64::try_from(-magnitude)
            .map(Duration)
            .map_err(|_| invalid(input))
    } else {
        i64::try_from(total)
            .map(Duration)
            .map_err(|_| invalid(input))
    }
}

/// Go's `leadingInt`: the digits as a number, or `None` once it exceeds 2^63.
fn leading_int(digits: &str) -> Option<u64> {
    let mut value: u64 = 0;
    for digit in digits.bytes() {
        if value > MAX_MAGNITUDE / 10 {
            return None;
        }
        value = value * 10 + u64::from(digit - b'0');
        if value > MAX_MAGNITUDE {
            return None;
        }
    }
    Some(value)
}

/// Go's `leadingFraction`: digits after the dot and their scale; stops gaining precision on
/// overflow instead of failing.
fn leading_fraction(digits: &str) -> (u64, f64) {
    let mut value: u64 = 0;
    let mut scale = 1.0;
    let mut overflow = false;
    for digit in digits.bytes() {
        if overflow {
            continue;
        }
        if value > (MAX_MAGNITUDE - 1) / 10 {
            overflow = true;
            continue;
        }
        let next = value * 10 + u64::from(digit - b'0');
        if next > MAX_MAGNITUDE {
            overflow = true;
            continue;
        }
        value = next;
        scale *= 10.0;
    }
    (value, scale)
}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => NANOSECOND,
        // U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU, both accepted by Go.
        "us" | "\u{00b5}s" | "\u{03bc}s" => MICROSECOND,
        "ms" => MILLISECOND,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        _ => return None,
    })
}

impl fmt::Display for Duration {
    /// Prints like Go's `time.Duration.String()`: `72h3m0.5s`, `1.5ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let negative = self.0 < 0;
        let magnitude = self.0.unsigned_abs();
        let mut out = String::with_capacity(24);
        if negative {
            out.push('-');
        }
        if magnitude < SECOND {
            if magnitude == 0 {
                return f.write_str("0s");
            }
            let (precision, unit) = if magnitude < MICROSECOND {
                (0, "ns")
            } else if magnitude < MILLISECOND {
                (3, "\u{00b5}s")
            } else {
                (6, "ms")
            };
            push_fraction(&mut out, magnitude, precision);
            out.push_str(unit);
        } else {
            let hours = magnitude / HOUR;
            let minutes = (magnitude / MINUTE) % 60;
            if hours > 0 {
                out.push_str(&hours.to_string());
                out.push('h');
            }
            if hours > 0 || minutes > 0 {
                out.push_str(&minutes.to_string());
                out.push('m');
            }
            push_fraction(&mut out, magnitude % MINUTE, 9);
            out.push('s');
        }
        f.write_str(&out)
    }
}

/// Appends `value / 10^precision` with trailing zeros of the fraction (and a bare dot) removed.
fn push_fraction(out: &mut String, value: u64, precision: u32) {
    let divisor = 10u64.pow(precision);
    let whole = value / divisor;
    let fraction = value % divisor;
    out.push_str(&whole.to_string());
    if fraction != 0 {
        let digits = format!("{fraction:0width$}", width = precision as usize);
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Duration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Go duration string such as \"10m0s\"")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Duration, E> {
                value.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // Not `format: duration`: that means ISO 8601, which Go does not accept.
        json_schema!({ "type": "string" })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ns(text: &str) -> i64 {
        text.parse::<Duration>()
            .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
            .as_nanos()
    }

    #[test]
    fn parses_go_test_table() {
        // Values from Go's time_test.go `parseDurationTests`.
        let s = SECOND as i64;
        let ms = MILLISECOND as i64;
        let m = MINUTE as i64;
        let h = HOUR as i64;
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("5s", 5 * s),
            ("30s", 30 * s),
            ("1478s", 1478 * s),
            ("-5s", -5 * s),
            ("+5s", 5 * s),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5 * s),
            ("5.6s", 5 * s + 600 * ms),
            ("5.s", 5 * s),
            (".5s", 500 * ms),
            ("1.0s", s),
            ("1.00s", s),
            ("1.004s", s + 4 * ms),
            ("1.0040s", s + 4 * ms),
            ("100.00100s", 100 * s + ms),
            ("10ns", 10),
            ("11us", 11_000),
            ("12µs", 12_000),
            ("12μs", 12_000),
            ("13ms", 13 * ms),
            ("14s", 14 * s),
            ("15m", 15 * m),
            ("16h", 16 * h),
            ("3h30m", 3 * h + 30 * m),
            ("10.5s4m", 4 * m + 10 * s + 500 * ms),
            ("-2m3.4s", -(2 * m + 3 * s + 400 * ms)),
            ("1h2m3s4ms5us6ns", h + 2 * m + 3 * s + 4 * ms + 5_000 + 6),
            ("39h9m14.425s", 39 * h + 9 * m + 14 * s + 425 * ms),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 20 * m),
            ("9007199254740993ns", (1 << 53) + 1),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("9223372036s854ms775us807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("-9223372036854775.808us", i64::MIN),
            ("-9223372036s854ms775us808ns", i64::MIN),
            ("-2562047h47m16.854775808s", i64::MIN),
            ("0.100000000000000000000h", 6 * m),
            ("0.830103483285477580700h", 49 * m + 48 * s + 372_539_827),
        ];
        for &(text, want) in cases {
            assert_eq!(ns(text), want, "parsing {text:?}");
        }
    }

    #[test]
    fn parses_fractional_hours_and_small_units() {
        assert_eq!(ns("1.5h"), (90 * MINUTE) as i64);
        assert_eq!(ns("300ms"), (300 * MILLISECOND) as i64);
        assert_eq!(ns("1us"), 1_000);
        assert_eq!(ns("1µs"), 1_000);
        assert_eq!(ns("7ns"), 7);
        assert_eq!(ns("10m"), (10 * MINUTE) as i64);
    }

    #[test]
    fn rejects_what_go_rejects() {
        for text in [
            "",
            "3",
            "-",
            "s",
            ".",
            "-.",
            ".s",
            "+.s",
            "1d",
            "\u{85}\u{85}",
            "\u{ffff}",
            "1.5x",
            "10 m",
            " 10m",
            "10m ",
            "1e3s",
            "--1s",
            "+-1s",
            "1s-",
            "1h-2m",
            "9223372036854775810ns",
            "9223372036854775808ns",
            "-9223372036854775809ns",
            "9223372036854775.808us",
            "3000000h",
            "2562048h",
            "-2562048h",
            "9223372036854775807ns1ns",
        ] {
            assert!(
                text.parse::<Duration>().is_err(),
                "{text:?} should be rejected"
            );
        }
    }

    #[test]
    fn errors_name_the_cause() {
        assert_eq!(
            "10".parse::<Duration>(),
            Err(ParseDurationError::MissingUnit { input: "10".into() })
        );
        assert_eq!(
            "10d".parse::<Duration>(),
            Err(ParseDurationError::UnknownUnit {
                unit: "d".into(),
                input: "10d".into()
            })
        );
        assert_eq!(
            "".parse::<Duration>().map_err(|e| e.to_string()),
            Err("time: invalid duration \"\"".to_owned())
        );
        assert_eq!(
            "1x".parse::<Duration>().map_err(|e| e.to_string()),
            Err("time: unknown unit \"x\" in duration \"1x\"".to_owned())
        );
    }

    #[test]
    fn prints_go_test_table() {
        // Values from Go's time_test.go `durationTests`.
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (3_300_000_000, "3.3s"),
            (4 * 60 * 1_000_000_000 + 5_000_000_000, "4m5s"),
            (4 * 60 * 1_000_000_000 + 5_001_000_000, "4m5.001s"),
            (
                5 * 3_600_000_000_000 + 6 * 60_000_000_000 + 7_001_000_000,
                "5h6m7.001s",
            ),
            (8 * 60_000_000_000 + 1, "8m0.000000001s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for &(nanos, want) in cases {
            assert_eq!(Duration::from_nanos(nanos).to_string(), want);
        }
    }

    #[test]
    fn prints_canonical_forms_used_in_status_texts() {
        assert_eq!(Duration::from_mins(10).to_string(), "10m0s");
        assert_eq!(Duration::from_hours(1).to_string(), "1h0m0s");
        assert_eq!(Duration::from_secs(1).to_string(), "1s");
        assert_eq!(Duration::from_millis(300).to_string(), "300ms");
        assert_eq!(Duration::from_nanos(1_000).to_string(), "1µs");
        assert_eq!(Duration::from_secs(-90).to_string(), "-1m30s");
        assert_eq!(Duration::from_nanos(-1).to_string(), "-1ns");
        assert_eq!(
            Duration::from_nanos((HOUR + 2 * MINUTE + 3 * SECOND + 500 * MILLISECOND) as i64)
                .to_string(),
            "1h2m3.5s"
        );
        assert_eq!(
            "1.5h".parse::<Duration>().map(|d| d.to_string()),
            Ok("1h30m0s".to_owned())
        );
        assert_eq!(
            "-0".parse::<Duration>().map(|d| d.to_string()),
            Ok("0s".to_owned())
        );
        assert_eq!(
            "90s".parse::<Duration>().map(|d| d.to_string()),
            Ok("1m30s".to_owned())
        );
    }

    #[test]
    fn printed_text_parses_back_to_the_same_value() {
        for nanos in [
            0,
            1,
            999,
            1_000,
            999_999,
            1_000_000,
            1_500_000_000,
            59_999_999_999,
            3_600_000_000_000,
            i64::MAX,
            i64::MIN,
            -1,
            -1_234_567_890_123,
        ] {
            let d = Duration::from_nanos(nanos);
            assert_eq!(d.to_string().parse::<Duration>(), Ok(d), "{nanos} ns");
        }
    }

    #[test]
    fn serde_uses_the_string_form() {
        let d: Duration = serde_json::from_str("\"1h2m3.5s\"").unwrap();
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"1h2m3.5s\"");
        assert_eq!(
            serde_json::to_string(&"10m".parse::<Duration>().unwrap()).unwrap(),
            "\"10m0s\""
        );
        assert!(serde_json::from_str::<Duration>("600").is_err());
        assert!(serde_json::from_str::<Duration>("\"10 minutes\"").is_err());
        assert!(serde_json::from_str::<Duration>("null").is_err());
    }

    #[test]
    fn converts_to_std_and_jiff() {
        assert_eq!(
            Duration::from_secs(5).to_std(),
            Some(std::time::Duration::from_secs(5))
        );
        assert_eq!(Duration::from_secs(-5).to_std(), None);
        assert_eq!(
            Duration::from_secs(-5).to_signed_duration(),
            jiff::SignedDuration::from_secs(-5)
        );
        assert_eq!(
            Duration::try_from(std::time::Duration::from_millis(1500)),
            Ok(Duration::from_millis(1500))
        );
        assert!(Duration::try_from(std::time::Duration::from_secs(u64::MAX)).is_err());
        assert_eq!(Duration::from_hours(i64::MAX).as_nanos(), i64::MAX);
        assert_eq!(Duration::from_millis(1999).as_secs(), 1);
        assert_eq!(Duration::from_millis(-1999).as_secs(), -1);
    }
}
