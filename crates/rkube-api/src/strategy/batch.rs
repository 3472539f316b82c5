//! Strategies of batch/v1 kinds (`pkg/apis/batch/v1/defaults.go`,
//! `pkg/apis/batch/validation/validation.go`, `pkg/registry/batch/*/strategy.go`).

use serde_json::{json, Map, Value};

use super::pod::{pod_spec_defaults, validate_pod_spec};
use super::{child, default_field, immutable, non_negative, reset_status, selector_matches_template, Object, Strategy};
use crate::field_error::FieldError;

/// Restart policies a job's pods may have.
const JOB_RESTART: &[&str] = &["OnFailure", "Never"];

/// `SetDefaults_Job`: when neither completions nor parallelism is set both
/// become 1; parallelism 1, backoffLimit 6 (MaxInt32 with a per-index
/// limit), NonIndexed, not suspended, and the pod replacement policy.
fn job_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    let unset = |spec: &Object, k: &str| spec.get(k).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    default_field(spec, "parallelism", json!(1));
    let backoff = if unset(spec, "backoffLimitPerIndex") { 6 } else { i32::MAX };
    default_field(spec, "backoffLimit", json!(backoff));
    default_field(spec, "completionMode", json!("NonIndexed"));
    default_field(spec, "suspend", json!(false));
    let replacement = if unset(spec, "podFailurePolicy") { "TerminatingOrFailed" } else { "Failed" };
    default_field(spec, "podReplacementPolicy", json!(replacement));
    let template = child(spec, "template");
    pod_spec_defaults(child(template, "spec"));
}

/// Labels the job controller selects a job's pods by (upstream
/// `batch.kubernetes.io/controller-uid` and `batch.kubernetes.io/job-name`,
/// plus the legacy `controller-uid` and `job-name`).
fn job_prepare(obj: &mut Object) {
    reset_status(obj);
    let manual = super::at(obj, "/spec/manualSelector").and_then(Value::as_bool) == Some(true);
    if manual {
        return;
    }
    let uid = super::at(obj, "/metadata/uid").and_then(Value::as_str).unwrap_or("").to_string();
    let name = super::at(obj, "/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let spec = child(obj, "spec");
    let mut match_labels = Map::new();
    match_labels.insert("batch.kubernetes.io/controller-uid".into(), json!(uid));
    spec.insert("selector".into(), json!({"matchLabels": match_labels}));
    let labels = child(child(child(spec, "template"), "metadata"), "labels");
    labels.insert("batch.kubernetes.io/controller-uid".into(), json!(uid));
    labels.insert("batch.kubernetes.io/job-name".into(), json!(name));
    labels.insert("controller-uid".into(), json!(uid));
    labels.insert("job-name".into(), json!(name));
}

fn job_spec_validate(obj: &Value, base: &str, errs: &mut Vec<FieldError>) {
    for f in ["parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"] {
        non_negative(obj, &format!("/{}/{f}", base.replace('.', "/")), &format!("{base}.{f}"), errs);
    }
    if let Some(n) = obj.pointer(&format!("/{}/activeDeadlineSeconds", base.replace('.', "/"))).and_then(Value::as_i64) {
        if n <= 0 {
            errs.push(FieldError::invalid_json(
                &format!("{base}.activeDeadlineSeconds"),
                &Value::from(n),
                "must be greater than 0",
            ));
        }
    }
    if let Some(spec) = obj.pointer(&format!("/{}", base.replace('.', "/"))) {
        per_index_validate(spec, base, errs);
    }
    let template_spec = obj.pointer(&format!("/{}/template/spec", base.replace('.', "/")));
    validate_pod_spec(template_spec, &format!("{base}.template.spec"), JOB_RESTART, errs);
    if template_spec.and_then(|s| s.get("restartPolicy")).is_none() && template_spec.is_some() {
        errs.push(FieldError::required(&format!("{base}.template.spec.restartPolicy"), ""));
    }
}

/// The most completions, and failed indexes, a job with
/// `backoffLimitPerIndex` may have (upstream
/// `maxCompletionsForBackoffLimitPerIndex`, `maxFailedIndexesLimitForBackoffLimitPerIndex`).
const MAX_PER_INDEX: i64 = 100_000;

/// Upstream's checks of `backoffLimitPerIndex` and `maxFailedIndexes`
/// (KEP-3850, `validateJobSpec`): non-negative, Indexed jobs only,
/// `maxFailedIndexes` only with a per-index limit and at most `completions`.
fn per_index_validate(spec: &Value, base: &str, errs: &mut Vec<FieldError>) {
    let int = |k: &str| spec.get(k).and_then(Value::as_i64);
    let (limit, max_failed, completions) = (int("backoffLimitPerIndex"), int("maxFailedIndexes"), int("completions"));
    for (k, v) in [("backoffLimitPerIndex", limit), ("maxFailedIndexes", max_failed)] {
        if let Some(n) = v.filter(|n| *n < 0) {
            errs.push(FieldError::invalid_json(&format!("{base}.{k}"), &Value::from(n), "must be greater than or equal to 0"));
        }
    }
    if max_failed.is_some() && limit.is_none() {
        errs.push(FieldError::required(&format!("{base}.backoffLimitPerIndex"), "when maxFailedIndexes is specified"));
    }
    if spec.get("completionMode").and_then(Value::as_str) != Some("Indexed") {
        if let Some(n) = limit {
            errs.push(FieldError::invalid_json(&format!("{base}.backoffLimitPerIndex"), &Value::from(n), "requires indexed completion mode"));
        }
        return;
    }
    if let (Some(m), Some(c)) = (max_failed, completions) {
        if m > c {
            errs.push(FieldError::invalid_json(&format!("{base}.maxFailedIndexes"), &Value::from(m), "must be less than or equal to completions"));
        }
    }
    if let Some(m) = max_failed.filter(|m| *m > MAX_PER_INDEX) {
        errs.push(FieldError::invalid_json(&format!("{base}.maxFailedIndexes"), &Value::from(m), format!("must be less than or equal to {MAX_PER_INDEX}")));
    }
    if let Some(c) = completions.filter(|c| *c > MAX_PER_INDEX && limit.is_some()) {
        errs.push(FieldError::invalid_json(
            &format!("{base}.completions"),
            &Value::from(c),
            format!("must be less than or equal to {MAX_PER_INDEX} when backoffLimitPerIndex is specified"),
        ));
    }
}

/// Rules a `successPolicy` may have (upstream `maxSuccessPolicyRule`).
const MAX_SUCCESS_POLICY_RULES: usize = 20;

/// Bytes a rule's `succeededIndexes` may have (upstream
/// `maxJobSuccessPolicySucceededIndexesLimit`).
const MAX_SUCCEEDED_INDEXES_BYTES: usize = 64 * 1024;

/// Upstream's `validateSuccessPolicy` (KEP-3998): Indexed jobs only; 1 to 20
/// rules, each naming `succeededIndexes` (an indexes text below
/// `completions`) or `succeededCount` (at most `completions`, and at most the
/// number of indexes named).
fn success_policy_validate(spec: &Value, errs: &mut Vec<FieldError>) {
    let Some(policy) = spec.get("successPolicy").filter(|p| !p.is_null()) else { return };
    if spec.get("completionMode").and_then(Value::as_str) != Some("Indexed") {
        errs.push(FieldError::invalid_rendered("spec.successPolicy", policy.to_string(), "requires indexed completion mode"));
        return;
    }
    let rules = policy.get("rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if rules.is_empty() {
        errs.push(FieldError::required("spec.successPolicy.rules", "at least one rules must be specified when the successPolicy is specified"));
    }
    if rules.len() > MAX_SUCCESS_POLICY_RULES {
        errs.push(FieldError::too_many("spec.successPolicy.rules", rules.len(), MAX_SUCCESS_POLICY_RULES));
    }
    let completions = spec.get("completions").and_then(Value::as_i64).unwrap_or(0);
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("spec.successPolicy.rules[{i}]");
        let indexes = rule.get("succeededIndexes").and_then(Value::as_str);
        let count = rule.get("succeededCount").and_then(Value::as_i64);
        if indexes.is_none() && count.is_none() {
            errs.push(FieldError::required(&path, "at least one of succeededCount or succeededIndexes must be specified"));
        }
        let mut named = 0;
        if let Some(text) = indexes {
            let field = format!("{path}.succeededIndexes");
            if text.len() > MAX_SUCCEEDED_INDEXES_BYTES {
                errs.push(FieldError::too_long(&field, MAX_SUCCEEDED_INDEXES_BYTES));
            }
            match count_indexes(text, completions) {
                Ok(n) => named = n,
                Err(e) => errs.push(FieldError::invalid(&field, text, format!("error parsing succeededIndexes: {e}"))),
            }
        }
        if let Some(n) = count {
            let field = format!("{path}.succeededCount");
            if n < 0 {
                errs.push(FieldError::invalid_json(&field, &Value::from(n), "must be greater than or equal to 0"));
            }
            if n > completions {
                errs.push(FieldError::invalid_json(&field, &Value::from(n), format!("must be less than or equal to {completions} (the number of specified completions)")));
            }
            if indexes.is_some() && n > named {
                errs.push(FieldError::invalid_json(&field, &Value::from(n), format!("must be less than or equal to {named} (the number of indexes in the specified succeededIndexes field)")));
            }
        }
    }
}

/// How many indexes an indexes text (`"1,3-5"`) names, upstream's
/// `validateIndexesFormat`: comma-separated numbers or ranges, each below
/// `completions`, in increasing order without overlaps.
fn count_indexes(text: &str, completions: i64) -> Result<i64, String> {
    let mut total = 0;
    let mut last: Option<i64> = None;
    if text.is_empty() {
        return Ok(0);
    }
    for part in text.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (parse_index(a)?, parse_index(b)?),
            None => {
                let n = parse_index(part)?;
                (n, n)
            }
        };
        if hi >= completions {
            return Err(format!("too large index: {hi}"));
        }
        if lo > hi {
            return Err(format!("non-increasing order, previous: {lo}, current: {hi}"));
        }
        if let Some(prev) = last.filter(|p| lo <= *p) {
            return Err(format!("overlapping indexes, previous: {prev}, current: {lo}"));
        }
        last = Some(hi);
        total += hi - lo + 1;
    }
    Ok(total)
}

fn parse_index(text: &str) -> Result<i64, String> {
    text.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| format!("cannot convert string to integer for index: {text:?}"))
}

fn job_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    job_spec_validate(obj, "spec", errs);
    if let Some(spec) = obj.get("spec") {
        success_policy_validate(spec, errs);
    }
    immutable(obj, old, "/spec/successPolicy", "spec.successPolicy", errs);
    if obj.pointer("/spec/manualSelector").and_then(Value::as_bool) == Some(true) {
        selector_matches_template(obj, errs);
    }
    immutable(obj, old, "/spec/selector", "spec.selector", errs);
    immutable(obj, old, "/spec/completionMode", "spec.completionMode", errs);
    let suspended = old.and_then(|o| o.pointer("/spec/suspend")).and_then(Value::as_bool) == Some(true);
    if !suspended {
        immutable(obj, old, "/spec/template", "spec.template", errs);
    }
}

/// Jobs: completions/parallelism 1, backoffLimit 6, NonIndexed, pod
/// replacement policy; a generated selector and pod labels; the template
/// needs `restartPolicy` OnFailure or Never; selector and template immutable.
pub(crate) const JOB: Strategy =
    Strategy { defaults: job_defaults, prepare_for_create: job_prepare, validate: job_validate, ..Strategy::NONE };

fn cron_job_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "concurrencyPolicy", json!("Allow"));
    default_field(spec, "suspend", json!(false));
    default_field(spec, "successfulJobsHistoryLimit", json!(3));
    default_field(spec, "failedJobsHistoryLimit", json!(1));
    let job_template_spec = child(child(spec, "jobTemplate"), "spec");
    let template = child(job_template_spec, "template");
    pod_spec_defaults(child(template, "spec"));
}

/// Whether `schedule` is a cron schedule the cron job controller can parse:
/// five fields, or one of the `@` macros (upstream uses robfig/cron's
/// standard parser).
fn valid_schedule(schedule: &str) -> bool {
    let s = schedule.trim();
    let s = match s.strip_prefix("TZ=").or_else(|| s.strip_prefix("CRON_TZ=")) {
        Some(rest) => match rest.split_once(' ') {
            Some((_, sched)) => sched.trim(),
            None => return false,
        },
        None => s,
    };
    if let Some(m) = s.strip_prefix('@') {
        return matches!(m, "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly")
            || m.strip_prefix("every ").is_some_and(|d| !d.trim().is_empty());
    }
    let fields: Vec<&str> = s.split_whitespace().collect();
    fields.len() == 5
        && fields.iter().all(|f| f.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '*' | '/' | ',' | '-' | '?')))
}

fn cron_job_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    match obj.pointer("/spec/schedule").and_then(Value::as_str) {
        None | Some("") => errs.push(FieldError::required("spec.schedule", "")),
        Some(s) if !valid_schedule(s) => {
            errs.push(FieldError::invalid("spec.schedule", s, format!("unparseable schedule: {s}")))
        }
        _ => {}
    }
    if let Some(p) = obj.pointer("/spec/concurrencyPolicy").and_then(Value::as_str) {
        if !matches!(p, "Allow" | "Forbid" | "Replace") {
            errs.push(FieldError::not_supported("spec.concurrencyPolicy", p, &["Allow", "Forbid", "Replace"]));
        }
    }
    for f in ["startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        non_negative(obj, &format!("/spec/{f}"), &format!("spec.{f}"), errs);
    }
    job_spec_validate(obj, "spec.jobTemplate.spec", errs);
}

/// CronJobs: Allow, not suspended, history 3 and 1; schedule, policy and
/// job template validation.
pub(crate) const CRON_JOB: Strategy = Strategy {
    defaults: cron_job_defaults,
    prepare_for_create: reset_status,
    validate: cron_job_validate,
    ..Strategy::NONE
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_schedules_parse_like_the_controller() {
        assert!(valid_schedule("*/5 * * * *"));
        assert!(valid_schedule("@hourly"));
        assert!(valid_schedule("TZ=Etc/UTC 0 3 * * 1-5"));
        assert!(!valid_schedule("* * *"));
        assert!(!valid_schedule("@sometimes"));
    }
}
