//! `rkube bench bodies`: the API server's CPU time for one large request
//! body, per encoding, against the goal of about 100 ms at the 3 MiB body
//! limit.
//!
//! One API server runs. Each case sends a ConfigMap of `--sizes` bytes
//! (default just under 3 MiB: a `data` map of short keys) with one encoding:
//! JSON, block YAML (plain and quoted scalars), JSON text sent as YAML,
//! server-side apply (as
//! `kubectl apply --server-side` sends it: JSON text typed
//! `application/apply-patch+yaml`, and as block YAML), and a nested YAML body
//! the server must refuse, and three whose data value is a list of single
//! digits (JSON, flow YAML, block YAML: the most values a body of that size
//! holds), refused for not being a string; and one JSON ConfigMap as large as a ConfigMap
//! may be (1 MiB of values), which the server stores, caches and answers;
//! and writes to such a ConfigMap created beforehand: a PUT and a merge
//! patch changing one value, and a server-side apply of the configuration
//! its one manager applied already (which changes nothing); and the DELETE
//! of such ConfigMaps, created before each run (the server keeps at most one
//! of them decoded, so most of these deletes read the stored object anew).
//! The server's CPU time (all threads, user +
//! system, from its CPU-time clock: [`crate::procs::process_cpu_seconds`],
//! nanosecond resolution) is read before and after each run of
//! [`REQUESTS_PER_RUN`] requests, sent one at a time, with the bodies built
//! beforehand and [`SETTLE`] of quiet after the last answer; what the idle
//! server uses over the same time (measured for [`IDLE_SAMPLE`] before the
//! first case) is taken off, so a run's figure is the requests' own CPU.
//! A ConfigMap's data may hold at most 1 MiB (upstream's
//! `ValidateConfigMap`), so bodies larger than that are decoded, validated
//! and refused with 422 `FieldValueTooLong`: what a client sending a 3 MiB
//! ConfigMap gets from any API server (etcd would not store it either).
//! The scenario fails when an answer has another code than expected, a
//! created object lacks some of the keys sent, or a refusal is not that
//! one; it does not fail on the goal (the report says which cases miss it).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cli::Scenario;
use crate::client::Api;
use crate::load;
use crate::procs::{sample_proc, Backend};
use crate::report::{Report, Table};
use crate::scenarios::{pick, Ctx};
use crate::stats::{fmt_bytes, fmt_secs, Summary};

const NS: &str = "bench-bodies";

/// Requests per measured run (serial).
pub const REQUESTS_PER_RUN: usize = 3;

/// Quiet time after a run's last answer before the server's CPU is read
/// again, so work finishing after the answer is sent is counted.
const SETTLE: Duration = Duration::from_millis(50);

/// How long the idle server's own CPU use is measured (a quarter of it
/// with `--quick`), after as long again for its start-up work to end.
const IDLE_SAMPLE: Duration = Duration::from_secs(2);

/// The CPU goal per request, seconds.
pub const GOAL_CPU_SECONDS: f64 = 0.100;

/// The most data bytes a ConfigMap may hold (upstream `MaxSecretSize`).
const CONFIG_MAP_DATA_LIMIT: usize = 1024 * 1024;

/// Just under kube-apiserver's 3 MiB request body limit.
const DEFAULT_BYTES: usize = 3 * 1024 * 1024 - 8 * 1024;

/// How a case's body is written and sent.
#[derive(Clone, Copy)]
enum Case {
    Json,
    JsonAccepted,
    YamlBlock,
    YamlQuoted,
    YamlJsonText,
    ApplyJsonText,
    ApplyYamlBlock,
    NestedYaml,
    JsonNumbers,
    YamlFlowNumbers,
    YamlBlockNumbers,
    Update,
    MergePatch,
    Reapply,
    Delete,
}

const CASES: [Case; 15] = [
    Case::Json,
    Case::JsonAccepted,
    Case::YamlBlock,
    Case::YamlQuoted,
    Case::YamlJsonText,
    Case::ApplyJsonText,
    Case::ApplyYamlBlock,
    Case::NestedYaml,
    Case::JsonNumbers,
    Case::YamlFlowNumbers,
    Case::YamlBlockNumbers,
    Case::Update,
    Case::MergePatch,
    Case::Reapply,
    Case::Delete,
];

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Json => "create, JSON",
            Case::JsonAccepted => "create, JSON, 1 MiB of data (accepted)",
            Case::YamlBlock => "create, block YAML",
            Case::YamlQuoted => "create, block YAML, quoted scalars",
            Case::YamlJsonText => "create, JSON text as YAML",
            Case::ApplyJsonText => "server-side apply, JSON text (kubectl)",
            Case::ApplyYamlBlock => "server-side apply, block YAML",
            Case::NestedYaml => "create, nested YAML (refused)",
            Case::JsonNumbers => "create, JSON, a list of single digits (refused)",
            Case::YamlFlowNumbers => "create, flow YAML list of single digits (refused)",
            Case::YamlBlockNumbers => "create, block YAML list of single digits (refused)",
            Case::Update => "update (PUT), one value changed, 1 MiB of data",
            Case::MergePatch => "merge patch of one value, 1 MiB of data",
            Case::Reapply => "server-side apply again, unchanged, 1 MiB of data",
            Case::Delete => "delete, 1 MiB of data",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Case::Json | Case::JsonAccepted | Case::JsonNumbers | Case::Update | Case::Delete => "application/json",
            Case::MergePatch => "application/merge-patch+json",
            Case::Reapply => "application/apply-patch+yaml",
            Case::YamlBlock
            | Case::YamlQuoted
            | Case::YamlJsonText
            | Case::NestedYaml
            | Case::YamlFlowNumbers
            | Case::YamlBlockNumbers => "application/yaml",
            Case::ApplyJsonText | Case::ApplyYamlBlock => "application/apply-patch+yaml",
        }
    }

    /// 400 for nested YAML and for a list where a ConfigMap's data holds
    /// strings; 200 for a write to the existing object; else
    /// 201, or 422 when the body's ConfigMap holds more than 1 MiB of data
    /// (`data_bytes`: the values).
    fn expected_code(self, data_bytes: usize) -> u16 {
        match self {
            Case::NestedYaml | Case::JsonNumbers | Case::YamlFlowNumbers | Case::YamlBlockNumbers => 400,
            Case::Update | Case::MergePatch | Case::Reapply | Case::Delete => 200,
            _ if data_bytes > CONFIG_MAP_DATA_LIMIT => 422,
            _ => 201,
        }
    }

    /// Whether the case writes to one ConfigMap created beforehand
    /// ([`Case::setup`]) rather than creating one per request.
    fn writes_existing(self) -> bool {
        matches!(self, Case::Update | Case::MergePatch | Case::Reapply)
    }

    /// The request creating the ConfigMap `name` a case writes to (or
    /// deletes, [`Case::Delete`]): 1 MiB of
    /// data, as JSON; server-side applied by the bench's manager for
    /// [`Case::Reapply`], so that every later apply of it changes nothing.
    fn setup(self, name: &str, bytes: usize) -> (&'static str, String, Vec<u8>, &'static str) {
        let (body, _) = configmap_json(name, bytes, CONFIG_MAP_DATA_LIMIT);
        let collection = format!("/api/v1/namespaces/{NS}/configmaps");
        match self {
            Case::Reapply => ("PATCH", apply_path(name), body, "application/apply-patch+yaml"),
            _ => ("POST", collection, body, "application/json"),
        }
    }

    /// Method, path and body of the request creating `name` (or, for a case
    /// that [`Case::writes_existing`], writing to it: for the PUT and the
    /// merge patch `turn` alternates the value written, so each one changes
    /// the object; the apply is the one of [`Case::setup`], which changes
    /// nothing), with the number of `data` keys it carries (or the object
    /// keeps).
    fn request(self, name: &str, bytes: usize, turn: usize) -> (&'static str, String, Vec<u8>, usize) {
        let collection = format!("/api/v1/namespaces/{NS}/configmaps");
        let apply = apply_path(name);
        let value = if turn.is_multiple_of(2) { "w0" } else { "v0" };
        match self {
            Case::Update => {
                let (obj, keys) = configmap_json(name, bytes, CONFIG_MAP_DATA_LIMIT);
                let body = String::from_utf8_lossy(&obj).replacen(r#""k0":"v0""#, &format!(r#""k0":"{value}""#), 1);
                ("PUT", format!("{collection}/{name}"), body.into_bytes(), keys)
            }
            Case::MergePatch => {
                let keys = configmap_json(name, bytes, CONFIG_MAP_DATA_LIMIT).1;
                let body = format!(r#"{{"data":{{"k0":"{value}"}}}}"#);
                ("PATCH", format!("{collection}/{name}"), body.into_bytes(), keys)
            }
            Case::Reapply => {
                let (obj, keys) = configmap_json(name, bytes, CONFIG_MAP_DATA_LIMIT);
                ("PATCH", apply, obj, keys)
            }
            // Of `name`, created by `Case::setup` before the run.
            Case::Delete => ("DELETE", format!("{collection}/{name}"), Vec::new(), 0),
            Case::JsonAccepted => {
                let (obj, keys) = configmap_json(name, bytes, CONFIG_MAP_DATA_LIMIT);
                ("POST", collection, obj, keys)
            }
            Case::YamlQuoted => {
                let (obj, keys) = configmap_yaml(name, bytes, true);
                ("POST", collection, obj, keys)
            }
            Case::Json | Case::YamlJsonText | Case::ApplyJsonText => {
                let (obj, keys) = configmap_json(name, bytes, usize::MAX);
                let path = if matches!(self, Case::ApplyJsonText) { apply } else { collection };
                let method = if matches!(self, Case::ApplyJsonText) { "PATCH" } else { "POST" };
                (method, path, obj, keys)
            }
            Case::YamlBlock | Case::ApplyYamlBlock => {
                let (obj, keys) = configmap_yaml(name, bytes, false);
                let path = if matches!(self, Case::ApplyYamlBlock) { apply } else { collection };
                let method = if matches!(self, Case::ApplyYamlBlock) { "PATCH" } else { "POST" };
                (method, path, obj, keys)
            }
            Case::NestedYaml => {
                let head = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata: ");
                let depth = bytes.saturating_sub(head.len()) / 2;
                let body = format!("{head}{}{}\n", "[".repeat(depth), "]".repeat(depth));
                ("POST", collection, body.into_bytes(), 0)
            }
            // As many values as the body holds, each as short as it can be
            // (the most nodes a body of this size decodes into).
            Case::JsonNumbers => {
                let head = format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"a":["#);
                let n = bytes.saturating_sub(head.len() + 4) / 2;
                let body = format!("{head}{}0]}}}}", "0,".repeat(n.saturating_sub(1)));
                ("POST", collection, body.into_bytes(), 0)
            }
            Case::YamlFlowNumbers => {
                let head = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: [");
                let n = bytes.saturating_sub(head.len() + 3) / 3;
                let body = format!("{head}{}0]\n", "0, ".repeat(n.saturating_sub(1)));
                ("POST", collection, body.into_bytes(), 0)
            }
            Case::YamlBlockNumbers => {
                let head = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a:\n");
                let n = bytes.saturating_sub(head.len()) / 6;
                let body = format!("{head}{}", "  - 0\n".repeat(n));
                ("POST", collection, body.into_bytes(), 0)
            }
        }
    }
}

/// The server-side apply path of the ConfigMap `name`.
fn apply_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/configmaps/{name}?fieldManager=bench&force=true")
}

/// The data bytes a ConfigMap with `keys` keys `k<i>: v<i>` counts against
/// its limit: the values' (upstream's `ValidateConfigMap` sums values only).
fn data_bytes(keys: usize) -> usize {
    (0..keys).map(|i| 1 + i.to_string().len()).sum()
}

/// A ConfigMap as JSON text of about `bytes` bytes, its values adding up
/// to at most `data_limit` bytes, and its number of keys.
fn configmap_json(name: &str, bytes: usize, data_limit: usize) -> (Vec<u8>, usize) {
    let mut s = format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"#);
    let mut keys = 0;
    let mut data = 0;
    while s.len() + 24 < bytes && data + 1 + keys.to_string().len() <= data_limit {
        if keys > 0 {
            s.push(',');
        }
        s.push_str(&format!(r#""k{keys}":"v{keys}""#));
        data += 1 + keys.to_string().len();
        keys += 1;
    }
    s.push_str("}}");
    (s.into_bytes(), keys)
}

/// A ConfigMap as block YAML of about `bytes` bytes (`"k": "v"` lines when
/// `quoted`), and its number of keys.
fn configmap_yaml(name: &str, bytes: usize, quoted: bool) -> (Vec<u8>, usize) {
    let mut s = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n");
    let mut keys = 0;
    while s.len() + 24 < bytes {
        if quoted {
            s.push_str(&format!("  \"k{keys}\": \"v{keys}\"\n"));
        } else {
            s.push_str(&format!("  k{keys}: v{keys}\n"));
        }
        keys += 1;
    }
    (s.into_bytes(), keys)
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let quick = ctx.args.quick;
    let backend = ctx.backends(&[Backend::Embedded])[0];
    let bytes = pick(&ctx.args.sizes, quick, &[256 * 1024], &[DEFAULT_BYTES])[0];
    let runs = ctx.runs(5);
    let mut report = ctx.report(
        Scenario::Bodies,
        json!({"backend": backend, "body_bytes": bytes, "runs": runs, "requests_per_run": REQUESTS_PER_RUN,
            "goal_cpu_seconds_per_request": GOAL_CPU_SECONDS, "object": "ConfigMap, data map of short keys"}),
    );
    let env = ctx.env(backend).await?;
    let server = env.start_server(&[]).await?;
    let api = Api::new(server.base_url());
    load::namespace_http(&api, NS).await?;
    let mut table = Table::new(
        format!("Server CPU per request for a {} body (median of {runs} runs of {REQUESTS_PER_RUN})", fmt_bytes(bytes as u64)),
        &["case", "content type", "answer", "CPU per request", "p90", "latency", "goal ≤ 100 ms"],
    );
    let idle_rate = idle_cpu_rate(server.pid(), if quick { IDLE_SAMPLE / 4 } else { IDLE_SAMPLE }).await?;
    report.note(format!("The idle server used {:.2} ms of CPU per second; that much per second of each run is taken off its figure.", idle_rate * 1000.0));
    let mut missed = Vec::new();
    for case in CASES {
        let mut cpu = Vec::new();
        let data = data_bytes(case.request("probe", bytes, 0).3);
        let mut latency = Vec::new();
        let existing = format!("u{}", case as u8);
        if case.writes_existing() {
            set_up(&api, case, &existing, bytes).await?;
            // Its caching and watch work is not the first run's.
            tokio::time::sleep(SETTLE).await;
        }
        for run in 0..runs {
            if matches!(case, Case::Delete) {
                // The ConfigMaps this run deletes, created outside it.
                for i in 0..REQUESTS_PER_RUN {
                    set_up(&api, case, &format!("d-{run}-{i}"), bytes).await?;
                }
                tokio::time::sleep(SETTLE).await;
            }
            let requests: Vec<_> = (0..REQUESTS_PER_RUN)
                .map(|i| match (case, case.writes_existing()) {
                    (Case::Delete, _) => case.request(&format!("d-{run}-{i}"), bytes, 0),
                    (_, true) => case.request(&existing, bytes, run * REQUESTS_PER_RUN + i),
                    (_, false) => case.request(&format!("b{}-{run}-{i}", case as u8), bytes, 0),
                })
                .collect();
            let mut answers = Vec::with_capacity(REQUESTS_PER_RUN);
            let started = Instant::now();
            let before = server_cpu(server.pid())?;
            for (method, path, body, keys) in requests {
                let t = Instant::now();
                let (code, answer) = api.send_raw(method, &path, body, case.content_type()).await?;
                latency.push(t.elapsed().as_secs_f64());
                answers.push((code, answer, keys));
            }
            tokio::time::sleep(SETTLE).await;
            let used = server_cpu(server.pid())? - before;
            let idle = idle_rate * started.elapsed().as_secs_f64();
            cpu.push((used - idle).max(0.0) / REQUESTS_PER_RUN as f64);
            for (code, answer, keys) in answers {
                check_answer(case, data, code, &answer, keys)?;
            }
            for i in 0..REQUESTS_PER_RUN {
                if case.expected_code(data) == 201 && !case.writes_existing() {
                    let path = format!("/api/v1/namespaces/{NS}/configmaps/b{}-{run}-{i}", case as u8);
                    api.send_raw("DELETE", &path, Vec::new(), "application/json").await?;
                }
            }
        }
        if case.writes_existing() {
            let path = format!("/api/v1/namespaces/{NS}/configmaps/{existing}");
            api.send_raw("DELETE", &path, Vec::new(), "application/json").await?;
        }
        let labels = [("case", case.name().to_string()), ("content_type", case.content_type().to_string())];
        let c = report.measure("bodies/cpu_per_request", "s", &labels, &cpu);
        let l = report.measure("bodies/latency", "s", &labels, &latency);
        let met = c.as_ref().is_some_and(|c| c.median <= GOAL_CPU_SECONDS);
        if !met {
            missed.push(case.name());
        }
        table.row(vec![
            case.name().into(),
            case.content_type().into(),
            case.expected_code(data).to_string(),
            c.as_ref().map_or("n/a".into(), |c: &Summary| fmt_secs(c.median)),
            c.as_ref().map_or("n/a".into(), |c| fmt_secs(c.p90)),
            l.as_ref().map_or("n/a".into(), |l| fmt_secs(l.median)),
            if met { "met".into() } else { "missed".into() },
        ]);
    }
    server.stop().await;
    report.tables.push(table);
    if !missed.is_empty() {
        report.note(format!("Goal of ≤ 100 ms of server CPU per request missed by: {}.", missed.join("; ")));
    }
    Ok(report)
}

/// Creates the ConfigMap `name` a case then writes to or deletes
/// ([`Case::setup`]); an error unless it is created (201).
async fn set_up(api: &Api, case: Case, name: &str, bytes: usize) -> anyhow::Result<()> {
    let (method, path, body, content_type) = case.setup(name, bytes);
    let (code, answer) = api.send_raw(method, &path, body, content_type).await?;
    if code != 201 {
        let short = String::from_utf8_lossy(&answer[..answer.len().min(300)]).into_owned();
        anyhow::bail!("{}: creating the ConfigMap {name} beforehand answered {code}: {short}", case.name());
    }
    Ok(())
}

/// The server's CPU time so far, seconds.
fn server_cpu(pid: u32) -> anyhow::Result<f64> {
    sample_proc(pid).map(|s| s.cpu_seconds).ok_or_else(|| anyhow::anyhow!("the API server is gone"))
}

/// CPU seconds per second the server uses while no request is sent,
/// measured over `sample` after waiting as long.
async fn idle_cpu_rate(pid: u32, sample: Duration) -> anyhow::Result<f64> {
    tokio::time::sleep(sample).await;
    let started = Instant::now();
    let before = server_cpu(pid)?;
    tokio::time::sleep(sample).await;
    let used = server_cpu(pid)? - before;
    Ok((used / started.elapsed().as_secs_f64()).max(0.0))
}

/// Fails unless `code` is what `case` expects for a ConfigMap of
/// `data` bytes, a created or written object carries all `keys` data keys,
/// and a 422 is the data size refusal.
fn check_answer(case: Case, data: usize, code: u16, answer: &[u8], keys: usize) -> anyhow::Result<()> {
    let short = || String::from_utf8_lossy(&answer[..answer.len().min(300)]).into_owned();
    let expected = case.expected_code(data);
    if code != expected {
        anyhow::bail!("{}: answered {code}, expected {expected}: {}", case.name(), short());
    }
    if code == 422 && !short().contains("Too long: may not be more than 1048576 bytes") {
        anyhow::bail!("{}: a 422 that is not the data size refusal: {}", case.name(), short());
    }
    let numbers = matches!(case, Case::JsonNumbers | Case::YamlFlowNumbers | Case::YamlBlockNumbers);
    if numbers && !short().contains("cannot be handled as a ConfigMap") {
        anyhow::bail!("{}: a 400 that is not the typed decoding refusal: {}", case.name(), short());
    }
    if matches!(case, Case::Delete) {
        let status: Value = serde_json::from_slice(answer)?;
        if status["kind"] != "Status" || status["status"] != "Success" {
            anyhow::bail!("{}: the answer is not a Success Status: {}", case.name(), short());
        }
        return Ok(());
    }
    if code == 201 || code == 200 {
        let obj: Value = serde_json::from_slice(answer)?;
        let got = obj["data"].as_object().map_or(0, |d| d.len());
        if got != keys {
            anyhow::bail!("{}: the written ConfigMap has {got} data keys, {keys} were expected", case.name());
        }
    }
    Ok(())
}
