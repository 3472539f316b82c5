//! The simulated clients of `rkube bench cluster` (kubemark/kwok-like
//! "hollow" components) and the per-call latency recorder.
//!
//! - [`kubelet`]: registers a Node and its Lease, renews the Lease every
//!   `lease_interval` (upstream: 10 s), GETs its Node with
//!   `resourceVersion=0` on the same beat (the node-status loop), PATCHes
//!   Node status every 5 minutes (upstream `nodeStatusReportFrequency`),
//!   LIST+WATCHes its pods with `fieldSelector=spec.nodeName=<node>`, and
//!   PATCHes `pods/<name>/status` to Running for each new pod.
//! - [`proxy`]: LIST+WATCH of Services and EndpointSlices (cluster scope).
//! - [`controller`]: creates pods bound to nodes at a set rate (`--workload pods`; see
//!   [`super::cluster_workload`] for Deployments);
//!   [`endpoints`] rewrites the EndpointSlices of services whose pods started,
//!   at most once a second each; [`lister`] LISTs pods per namespace and
//!   cluster-wide on fixed periods (paginated, limit 500).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::Semaphore;

use crate::client::{Api, ClientError};
use crate::objects;
use crate::stats::{micros, Histogram};

/// Aborts the task when dropped (so aborting a kubelet ends its pod watch).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Verbs as the SLOs group them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// GET of one object.
    Get,
    /// LIST (one page).
    List,
}

impl Verb {
    /// Upper-case name as in `apiserver_request_total{verb}`.
    pub fn name(self) -> &'static str {
        match self {
            Verb::Create => "POST",
            Verb::Update => "PUT",
            Verb::Patch => "PATCH",
            Verb::Get => "GET",
            Verb::List => "LIST",
        }
    }
}

/// Scope of a call (upstream SLI `scope` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// One object.
    Resource,
    /// A namespace's collection.
    Namespace,
    /// All namespaces / a cluster-scoped collection.
    Cluster,
}

impl Scope {
    /// Name as in the SLI.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Resource => "resource",
            Scope::Namespace => "namespace",
            Scope::Cluster => "cluster",
        }
    }
}

/// Call key: verb, scope, resource.
pub type CallKey = (Verb, Scope, &'static str);

/// Latency per call key, error counts per key and code.
#[derive(Default)]
pub struct Recorder {
    calls: Mutex<BTreeMap<CallKey, Histogram>>,
    errors: Mutex<BTreeMap<(CallKey, String), u64>>,
}

impl Recorder {
    /// Runs `fut`, recording its latency (successes and failures alike) and its error.
    pub async fn call<T>(
        &self,
        key: CallKey,
        fut: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        let t = Instant::now();
        let r = fut.await;
        let us = micros(t.elapsed());
        if let Ok(mut m) = self.calls.lock() {
            m.entry(key).or_default().record(us);
        }
        if let Err(e) = &r {
            let code = e
                .code()
                .map(|c| c.to_string())
                .unwrap_or_else(|| "transport".into());
            if let Ok(mut m) = self.errors.lock() {
                *m.entry((key, code)).or_default() += 1;
            }
        }
        r
    }

    /// A copy of the histograms.
    pub fn calls(&self) -> BTreeMap<CallKey, Histogram> {
        self.calls.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// A copy of the error counts.
    pub fn errors(&self) -> BTreeMap<(CallKey, String), u64> {
        self.errors.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// Settings and shared state of one simulated cluster.
pub struct Sim {
    /// Requests (pooled connections).
    pub api: Api,
    /// Watches (one connection each).
    pub watch_api: Api,
    /// Call latencies.
    pub rec: Recorder,
    /// Simulated nodes.
    pub nodes: usize,
    /// Services (and EndpointSlices).
    pub services: usize,
    /// Namespaces pods and services live in.
    pub namespaces: usize,
    /// Lease renewal period.
    pub lease_interval: Duration,
    /// Node status PATCH period.
    pub node_status_interval: Duration,
    /// Set when the run ends.
    pub stopping: AtomicBool,
    /// Nodes registered (node + lease created, pod watch open).
    pub registered: AtomicU64,
    /// Pods created by the controller.
    pub pods_created: AtomicU64,
    /// Pods whose status a kubelet set to Running.
    pub pods_running: AtomicU64,
    /// Watch streams that ended early (all clients).
    pub watch_terminations: AtomicU64,
    /// Paginated LISTs still returning a `continue` token after [`WALK_PAGE_BUDGET`] pages.
    pub unfinished_walks: AtomicU64,
    /// Events received by proxy clients.
    pub proxy_events: AtomicU64,
    /// Pod create → ADDED event at its kubelet.
    pub pod_seen: Mutex<Histogram>,
    /// Services whose endpoints changed: index → pod IPs.
    pub dirty: Mutex<BTreeMap<usize, Vec<String>>>,
}

impl Sim {
    /// The name of node `i`.
    pub fn node_name(i: usize) -> String {
        format!("hollow-node-{i:05}")
    }

    /// The namespace of pod or service `i`.
    pub fn namespace(&self, i: usize) -> String {
        format!("bench-{}", i % self.namespaces)
    }

    fn stopped(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Sleeps `d` or until the run stops; false when stopping.
    async fn pause(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if self.stopped() {
                return false;
            }
            tokio::time::sleep((end - Instant::now()).min(Duration::from_millis(250))).await;
        }
        !self.stopped()
    }
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// One hollow kubelet for node `idx`. `gate` bounds concurrent registrations.
pub async fn kubelet(sim: Arc<Sim>, idx: usize, gate: Arc<Semaphore>) {
    let node = Sim::node_name(idx);
    let rec = &sim.rec;
    // The node's own identity (system:node:<name> in system:nodes), as a kubelet's.
    let token = super::cluster_workload::node_token(&node);
    let api = sim.api.with_token(&token);
    let lease_path =
        format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}");
    let mut lease_rv;
    let watch_task;
    {
        let _permit = gate.acquire().await;
        loop {
            let created = rec
                .call(
                    (Verb::Create, Scope::Resource, "nodes"),
                    api.create("/api/v1/nodes", &objects::node(&node)),
                )
                .await;
            match created {
                Ok(_) => break,
                Err(e) if e.code() == Some(409) => break,
                Err(_) if sim.pause(Duration::from_millis(500)).await => continue,
                Err(_) => return,
            }
        }
        loop {
            let created = rec
                .call(
                    (Verb::Create, Scope::Resource, "leases"),
                    api.create(
                        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                        &objects::lease(&node, &objects::now_micro()),
                    ),
                )
                .await;
            match created {
                Ok(rv) => {
                    lease_rv = rv;
                    break;
                }
                Err(e) if e.code() == Some(409) => {
                    lease_rv = String::new();
                    break;
                }
                Err(_) if sim.pause(Duration::from_millis(500)).await => continue,
                Err(_) => return,
            }
        }
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        watch_task = AbortOnDrop(tokio::spawn(pod_watch(sim.clone(), node.clone(), token.clone(), ready_tx)));
        let _ = ready_rx.await;
    }
    let _watch_task = watch_task;
    sim.registered.fetch_add(1, Ordering::Relaxed);
    // Spread the beats over the interval, like kubelets started at different times.
    let offset = sim.lease_interval.mul_f64((idx as f64 * 0.618_034) % 1.0);
    if !sim.pause(offset).await {
        return;
    }
    let status_every = (sim.node_status_interval.as_secs_f64() / sim.lease_interval.as_secs_f64())
        .round()
        .max(1.0) as u64;
    let status_phase = (idx as u64 * 7919) % status_every;
    let mut beat: u64 = 0;
    loop {
        // Lease renewal (upstream: update with the last lease it saw; on conflict, GET and retry once).
        let mut body = objects::lease(&node, &objects::now_micro());
        body["metadata"]["resourceVersion"] = json!(lease_rv);
        match rec
            .call(
                (Verb::Update, Scope::Resource, "leases"),
                api.update(&lease_path, &body),
            )
            .await
        {
            Ok(rv) => lease_rv = rv,
            Err(e) if e.code() == Some(409) => {
                if let Ok(bytes) = rec
                    .call(
                        (Verb::Get, Scope::Resource, "leases"),
                        api.get(&lease_path),
                    )
                    .await
                {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                        lease_rv = v["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                    }
                }
            }
            Err(_) => {}
        }
        // Node status loop: read the node from the cache, report status every node_status_interval.
        let _ = rec
            .call(
                (Verb::Get, Scope::Resource, "nodes"),
                api
                    .get(&format!("/api/v1/nodes/{node}?resourceVersion=0")),
            )
            .await;
        if beat % status_every == status_phase {
            let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)}]}});
            let _ = rec
                .call(
                    (Verb::Patch, Scope::Resource, "nodes"),
                    api
                        .merge_patch(&format!("/api/v1/nodes/{node}/status"), &patch),
                )
                .await;
        }
        beat += 1;
        if !sim.pause(sim.lease_interval).await {
            return;
        }
    }
}

/// The kubelet's pod informer: LIST (RV=0) + WATCH with the node's field selector; starts new pods.
async fn pod_watch(sim: Arc<Sim>, node: String, token: String, ready: tokio::sync::oneshot::Sender<()>) {
    let mut ready = Some(ready);
    let (api, watch_api) = (sim.api.with_token(&token), sim.watch_api.with_token(&token));
    let selector = format!("fieldSelector=spec.nodeName%3D{node}");
    loop {
        let list = sim
            .rec
            .call(
                (Verb::List, Scope::Cluster, "pods"),
                api.list(&format!("/api/v1/pods?{selector}&resourceVersion=0")),
            )
            .await;
        let rv = match list {
            Ok(page) => page.resource_version,
            Err(_) => {
                if !sim.pause(Duration::from_secs(1)).await {
                    return;
                }
                continue;
            }
        };
        let path = format!("/api/v1/pods?{selector}&watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3600");
        let mut stream = match watch_api.watch(&path).await {
            Ok(s) => s,
            Err(_) => {
                if !sim.pause(Duration::from_secs(1)).await {
                    return;
                }
                continue;
            }
        };
        if let Some(tx) = ready.take() {
            let _ = tx.send(());
        }
        while let Ok(Some(ev)) = stream.next_event().await {
            if ev.kind != "ADDED" {
                continue;
            }
            let meta = ev.object.metadata;
            if let Some(sent) = meta
                .annotations
                .as_ref()
                .and_then(|a| a.get("bench.rkube.io/created"))
                .and_then(|s| s.parse::<u128>().ok())
            {
                let us = u32::try_from(now_nanos().saturating_sub(sent) / 1000).unwrap_or(u32::MAX);
                if let Ok(mut h) = sim.pod_seen.lock() {
                    h.record(us);
                }
            }
            tokio::spawn(start_pod(sim.clone(), api.clone(), meta.namespace, meta.name));
        }
        if sim.stopped() {
            return;
        }
        sim.watch_terminations.fetch_add(1, Ordering::Relaxed);
    }
}

/// Tries of one status write the server answers 429 before the write waits for the next
/// status sync: client-go's REST client tries a 429 again after its `Retry-After` (1 s from
/// rkube), up to 10 times.
const TOO_MANY_REQUESTS_TRIES: u32 = 10;

/// The kubelet status manager's sync period: a status write that failed for good (any error
/// but a 429 within [`TOO_MANY_REQUESTS_TRIES`]) is tried again at the next sync.
const STATUS_SYNC_PERIOD: Duration = Duration::from_secs(10);

/// Reports a pod Running (PATCH pods/<name>/status) and marks its service's endpoints dirty.
/// A refused PATCH is tried again as a kubelet's would be: a 429 (the server's in-flight
/// limit) after the server's `Retry-After` of 1 s, as client-go does, up to
/// [`TOO_MANY_REQUESTS_TRIES`] times; after that, or after any other error but 404, at the
/// status manager's next sync ([`STATUS_SYNC_PERIOD`]). Every try is counted by the recorder.
async fn start_pod(sim: Arc<Sim>, api: Api, ns: String, name: String) {
    // The bench's own pods carry their index; a controller's pods get the next free one.
    let i = name
        .strip_prefix("pod-")
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or_else(|| sim.pods_running.load(Ordering::Relaxed) as usize);
    let patch = json!({"status": objects::running_status(i)});
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}/status");
    let mut tries = 0;
    loop {
        let call = api.merge_patch(&path, &patch);
        match sim.rec.call((Verb::Patch, Scope::Resource, "pods"), call).await {
            Ok(_) => break,
            Err(e) if e.code() == Some(404) => return,
            Err(e) => {
                tries += 1;
                let delay = if e.code() == Some(429) && tries % TOO_MANY_REQUESTS_TRIES != 0 {
                    Duration::from_secs(1)
                } else {
                    STATUS_SYNC_PERIOD
                };
                if !sim.pause(delay).await {
                    return;
                }
            }
        }
    }
    sim.pods_running.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut d) = sim.dirty.lock() {
        d.entry(i % sim.services).or_default().push(objects::pod_ip(i));
    }
}

/// One hollow proxy: LIST+WATCH of services and endpointslices, counting events.
pub async fn proxy(sim: Arc<Sim>) {
    tokio::join!(
        informer(sim.clone(), "/api/v1/services", "services"),
        informer(
            sim.clone(),
            "/apis/discovery.k8s.io/v1/endpointslices",
            "endpointslices"
        )
    );
}

async fn informer(sim: Arc<Sim>, collection: &'static str, resource: &'static str) {
    loop {
        let rv = match sim
            .rec
            .call(
                (Verb::List, Scope::Cluster, resource),
                sim.api.list(&format!("{collection}?resourceVersion=0")),
            )
            .await
        {
            Ok(page) => page.resource_version,
            Err(_) => {
                if !sim.pause(Duration::from_secs(1)).await {
                    return;
                }
                continue;
            }
        };
        let path = format!("{collection}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3600");
        let Ok(mut stream) = sim.watch_api.watch(&path).await else {
            if !sim.pause(Duration::from_secs(1)).await {
                return;
            }
            continue;
        };
        while let Ok(Some(_)) = stream.next_event().await {
            sim.proxy_events.fetch_add(1, Ordering::Relaxed);
        }
        if sim.stopped() {
            return;
        }
        sim.watch_terminations.fetch_add(1, Ordering::Relaxed);
    }
}

/// Creates `total` pods at `rate`/s (bound to nodes round-robin) until done or `deadline`.
pub async fn controller(
    sim: Arc<Sim>,
    total: usize,
    rate: f64,
    deadline: Instant,
    progress: indicatif::ProgressBar,
) {
    let sem = Arc::new(Semaphore::new(256));
    let start = Instant::now();
    for i in 0..total {
        let at = start + Duration::from_secs_f64(i as f64 / rate);
        if at > deadline || sim.stopped() {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let Ok(permit) = sem.clone().acquire_owned().await else {
            break;
        };
        let sim = sim.clone();
        let progress = progress.clone();
        tokio::spawn(async move {
            let ns = sim.namespace(i);
            let name = format!("pod-{i:07}");
            let mut pod = objects::pending_pod(&ns, &name, &Sim::node_name(i % sim.nodes), i);
            pod["metadata"]["labels"]["app"] = json!(format!("svc-{}", i % sim.services));
            pod["metadata"]["annotations"]["bench.rkube.io/created"] =
                json!(now_nanos().to_string());
            let path = format!("/api/v1/namespaces/{ns}/pods");
            if sim
                .rec
                .call(
                    (Verb::Create, Scope::Resource, "pods"),
                    sim.api.create(&path, &pod),
                )
                .await
                .is_ok()
            {
                sim.pods_created.fetch_add(1, Ordering::Relaxed);
                progress.inc(1);
            }
            drop(permit);
        });
    }
    let _ = sem.acquire_many(256).await;
}

/// Creates the namespaces, the services and their (empty) EndpointSlices.
pub async fn setup(sim: &Sim) -> anyhow::Result<()> {
    for n in 0..sim.namespaces {
        crate::load::namespace_http(&sim.api, &format!("bench-{n}")).await?;
    }
    for s in 0..sim.services {
        let ns = sim.namespace(s);
        let name = format!("svc-{s}");
        sim.rec
            .call(
                (Verb::Create, Scope::Resource, "services"),
                sim.api.create(
                    &format!("/api/v1/namespaces/{ns}/services"),
                    &objects::service(&ns, &name),
                ),
            )
            .await?;
        sim.rec
            .call(
                (Verb::Create, Scope::Resource, "endpointslices"),
                sim.api.create(
                    &format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"),
                    &objects::endpoint_slice(&ns, &name, &[]),
                ),
            )
            .await?;
    }
    Ok(())
}

/// Once a second, rewrites the EndpointSlice of each service whose pods started (last 100 IPs).
pub async fn endpoints(sim: Arc<Sim>) {
    let mut ips: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    while sim.pause(Duration::from_secs(1)).await {
        let dirty: BTreeMap<usize, Vec<String>> = sim
            .dirty
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default();
        let touched: BTreeSet<usize> = dirty.keys().copied().collect();
        for (s, new) in dirty {
            let list = ips.entry(s).or_default();
            list.extend(new);
            let excess = list.len().saturating_sub(100);
            list.drain(..excess);
        }
        for s in touched {
            let ns = sim.namespace(s);
            let name = format!("svc-{s}");
            let body =
                objects::endpoint_slice(&ns, &name, ips.get(&s).map(Vec::as_slice).unwrap_or(&[]));
            let path =
                format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/{name}-bench");
            let _ = sim
                .rec
                .call(
                    (Verb::Update, Scope::Resource, "endpointslices"),
                    sim.api.update(&path, &body),
                )
                .await;
        }
    }
}

/// Periodic paginated LISTs: pods of one namespace every `ns_every`, all pods every `cluster_every`.
pub async fn lister(sim: Arc<Sim>, ns_every: Duration, cluster_every: Duration) {
    let mut next_ns = Instant::now() + ns_every;
    let mut next_cluster = Instant::now() + cluster_every;
    let mut n = 0;
    while sim.pause(Duration::from_millis(200)).await {
        if Instant::now() >= next_ns {
            walk(
                &sim,
                &format!("/api/v1/namespaces/{}/pods", sim.namespace(n)),
                Scope::Namespace,
            )
            .await;
            n += 1;
            next_ns += ns_every;
        }
        if Instant::now() >= next_cluster {
            walk(&sim, "/api/v1/pods", Scope::Cluster).await;
            let _ = sim
                .rec
                .call(
                    (Verb::List, Scope::Cluster, "nodes"),
                    sim.api.list("/api/v1/nodes?resourceVersion=0"),
                )
                .await;
            next_cluster += cluster_every;
        }
    }
}

/// Pages a paginated LIST may take (5 M objects at 500 a page) before it
/// counts as unfinished.
pub const WALK_PAGE_BUDGET: usize = 10_000;

/// A paginated LIST (limit 500); each page is one recorded LIST call; a walk
/// that has not ended after [`WALK_PAGE_BUDGET`] pages is counted in
/// `sim.unfinished_walks` (which fails the scenario).
async fn walk(sim: &Sim, collection: &str, scope: Scope) {
    let mut token = String::new();
    for _ in 0..WALK_PAGE_BUDGET {
        let url = if token.is_empty() {
            format!("{collection}?limit=500")
        } else {
            format!(
                "{collection}?limit=500&continue={}",
                crate::client::urlencode(&token)
            )
        };
        match sim
            .rec
            .call((Verb::List, scope, "pods"), sim.api.list(&url))
            .await
        {
            Ok(page) if !page.continue_token.is_empty() => token = page.continue_token,
            _ => return,
        }
    }
    sim.unfinished_walks.fetch_add(1, Ordering::Relaxed);
}
