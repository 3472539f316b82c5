//! CronJob schedules (upstream `pkg/controller/cronjob/utils.go`): parsing
//! the standard five-field syntax and `@hourly`-style descriptors with
//! croner, evaluating them in `spec.timeZone` (chrono-tz's tz database) or
//! the controller's local zone, and finding the most recent unmet schedule
//! time with upstream's guard against too many missed start times.

use std::str::FromStr;

use chrono::{DateTime, Local, TimeZone, Utc};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// Upstream's limit of missed start times before it warns (`TooManyMissedTimes`).
pub const TOO_MANY_MISSED: usize = 100;

/// A parsed schedule and the zone it runs in.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    zone: Zone,
}

#[derive(Debug, Clone, Copy)]
enum Zone {
    Local,
    Named(chrono_tz::Tz),
}

/// Why a schedule cannot be used, with upstream's event reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleError {
    /// `UnparseableSchedule` or `UnknownTimeZone`.
    pub reason: &'static str,
    /// The event note.
    pub message: String,
}

impl Schedule {
    /// Parses `schedule` (five fields or a descriptor such as `@hourly`)
    /// for `time_zone` (an IANA name; `None` is the local zone). A `TZ=` or
    /// `CRON_TZ=` prefix is refused (use `spec.timeZone`, as upstream requires).
    pub fn parse(schedule: &str, time_zone: Option<&str>) -> Result<Schedule, ScheduleError> {
        let unparseable = |why: String| ScheduleError { reason: "UnparseableSchedule", message: format!("unparseable schedule: {schedule:?} : {why}") };
        let text = schedule.trim();
        if text.starts_with("TZ=") || text.starts_with("CRON_TZ=") {
            return Err(unparseable("TZ or CRON_TZ in schedule is not supported; use spec.timeZone".into()));
        }
        let fields = text.split_whitespace().count();
        if !text.starts_with('@') && fields != 5 {
            return Err(unparseable(format!("expected exactly 5 fields, found {fields}")));
        }
        let parser = CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build();
        let cron = parser.parse(text).map_err(|e| unparseable(e.to_string()))?;
        let zone = match time_zone {
            None => Zone::Local,
            Some(name) => Zone::Named(
                chrono_tz::Tz::from_str(name)
                    .map_err(|e| ScheduleError { reason: "UnknownTimeZone", message: format!("invalid timeZone: {name:?}: {e}") })?,
            ),
        };
        Ok(Schedule { cron, zone })
    }

    /// The first schedule time strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self.zone {
            Zone::Local => next_in(&self.cron, &Local, t),
            Zone::Named(tz) => next_in(&self.cron, &tz, t),
        }
    }

    /// The last schedule time at or before `t`.
    pub fn latest_until(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self.zone {
            Zone::Local => prev_in(&self.cron, &Local, t),
            Zone::Named(tz) => prev_in(&self.cron, &tz, t),
        }
    }

    /// `t` written in the schedule's zone as RFC 3339 (the
    /// `batch.kubernetes.io/cronjob-scheduled-timestamp` annotation).
    pub fn format_in_zone(&self, t: DateTime<Utc>) -> String {
        match self.zone {
            Zone::Local => t.with_timezone(&Local).to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            Zone::Named(tz) => t.with_timezone(&tz).to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }
}

fn next_in<Z: TimeZone>(cron: &Cron, zone: &Z, t: DateTime<Utc>) -> Option<DateTime<Utc>>
where
    DateTime<Z>: croner::CronDateTime,
{
    cron.find_next_occurrence(&t.with_timezone(zone), false).ok().map(|d| d.with_timezone(&Utc))
}

fn prev_in<Z: TimeZone>(cron: &Cron, zone: &Z, t: DateTime<Utc>) -> Option<DateTime<Utc>>
where
    DateTime<Z>: croner::CronDateTime,
{
    cron.find_previous_occurrence(&t.with_timezone(zone), true).ok().map(|d| d.with_timezone(&Utc))
}

/// The schedule times a CronJob has not started yet at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missed {
    /// The most recent schedule time in the window, the one to start.
    pub most_recent: Option<DateTime<Utc>>,
    /// How many schedule times fell in the window (counted up to
    /// [`TOO_MANY_MISSED`] + 1).
    pub count: usize,
}

/// Upstream's `mostRecentScheduleTime`: schedule times after `last`
/// (`status.lastScheduleTime`, else the creation time) and at or before
/// `now`; with `starting_deadline` (seconds) the window starts no earlier
/// than `now - starting_deadline`.
pub fn missed(schedule: &Schedule, last: DateTime<Utc>, now: DateTime<Utc>, starting_deadline: Option<i64>) -> Missed {
    let mut earliest = last;
    if let Some(sds) = starting_deadline {
        let floor = now - chrono::Duration::seconds(sds);
        if floor > earliest {
            earliest = floor;
        }
    }
    let mut count = 0;
    let mut most_recent = None;
    let mut t = earliest;
    while let Some(next) = schedule.next_after(t) {
        if next > now {
            break;
        }
        count += 1;
        most_recent = Some(next);
        t = next;
        if count > TOO_MANY_MISSED {
            // Enough to warn; the one to start is the latest before now.
            most_recent = schedule.latest_until(now).or(most_recent);
            break;
        }
    }
    Missed { most_recent, count }
}

/// The Job name for schedule time `t`: `<cronjob>-<minutes since the epoch>`.
pub fn job_name(cronjob: &str, t: DateTime<Utc>) -> String {
    format!("{cronjob}-{}", t.timestamp().div_euclid(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn schedules_parse_five_fields_and_descriptors_and_refuse_tz_prefixes() {
        assert!(Schedule::parse("*/5 * * * *", Some("UTC")).is_ok());
        assert!(Schedule::parse("@hourly", Some("UTC")).is_ok());
        assert!(Schedule::parse("0 0 * * 1-5", Some("UTC")).is_ok());
        let e = Schedule::parse("TZ=UTC 0 * * * *", None).unwrap_err();
        assert_eq!(e.reason, "UnparseableSchedule");
        assert_eq!(Schedule::parse("CRON_TZ=UTC 0 * * * *", None).unwrap_err().reason, "UnparseableSchedule");
        assert_eq!(Schedule::parse("0 * * * * *", None).unwrap_err().reason, "UnparseableSchedule");
        assert_eq!(Schedule::parse("61 * * * *", None).unwrap_err().reason, "UnparseableSchedule");
        assert_eq!(Schedule::parse("0 * * * *", Some("Mars/Olympus")).unwrap_err().reason, "UnknownTimeZone");
    }

    #[test]
    fn next_schedule_times_follow_the_time_zone() {
        let daily9 = |tz| Schedule::parse("0 9 * * *", Some(tz)).unwrap();
        let t = at("2026-03-01T12:00:00Z");
        assert_eq!(daily9("UTC").next_after(t), Some(at("2026-03-02T09:00:00Z")));
        assert_eq!(daily9("America/New_York").next_after(t), Some(at("2026-03-01T14:00:00Z")));
        assert_eq!(daily9("Asia/Tokyo").next_after(t), Some(at("2026-03-02T00:00:00Z")));
        // New York moves to daylight time on 2026-03-08: 09:00 EDT is 13:00 UTC.
        assert_eq!(daily9("America/New_York").next_after(at("2026-03-08T12:00:00Z")), Some(at("2026-03-08T13:00:00Z")));
        let hourly = Schedule::parse("@hourly", Some("UTC")).unwrap();
        assert_eq!(hourly.next_after(at("2026-03-01T12:00:00Z")), Some(at("2026-03-01T13:00:00Z")));
        assert_eq!(hourly.format_in_zone(at("2026-03-01T13:00:00Z")), "2026-03-01T13:00:00Z");
        assert_eq!(daily9("Asia/Tokyo").format_in_zone(at("2026-03-02T00:00:00Z")), "2026-03-02T09:00:00+09:00");
    }

    #[test]
    fn missed_schedules_count_the_window_and_the_deadline_shortens_it() {
        let every = Schedule::parse("* * * * *", Some("UTC")).unwrap();
        let m = missed(&every, at("2026-01-01T00:00:30Z"), at("2026-01-01T00:03:10Z"), None);
        assert_eq!(m, Missed { most_recent: Some(at("2026-01-01T00:03:00Z")), count: 3 });
        let m = missed(&every, at("2026-01-01T00:00:30Z"), at("2026-01-01T00:03:10Z"), Some(30));
        assert_eq!(m, Missed { most_recent: Some(at("2026-01-01T00:03:00Z")), count: 1 });
        let m = missed(&every, at("2026-01-01T00:00:30Z"), at("2026-01-01T00:00:50Z"), None);
        assert_eq!(m, Missed { most_recent: None, count: 0 });
    }

    #[test]
    fn more_than_a_hundred_missed_times_still_start_the_latest() {
        let every = Schedule::parse("* * * * *", Some("UTC")).unwrap();
        let m = missed(&every, at("2026-01-01T00:00:00Z"), at("2026-01-02T00:00:30Z"), None);
        assert_eq!(m.count, TOO_MANY_MISSED + 1);
        assert_eq!(m.most_recent, Some(at("2026-01-02T00:00:00Z")));
    }

    #[test]
    fn job_names_carry_the_schedule_time_in_minutes() {
        assert_eq!(job_name("hello", at("2026-01-01T00:03:00Z")), "hello-29453763");
    }
}
