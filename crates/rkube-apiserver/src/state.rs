//! Shared server state: storage, the watch-cache layer (every read), and allocators.

use std::sync::Arc;
use std::time::Instant;

use rkube_storage::Storage;

use crate::filters::metrics::ApiserverMetrics;
use crate::ipalloc::{Cidr, ClusterIpAllocator};

/// Default `--service-cluster-ip-range`.
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";

/// Settings of one API server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `--etcd-prefix` (default `/registry`); every key starts with it.
    pub etcd_prefix: String,
    /// `--service-cluster-ip-range`.
    pub service_cidr: Cidr,
    /// Watch cache, compaction and consistency-check settings ([`rkube_cache::CacheLayer`]).
    pub watch_cache: crate::cache_options::WatchCacheOptions,
    /// `--min-request-timeout`, seconds: a watch without `timeoutSeconds`
    /// lasts a random duration in `[min, 2·min)` ([`crate::filters::timeout::watch_timeout`]).
    pub min_request_timeout: u64,
    /// Admission plugins ([`crate::admission`]); none by default here
    /// (`rkube apiserver` and `rkube up` turn `ServiceAccount` on).
    pub admission: crate::admission::AdmissionConfig,
    /// The client of kubelet APIs (`pods/log`); `None`: no client certificate and an
    /// unverified kubelet certificate.
    pub kubelet_client: Option<crate::kubelet_client::KubeletClient>,
    /// How often the kubelets' resource metrics are scraped (`--metric-resolution`).
    pub metric_resolution: std::time::Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            etcd_prefix: "/registry".to_string(),
            service_cidr: Cidr::parse(DEFAULT_SERVICE_CIDR).expect("default CIDR parses"),
            watch_cache: Default::default(),
            min_request_timeout: crate::filters::timeout::DEFAULT_MIN_REQUEST_TIMEOUT,
            admission: crate::admission::AdmissionConfig::default(),
            kubelet_client: None,
            metric_resolution: crate::metrics_api::scraper::DEFAULT_METRIC_RESOLUTION,
        }
    }
}

/// Everything a request handler needs. Cheap to clone (all shared).
#[derive(Clone)]
pub struct ApiState {
    /// Writes go here (and reads inside read-modify-write loops); GET, LIST
    /// and WATCH go through [`ApiState::cache`].
    pub storage: Arc<dyn Storage>,
    /// Settings.
    pub config: Arc<ServerConfig>,
    /// ClusterIP allocator.
    pub cluster_ips: Arc<ClusterIpAllocator>,
    /// When the server started (for `/livez` and `/readyz` checks).
    pub started: Instant,
    /// Set to `true` when the server shuts down; open watches end on it.
    pub shutdown: Arc<tokio::sync::watch::Sender<bool>>,
    /// The watch-cache layer: serves every GET, LIST and WATCH, and runs the
    /// `storage-readiness` hook, the compactor and the consistency checker.
    pub cache: Arc<rkube_cache::CacheLayer>,
    /// The metrics registry `GET /metrics` renders, the cache layer's
    /// families included; [`crate::server::serve_api`] makes it the filter
    /// chain's ([`ApiState::with_metrics`]).
    pub metrics: Arc<ApiserverMetrics>,
    /// The filter chain's authorizer, for handlers that authorize on their
    /// own (SubjectAccessReviews, CSR approval); `AlwaysAllow` until
    /// [`crate::server::serve_api`] puts the chain's in ([`ApiState::with_authorizer`]).
    pub authorizer: Arc<crate::filters::authz::Authorizer>,
    /// The filter chain's authenticator, for handlers that authenticate a
    /// credential on their own (TokenReview); none until
    /// [`crate::server::serve_api`] puts the chain's in ([`ApiState::with_authenticator`]).
    pub authenticator: Arc<crate::filters::authn::Authenticator>,
    /// ServiceAccount token settings (`None`: no issuer configured, so no
    /// TokenRequest and no issuer discovery).
    pub service_account_tokens: Option<Arc<crate::serviceaccount::TokenConfig>>,
    /// The kubelets' scraped usage behind `metrics.k8s.io` ([`crate::metrics_api`]); filled by
    /// [`crate::metrics_api::scraper::run`].
    pub resource_metrics: Arc<crate::metrics_api::store::MetricsStore>,
    /// Large objects the write paths decoded or wrote lately, for the next
    /// update of each ([`crate::decoded`]).
    pub decoded: Arc<crate::decoded::DecodedObjects>,
}

impl ApiState {
    /// State serving reads from the watch cache over `storage` (straight from
    /// `storage` with `--watch-cache=false`), with compaction as configured.
    pub fn new(storage: Arc<dyn Storage>, config: ServerConfig) -> Self {
        crate::metrics_api::register_rows();
        let cache = rkube_cache::CacheLayer::start(storage.clone(), config.watch_cache.layer_options(&config.etcd_prefix));
        let cluster_ips = Arc::new(ClusterIpAllocator::new(config.service_cidr));
        let (shutdown, _) = tokio::sync::watch::channel(false);
        let metrics = Arc::new(ApiserverMetrics::new());
        attach_cache_metrics(&metrics, &cache);
        ApiState {
            storage,
            config: Arc::new(config),
            cluster_ips,
            started: Instant::now(),
            shutdown: Arc::new(shutdown),
            cache,
            metrics,
            authorizer: Arc::new(crate::filters::authz::Authorizer::always_allow()),
            authenticator: Arc::new(crate::filters::authn::Authenticator::default()),
            service_account_tokens: None,
            resource_metrics: Arc::default(),
            decoded: Arc::default(),
        }
    }

    /// This state issuing and publishing ServiceAccount tokens with `tokens`.
    pub fn with_service_account_tokens(mut self, tokens: Option<Arc<crate::serviceaccount::TokenConfig>>) -> Self {
        self.service_account_tokens = tokens;
        self
    }

    /// This state with `authenticator` as the one handlers ask.
    pub fn with_authenticator(mut self, authenticator: Arc<crate::filters::authn::Authenticator>) -> Self {
        self.authenticator = authenticator;
        self
    }

    /// This state with `authorizer` as the one handlers ask.
    pub fn with_authorizer(mut self, authorizer: Arc<crate::filters::authz::Authorizer>) -> Self {
        self.authorizer = authorizer;
        self
    }

    /// This state with `metrics` as its registry (e.g. the filter chain's,
    /// which counts the requests), the cache layer's families attached to it.
    pub fn with_metrics(mut self, metrics: Arc<ApiserverMetrics>) -> Self {
        if !Arc::ptr_eq(&self.metrics, &metrics) {
            attach_cache_metrics(&metrics, &self.cache);
            self.metrics = metrics;
        }
        self
    }

    /// The `--etcd-prefix`.
    pub fn prefix(&self) -> &str {
        &self.config.etcd_prefix
    }
}

/// Appends the cache layer's families (watch cache, consistency checks) to `metrics`.
fn attach_cache_metrics(metrics: &ApiserverMetrics, cache: &Arc<rkube_cache::CacheLayer>) {
    let cache = cache.clone();
    metrics.add_text_source(Arc::new(move || cache.render_metrics()));
}
