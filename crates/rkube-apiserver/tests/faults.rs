//! Fault tests of issue 4 (KEP-4568 resilient initialization, the
//! `storage-readiness` post-start hook, the consistency checker), as a
//! client sees them over HTTP:
//!
//! - `kill -9` of a real `apiserver` process (same code and flags as
//!   `rkube apiserver`) on the embedded backend during 1,000 creates: every
//!   acknowledged object survives, every stored value decodes;
//! - a real etcd killed and restarted under writes and watches: clear
//!   429/5xx `Status` answers meanwhile, caches re-initialize, and every
//!   watcher's events match etcd's own history (no loss, no duplicate), or
//!   it got 410 and re-listed exactly etcd's state;
//! - each of `ResilientWatchCacheInitialization`,
//!   `WatchCacheInitializationPostStartHook` and `DetectCacheInconsistency`
//!   switched off (each test fails if the gate were ignored);
//! - the health endpoints (`/healthz`, `/livez`, `/readyz`, `?verbose`,
//!   `?exclude=`, `/<endpoint>/<check>`) with the post-start hook
//!   `poststarthook/storage-readiness`, as upstream genericapiserver serves them.
//!
//! Every process is a child of the test, killed by its PID on drop.

use crate::cache_support;
use crate::faults_support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cache_support::{embedded, metric, Apiserver, LateEtcd, LossyWatchStorage};
use faults_support::{check_against_history, history, run_watcher, serve, Client, HeldWatchStorage, WatchLog};
use rkube_apiserver::ServerConfig;
use rkube_storage::Storage;
use serde_json::{json, Value};

const CM: &str = "/api/v1/namespaces/default/configmaps";
const CM_PREFIX: &str = "/registry/configmaps/default/";

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

/// The `(code, reason)` pairs a client may see while storage is down: a
/// clear Status, never a hang, a torn body or a 200 with wrong data.
const DOWN_ANSWERS: &[(u16, &str)] =
    &[(429, "TooManyRequests"), (503, "ServiceUnavailable"), (504, "Timeout"), (500, "InternalError")];

fn assert_clear_status(a: &faults_support::Answer) {
    assert!(DOWN_ANSWERS.contains(&(a.code, a.reason())), "unclear answer while storage is down: {} {}", a.code, a.text);
    assert_eq!(a.body["kind"], "Status", "{}", a.text);
    assert_eq!(a.body["code"].as_u64(), Some(u64::from(a.code)), "{}", a.text);
    assert!(!a.body["message"].as_str().unwrap_or("").is_empty(), "{}", a.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_1000_creates_on_the_embedded_backend_loses_no_acknowledged_object() {
    const TOTAL: usize = 1000;
    const KILL_AFTER: usize = 400;
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let mut s = Apiserver::spawn_in(Some(&data), &[], &[]);
    s.api.wait_ready(30).await;
    let c = Client::new(&s.api.base);

    // 16 clients create k-0000..k-0999; each 201 is recorded.
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (c, acked, next) = (c.clone(), acked.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= TOTAL {
                        return;
                    }
                    let name = format!("k-{i:04}");
                    match c.post(CM, &configmap(&name)).await {
                        Some(a) if a.code == 201 => {
                            acked.lock().unwrap().insert(name);
                        }
                        Some(a) => panic!("create {name}: {} {}", a.code, a.text),
                        None => return, // the server is gone
                    }
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < KILL_AFTER {
        assert!(started.elapsed() < Duration::from_secs(40), "creates too slow");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let pid = s.pid();
    tokio::task::block_in_place(|| s.kill_9());
    let killed_at = started.elapsed();
    for w in workers {
        w.await.expect("client task");
    }
    let acked: BTreeSet<String> = acked.lock().unwrap().clone();
    let attempted = next.load(Ordering::Relaxed).min(TOTAL);
    assert!(acked.len() < TOTAL, "the kill came too late to test anything");

    // The data dir as the next start finds it: every acknowledged object
    // is there and every stored value is a whole object.
    let stored: BTreeSet<String> = {
        let store = rkube_storage::embedded::EmbeddedStorage::open(&data).expect("reopen after kill -9");
        let all = store.range(rkube_storage::RangeRequest::prefix("/registry/")).await.expect("range");
        for kv in &all.kvs {
            let v: Value = serde_json::from_slice(&kv.value)
                .unwrap_or_else(|e| panic!("{} holds a half-written value ({e}): {:?}", kv.key, kv.value));
            let name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            assert!(kv.key.ends_with(&format!("/{name}")), "{} stores object {name:?}", kv.key);
        }
        let cms = store.range(rkube_storage::RangeRequest::prefix(CM_PREFIX)).await.expect("range");
        cms.kvs.iter().map(|kv| kv.key.trim_start_matches(CM_PREFIX).to_string()).collect()
    };
    let lost: Vec<&String> = acked.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged but lost after kill -9: {lost:?}");
    eprintln!(
        "kill -9 (pid {pid}) after {:.2} s: {} creates acknowledged, {} sent, {} stored ({} stored without a 201)",
        killed_at.as_secs_f64(),
        acked.len(),
        attempted,
        stored.len(),
        stored.len() - acked.len()
    );

    // Restart on the same data dir: the server serves all of them, and the
    // creates the kill interrupted can be completed (409 when the kill came
    // between commit and answer).
    let s = Apiserver::spawn_in(Some(&data), &[], &[]);
    s.api.wait_ready(30).await;
    let c = Client::new(&s.api.base);
    for i in 0..TOTAL {
        let name = format!("k-{i:04}");
        if acked.contains(&name) {
            continue;
        }
        let a = c.post(CM, &configmap(&name)).await.expect("restarted server answers");
        let committed = stored.contains(&name);
        match (a.code, committed) {
            (201, false) => {}
            (409, true) => assert_eq!(a.reason(), "AlreadyExists", "{}", a.text),
            _ => panic!("create {name} after restart (stored before: {committed}): {} {}", a.code, a.text),
        }
    }
    let list = c.get(CM).await.expect("list");
    assert_eq!(list.code, 200, "{}", list.text);
    let names: BTreeSet<String> = list.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i.pointer("/metadata/name")?.as_str().map(str::to_string))
        .filter(|n| n.starts_with("k-"))
        .collect();
    assert_eq!(names.len(), TOTAL, "after restart and retries every object exists once");
    for name in &acked {
        assert!(names.contains(name), "{name} acknowledged before the kill, missing after restart");
    }
}

/// One refused write of a writer: the request (`POST w0-5`, `DELETE w0-4`)
/// and the answer.
type Refusal = (String, faults_support::Answer);

/// Writers of `etcd_stop_under_load`: create `w<t>-<i>`, and every third
/// step delete the object the step before created, only when that create
/// was acknowledged (201); record refused requests; count acknowledged writes.
///
/// Why only acknowledged creates: a create refused while etcd is down never
/// reached etcd, so a DELETE of it served once etcd is back is rightly 404
/// `NotFound` (upstream `Store.Delete` reads the object from etcd first and
/// answers NotFound too). An earlier writer deleted `w<t>-<i-1>` whatever its
/// create got and so failed, now and then, with exactly that 404 at the
/// moment etcd came back. A create answered 5xx that etcd applied anyway
/// (its answer lost with the connection) is never deleted here, and no
/// request is ever re-sent, so no 404 is acceptable: one would mean an
/// acknowledged create was lost or a delete was applied twice.
async fn writer(c: Client, t: usize, stop: Arc<AtomicBool>, refusals: Arc<Mutex<Vec<Refusal>>>, acked: Arc<AtomicUsize>) {
    let mut i = 0usize;
    let mut last_created: Option<(String, i64)> = None;
    while !stop.load(Ordering::Acquire) {
        i += 1;
        let name = format!("w{t}-{i}");
        let deleting = i.is_multiple_of(3) && last_created.is_some();
        let (op, a) = match last_created.take() {
            Some((prev, rv)) if deleting => (
                format!("DELETE {prev} (its create answered 201 at resourceVersion {rv})"),
                c.send("DELETE", &format!("{CM}/{prev}"), None).await,
            ),
            _ => (format!("POST {name}"), c.post(CM, &configmap(&name)).await),
        };
        match a {
            Some(a) if a.code < 300 => {
                acked.fetch_add(1, Ordering::Relaxed);
                if !deleting {
                    last_created = Some((name, a.rv()));
                }
            }
            Some(a) => {
                refusals.lock().unwrap().push((op, a));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Fails on a refusal that is not a clear "storage down" Status, naming the
/// request and etcd's own history of the object (so a 404 tells whether
/// etcd lost the acknowledged create or saw the object deleted before).
async fn assert_clear_refusal(storage: &dyn Storage, (op, a): &Refusal, final_rv: i64) {
    if !DOWN_ANSWERS.contains(&(a.code, a.reason())) {
        let name = op.split_whitespace().nth(1).unwrap_or("");
        let key_history: Vec<faults_support::Seen> = history(storage, &format!("{CM_PREFIX}{name}"), 0, final_rv)
            .await
            .into_iter()
            .filter(|e| e.1 == name)
            .collect();
        panic!(
            "{op}: unclear answer while storage is down: {} {}\netcd's history of {name}: {key_history:?}",
            a.code, a.text
        );
    }
    assert_clear_status(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stop_under_load_gives_clear_statuses_and_watchers_lose_no_event() {
    let mut etcd = LateEtcd::new();
    tokio::task::block_in_place(|| etcd.start());
    let servers = format!("--etcd-servers={}", etcd.endpoint());
    let mut s = Apiserver::spawn(&["--storage-backend=etcd3", &servers, "--etcd-compaction-interval=0"], &[]);
    s.api.wait_ready(30).await;
    let c = Client::new(&s.api.base);

    let stop = Arc::new(AtomicBool::new(false));
    let target = Arc::new(AtomicI64::new(0));
    let refusals = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..3)
        .map(|t| tokio::spawn(writer(c.clone(), t, stop.clone(), refusals.clone(), acked.clone())))
        .collect();
    let logs: Vec<Arc<Mutex<WatchLog>>> = (0..3).map(|_| Arc::default()).collect();
    let never = Arc::new(AtomicBool::new(false));
    let watchers: Vec<_> = logs
        .iter()
        .map(|l| tokio::spawn(run_watcher(c.clone(), CM.to_string(), target.clone(), never.clone(), l.clone())))
        .collect();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = acked.load(Ordering::Relaxed);
    assert!(before > 10, "writes before the stop: {before}");
    tokio::task::block_in_place(|| etcd.stop());
    let down_at = Instant::now();
    // While etcd is down: reads answer clearly too.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut down_reads = Vec::new();
    for path in [format!("{CM}/w0-1"), CM.to_string(), format!("{CM}?watch=1"), format!("{CM}?resourceVersion=0&labelSelector=a%3Db")] {
        let a = c.get(&path).await.expect("the server answers while etcd is down");
        assert_clear_status(&a);
        down_reads.push((path, a.code, a.reason().to_string()));
    }
    let during = refusals.lock().unwrap().len();
    assert!(during > 0, "no write was refused while etcd was down");
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| etcd.start());
    let down_for = down_at.elapsed();

    // Writes succeed again, then caches re-initialize and watches are served.
    let deadline = Instant::now() + Duration::from_secs(30);
    let resumed = acked.load(Ordering::Relaxed);
    while acked.load(Ordering::Relaxed) < resumed + 20 {
        assert!(Instant::now() < deadline, "writes did not resume after etcd came back:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let back_after = down_at.elapsed() - down_for;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Release);
    for w in writers {
        w.await.expect("writer");
    }
    let storage = rkube_storage::etcd::EtcdStorage::connect(&[etcd.endpoint()]).await.expect("connect etcd");
    let final_rv = storage.current_revision().await.expect("revision");
    target.store(final_rv, Ordering::Release);
    for w in watchers {
        tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("every watcher reaches etcd's final revision")
            .expect("watcher task");
    }

    // Every refusal was a clear Status.
    let refused = refusals.lock().unwrap().clone();
    for r in &refused {
        assert_clear_refusal(&storage, r, final_rv).await;
    }
    // Every watcher's events are etcd's history: no gap, no duplicate.
    let mut total = 0;
    for (i, l) in logs.iter().enumerate() {
        let log = std::mem::take(&mut *l.lock().unwrap());
        for (code, reason) in &log.refusals {
            assert!(
                DOWN_ANSWERS.contains(&(*code, reason.as_str())) || (*code, reason.as_str()) == (410, "Expired"),
                "watcher {i} got {code} {reason}"
            );
        }
        let n = check_against_history(&storage, CM_PREFIX, &log, final_rv).await;
        eprintln!(
            "watcher {i}: {n} events checked against etcd, {} segment(s) (re-lists after 410: {}), {} re-watches, refusals {:?}",
            log.segments.len(),
            log.segments.len() - 1,
            log.rewatches,
            log.refusals.iter().collect::<BTreeSet<_>>()
        );
        total += n;
    }
    assert!(total > 0);
    let m = s.api.metrics().await;
    let inits = metric(&m, "apiserver_watch_cache_initializations_total", &[("resource", "configmaps")]);
    assert!(inits >= 2.0, "the configmaps cache re-initialized: {inits}");
    assert!(s.exited().is_none(), "the apiserver exited:\n{}", s.log());
    assert!(!s.log().contains("panicked"), "{}", s.log());
    let codes: BTreeSet<(u16, String)> = refused.iter().map(|(_, a)| (a.code, a.reason().to_string())).collect();
    eprintln!(
        "etcd down {:.1} s; writes back {:.1} s after restart; {} writes acknowledged, {} refused {codes:?}; reads while down {down_reads:?}; final revision {final_rv}",
        down_for.as_secs_f64(),
        back_after.as_secs_f64(),
        acked.load(Ordering::Relaxed),
        refused.len()
    );
}

/// A config with the named gates switched off.
fn config_with(gates: &str) -> ServerConfig {
    let mut config = ServerConfig::default();
    config.watch_cache.gates = rkube_apiserver::feature_gates::FeatureGates::parse(gates).expect("gates");
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resilient_watch_cache_initialization_off_makes_requests_wait_for_the_cache_instead_of_429() {
    let (inner, _dir) = embedded();
    let storage = HeldWatchStorage::new(inner, "/configmaps/");
    let s = serve(storage.clone(), config_with("ResilientWatchCacheInitialization=false")).await;
    let c = Client::new(&s.api.base);
    assert_eq!(c.post(CM, &configmap("before")).await.expect("create").code, 201, "writes go to storage");

    // The configmaps cache cannot become ready. A watch waits (pre-KEP-4568)
    // instead of a 429 at once.
    let t0 = Instant::now();
    let wc = c.clone();
    let watch = tokio::spawn(async move { wc.watch(&format!("{CM}?watch=1&resourceVersion=0")).await });
    // A LIST at resourceVersion=0 goes to storage (pre-KEP), even with a selector.
    let l = c.get(&format!("{CM}?resourceVersion=0&labelSelector=x%21%3Dy")).await.expect("list");
    assert_eq!(l.code, 200, "{}", l.text);
    assert_eq!(l.body["items"][0]["metadata"]["name"], "before", "{}", l.text);
    // GET at a resourceVersion > 0 waits too; unset reads storage.
    assert_eq!(c.get(&format!("{CM}/before")).await.expect("get").code, 200);
    let gc = c.clone();
    let get_at_rv = tokio::spawn(async move { gc.get(&format!("{CM}/before?resourceVersion=1")).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!watch.is_finished(), "the watch was answered while the cache was not ready");
    assert!(!get_at_rv.is_finished(), "the GET at a resourceVersion was answered while the cache was not ready");

    storage.release();
    let w = tokio::time::timeout(Duration::from_secs(20), watch).await.expect("watch answered").expect("task");
    let waited = t0.elapsed();
    let mut stream = match w.expect("server answers") {
        Ok(s) => s,
        Err(a) => panic!("the watch got {} instead of waiting: {}", a.code, a.text),
    };
    assert!(waited >= Duration::from_secs(2), "answered after {waited:?}");
    let g = tokio::time::timeout(Duration::from_secs(20), get_at_rv).await.expect("GET answered").expect("task");
    let g = g.expect("server answers");
    assert_eq!((g.code, g.body["metadata"]["name"].as_str()), (200, Some("before")), "{}", g.text);
    match stream.next(Duration::from_secs(5)).await {
        faults_support::Next::Event(ev) => {
            assert_eq!((ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("before")))
        }
        other => panic!("no initial event: {other:?}"),
    }
    c.post(CM, &configmap("after")).await.expect("create");
    match stream.next(Duration::from_secs(5)).await {
        faults_support::Next::Event(ev) => assert_eq!(ev["object"]["metadata"]["name"], "after", "{ev}"),
        other => panic!("no event after the cache became ready: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_cache_initialization_post_start_hook_off_leaves_storage_readiness_out_of_readyz() {
    let (inner, _dir) = embedded();
    let storage = HeldWatchStorage::new(inner, "/pods/");
    let s = serve(storage.clone(), config_with("WatchCacheInitializationPostStartHook=false")).await;
    let c = Client::new(&s.api.base);
    // The pods cache never becomes ready, yet /readyz passes: no hook waits for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = c.get("/readyz?verbose").await.expect("readyz");
        if r.code == 200 {
            break r;
        }
        assert!(Instant::now() < deadline, "/readyz never passed: {}", r.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!r.text.contains("storage-readiness"), "{}", r.text);
    assert!(r.text.contains("[+]etcd ok\n") && r.text.ends_with("readyz check passed\n"), "{}", r.text);
    for ep in ["/livez?verbose", "/healthz?verbose"] {
        let r = c.get(ep).await.expect("health");
        assert_eq!(r.code, 200, "{ep}: {}", r.text);
        assert!(!r.text.contains("storage-readiness"), "{ep}: {}", r.text);
    }
    assert_eq!(c.get("/readyz/poststarthook/storage-readiness").await.expect("sub-path").code, 404);
    // The cache is still not ready: KEP-4568's 429 (that gate is on).
    let w = c.get("/api/v1/pods?watch=1").await.expect("watch");
    assert_eq!((w.code, w.reason()), (429, "TooManyRequests"), "{}", w.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_report_the_storage_readiness_post_start_hook_like_upstream() {
    let (inner, _dir) = embedded();
    let storage = HeldWatchStorage::new(inner, "/pods/");
    let s = serve(storage.clone(), ServerConfig::default()).await;
    let c = Client::new(&s.api.base);
    let get = |p: &'static str| {
        let c = c.clone();
        async move { c.get(p).await.expect(p) }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Hook not finished (pods cache not ready): all three endpoints list it.
    for (ep, name) in [("/readyz", "readyz"), ("/livez", "livez"), ("/healthz", "healthz")] {
        let r = c.get(ep).await.expect(ep);
        assert_eq!(r.code, 500, "{ep}: {}", r.text);
        assert!(r.text.contains("[-]poststarthook/storage-readiness failed: reason withheld\n"), "{ep}: {}", r.text);
        assert!(r.text.contains("[+]ping ok\n") && r.text.contains("[+]etcd ok\n"), "{ep}: {}", r.text);
        assert!(r.text.ends_with(&format!("{name} check failed\n")), "{ep}: {}", r.text);
    }
    for p in ["/readyz/poststarthook/storage-readiness", "/livez/poststarthook/storage-readiness", "/healthz/poststarthook/storage-readiness"] {
        let r = c.get(p).await.expect(p);
        assert_eq!((r.code, r.text.as_str()), (500, "internal server error: not finished\n"), "{p}");
    }
    let r = get("/readyz/etcd").await;
    assert_eq!((r.code, r.text.as_str()), (200, "ok"));
    // ?exclude= skips the failing check; a name matching no check is warned about.
    let r = get("/readyz?verbose&exclude=poststarthook/storage-readiness").await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert!(r.text.contains("[+]poststarthook/storage-readiness excluded: ok\n"), "{}", r.text);
    assert!(r.text.ends_with("readyz check passed\n"), "{}", r.text);
    let r = get("/readyz?exclude=poststarthook/storage-readiness").await;
    assert_eq!((r.code, r.text.as_str()), (200, "ok"));
    let r = get("/livez?exclude=poststarthook/storage-readiness&exclude=nope").await;
    assert_eq!(r.code, 200, "{}", r.text);
    let r = get("/livez?verbose&exclude=poststarthook/storage-readiness&exclude=nope").await;
    assert!(r.text.contains("warn: some health checks cannot be excluded: no matches for \"nope\"\n"), "{}", r.text);
    assert_eq!(get("/readyz/poststarthook/nope").await.code, 404);
    assert_eq!(get("/readyz/nope").await.code, 404);

    // The pods cache becomes ready: the hook finishes and never fails again.
    storage.release();
    let deadline = Instant::now() + Duration::from_secs(20);
    while get("/readyz").await.code != 200 {
        assert!(Instant::now() < deadline, "/readyz never passed: {}", get("/readyz?verbose").await.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (ep, name) in [("/readyz?verbose", "readyz"), ("/livez?verbose", "livez"), ("/healthz?verbose", "healthz")] {
        let r = c.get(ep).await.expect(ep);
        assert_eq!(r.code, 200, "{ep}: {}", r.text);
        assert!(r.text.contains("[+]poststarthook/storage-readiness ok\n"), "{ep}: {}", r.text);
        assert!(r.text.ends_with(&format!("{name} check passed\n")), "{ep}: {}", r.text);
    }
    for ep in ["/readyz", "/livez", "/healthz", "/readyz/poststarthook/storage-readiness", "/livez/poststarthook/storage-readiness"] {
        let r = c.get(ep).await.expect(ep);
        assert_eq!((r.code, r.text.as_str()), (200, "ok"), "{ep}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detect_cache_inconsistency_off_runs_no_checker_and_exposes_no_metric() {
    let (inner, _dir) = embedded();
    let storage = Arc::new(LossyWatchStorage::new(inner, "hidden"));
    let mut config = config_with("DetectCacheInconsistency=false");
    config.watch_cache.consistency_check_period = Duration::from_secs(1);
    let s = serve(storage, config).await;
    let c = Client::new(&s.api.base);
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.get("/readyz").await.expect("readyz").code != 200 {
        assert!(Instant::now() < deadline, "not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.post(CM, &configmap("visible")).await.expect("create");
    let rv = c.post(CM, &configmap("hidden-1")).await.expect("create").rv();
    // With the checker the cache's missing event would be caught within
    // 1–1.5 s (checks_total{status="failure"}, snapshots purged). Wait 4 s.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let m = c.get("/metrics").await.expect("metrics").text;
    assert!(!m.contains("apiserver_storage_consistency_checks"), "checker metric present:\n{m}");
    // Snapshots were not purged: the Exact LIST still comes from the cache's
    // snapshot (which lacks the lost object: nothing detected it).
    let list_total = |m: &str| metric(m, "apiserver_cache_list_total", &[("resource", "configmaps")]);
    let before = list_total(&m);
    let r = c.get(&format!("{CM}?resourceVersion={rv}&resourceVersionMatch=Exact")).await.expect("list");
    assert_eq!(r.code, 200, "{}", r.text);
    let names: Vec<&str> = r.body["items"].as_array().expect("items").iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["visible"], "{}", r.text);
    let after = list_total(&c.get("/metrics").await.expect("metrics").text);
    assert_eq!(after - before, 1.0, "served from a snapshot");
}

/// Writes a/b/c into a fresh embedded store; returns it with the revision before them.
async fn three_writes() -> (Arc<dyn Storage>, tempfile::TempDir, i64) {
    let (storage, dir) = embedded();
    let start = storage.current_revision().await.expect("revision");
    for n in ["a", "b", "c"] {
        storage.create(&format!("{CM_PREFIX}{n}"), configmap(n).to_string().into()).await.expect("create");
    }
    (storage, dir, start)
}

fn one_segment(start_rv: i64, events: &[(&str, &str, i64)]) -> WatchLog {
    let events = events.iter().map(|(t, n, r)| (t.to_string(), n.to_string(), *r)).collect();
    WatchLog { segments: vec![faults_support::Segment { start_rv, relist: None, events }], ..Default::default() }
}

/// The history checker of the etcd test is itself checked: a stream that
/// skipped an event fails it.
#[tokio::test]
#[should_panic(expected = "lost revisions [")]
async fn history_checker_catches_a_lost_event() {
    let (storage, _dir, s) = three_writes().await;
    let log = one_segment(s, &[("ADDED", "a", s + 1), ("ADDED", "c", s + 3)]);
    check_against_history(storage.as_ref(), CM_PREFIX, &log, s + 3).await;
}

/// ... and so does a stream that delivered an event twice.
#[tokio::test]
#[should_panic(expected = "duplicated revisions [")]
async fn history_checker_catches_a_duplicated_event() {
    let (storage, _dir, s) = three_writes().await;
    let log = one_segment(s, &[("ADDED", "a", s + 1), ("ADDED", "b", s + 2), ("ADDED", "b", s + 2), ("ADDED", "c", s + 3)]);
    check_against_history(storage.as_ref(), CM_PREFIX, &log, s + 3).await;
}

/// ... while the exact history passes.
#[tokio::test]
async fn history_checker_accepts_the_exact_history() {
    let (storage, _dir, s) = three_writes().await;
    let log = one_segment(s, &[("ADDED", "a", s + 1), ("ADDED", "b", s + 2), ("ADDED", "c", s + 3)]);
    assert_eq!(check_against_history(storage.as_ref(), CM_PREFIX, &log, s + 3).await, 3);
}
