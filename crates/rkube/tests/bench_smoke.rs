//! Smoke runs of `rkube bench <scenario> --quick`: each scenario starts its
//! own API server (and etcd where it needs one), runs end to end, stops them,
//! and writes a well-formed report: JSON with the required keys and
//! measurements, a Markdown file with table rows, and an SVG plot. Timings
//! are not checked.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Upper bound for one quick scenario (they take a few seconds; CI machines are busy).
const LIMIT: Duration = Duration::from_secs(100);

/// Runs `rkube bench <scenario> --quick --out <dir>` and returns the output dir.
fn run_quick(scenario: &str) -> tempfile::TempDir {
    run_quick_with(scenario, &[])
}

fn run_quick_with(scenario: &str, extra: &[&str]) -> tempfile::TempDir {
    let out = tempfile::tempdir().expect("temp dir");
    let log_path = out.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).expect("stderr log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["bench", scenario, "--quick"])
        .args(extra)
        .arg("--out")
        .arg(out.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn rkube bench");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for rkube bench") {
            break status;
        }
        if start.elapsed() > LIMIT {
            // SIGTERM by PID: rkube bench then stops the API server and etcd it started.
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_secs(10) && matches!(child.try_wait(), Ok(None))
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
            panic!("rkube bench {scenario} --quick did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(
        status.success(),
        "rkube bench {scenario} --quick failed ({status}):\n{stderr}"
    );
    out
}

/// Checks that `svg` is one well-formed `<svg>` element: every tag closed in order.
fn assert_well_formed_svg(svg: &str) {
    let body = svg.trim();
    let body = body
        .strip_prefix("<?xml")
        .map(|r| &r[r.find("?>").expect("xml declaration ends") + 2..])
        .unwrap_or(body);
    let mut stack: Vec<String> = Vec::new();
    let mut rest = body;
    let mut saw_root = false;
    while let Some(open) = rest.find('<') {
        assert!(
            !rest[..open].contains('>'),
            "stray '>' in text: {:?}",
            &rest[..open]
        );
        let close = rest[open..].find('>').expect("unterminated tag") + open;
        let tag = &rest[open + 1..close];
        assert!(!tag.contains('<'), "'<' inside a tag: {tag:?}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.trim()),
                "closing tag out of order"
            );
        } else if !tag.ends_with('/') {
            let name = tag
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            if stack.is_empty() {
                assert_eq!(name, "svg", "the root element is <svg>");
                assert!(!saw_root, "one root element");
                saw_root = true;
            }
            stack.push(name);
        }
        rest = &rest[close + 1..];
    }
    assert!(stack.is_empty(), "unclosed tags: {stack:?}");
    assert!(saw_root, "no <svg> root");
    assert!(
        body.contains("<polyline"),
        "the plot draws at least one line"
    );
}

/// Checks the report files of `scenario` in `dir`; returns the JSON.
fn assert_report(dir: &Path, scenario: &str, svg: bool) -> Value {
    let json_text =
        std::fs::read_to_string(dir.join(format!("{scenario}.json"))).expect("JSON report written");
    let json: Value = serde_json::from_str(&json_text).expect("JSON report parses");
    assert_eq!(json["scenario"], scenario);
    for key in [
        "started_at",
        "duration_seconds",
        "command",
        "machine",
        "parameters",
        "measurements",
        "not_measured",
        "tables",
        "notes",
    ] {
        assert!(json.get(key).is_some(), "JSON report has {key}");
    }
    let machine = &json["machine"];
    assert!(machine["nproc"].as_u64().unwrap_or(0) >= 1, "machine.nproc");
    for key in ["memory_bytes", "kernel", "rkube_git_commit", "rkube_build"] {
        assert!(machine.get(key).is_some(), "machine has {key}");
    }
    let measurements = json["measurements"].as_array().expect("measurements array");
    assert!(!measurements.is_empty(), "at least one measurement");
    for m in measurements {
        assert!(
            m["name"].as_str().is_some_and(|n| !n.is_empty()),
            "measurement name: {m}"
        );
        assert!(m["unit"].as_str().is_some(), "measurement unit: {m}");
        for k in ["runs", "median", "p50", "p90", "p99", "min", "max"] {
            assert!(m["summary"][k].is_number(), "summary.{k} in {m}");
        }
    }
    let tables = json["tables"].as_array().expect("tables array");
    assert!(
        tables
            .iter()
            .any(|t| t["rows"].as_array().is_some_and(|r| !r.is_empty())),
        "a table with rows"
    );

    let md = std::fs::read_to_string(dir.join(format!("{scenario}.md")))
        .expect("Markdown report written");
    assert!(
        md.starts_with(&format!("# rkube bench {scenario}")),
        "Markdown title"
    );
    let lines: Vec<&str> = md.lines().collect();
    let sep = lines
        .iter()
        .position(|l| l.starts_with("|---|"))
        .expect("a Markdown table separator");
    assert!(
        sep > 0 && lines[sep - 1].starts_with("| "),
        "a header row above the separator"
    );
    assert!(
        lines.get(sep + 1).is_some_and(|l| l.starts_with("| ")),
        "a data row below the separator"
    );

    let svg_path = dir.join(format!("{scenario}.svg"));
    if svg {
        assert_well_formed_svg(&std::fs::read_to_string(&svg_path).expect("SVG plot written"));
    }
    json
}

fn measurement_names(json: &Value) -> Vec<String> {
    json["measurements"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn bench_list_quick_reports_every_list_mode_side_by_side() {
    let out = run_quick("list");
    let json = assert_report(out.path(), "list", true);
    let names = measurement_names(&json);
    for mode in ["floor", "rv0", "consistent", "walk"] {
        assert!(
            names
                .iter()
                .any(|n| n == &format!("list/configmaps/{mode}")),
            "list/configmaps/{mode} in {names:?}"
        );
    }
}

/// `rkube bench crds --quick`: a full LIST of the loaded custom resources
/// from the cache (RV=0, RV="") and from storage (direct range, cache
/// disabled), side by side; the scenario checks every LIST's item count.
#[test]
fn bench_crds_quick_reports_cache_and_storage_lists_side_by_side() {
    let out = run_quick("crds");
    let json = assert_report(out.path(), "crds", true);
    let names = measurement_names(&json);
    for mode in ["floor", "rv0", "consistent", "storage"] {
        assert!(
            names.iter().any(|n| n == &format!("crds/list/{mode}")),
            "crds/list/{mode} in {names:?}"
        );
    }
    assert!(
        names.iter().any(|n| n == "crds/created_to_listed"),
        "{names:?}"
    );
}

/// `rkube bench testenv --quick`: 5 in-process `TestEnv` starts timed to the
/// first answered LIST, 3 CRD installs timed to Established, both in the JSON
/// and the Markdown table, with the 1 s goal met (the command exits 0).
#[test]
fn bench_testenv_quick_reports_start_and_crd_established() {
    let out = run_quick("testenv");
    let json = assert_report(out.path(), "testenv", false);
    let m = |name: &str| {
        json["measurements"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {}", json["measurements"]))
            .clone()
    };
    let start = m("testenv/start_to_first_request");
    assert_eq!(start["summary"]["runs"], 5, "{start}");
    let median = start["summary"]["median"].as_f64().expect("median");
    assert!(median > 0.0 && median < 1.0, "median start {median} s");
    let crd = m("testenv/crd_established");
    assert_eq!(crd["summary"]["runs"], 3, "{crd}");
    assert!(crd["summary"]["max"].as_f64().is_some_and(|s| s > 0.0), "{crd}");
    assert!(json.get("missed_goals").is_none(), "{json}");
    assert_eq!(json["parameters"]["crd"], "widgets.testenv.bench.rkube.dev");
    let md = std::fs::read_to_string(out.path().join("testenv.md")).expect("Markdown report");
    assert!(md.contains("| TestEnv::start() → first LIST of namespaces answered | 5 |"), "{md}");
    assert!(md.contains("| install_crd (server-side apply) → Established | 3 |"), "{md}");
    assert!(md.contains("- Command: `") && md.contains("bench testenv --quick"), "{md}");
}

#[test]
fn bench_watch_quick_reports_delivery_latency_and_rate_sweep() {
    let out = run_quick("watch");
    let json = assert_report(out.path(), "watch", true);
    let names = measurement_names(&json);
    assert!(
        names.iter().any(|n| n == "watch/delivery_latency"),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n == "watch/achieved_rate"),
        "{names:?}"
    );
}

#[test]
fn bench_cluster_quick_reports_latency_per_slo() {
    let out = run_quick("cluster");
    let json = assert_report(out.path(), "cluster", true);
    let names = measurement_names(&json);
    assert!(
        names.iter().any(|n| n == "cluster/slo_latency"),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n == "cluster/peak_rss"), "{names:?}");
    // The default workload: Deployments through the controller manager and the scheduler.
    // Latency pods (the SLO) and the saturation burst are reported apart.
    for n in [
        "cluster/pod_startup_latency",
        "cluster/saturation_pod_startup_latency",
        "cluster/saturation_seconds",
        "cluster/scheduler_throughput",
    ] {
        assert!(names.iter().any(|m| m == n), "{n} missing: {names:?}");
    }
}

/// `--workload pods`: the bench creates bound pods itself, so there is no scheduler to time.
#[test]
fn bench_cluster_quick_with_bench_made_pods_reports_no_scheduling() {
    let out = run_quick_with("cluster", &["--workload", "pods"]);
    let json = assert_report(out.path(), "cluster", true);
    let names = measurement_names(&json);
    assert!(names.iter().any(|n| n == "cluster/slo_latency"), "{names:?}");
    assert!(names.iter().any(|n| n == "cluster/pod_create_to_kubelet_watch"), "{names:?}");
    assert!(!names.iter().any(|n| n == "cluster/scheduler_throughput"), "{names:?}");
}

#[test]
fn bench_init_quick_reports_both_backends() {
    let out = run_quick("init");
    let json = assert_report(out.path(), "init", true);
    let backends: Vec<&str> = json["measurements"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["labels"]["backend"].as_str())
        .collect();
    assert!(
        backends.contains(&"embedded") && backends.contains(&"etcd"),
        "{backends:?}"
    );
}

#[test]
fn bench_writes_quick_reports_create_and_update() {
    let out = run_quick("writes");
    let json = assert_report(out.path(), "writes", true);
    let names = measurement_names(&json);
    assert!(
        names.iter().any(|n| n == "writes/create/latency")
            && names.iter().any(|n| n == "writes/update/latency"),
        "{names:?}"
    );
}

#[test]
fn bench_stalled_quick_reports_rss_before_during_and_after() {
    let out = run_quick("stalled");
    let json = assert_report(out.path(), "stalled", false);
    let names = measurement_names(&json);
    for name in [
        "rss/before",
        "rss/peak_while_stalled",
        "rss/after",
        "small_get/while_stalled",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
}

#[test]
fn bench_bodies_quick_reports_cpu_per_request_for_every_encoding() {
    let out = run_quick("bodies");
    let json = assert_report(out.path(), "bodies", false);
    let cases: Vec<&str> = json["measurements"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["name"] == "bodies/cpu_per_request")
        .filter_map(|m| m["labels"]["case"].as_str())
        .collect();
    assert_eq!(cases.len(), 15, "{cases:?}");
    for case in [
        "server-side apply, JSON text (kubectl)",
        "update (PUT), one value changed, 1 MiB of data",
        "merge patch of one value, 1 MiB of data",
        "server-side apply again, unchanged, 1 MiB of data",
        "delete, 1 MiB of data",
        "create, nested YAML (refused)",
        "create, JSON, 1 MiB of data (accepted)",
        "create, block YAML, quoted scalars",
        "create, JSON, a list of single digits (refused)",
        "create, flow YAML list of single digits (refused)",
        "create, block YAML list of single digits (refused)",
    ] {
        assert!(cases.contains(&case), "{case} missing from {cases:?}");
    }
}

#[test]
fn bench_streaming_quick_reports_exec_and_port_forward_for_both_protocols() {
    let out = run_quick("streaming");
    let json = assert_report(out.path(), "streaming", false);
    for name in [
        "streaming/exec_round_trip",
        "streaming/port_forward_throughput",
    ] {
        let protocols: Vec<&str> = json["measurements"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["name"] == name)
            .filter_map(|m| m["labels"]["protocol"].as_str())
            .collect();
        assert_eq!(protocols, ["SPDY/3.1", "WebSocket"], "{name}");
    }
}

/// `rkube bench pods --quick --pods 3`: three pods with a configMap volume and a readiness
/// probe start on `rkube up --node`; the report has every pod's created → Running and → Ready,
/// the SLO verdict, and the idle CPU of the `rkube up` process.
#[test]
fn bench_pods_quick_reports_startup_latency_against_the_slo_and_idle_cpu() {
    let out = run_quick_with("pods", &["--pods", "3", "--step-seconds", "2"]);
    let json = assert_report(out.path(), "pods", false);
    assert_eq!(json["parameters"]["pods"], 3, "--pods is what the run used");
    assert_eq!(json["parameters"]["idle_seconds"], 2, "--step-seconds is the idle window");
    for name in ["pods/startup_latency", "pods/created_to_ready"] {
        let m = json["measurements"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("{name} measured: {json}"));
        assert_eq!(m["summary"]["runs"], 3, "{name}: every pod: {m}");
    }
    let idle = measurement_names(&json);
    assert!(
        idle.iter().any(|n| n == "pods/idle_cpu_percent_of_core"),
        "{idle:?}"
    );
    let rows = &json["tables"][0]["rows"];
    assert_eq!(rows[0][0], "created → Running (pod startup)", "{rows}");
    assert_eq!(rows[0][1], "3 of 3", "{rows}");
    assert!(
        rows[0][7] == "yes" || rows[0][7] == "NO",
        "an SLO verdict: {rows}"
    );
}

/// SIGTERM stops `rkube bench all` as a whole: the scenario it interrupts stops its processes,
/// and no later scenario starts.
#[test]
fn bench_all_stops_at_sigterm_without_starting_the_next_scenario() {
    let out = tempfile::tempdir().expect("temp dir");
    let log_path = out.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).expect("stderr log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["bench", "all", "--quick", "--out"])
        .arg(out.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn rkube bench all");
    let deadline = Instant::now() + LIMIT;
    while !std::fs::read_to_string(&log_path)
        .unwrap_or_default()
        .contains("LIST")
    {
        assert!(Instant::now() < deadline, "the list scenario never started");
        assert!(
            matches!(child.try_wait(), Ok(None)),
            "rkube bench all ended early"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rkube bench all did not stop within 30 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(
        !stderr.contains("scenario writes"),
        "a later scenario started:\n{stderr}"
    );
}

/// `rkube bench all` runs every scenario and exits non-zero naming those that
/// failed: here all of them, as the API server binary it is given does not
/// exist. No report is written for a failed scenario.
#[test]
fn bench_all_runs_every_scenario_and_fails_on_any_failure() {
    let out = tempfile::tempdir().expect("temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args([
            "bench",
            "all",
            "--quick",
            "--rkube",
            "/nonexistent/rkube",
            "--out",
        ])
        .arg(out.path())
        .stdin(Stdio::null())
        .output()
        .expect("run rkube bench all");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "rkube: failed scenarios: list, writes, init, watch, cluster, rbac, stalled, bodies, streaming, pods, crds, testenv"
        ),
        "{stderr}"
    );
    for name in [
        "list",
        "writes",
        "init",
        "watch",
        "cluster",
        "rbac",
        "stalled",
        "bodies",
        "streaming",
        "pods",
        "crds",
        "testenv",
    ] {
        assert!(
            !out.path().join(format!("{name}.json")).exists(),
            "{name}: a failed run wrote a report"
        );
    }
}
