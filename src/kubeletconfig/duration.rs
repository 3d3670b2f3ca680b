//! Go `time.Duration` / `metav1.Duration` compatible durations.
//!
//! The kubelet config file and flags spell durations the way Go does
//! (`"20s"`, `"1m0s"`, `"1h2m3.5s"`, `"300ms"`), so this type parses and
//! prints exactly that grammar. Go durations may be negative; a
//! `std::time::Duration` cannot, so negative values are rejected at parse
//! time with an explicit message rather than silently clamped.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

const NANOS_PER_MICRO: u128 = 1_000;
const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SEC: u128 = 1_000_000_000;
const NANOS_PER_MIN: u128 = 60 * NANOS_PER_SEC;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MIN;
/// Go stores durations in an int64 of nanoseconds; anything larger overflows there.
const MAX_GO_NANOS: u128 = i64::MAX as u128;
/// Fraction digits beyond this cannot change a nanosecond-resolution result.
const MAX_FRACTION_DIGITS: u32 = 18;

/// A non-negative duration that reads and writes Go's duration syntax.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    pub const ZERO: Duration = Duration(std::time::Duration::ZERO);

    pub const fn from_secs(secs: u64) -> Self {
        Duration(std::time::Duration::from_secs(secs))
    }

    pub const fn from_millis(millis: u64) -> Self {
        Duration(std::time::Duration::from_millis(millis))
    }

    pub const fn from_mins(mins: u64) -> Self {
        Duration(std::time::Duration::from_secs(mins * 60))
    }

    pub const fn from_hours(hours: u64) -> Self {
        Duration(std::time::Duration::from_secs(hours * 3600))
    }

    /// The underlying std duration.
    pub const fn std(self) -> std::time::Duration {
        self.0
    }

    pub fn is_zero(self) -> bool {
        self.0.is_zero()
    }

    /// Parses Go duration syntax: `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+` or a bare `0`.
    pub fn parse(s: &str) -> Result<Self, DurationError> {
        parse_go_duration(s).map(|nanos| Duration(nanos_to_std(nanos)))
    }
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Self {
        Duration(d)
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> Self {
        d.0
    }
}

impl FromStr for Duration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Duration::parse(s)
    }
}

/// Why a duration string was rejected; the message quotes the input like Go does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurationError {
    input: String,
    reason: &'static str,
    detail: Option<String>,
}

impl DurationError {
    fn new(input: &str, reason: &'static str) -> Self {
        DurationError {
            input: input.to_string(),
            reason,
            detail: None,
        }
    }

    fn with_detail(input: &str, reason: &'static str, detail: String) -> Self {
        DurationError {
            input: input.to_string(),
            reason,
            detail: Some(detail),
        }
    }
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.detail {
            Some(d) => write!(f, "{} {:?} in duration {:?}", self.reason, d, self.input),
            None => write!(f, "{} {:?}", self.reason, self.input),
        }
    }
}

impl std::error::Error for DurationError {}

fn nanos_to_std(nanos: u128) -> std::time::Duration {
    // nanos <= i64::MAX, so the split below cannot overflow u64.
    let secs = (nanos / NANOS_PER_SEC) as u64;
    let sub = (nanos % NANOS_PER_SEC) as u32;
    std::time::Duration::new(secs, sub)
}

fn unit_nanos(unit: &str) -> Option<u128> {
    match unit {
        "ns" => Some(1),
        // Go accepts ASCII "us", U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU.
        "us" | "\u{b5}s" | "\u{3bc}s" => Some(NANOS_PER_MICRO),
        "ms" => Some(NANOS_PER_MILLI),
        "s" => Some(NANOS_PER_SEC),
        "m" => Some(NANOS_PER_MIN),
        "h" => Some(NANOS_PER_HOUR),
        _ => None,
    }
}

/// Splits off the leading run of ASCII digits.
fn take_digits(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// Nanoseconds contributed by one `<int>[.<frac>]<unit>` component.
fn component_nanos(int: &str, frac: &str, unit: u128, orig: &str) -> Result<u128, DurationError> {
    let overflow = || DurationError::new(orig, "time: invalid duration");
    let mut value: u128 = 0;
    for b in int.bytes() {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u128::from(b - b'0')))
            .filter(|v| *v <= MAX_GO_NANOS)
            .ok_or_else(overflow)?;
    }
    let mut total = value.checked_mul(unit).ok_or_else(overflow)?;
    // Exact integer arithmetic for the fraction (Go uses float64 here and
    // truncates; for every representable input the results agree to the ns).
    let (mut numer, mut scale) = (0u128, 1u128);
    for b in frac.bytes().take(MAX_FRACTION_DIGITS as usize) {
        numer = numer * 10 + u128::from(b - b'0');
        scale *= 10;
    }
    total = total
        .checked_add(numer * unit / scale)
        .ok_or_else(overflow)?;
    Ok(total)
}

/// Returns the absolute value in nanoseconds, rejecting negative non-zero values.
fn parse_go_duration(orig: &str) -> Result<u128, DurationError> {
    let invalid = || DurationError::new(orig, "time: invalid duration");
    let (neg, mut s) = match orig.as_bytes().first() {
        Some(b'-') => (true, &orig[1..]),
        Some(b'+') => (false, &orig[1..]),
        _ => (false, orig),
    };
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !s.is_empty() {
        let (int, rest) = take_digits(s);
        let (frac, rest) = match rest.strip_prefix('.') {
            Some(after) => take_digits(after),
            None => ("", rest),
        };
        // Go requires at least one digit on either side of the optional dot.
        if int.is_empty() && frac.is_empty() {
            return Err(invalid());
        }
        let unit_end = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (unit, rest) = rest.split_at(unit_end);
        if unit.is_empty() {
            return Err(DurationError::new(orig, "time: missing unit in duration"));
        }
        let unit_ns = unit_nanos(unit).ok_or_else(|| {
            DurationError::with_detail(orig, "time: unknown unit", unit.to_string())
        })?;
        total = total
            .checked_add(component_nanos(int, frac, unit_ns, orig)?)
            .filter(|t| *t <= MAX_GO_NANOS)
            .ok_or_else(invalid)?;
        s = rest;
    }
    if neg && total != 0 {
        return Err(DurationError::new(
            orig,
            "negative durations are not supported:",
        ));
    }
    Ok(total)
}

/// Appends `v / 10^prec` as a decimal fraction with trailing zeros removed
/// (no dot at all when the fraction is zero), returning the integer part.
fn split_frac(v: u128, prec: u32) -> (u128, String) {
    let pow = 10u128.pow(prec);
    let (int, frac) = (v / pow, v % pow);
    if frac == 0 {
        return (int, String::new());
    }
    let digits = format!("{:0width$}", frac, width = prec as usize);
    (int, format!(".{}", digits.trim_end_matches('0')))
}

/// Formats like Go's `time.Duration.String()`.
pub(crate) fn format_go_duration(nanos: u128) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < NANOS_PER_SEC {
        // Sub-second values use the largest unit that keeps an integer part.
        let (prec, unit) = if nanos < NANOS_PER_MICRO {
            (0, "ns")
        } else if nanos < NANOS_PER_MILLI {
            (3, "\u{b5}s")
        } else {
            (6, "ms")
        };
        let (int, frac) = split_frac(nanos, prec);
        return format!("{int}{frac}{unit}");
    }
    let (secs, frac) = split_frac(nanos, 9);
    let (mins, secs) = (secs / 60, secs % 60);
    let (hours, mins) = (mins / 60, mins % 60);
    if hours > 0 {
        format!("{hours}h{mins}m{secs}{frac}s")
    } else if mins > 0 {
        format!("{mins}m{secs}{frac}s")
    } else {
        format!("{secs}{frac}s")
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_go_duration(self.0.as_nanos()))
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Parses inside `visit_str` so the YAML deserializer can attach the field
/// path and line/column to a parse error.
struct DurationVisitor;

impl serde::de::Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string such as \"1m30s\"")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Duration, E> {
        Duration::parse(s).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for Duration {
    /// metav1.Duration only accepts JSON strings; a bare number is an error upstream too.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(DurationVisitor)
    }
}

/// Deserializes either a duration string or an integer number of
/// nanoseconds, as component-base's `TimeOrMetaDuration` does for
/// `logging.flushFrequency` (kubeadm writes `flushFrequency: 0`).
pub(crate) fn deserialize_time_or_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Nanos(i64),
        Text(String),
    }
    match Raw::deserialize(deserializer)? {
        Raw::Nanos(n) if n >= 0 => Ok(Duration(std::time::Duration::from_nanos(n as u64))),
        Raw::Nanos(n) => Err(serde::de::Error::custom(format!(
            "negative durations are not supported: {n}"
        ))),
        Raw::Text(s) => Duration::parse(&s).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> std::time::Duration {
        match Duration::parse(s) {
            Ok(v) => v.0,
            Err(e) => panic!("parse {s:?}: {e}"),
        }
    }

    #[test]
    fn parses_go_syntax() {
        use std::time::Duration as S;
        assert_eq!(d("0"), S::ZERO);
        assert_eq!(d("0s"), S::ZERO);
        assert_eq!(d("-0"), S::ZERO);
        assert_eq!(d("+5s"), S::from_secs(5));
        assert_eq!(d("20s"), S::from_secs(20));
        assert_eq!(d("1m0s"), S::from_secs(60));
        assert_eq!(d("1h"), S::from_secs(3600));
        assert_eq!(d("2h45m"), S::from_secs(2 * 3600 + 45 * 60));
        assert_eq!(d("1.5s"), S::from_millis(1500));
        assert_eq!(d("300ms"), S::from_millis(300));
        assert_eq!(d("1h2m3.5s"), S::from_millis(3_723_500));
        assert_eq!(d(".5s"), S::from_millis(500));
        assert_eq!(d("5.s"), S::from_secs(5));
        assert_eq!(d("1.5h"), S::from_secs(5400));
        assert_eq!(d("10us"), S::from_micros(10));
        assert_eq!(d("10\u{b5}s"), S::from_micros(10));
        assert_eq!(d("10\u{3bc}s"), S::from_micros(10));
        assert_eq!(d("7ns"), S::from_nanos(7));
        assert_eq!(d("1s500ms"), S::from_millis(1500));
        assert_eq!(d("0.000000001s"), S::from_nanos(1));
    }

    #[test]
    fn rejects_invalid() {
        for bad in [
            "",
            "-",
            "+",
            "s",
            ".s",
            "1",
            "10",
            "1x",
            "1.2.3s",
            "1 s",
            "-1s",
            "-1m0s",
            " 1s",
            "1S",
            "1sec",
            "9999999999999999999h",
        ] {
            assert!(Duration::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn error_messages_name_input() {
        let e = Duration::parse("5x").unwrap_err().to_string();
        assert!(
            e.contains("unknown unit") && e.contains("\"x\"") && e.contains("\"5x\""),
            "{e}"
        );
        let e = Duration::parse("10").unwrap_err().to_string();
        assert!(e.contains("missing unit"), "{e}");
        let e = Duration::parse("-3s").unwrap_err().to_string();
        assert!(e.contains("negative"), "{e}");
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(u64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1\u{b5}s"),
            (2_200_000, "2.2ms"),
            (300_000_000, "300ms"),
            (1_500_000_000, "1.5s"),
            (20_000_000_000, "20s"),
            (60_000_000_000, "1m0s"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (9_900_000_000_000, "2h45m0s"),
            (3_723_500_000_000, "1h2m3.5s"),
            (4 * 3_600_000_000_000, "4h0m0s"),
        ];
        for (nanos, want) in cases {
            let got = Duration(std::time::Duration::from_nanos(*nanos)).to_string();
            assert_eq!(&got, want, "nanos {nanos}");
        }
    }

    #[test]
    fn round_trips() {
        for s in [
            "0s",
            "1m0s",
            "1h0m0s",
            "2h45m0s",
            "1.5s",
            "300ms",
            "1h2m3.5s",
            "20s",
            "1.1\u{b5}s",
            "7ns",
        ] {
            assert_eq!(
                Duration::parse(s).map(|v| v.to_string()).ok().as_deref(),
                Some(s)
            );
        }
        // Non-canonical inputs normalise to Go's canonical spelling.
        for (input, canonical) in [("1h", "1h0m0s"), ("2h45m", "2h45m0s"), ("90s", "1m30s")] {
            assert_eq!(
                Duration::parse(input)
                    .map(|v| v.to_string())
                    .ok()
                    .as_deref(),
                Some(canonical)
            );
        }
    }

    #[test]
    fn serde_uses_strings() {
        let v: Duration = serde_json::from_str("\"2m\"").expect("string form");
        assert_eq!(v, Duration::from_mins(2));
        assert_eq!(serde_json::to_string(&v).ok().as_deref(), Some("\"2m0s\""));
        assert!(serde_json::from_str::<Duration>("120").is_err());
        assert!(serde_json::from_str::<Duration>("\"-1s\"").is_err());
    }
}
