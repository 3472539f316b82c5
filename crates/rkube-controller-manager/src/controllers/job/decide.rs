//! Pure decisions of the job controller (upstream `pkg/controller/job`,
//! `job_controller.go`, `indexed_job_utils.go`, `backoff_utils.go`): how
//! many pods to create or delete, which completion indexes are missing,
//! the pod-creation backoff and the terminal conditions. No I/O here.

use std::collections::BTreeSet;
use std::time::Duration;

/// Upstream's `DefaultJobPodFailureBackOff`: the delay after the first failure.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);
/// Upstream's `MaxJobPodFailureBackOff`: the cap of the doubling delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(360);

/// What to do with a NonIndexed job's active pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Create this many pods.
    Create(usize),
    /// Delete this many active pods.
    Delete(usize),
    /// Leave the active pods as they are.
    Steady,
}

/// Active pods a NonIndexed job wants (upstream's `manageJob`):
/// `0` when suspended; with `completions` unset (a work queue), `parallelism`
/// until a pod succeeds, then no new pods (the running ones finish);
/// otherwise `min(parallelism, completions - succeeded)`, never negative.
/// `active` counts the job's pods that are neither terminal nor deleted.
pub fn scale(suspended: bool, parallelism: i32, completions: Option<i32>, succeeded: i32, active: usize) -> Scale {
    let parallelism = usize::try_from(parallelism.max(0)).unwrap_or(0);
    let want = if suspended {
        0
    } else {
        match completions {
            None if succeeded > 0 => active.min(parallelism),
            None => parallelism,
            Some(c) => parallelism.min(usize::try_from((c - succeeded).max(0)).unwrap_or(0)),
        }
    };
    match active.cmp(&want) {
        std::cmp::Ordering::Less => Scale::Create(want - active),
        std::cmp::Ordering::Greater => Scale::Delete(active - want),
        std::cmp::Ordering::Equal => Scale::Steady,
    }
}

/// Completion indexes an Indexed job should start pods for now: the lowest
/// indexes in `0..completions` neither succeeded nor active, at most
/// `parallelism - active` of them (none when suspended).
pub fn missing_indexes(completions: i32, parallelism: i32, succeeded: &BTreeSet<i32>, active: &BTreeSet<i32>, active_count: usize, suspended: bool) -> Vec<i32> {
    if suspended {
        return Vec::new();
    }
    let room = usize::try_from(parallelism.max(0)).unwrap_or(0).saturating_sub(active_count);
    (0..completions.max(0)).filter(|i| !succeeded.contains(i) && !active.contains(i)).take(room).collect()
}

/// The message of the first `successPolicy` rule an Indexed job's
/// `completed` indexes satisfy (`Matched rules at index <i>`), upstream's
/// `matchSuccessPolicy` (KEP-3998). A rule with `succeededIndexes` needs
/// all of them succeeded, or `succeededCount` of them when it sets both; a
/// rule with only `succeededCount` needs that many succeeded indexes. A rule
/// whose `succeededIndexes` names no index below `completions` is skipped.
pub fn success_policy_met(rules: &[k8s_openapi::api::batch::v1::SuccessPolicyRule], completions: i32, completed: &BTreeSet<i32>) -> Option<String> {
    if completed.is_empty() {
        return None;
    }
    let at_least = |n: Option<i32>| n.and_then(|n| usize::try_from(n).ok());
    rules.iter().position(|rule| match (&rule.succeeded_indexes, at_least(rule.succeeded_count)) {
        (Some(text), count) => {
            let required = parse_indexes(text, completions);
            let done = required.intersection(completed).count();
            !required.is_empty() && done >= count.unwrap_or(required.len())
        }
        (None, Some(count)) => completed.len() >= count,
        (None, None) => false,
    })
    .map(|i| format!("Matched rules at index {i}"))
}

/// Upstream's `completedIndexes` text: sorted, comma separated, with runs of
/// three or more consecutive indexes written `a-b` (`"0-2,5"`).
pub fn format_indexes(indexes: &BTreeSet<i32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        match end - start {
            0 => parts.push(start.to_string()),
            1 => parts.push(format!("{start},{end}")),
            _ => parts.push(format!("{start}-{end}")),
        }
    }
    parts.join(",")
}

/// Parses `completedIndexes` (`"0-2,5"`), keeping indexes below
/// `completions`; malformed parts are skipped (as upstream's parser does).
pub fn parse_indexes(text: &str, completions: i32) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<i32>(), b.parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        if let (Ok(lo), Ok(hi)) = (lo, hi) {
            out.extend((lo.max(0)..=hi).filter(|i| *i < completions));
        }
    }
    out
}

/// The pod-creation delay after `failures` consecutive failures (upstream's
/// backoff records): `base * 2^(failures-1)` capped at `max`; zero without
/// failures.
pub fn backoff_delay(failures: u32, base: Duration, max: Duration) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32.checked_shl(failures - 1).unwrap_or(u32::MAX);
    base.checked_mul(factor).unwrap_or(max).min(max)
}

/// Why a job fails, with upstream's condition reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `BackoffLimitExceeded`, `DeadlineExceeded` or `PodFailurePolicy`.
    pub reason: &'static str,
    /// The condition message (and the Warning event's note).
    pub message: String,
}

/// `BackoffLimitExceeded`: more pods failed than `backoffLimit` allows.
pub fn backoff_limit_exceeded(failed: i32, backoff_limit: i32) -> Option<Failure> {
    (failed > backoff_limit)
        .then(|| Failure { reason: "BackoffLimitExceeded", message: "Job has reached the specified backoff limit".into() })
}

/// `DeadlineExceeded`: running longer than `activeDeadlineSeconds` since
/// `start` (seconds since the epoch) at `now`; `Ok(remaining)` otherwise,
/// the time to check again (`None` without a deadline).
pub fn past_deadline(start: Option<i64>, active_deadline: Option<i64>, now: i64) -> Result<Option<Duration>, Failure> {
    let (Some(start), Some(limit)) = (start, active_deadline) else { return Ok(None) };
    let left = start + limit - now;
    if left <= 0 {
        return Err(Failure { reason: "DeadlineExceeded", message: "Job was active longer than specified deadline".into() });
    }
    Ok(Some(Duration::from_secs(u64::try_from(left).unwrap_or(0))))
}

/// Whether a job has every completion it needs: `completions` pods
/// succeeded (or every index for Indexed), or, with `completions` unset,
/// one pod succeeded and none remains active.
pub fn success_reached(completions: Option<i32>, succeeded: i32, active: usize) -> bool {
    match completions {
        Some(c) => succeeded >= c,
        None => succeeded > 0 && active == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_pods_follow_parallelism_completions_and_suspend() {
        let cases = [
            // (suspended, parallelism, completions, succeeded, active, expected)
            (false, 2, Some(3), 0, 0, Scale::Create(2)),
            (false, 2, Some(3), 2, 1, Scale::Steady),
            (false, 2, Some(3), 2, 0, Scale::Create(1)),
            (false, 2, Some(3), 3, 0, Scale::Steady),
            (false, 1, Some(3), 0, 3, Scale::Delete(2)),
            (true, 2, Some(3), 0, 2, Scale::Delete(2)),
            (false, 3, None, 0, 1, Scale::Create(2)),
            (false, 3, None, 1, 2, Scale::Steady),
            (false, 0, Some(3), 0, 1, Scale::Delete(1)),
        ];
        for (suspended, par, comp, succ, active, want) in cases {
            assert_eq!(scale(suspended, par, comp, succ, active), want, "{suspended} {par} {comp:?} {succ} {active}");
        }
    }

    #[test]
    fn indexed_jobs_start_the_lowest_missing_indexes_within_parallelism() {
        let done: BTreeSet<i32> = [0, 2].into();
        let active: BTreeSet<i32> = [1].into();
        assert_eq!(missing_indexes(6, 3, &done, &active, 1, false), vec![3, 4]);
        assert_eq!(missing_indexes(3, 3, &done, &active, 1, false), Vec::<i32>::new());
        assert_eq!(missing_indexes(6, 3, &done, &active, 1, true), Vec::<i32>::new());
    }

    #[test]
    fn completed_indexes_use_upstreams_interval_text() {
        let set: BTreeSet<i32> = [0, 1, 2, 4, 5, 7].into();
        assert_eq!(format_indexes(&set), "0-2,4,5,7");
        assert_eq!(parse_indexes("0-2,4,5,7", 10), set);
        assert_eq!(parse_indexes("0-2,9", 3), [0, 1, 2].into());
        assert_eq!(parse_indexes("", 3), BTreeSet::new());
    }

    #[test]
    fn backoff_doubles_from_ten_seconds_up_to_six_minutes() {
        let d = |n| backoff_delay(n, DEFAULT_BACKOFF, MAX_BACKOFF).as_secs();
        assert_eq!([d(0), d(1), d(2), d(3), d(4), d(5), d(6), d(7), d(40)], [0, 10, 20, 40, 80, 160, 320, 360, 360]);
    }

    #[test]
    fn failures_past_the_backoff_limit_or_the_deadline_fail_the_job() {
        assert_eq!(backoff_limit_exceeded(1, 1), None);
        assert_eq!(backoff_limit_exceeded(2, 1).map(|f| f.reason), Some("BackoffLimitExceeded"));
        assert_eq!(past_deadline(Some(100), Some(30), 120), Ok(Some(Duration::from_secs(10))));
        assert_eq!(past_deadline(Some(100), Some(30), 130).map_err(|f| f.reason), Err("DeadlineExceeded"));
        assert_eq!(past_deadline(None, Some(30), 130), Ok(None));
    }

    #[test]
    fn success_needs_all_completions_or_one_success_of_a_work_queue() {
        assert!(success_reached(Some(3), 3, 0));
        assert!(!success_reached(Some(3), 2, 1));
        assert!(!success_reached(None, 1, 1));
        assert!(success_reached(None, 1, 0));
    }

    #[test]
    fn success_policy_rules_match_in_order_on_indexes_and_counts() {
        let rule = |indexes: Option<&str>, count: Option<i32>| k8s_openapi::api::batch::v1::SuccessPolicyRule {
            succeeded_indexes: indexes.map(String::from),
            succeeded_count: count,
        };
        let done: BTreeSet<i32> = [0, 2, 3].into();
        // All of the named indexes.
        assert_eq!(success_policy_met(&[rule(Some("0,2"), None)], 5, &done).as_deref(), Some("Matched rules at index 0"));
        assert_eq!(success_policy_met(&[rule(Some("0-1"), None)], 5, &done), None);
        // A count among the named indexes, or overall.
        assert_eq!(success_policy_met(&[rule(Some("0-1"), None), rule(Some("1-4"), Some(2))], 5, &done).as_deref(), Some("Matched rules at index 1"));
        assert_eq!(success_policy_met(&[rule(None, Some(4))], 5, &done), None);
        assert_eq!(success_policy_met(&[rule(None, Some(3))], 5, &done).as_deref(), Some("Matched rules at index 0"));
        // Indexes past completions name nothing; nothing succeeded matches nothing.
        assert_eq!(success_policy_met(&[rule(Some("7-9"), None)], 5, &done), None);
        assert_eq!(success_policy_met(&[rule(None, Some(0))], 5, &BTreeSet::new()), None);
    }
}
