//! Which finished Jobs a CronJob keeps (upstream's `cleanupFinishedJobs`):
//! the newest `successfulJobsHistoryLimit` that completed and the newest
//! `failedJobsHistoryLimit` that failed; older ones are deleted.

use k8s_openapi::api::batch::v1::Job;

/// How a Job ended: `Some("Complete")`, `Some("Failed")`, or `None` while it runs.
pub fn finished(job: &Job) -> Option<&'static str> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    for c in conds.iter().filter(|c| c.status == "True") {
        match c.type_.as_str() {
            "Complete" => return Some("Complete"),
            "Failed" => return Some("Failed"),
            _ => {}
        }
    }
    None
}

/// A finished Job as the cleanup sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The Job's name.
    pub name: String,
    /// Whether it completed (else it failed).
    pub succeeded: bool,
    /// Its start time (else creation time), seconds since the epoch; older goes first.
    pub started: i64,
}

/// Names of the Jobs to delete so at most `successful_limit` completed and
/// `failed_limit` failed Jobs remain (`None`: keep all), oldest first.
pub fn to_delete(jobs: &[Finished], successful_limit: Option<i32>, failed_limit: Option<i32>) -> Vec<String> {
    let mut out = Vec::new();
    for (succeeded, limit) in [(true, successful_limit), (false, failed_limit)] {
        let Some(limit) = limit else { continue };
        let mut group: Vec<&Finished> = jobs.iter().filter(|j| j.succeeded == succeeded).collect();
        group.sort_by(|a, b| a.started.cmp(&b.started).then_with(|| a.name.cmp(&b.name)));
        let keep = usize::try_from(limit.max(0)).unwrap_or(0);
        let excess = group.len().saturating_sub(keep);
        out.extend(group[..excess].iter().map(|j| j.name.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str, succeeded: bool, started: i64) -> Finished {
        Finished { name: name.into(), succeeded, started }
    }

    #[test]
    fn history_keeps_the_newest_within_each_limit() {
        let jobs = [f("s1", true, 1), f("s3", true, 3), f("s2", true, 2), f("f1", false, 1), f("f2", false, 2)];
        assert_eq!(to_delete(&jobs, Some(2), Some(1)), vec!["s1", "f1"]);
        assert_eq!(to_delete(&jobs, Some(0), Some(0)), vec!["s1", "s2", "s3", "f1", "f2"]);
        assert_eq!(to_delete(&jobs, None, Some(5)), Vec::<String>::new());
    }
}
