//! Timestamps in the formats Kubernetes serializes.
//!
//! - `metav1.Time` (`creationTimestamp`, `deletionTimestamp`, conditions):
//!   RFC 3339 in UTC with seconds precision, `2006-01-02T15:04:05Z`.
//! - `metav1.MicroTime` (`managedFields[].time` is a `Time`, but events'
//!   `eventTime`, leases' `renewTime` and `acquireTime` are `MicroTime`):
//!   microseconds, `2006-01-02T15:04:05.000000Z`.

use chrono::{DateTime, SecondsFormat, Utc};

/// The current time as a `metav1.Time` string, e.g. `2024-05-01T12:00:00Z`.
pub fn now_rfc3339() -> String {
    format_rfc3339(Utc::now())
}

/// The current time as a `metav1.MicroTime` string, e.g. `2024-05-01T12:00:00.123456Z`.
pub fn now_rfc3339_micros() -> String {
    format_rfc3339_micros(Utc::now())
}

/// Formats `t` as a `metav1.Time` string (seconds precision, `Z`).
pub fn format_rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Formats `t` as a `metav1.MicroTime` string (always six fractional digits, `Z`).
pub fn format_rfc3339_micros(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Parses an RFC 3339 timestamp (any offset, any fraction) into UTC, as
/// `metav1.Time` unmarshalling accepts. `None` when it is not RFC 3339.
pub fn parse_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Parses Go's `time.Duration` string form (`1h0m0s`, `1.5s`, `300ms`,
/// `-2m`, `0s`; units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`) into
/// nanoseconds, as Go's `time.ParseDuration`; `None` when it is not one.
/// The one parser of every duration rkube reads: flags, protobuf
/// `metav1.Duration`s.
pub fn parse_go_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += n * scale;
    }
    if !total.is_finite() || total > i64::MAX as f64 {
        return None;
    }
    let ns = total.round() as i64;
    Some(if neg { -ns } else { ns })
}
/// Go's `time.Duration.String()` for a nanosecond count, e.g. `1h0m0s`, `1.5s`, `300ms`,
/// `1.5µs`, `-2m0.5s`: the inverse of [`parse_go_duration`].
pub fn format_go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let neg = ns < 0;
    let u = ns.unsigned_abs();
    let mut s = if u < 1_000_000_000 {
        let (unit, div) = if u < 1_000 { ("ns", 1) } else if u < 1_000_000 { ("µs", 1_000) } else { ("ms", 1_000_000) };
        format!("{}{}", trim_frac(u, div), unit)
    } else {
        let secs_total = u / 1_000_000_000;
        let frac = u % 1_000_000_000;
        let (h, m, sec) = (secs_total / 3600, (secs_total / 60) % 60, secs_total % 60);
        let secs = trim_frac(sec * 1_000_000_000 + frac, 1_000_000_000);
        if h > 0 {
            format!("{h}h{m}m{secs}s")
        } else if m > 0 {
            format!("{m}m{secs}s")
        } else {
            format!("{secs}s")
        }
    };
    if neg {
        s.insert(0, '-');
    }
    s
}

fn trim_frac(v: u64, div: u64) -> String {
    let (whole, frac) = (v / div, v % div);
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let f = format!("{frac:0width$}");
    format!("{whole}.{}", f.trim_end_matches('0'))
}

