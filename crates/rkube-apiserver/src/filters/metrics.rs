//! `/metrics`: the API server's Prometheus metrics, with upstream's names and
//! labels (`staging/src/k8s.io/apiserver/pkg/endpoints/metrics/metrics.go`,
//! `.../server/filters/maxinflight.go`, `.../audit/metrics.go`,
//! `.../storage/etcd3/metrics/metrics.go`).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `apiserver_request_total` | counter | `code, component, dry_run, group, resource, scope, subresource, verb, version` |
//! | `apiserver_request_duration_seconds` | histogram | same without `code` |
//! | `apiserver_response_sizes` | histogram (bytes, GET/LIST only) | same without `code`, `dry_run` |
//! | `apiserver_current_inflight_requests` | gauge | `request_kind` = `readOnly` / `mutating` |
//! | `apiserver_dropped_requests_total` | counter | `request_kind` (429s from the inflight limit) |
//! | `apiserver_flowcontrol_dispatched_requests_total` | counter | `flow_schema, priority_level` (see [`crate::filters::apf`]) |
//! | `apiserver_flowcontrol_rejected_requests_total` | counter | `flow_schema, priority_level, reason` (`queue-full`, `time-out`, `concurrency-limit`) |
//! | `apiserver_flowcontrol_current_inqueue_requests` | gauge | `flow_schema, priority_level` |
//! | `apiserver_flowcontrol_current_executing_requests` | gauge | `flow_schema, priority_level` |
//! | `apiserver_flowcontrol_nominal_limit_seats` | gauge | `priority_level` |
//! | `apiserver_longrunning_requests` | gauge | `component, group, resource, scope, subresource, verb, version` |
//! | `apiserver_registered_watchers` | gauge | `group, kind, version` |
//! | `apiserver_audit_event_total` | counter | – (events sent to the audit backend) |
//! | `apiserver_audit_error_total` | counter | `plugin` (`log`): events dropped or not written |
//! | `apiserver_audit_level_total` | counter | `level` (policy level of each request) |
//! | `etcd_request_duration_seconds` | histogram | `backend` (`embedded`/`etcd`), `operation`, `type` (see [`crate::filters::storage_metrics`]) |
//! | `process_*` | | see [`crate::filters::process`] |
//!
//! `verb` is upstream's uppercase reported verb (`GET`, `LIST`, `WATCH`,
//! `POST`, `PUT`, `PATCH`, `APPLY`, `DELETE`, `DELETECOLLECTION`; the HTTP
//! method for non-resource paths, `other` for a non-standard method).
//! Non-resource requests have `group`, `version`, `resource` and `scope`
//! empty, and `subresource`/`component` as upstream labels the few
//! non-resource endpoints it instruments (health checks, discovery, OpenAPI
//! v3; see `non_resource_labels`), empty `subresource` for the others.
//! Durations start when the request arrived.
//! Watches are counted (and timed) when they end.
//!
//! To keep label cardinality bounded against hostile clients, requests for
//! resources the registry does not know, and non-resource requests answered
//! 404, are not recorded, and non-resource label values come from a fixed set.
//!
//! `apiserver_current_inflight_requests` reports the current number of
//! requests holding an inflight slot (upstream reports the maximum seen in the
//! last second).
//!
//! [`ApiserverMetrics::render`] writes the Prometheus text format 0.0.4
//! (`Content-Type: text/plain; version=0.0.4`), as kube-apiserver serves it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::Body as _;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::filters::body::guard_response;
use crate::filters::requestinfo::{context_of, RequestAttributes};

/// `Content-Type` of `GET /metrics`.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upstream's `apiserver_request_duration_seconds` buckets (seconds).
pub const REQUEST_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0,
    45.0, 60.0,
];

/// Upstream's `etcd_request_duration_seconds` buckets (seconds).
pub const STORAGE_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0,
    45.0, 60.0,
];

/// The `component` label value.
const COMPONENT: &str = "apiserver";

/// Labels of `apiserver_request_total` (alphabetical, as upstream prints them).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    component: String,
    dry_run: String,
    group: String,
    resource: String,
    scope: String,
    subresource: String,
    verb: String,
    version: String,
}

/// Labels of `apiserver_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    component: String,
    dry_run: String,
    group: String,
    resource: String,
    scope: String,
    subresource: String,
    verb: String,
    version: String,
}

/// Labels of `apiserver_longrunning_requests` and `apiserver_response_sizes`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    component: String,
    group: String,
    resource: String,
    scope: String,
    subresource: String,
    verb: String,
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestKindLabels {
    request_kind: String,
}

/// Labels of the `apiserver_flowcontrol_*` request metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabels {
    flow_schema: String,
    priority_level: String,
}

/// Labels of `apiserver_flowcontrol_rejected_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectedLabels {
    flow_schema: String,
    priority_level: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PriorityLevelLabels {
    priority_level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatcherLabels {
    group: String,
    kind: String,
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabels {
    level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StorageLabels {
    pub(crate) backend: String,
    pub(crate) operation: String,
    #[prometheus(flatten)]
    pub(crate) kind: StorageType,
}

/// The `type` label (a Rust keyword, hence the wrapper).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct StorageType(pub(crate) String);

impl EncodeLabelSet for StorageType {
    fn encode(&self, encoder: &mut prometheus_client::encoding::LabelSetEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelSet::encode(&[("type", self.0.as_str())], encoder)
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn request_duration_histogram() -> Histogram {
    Histogram::new(REQUEST_DURATION_BUCKETS.iter().copied())
}

fn storage_duration_histogram() -> Histogram {
    Histogram::new(STORAGE_DURATION_BUCKETS.iter().copied())
}

fn response_size_histogram() -> Histogram {
    // Upstream: ExponentialBuckets(1000, 10.0, 8), 1 KB .. 10 GB.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(1000.0, 10.0, 8))
}

/// The API server's metrics registry. Cheap to share (`Arc`); every method
/// is safe to call concurrently.
#[derive(Debug)]
pub struct ApiserverMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: HistogramFamily<DurationLabels>,
    response_sizes: HistogramFamily<ResourceLabels>,
    inflight: Family<RequestKindLabels, Gauge>,
    dropped: Family<RequestKindLabels, Counter>,
    flow_dispatched: Family<FlowLabels, Counter>,
    flow_rejected: Family<RejectedLabels, Counter>,
    flow_inqueue: Family<FlowLabels, Gauge>,
    flow_executing: Family<FlowLabels, Gauge>,
    flow_nominal_seats: Family<PriorityLevelLabels, Gauge>,
    longrunning: Family<ResourceLabels, Gauge>,
    watchers: Family<WatcherLabels, Gauge>,
    audit_events: Counter,
    audit_errors: Family<PluginLabels, Counter>,
    audit_levels: Family<LevelLabels, Counter>,
    pub(crate) storage: HistogramFamily<StorageLabels>,
    /// Other components' metrics in Prometheus text (the watch cache's), appended by [`ApiserverMetrics::render`].
    extra: ExtraSources,
}

/// The sources added with [`ApiserverMetrics::add_text_source`].
#[derive(Default)]
struct ExtraSources(std::sync::RwLock<Vec<TextSource>>);

impl std::fmt::Debug for ExtraSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.read().map(|v| v.len()).unwrap_or(0);
        write!(f, "ExtraSources({n})")
    }
}

/// Renders another registry as Prometheus text 0.0.4.
pub type TextSource = Arc<dyn Fn() -> String + Send + Sync>;

impl Default for ApiserverMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ApiserverMetrics {
    /// A registry with every metric registered (process metrics included).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let durations: HistogramFamily<DurationLabels> = Family::new_with_constructor(request_duration_histogram);
        let response_sizes: HistogramFamily<ResourceLabels> = Family::new_with_constructor(response_size_histogram);
        let inflight = Family::<RequestKindLabels, Gauge>::default();
        let dropped = Family::<RequestKindLabels, Counter>::default();
        let longrunning = Family::<ResourceLabels, Gauge>::default();
        let flow_dispatched = Family::<FlowLabels, Counter>::default();
        let flow_rejected = Family::<RejectedLabels, Counter>::default();
        let flow_inqueue = Family::<FlowLabels, Gauge>::default();
        let flow_executing = Family::<FlowLabels, Gauge>::default();
        let flow_nominal_seats = Family::<PriorityLevelLabels, Gauge>::default();
        let watchers = Family::<WatcherLabels, Gauge>::default();
        let audit_events = Counter::default();
        let audit_errors = Family::<PluginLabels, Counter>::default();
        let audit_levels = Family::<LevelLabels, Counter>::default();
        let storage: HistogramFamily<StorageLabels> = Family::new_with_constructor(storage_duration_histogram);
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code",
            requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component",
            durations.clone(),
        );
        registry.register(
            "apiserver_response_sizes",
            "Response size distribution in bytes for each group, version, verb, resource, subresource, scope and component",
            response_sizes.clone(),
        );
        registry.register(
            "apiserver_current_inflight_requests",
            "Number of requests currently holding an inflight slot of this apiserver, per request kind",
            inflight.clone(),
        );
        registry.register(
            "apiserver_dropped_requests",
            "Number of requests dropped with 'TooManyRequests' response",
            dropped.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_dispatched_requests",
            "Number of requests executed by API Priority and Fairness subsystem",
            flow_dispatched.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_rejected_requests",
            "Number of requests rejected by API Priority and Fairness subsystem",
            flow_rejected.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_current_inqueue_requests",
            "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
            flow_inqueue.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_current_executing_requests",
            "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
            flow_executing.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_nominal_limit_seats",
            "Nominal number of execution seats configured for each priority level",
            flow_nominal_seats.clone(),
        );
        registry.register(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component",
            longrunning.clone(),
        );
        registry.register(
            "apiserver_registered_watchers",
            "Number of currently registered watchers for a given resources",
            watchers.clone(),
        );
        registry.register(
            "apiserver_audit_event",
            "Counter of audit events generated and sent to the audit backend",
            audit_events.clone(),
        );
        registry.register(
            "apiserver_audit_error",
            "Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error",
            audit_errors.clone(),
        );
        registry.register("apiserver_audit_level", "Counter of policy levels for audit events (1 per request)", audit_levels.clone());
        registry.register(
            "etcd_request_duration_seconds",
            "Storage request latency in seconds for each operation, object type and storage backend",
            storage.clone(),
        );
        registry.register_collector(Box::new(crate::filters::process::ProcessCollector::new()));
        // Pre-create the inflight gauges so both kinds show from the start.
        for kind in ["readOnly", "mutating"] {
            let _ = inflight.get_or_create(&RequestKindLabels { request_kind: kind.into() });
        }
        ApiserverMetrics {
            registry,
            requests,
            durations,
            response_sizes,
            inflight,
            dropped,
            flow_dispatched,
            flow_rejected,
            flow_inqueue,
            flow_executing,
            flow_nominal_seats,
            longrunning,
            watchers,
            audit_events,
            audit_errors,
            audit_levels,
            storage,
            extra: ExtraSources::default(),
        }
    }

    /// Adds another component's metrics to `/metrics` (e.g. the watch cache's
    /// registry). Metric families it renders are dropped from this registry's
    /// output, so a name is never exposed twice.
    pub fn add_text_source(&self, source: TextSource) {
        if let Ok(mut extra) = self.extra.0.write() {
            extra.push(source);
        }
    }

    /// The whole registry in the Prometheus text format 0.0.4, followed by
    /// every source added with [`ApiserverMetrics::add_text_source`]. A
    /// metric family is exposed once: a source's family replaces the
    /// registry's family of the same name, and an earlier source's wins over
    /// a later one's. This is the one renderer of `/metrics`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode_registry(&mut out, &self.registry).is_err() {
            return String::new();
        }
        let own = to_prometheus_text(&out);
        let extra: Vec<String> = match self.extra.0.read() {
            Ok(sources) => sources.iter().map(|f| f()).collect(),
            Err(_) => Vec::new(),
        };
        if extra.is_empty() {
            return own;
        }
        let mut text = String::with_capacity(own.len() + extra.iter().map(String::len).sum::<usize>());
        // Families of the sources, then the registry's own text without them.
        let mut taken: HashSet<String> = HashSet::new();
        let mut sources_text = String::new();
        for t in &extra {
            let families = family_names(t);
            push_without(&mut sources_text, t, &families, &taken);
            taken.extend(families.into_iter().map(str::to_string));
        }
        push_without(&mut text, &own, &family_names(&own), &taken);
        text.push_str(&sources_text);
        text
    }

    /// Records one finished request: `apiserver_request_total`,
    /// `apiserver_request_duration_seconds`, and for GET/LIST
    /// `apiserver_response_sizes` (when the size is known).
    pub fn observe_request(&self, attrs: &RequestAttributes, code: u16, elapsed: Duration, response_size: Option<u64>) {
        if !recordable(attrs, code) {
            return;
        }
        let l = labels_of(attrs);
        self.requests
            .get_or_create(&RequestLabels {
                code: code.to_string(),
                component: l.component.clone(),
                dry_run: attrs.dry_run.clone(),
                group: l.group.clone(),
                resource: l.resource.clone(),
                scope: l.scope.clone(),
                subresource: l.subresource.clone(),
                verb: l.verb.clone(),
                version: l.version.clone(),
            })
            .inc();
        self.durations
            .get_or_create(&DurationLabels {
                component: l.component.clone(),
                dry_run: attrs.dry_run.clone(),
                group: l.group.clone(),
                resource: l.resource.clone(),
                scope: l.scope.clone(),
                subresource: l.subresource.clone(),
                verb: l.verb.clone(),
                version: l.version.clone(),
            })
            .observe(elapsed.as_secs_f64());
        if let Some(size) = response_size {
            if l.verb == "GET" || l.verb == "LIST" {
                self.response_sizes.get_or_create(&l).observe(size as f64);
            }
        }
    }

    /// Sets `apiserver_current_inflight_requests{request_kind}`.
    pub fn set_inflight(&self, read_only: bool, value: i64) {
        self.inflight.get_or_create(&RequestKindLabels { request_kind: request_kind(read_only).into() }).set(value);
    }

    /// Counts a request rejected with 429 by the inflight limit.
    pub fn observe_dropped(&self, attrs: &RequestAttributes, elapsed: Duration) {
        self.dropped.get_or_create(&RequestKindLabels { request_kind: request_kind(attrs.is_read_only()).into() }).inc();
        self.observe_request(attrs, 429, elapsed, None);
    }

    /// Counts a request API Priority and Fairness let run
    /// (`apiserver_flowcontrol_dispatched_requests_total`) and returns the
    /// `apiserver_flowcontrol_current_executing_requests` gauge, already
    /// incremented: decrement it when the request is done.
    pub fn flowcontrol_dispatched(&self, flow_schema: &str, priority_level: &str) -> Gauge {
        let l = FlowLabels { flow_schema: flow_schema.into(), priority_level: priority_level.into() };
        self.flow_dispatched.get_or_create(&l).inc();
        let g = self.flow_executing.get_or_create(&l).clone();
        g.inc();
        g
    }

    /// Counts a request API Priority and Fairness refused with 429;
    /// `reason` is upstream's `queue-full`, `time-out` or `concurrency-limit`.
    pub fn flowcontrol_rejected(&self, flow_schema: &str, priority_level: &str, reason: &str) {
        let l = RejectedLabels { flow_schema: flow_schema.into(), priority_level: priority_level.into(), reason: reason.into() };
        self.flow_rejected.get_or_create(&l).inc();
    }

    /// The `apiserver_flowcontrol_current_inqueue_requests` gauge of a flow schema and level.
    pub fn flowcontrol_inqueue(&self, flow_schema: &str, priority_level: &str) -> Gauge {
        let l = FlowLabels { flow_schema: flow_schema.into(), priority_level: priority_level.into() };
        self.flow_inqueue.get_or_create(&l).clone()
    }

    /// Sets `apiserver_flowcontrol_nominal_limit_seats{priority_level}`.
    pub fn set_flowcontrol_nominal_seats(&self, priority_level: &str, seats: usize) {
        self.flow_nominal_seats.get_or_create(&PriorityLevelLabels { priority_level: priority_level.into() }).set(seats as i64);
    }

    /// The `apiserver_flowcontrol_rejected_requests_total` count (for tests).
    pub fn flowcontrol_rejected_count(&self, flow_schema: &str, priority_level: &str, reason: &str) -> u64 {
        let l = RejectedLabels { flow_schema: flow_schema.into(), priority_level: priority_level.into(), reason: reason.into() };
        self.flow_rejected.get(&l).map(|c| c.get()).unwrap_or(0)
    }

    /// Counts one audit event handed to the backend.
    pub fn audit_event(&self) {
        self.audit_events.inc();
    }

    /// Counts one audit event the `plugin` backend could not write (dropped or failed).
    pub fn audit_error(&self, plugin: &str) {
        self.audit_errors.get_or_create(&PluginLabels { plugin: plugin.into() }).inc();
    }

    /// Counts one request audited at `level` (`None`, `Metadata`, ...).
    pub fn audit_level(&self, level: &str) {
        self.audit_levels.get_or_create(&LevelLabels { level: level.into() }).inc();
    }

    /// `apiserver_audit_error_total{plugin}` (for tests and health checks).
    pub fn audit_error_count(&self, plugin: &str) -> u64 {
        self.audit_errors.get(&PluginLabels { plugin: plugin.into() }).map(|c| c.get()).unwrap_or(0)
    }

    /// `apiserver_audit_event_total`.
    pub fn audit_event_count(&self) -> u64 {
        self.audit_events.get()
    }

    /// Observes one storage call of `operation` on `type_` taking `elapsed`.
    pub fn observe_storage(&self, backend: &str, operation: &str, type_: &str, elapsed: Duration) {
        self.storage
            .get_or_create(&StorageLabels {
                backend: backend.into(),
                operation: operation.into(),
                kind: StorageType(type_.into()),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Starts tracking a long-running request (watch): increments
    /// `apiserver_longrunning_requests` and, for watches of known kinds,
    /// `apiserver_registered_watchers`, until the returned guard is dropped;
    /// the request is counted in `apiserver_request_total` then.
    pub fn track_long_running(self: &Arc<Self>, attrs: &RequestAttributes, started: Instant) -> LongRunningGuard {
        let recorded = recordable(attrs, 200);
        let labels = labels_of(attrs);
        if recorded {
            self.longrunning.get_or_create(&labels).inc();
        }
        let watcher = if attrs.verb == "watch" {
            rkube_api::registry::lookup(&attrs.api_group, &attrs.api_version, &attrs.resource).map(|info| WatcherLabels {
                group: attrs.api_group.clone(),
                kind: info.kind.to_string(),
                version: attrs.api_version.clone(),
            })
        } else {
            None
        };
        if let Some(w) = &watcher {
            self.watchers.get_or_create(w).inc();
        }
        LongRunningGuard {
            metrics: self.clone(),
            attrs: attrs.clone(),
            labels: recorded.then_some(labels),
            watcher,
            started,
            code: 200,
        }
    }
}

/// Keeps a long-running request's gauges up; see [`ApiserverMetrics::track_long_running`].
#[derive(Debug)]
pub struct LongRunningGuard {
    metrics: Arc<ApiserverMetrics>,
    attrs: RequestAttributes,
    labels: Option<ResourceLabels>,
    watcher: Option<WatcherLabels>,
    started: Instant,
    /// The response code to count the request with.
    pub code: u16,
}

impl Drop for LongRunningGuard {
    fn drop(&mut self) {
        if let Some(l) = &self.labels {
            self.metrics.longrunning.get_or_create(l).dec();
        }
        if let Some(w) = &self.watcher {
            self.metrics.watchers.get_or_create(w).dec();
        }
        self.metrics.observe_request(&self.attrs, self.code, self.started.elapsed(), None);
    }
}

fn request_kind(read_only: bool) -> &'static str {
    if read_only {
        "readOnly"
    } else {
        "mutating"
    }
}

/// Whether a request may be recorded without unbounded label values.
fn recordable(attrs: &RequestAttributes, code: u16) -> bool {
    if attrs.is_resource_request {
        rkube_api::registry::lookup(&attrs.api_group, &attrs.api_version, &attrs.resource).is_some()
    } else {
        code != 404
    }
}

fn labels_of(attrs: &RequestAttributes) -> ResourceLabels {
    if attrs.is_resource_request {
        ResourceLabels {
            component: COMPONENT.into(),
            group: attrs.api_group.clone(),
            resource: attrs.resource.clone(),
            scope: attrs.scope().into(),
            subresource: attrs.subresource.clone(),
            verb: attrs.metrics_verb(),
            version: attrs.api_version.clone(),
        }
    } else {
        let (subresource, component) = non_resource_labels(&attrs.path);
        ResourceLabels {
            component: component.into(),
            group: String::new(),
            resource: String::new(),
            scope: String::new(),
            subresource: subresource.into(),
            verb: non_resource_verb(&attrs.method),
            version: String::new(),
        }
    }
}

/// `(subresource, component)` of a non-resource request. Upstream counts
/// only the non-resource endpoints it wraps in `metrics.InstrumentHandlerFunc`,
/// each with fixed labels (group, version, resource and scope empty):
///
/// | path | `subresource` | `component` | upstream |
/// |---|---|---|---|
/// | `/healthz`, `/livez`, `/readyz` | the path | empty | `server/healthz.InstallPathHandler` |
/// | `/api`, `/apis` | `api`, `apis` | `apiserver` | `endpoints/discovery/aggregated.NewResourceManager` |
/// | `/openapi/v3` | `openapi/v3` | empty | `kube-aggregator` `openapiv3` `specProxier` |
/// | `/openapi/v3/<path>` | `openapi/v3/` | empty | same |
///
/// Every other non-resource path (`/version`, `/openapi/v2`, `/metrics`,
/// `/healthz/<check>`, `/debug/flags/v`, ...), which upstream does not
/// count, is counted with `subresource` empty (so label values stay a
/// fixed set whatever the path).
fn non_resource_labels(path: &str) -> (&'static str, &'static str) {
    let p = path.strip_suffix('/').filter(|p| !p.is_empty()).unwrap_or(path);
    match p {
        "/healthz" => ("/healthz", ""),
        "/livez" => ("/livez", ""),
        "/readyz" => ("/readyz", ""),
        "/api" => ("api", COMPONENT),
        "/apis" => ("apis", COMPONENT),
        "/openapi/v3" => ("openapi/v3", ""),
        _ if p.starts_with("/openapi/v3/") => ("openapi/v3/", ""),
        _ => ("", COMPONENT),
    }
}

/// The `verb` of a non-resource request: its method, or `other` for a
/// method outside the standard set (upstream `cleanVerb`), so a client can
/// not invent label values.
fn non_resource_verb(method: &str) -> String {
    match method {
        "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS" | "CONNECT" | "TRACE" => method.to_string(),
        _ => "other".to_string(),
    }
}

/// The family names a text declares with `# TYPE`.
fn family_names(text: &str) -> HashSet<&str> {
    text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split_whitespace().next()).collect()
}

/// The family of one line of `text` whose families are `families`: the name
/// of a `# HELP`/`# TYPE` line, or a sample's name with a histogram or
/// summary suffix (`_bucket`, `_sum`, `_count`, `_created`) removed when
/// that names one of `families`.
fn family_of<'a>(line: &'a str, families: &HashSet<&str>) -> &'a str {
    let name = line
        .strip_prefix("# HELP ")
        .or_else(|| line.strip_prefix("# TYPE "))
        .unwrap_or(line)
        .split(|c: char| c == '{' || c.is_whitespace())
        .next()
        .unwrap_or("");
    if families.contains(name) {
        return name;
    }
    ["_bucket", "_sum", "_count", "_created"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix).filter(|base| families.contains(base)))
        .unwrap_or(name)
}

/// Appends the lines of `text` (whose families are `families`) except those
/// of a family in `skip`, each ending with a newline.
fn push_without(out: &mut String, text: &str, families: &HashSet<&str>, skip: &HashSet<String>) {
    for line in text.lines() {
        if skip.contains(family_of(line, families)) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
}

/// Rewrites prometheus-client's OpenMetrics text into the Prometheus 0.0.4
/// text format: counter families are named with their `_total` suffix, and
/// the `# EOF` / `# UNIT` lines are dropped.
fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 256);
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let name = rest.split(' ').next()?;
            counters.contains(name).then(|| format!("{p}{name}_total{}", &rest[name.len()..]))
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// The `GET /metrics` response: [`ApiserverMetrics::render`] as
/// `text/plain; version=0.0.4`. Both the filter chain's `/metrics` route and
/// the router's `metrics` arm answer with it.
pub fn metrics_response(m: &ApiserverMetrics) -> Response {
    let mut resp = (StatusCode::OK, m.render()).into_response();
    resp.headers_mut().insert("content-type", HeaderValue::from_static(METRICS_CONTENT_TYPE));
    resp
}

/// The `GET /metrics` handler ([`metrics_response`]).
pub async fn metrics_handler(State(m): State<Arc<ApiserverMetrics>>) -> Response {
    metrics_response(&m)
}

/// Middleware recording every request it wraps (see the module docs).
pub async fn metrics_middleware(State(m): State<Arc<ApiserverMetrics>>, req: Request, next: Next) -> Response {
    let ctx = context_of(&req);
    if ctx.attrs.is_long_running() {
        let mut guard = m.track_long_running(&ctx.attrs, ctx.started);
        let resp = next.run(req).await;
        guard.code = resp.status().as_u16();
        return guard_response(resp, guard);
    }
    let resp = next.run(req).await;
    let size = resp.body().size_hint().exact();
    m.observe_request(&ctx.attrs, resp.status().as_u16(), ctx.started.elapsed(), size);
    resp
}

/// Response body of [`metrics_handler`] for tests that render without a server.
#[doc(hidden)]
pub fn render_body(m: &ApiserverMetrics) -> Body {
    Body::from(m.render())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, Method};

    fn attrs(method: Method, uri: &str) -> RequestAttributes {
        RequestAttributes::new(&method, &uri.parse().unwrap(), &HeaderMap::new())
    }

    #[test]
    fn added_text_sources_are_appended_and_replace_families_of_the_same_name() {
        let m = Arc::new(ApiserverMetrics::new());
        let _watch = m.track_long_running(
            &attrs(Method::GET, "/apis/apps/v1/namespaces/default/deployments?watch=true"),
            std::time::Instant::now(),
        );
        assert!(m.render().contains("apiserver_registered_watchers{group=\"apps\",kind=\"Deployment\""));
        m.add_text_source(Arc::new(|| {
            "# HELP apiserver_registered_watchers from the cache.\n# TYPE apiserver_registered_watchers gauge\napiserver_registered_watchers{group=\"\",resource=\"pods\"} 3\n".to_string()
        }));
        let text = m.render();
        assert_eq!(text.matches("# TYPE apiserver_registered_watchers gauge").count(), 1, "{text}");
        assert!(text.contains("apiserver_registered_watchers{group=\"\",resource=\"pods\"} 3"), "{text}");
        assert!(
            !text.lines().any(|l| l.starts_with("apiserver_registered_watchers{") && l.contains("kind=")),
            "the registry's own family must be dropped: {text}"
        );
        assert!(text.contains("# TYPE apiserver_current_inflight_requests gauge"), "{text}");
    }

    #[test]
    fn request_total_has_upstream_labels_and_total_suffix() {
        let m = ApiserverMetrics::new();
        m.observe_request(&attrs(Method::GET, "/api/v1/namespaces/default/pods"), 200, Duration::from_millis(3), Some(100));
        let text = m.render();
        assert!(text.contains("# TYPE apiserver_request_total counter"), "{text}");
        assert!(text.contains(
            "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 1"
        ), "{text}");
        assert!(text.contains("apiserver_request_duration_seconds_bucket{le=\"0.005\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 1"), "{text}");
        assert!(!text.contains(".."), "{text}");
        assert!(text.contains("apiserver_response_sizes_count{"), "{text}");
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn unknown_resources_and_404_paths_are_not_recorded() {
        let m = ApiserverMetrics::new();
        m.observe_request(&attrs(Method::GET, "/api/v1/widgets"), 404, Duration::ZERO, None);
        m.observe_request(&attrs(Method::GET, "/random/path"), 404, Duration::ZERO, None);
        m.observe_request(&attrs(Method::GET, "/healthz"), 200, Duration::ZERO, None);
        let text = m.render();
        assert!(!text.contains("widgets"));
        assert!(!text.contains("/random/path"));
        assert!(text.contains("subresource=\"/healthz\",verb=\"GET\""), "{text}");
    }

    #[test]
    fn non_resource_requests_have_empty_resource_labels_like_upstream() {
        let m = ApiserverMetrics::new();
        for path in ["/version", "/openapi/v2", "/metrics", "/healthz/etcd", "/api", "/apis", "/healthz", "/readyz/", "/openapi/v3/apis/apps/v1"] {
            m.observe_request(&attrs(Method::GET, path), 200, Duration::ZERO, Some(10));
        }
        m.observe_request(&attrs(Method::from_bytes(b"FOO").unwrap(), "/version"), 405, Duration::ZERO, None);
        let text = m.render();
        let series = |component: &str, subresource: &str, verb: &str, code: &str| {
            format!("apiserver_request_total{{code=\"{code}\",component=\"{component}\",dry_run=\"\",group=\"\",resource=\"\",scope=\"\",subresource=\"{subresource}\",verb=\"{verb}\",version=\"\"}}")
        };
        for (line, n) in [
            // /version, /openapi/v2, /metrics, /healthz/etcd: not instrumented upstream, all labels empty.
            (series("apiserver", "", "GET", "200"), 4),
            (series("apiserver", "api", "GET", "200"), 1),
            (series("apiserver", "apis", "GET", "200"), 1),
            (series("", "/healthz", "GET", "200"), 1),
            (series("", "/readyz", "GET", "200"), 1),
            (series("", "openapi/v3/", "GET", "200"), 1),
            (series("apiserver", "", "other", "405"), 1),
        ] {
            assert!(text.contains(&format!("{line} {n}\n")), "missing {line} {n} in:\n{text}");
        }
        for path in ["/version", "/api\"", "/metrics", "openapi/v2", "/healthz/etcd", "FOO"] {
            assert!(!text.contains(path), "{path} leaked into a label:\n{text}");
        }
        assert!(text.contains("apiserver_request_duration_seconds_count{component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"\",scope=\"\",subresource=\"\",verb=\"GET\",version=\"\"} 4"), "{text}");
    }

    #[test]
    fn every_family_is_rendered_once_whatever_the_sources() {
        let m = ApiserverMetrics::new();
        m.observe_request(&attrs(Method::GET, "/api/v1/pods"), 200, Duration::from_millis(3), None);
        let cache = "# HELP apiserver_request_duration_seconds other.\n# TYPE apiserver_request_duration_seconds histogram\napiserver_request_duration_seconds_bucket{le=\"+Inf\"} 7\napiserver_request_duration_seconds_sum 1.0\napiserver_request_duration_seconds_count 7\n# HELP apiserver_cache_list_total n.\n# TYPE apiserver_cache_list_total counter\napiserver_cache_list_total{resource_prefix=\"/pods\"} 2\n";
        m.add_text_source(Arc::new(move || cache.to_string()));
        m.add_text_source(Arc::new(move || cache.replace("} 2", "} 9")));
        let text = m.render();
        assert_eq!(text.matches("# TYPE apiserver_request_duration_seconds histogram").count(), 1, "{text}");
        assert_eq!(text.matches("# TYPE apiserver_cache_list_total counter").count(), 1, "{text}");
        assert!(text.contains("apiserver_request_duration_seconds_count 7\n"), "{text}");
        assert!(!text.contains("apiserver_request_duration_seconds_count{"), "the registry's histogram is replaced: {text}");
        assert!(text.contains("apiserver_cache_list_total{resource_prefix=\"/pods\"} 2\n"), "the first source wins: {text}");
        assert!(!text.contains("} 9"), "{text}");
        assert!(text.contains("apiserver_request_total{code=\"200\""), "{text}");
    }

    #[test]
    fn watch_gauges_follow_the_guard() {
        let m = Arc::new(ApiserverMetrics::new());
        let a = attrs(Method::GET, "/apis/apps/v1/namespaces/x/deployments?watch=true");
        let g = m.track_long_running(&a, Instant::now());
        let text = m.render();
        assert!(text.contains("apiserver_registered_watchers{group=\"apps\",kind=\"Deployment\",version=\"v1\"} 1"), "{text}");
        assert!(text.contains("apiserver_longrunning_requests{component=\"apiserver\",group=\"apps\",resource=\"deployments\",scope=\"namespace\",subresource=\"\",verb=\"WATCH\",version=\"v1\"} 1"), "{text}");
        drop(g);
        let text = m.render();
        assert!(text.contains("apiserver_registered_watchers{group=\"apps\",kind=\"Deployment\",version=\"v1\"} 0"));
        assert!(text.contains("verb=\"WATCH\",version=\"v1\"} 1"), "counted when it ends: {text}");
    }

    #[test]
    fn inflight_and_process_metrics_are_present() {
        let m = ApiserverMetrics::new();
        m.set_inflight(false, 3);
        let text = m.render();
        assert!(text.contains("apiserver_current_inflight_requests{request_kind=\"mutating\"} 3"), "{text}");
        assert!(text.contains("apiserver_current_inflight_requests{request_kind=\"readOnly\"} 0"));
        for name in ["process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "process_start_time_seconds"] {
            assert!(text.contains(&format!("\n{name} ")), "{name} missing: {text}");
        }
    }
}
