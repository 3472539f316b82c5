//! `rkube bench testenv`: how fast `rkube_testenv::TestEnv` gives a Rust test
//! a working API server (issue 15), measured in this process as a test would
//! use it:
//!
//! - `runs` times (default 50; 5 with `--quick`; `--runs` sets it): time from
//!   calling `TestEnv::start()` to the first answered request (a LIST of
//!   namespaces through the environment's `kube::Client`), then stop it;
//!   reported as median, p90, p99 and max;
//! - 10 times (3 with `--quick`), each on a fresh environment: time from
//!   `TestEnv::install_crd::<Widget>()` (server-side apply of the CRD) until
//!   it returns, i.e. until the CRD's `Established` condition is `True`;
//!   reported as median and max.
//!
//! The goal is a median start under 1 s: a fifth of the ~5 s envtest needs
//! to start kube-apiserver and etcd, the tool this replaces. A run that
//! misses it writes its report and exits non-zero.
//!
//! The server runs in the bench process (the build of this binary), not as a
//! child, over the embedded store (under `/dev/shm` when the machine has it):
//! `--backend` does not apply, and `--rkube` naming another binary fails the
//! scenario, since that binary would not be the one measured.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::{CustomResource, CustomResourceExt};
use rkube_testenv::TestEnv;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::cli::Scenario;
use crate::progress;
use crate::report::{Report, Table};
use crate::scenarios::Ctx;
use crate::stats::{fmt_secs, Summary};

/// Upper bound on one start or one CRD install, so a hung environment fails
/// the run instead of stalling it.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// The goal for the median start → first answered request, seconds.
pub const GOAL_MEDIAN_START_SECONDS: f64 = 1.0;

/// The spec of the custom resource whose CRD the scenario installs
/// (`widgets.testenv.bench.rkube.dev/v1`, namespaced).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(group = "testenv.bench.rkube.dev", version = "v1", kind = "Widget", namespaced)]
pub struct WidgetSpec {
    /// Any number; the schema gives the CRD one typed field.
    pub size: i32,
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let this = std::env::current_exe().context("finding this binary")?;
    let same = |p: &std::path::Path| std::fs::canonicalize(p).ok();
    anyhow::ensure!(
        same(&ctx.exe).is_some() && same(&ctx.exe) == same(&this),
        "testenv measures rkube-testenv inside this binary ({}); --rkube {} would not be the build measured",
        this.display(),
        ctx.exe.display()
    );
    let quick = ctx.args.quick;
    let starts = ctx.args.runs.unwrap_or(if quick { 5 } else { 50 }).max(1);
    let crd_runs = if quick { 3 } else { 10 };
    let mut report = ctx.report(
        Scenario::Testenv,
        json!({
            "starts": starts, "crd_installs": crd_runs,
            "first_request": "LIST /api/v1/namespaces through TestEnv::client()",
            "crd": Widget::crd_name(),
            "crd_install": "TestEnv::install_crd (server-side apply) until the CRD is Established, on a fresh environment each time",
            "server": "in the bench process (rkube_testenv::TestEnv), embedded store",
            "goal_median_start_seconds": GOAL_MEDIAN_START_SECONDS,
        }),
    );

    let pb = progress::bar(starts as u64, format!("{starts} × TestEnv::start() → first LIST of namespaces"));
    let mut start_samples = Vec::with_capacity(starts);
    for i in 0..starts {
        let began = Instant::now();
        let (env, listed) = tokio::time::timeout(STEP_TIMEOUT, async {
            let env = TestEnv::start().await.with_context(|| format!("TestEnv::start() #{}", i + 1))?;
            let listed = Api::<Namespace>::all(env.client())
                .list(&ListParams::default())
                .await
                .with_context(|| format!("first LIST of namespaces after start #{}", i + 1))?;
            anyhow::Ok((env, listed))
        })
        .await
        .with_context(|| format!("start #{} not answered within {STEP_TIMEOUT:?}", i + 1))??;
        start_samples.push(began.elapsed().as_secs_f64());
        anyhow::ensure!(
            listed.items.iter().any(|ns| ns.metadata.name.as_deref() == Some("default")),
            "the first LIST of namespaces after start #{} has no `default` namespace",
            i + 1
        );
        env.stop().await;
        pb.inc(1);
    }
    pb.finish_and_clear();

    let pb = progress::bar(crd_runs as u64, format!("{crd_runs} × install {} → Established", Widget::crd_name()));
    let mut crd_samples = Vec::with_capacity(crd_runs);
    for i in 0..crd_runs {
        let env = TestEnv::start().await.with_context(|| format!("TestEnv::start() for CRD install #{}", i + 1))?;
        let began = Instant::now();
        tokio::time::timeout(STEP_TIMEOUT, env.install_crd::<Widget>())
            .await
            .with_context(|| format!("{} not Established within {STEP_TIMEOUT:?} (#{})", Widget::crd_name(), i + 1))?
            .with_context(|| format!("installing {} (#{})", Widget::crd_name(), i + 1))?;
        crd_samples.push(began.elapsed().as_secs_f64());
        env.stop().await;
        pb.inc(1);
    }
    pb.finish_and_clear();

    let start = report.measure("testenv/start_to_first_request", "s", &[], &start_samples);
    let crd = report.measure("testenv/crd_established", "s", &[], &crd_samples);
    report.tables.push(tables(start, crd));
    report.missed_goals.extend(start.and_then(missed_goal));
    Ok(report)
}

/// The missed goal, when the median start is not under [`GOAL_MEDIAN_START_SECONDS`].
fn missed_goal(start: Summary) -> Option<String> {
    (start.median >= GOAL_MEDIAN_START_SECONDS).then(|| {
        format!(
            "median TestEnv::start() → first answered request {} over {} starts (goal: under {})",
            fmt_secs(start.median),
            start.runs,
            fmt_secs(GOAL_MEDIAN_START_SECONDS)
        )
    })
}

/// The result table: one row per measurement, seconds.
fn tables(start: Option<Summary>, crd: Option<Summary>) -> Table {
    let mut t = Table::new(
        format!("rkube-testenv in process (goal: median start under {})", fmt_secs(GOAL_MEDIAN_START_SECONDS)),
        &["measurement", "runs", "median", "p90", "p99", "max"],
    );
    let na = || "n/a".to_string();
    if let Some(s) = start {
        t.row(vec![
            "TestEnv::start() → first LIST of namespaces answered".into(),
            s.runs.to_string(),
            fmt_secs(s.median),
            fmt_secs(s.p90),
            fmt_secs(s.p99),
            fmt_secs(s.max),
        ]);
    }
    if let Some(s) = crd {
        t.row(vec![
            "install_crd (server-side apply) → Established".into(),
            s.runs.to_string(),
            fmt_secs(s.median),
            na(),
            na(),
            fmt_secs(s.max),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_median_start_of_one_second_or_more_misses_the_goal() {
        let of = |v: &[f64]| Summary::of(v).expect("samples");
        assert_eq!(missed_goal(of(&[0.1, 0.2, 5.0])), None);
        let missed = missed_goal(of(&[0.9, 1.0, 1.2])).expect("missed");
        assert!(missed.contains("over 3 starts (goal: under 1.00 s)"), "{missed}");
    }

    #[test]
    fn the_crd_has_a_structural_schema_for_the_spec() {
        let crd = serde_json::to_value(Widget::crd()).expect("CRD as JSON");
        assert_eq!(crd["metadata"]["name"], "widgets.testenv.bench.rkube.dev");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(schema["properties"]["spec"]["properties"]["size"]["type"], "integer", "{schema}");
    }
}
