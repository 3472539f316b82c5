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
