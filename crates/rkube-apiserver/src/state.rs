//! Shared server state: storage, the read source, and allocators.

use std::sync::Arc;
use std::time::Instant;

use rkube_storage::Storage;

use crate::ipalloc::{Cidr, ClusterIpAllocator};
use crate::source::ReadSource;

/// Default `--service-cluster-ip-range`.
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";

/// Settings of one API server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `--etcd-prefix` (default `/registry`); every key starts with it.
    pub etcd_prefix: String,
    /// `--service-cluster-ip-range`.
    pub service_cidr: Cidr,
    /// Watch cache, compaction and consistency-check settings ([`crate::cache_source`]).
    pub watch_cache: crate::cache_options::WatchCacheOptions,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            etcd_prefix: "/registry".to_string(),
            service_cidr: Cidr::parse(DEFAULT_SERVICE_CIDR).expect("default CIDR parses"),
            watch_cache: Default::default(),
        }
    }
}

/// Everything a request handler needs. Cheap to clone (all shared).
#[derive(Clone)]
pub struct ApiState {
    /// Writes go here (and reads inside read-modify-write loops).
    pub storage: Arc<dyn Storage>,
    /// GET/LIST/WATCH are served from here.
    pub source: Arc<dyn ReadSource>,
    /// Settings.
    pub config: Arc<ServerConfig>,
    /// ClusterIP allocator.
    pub cluster_ips: Arc<ClusterIpAllocator>,
    /// When the server started (for `/livez` and `/readyz` checks).
    pub started: Instant,
    /// Set to `true` when the server shuts down; open watches end on it.
    pub shutdown: Arc<tokio::sync::watch::Sender<bool>>,
    /// The watch-cache layer (caches, `storage-readiness` hook, compactor, consistency checker).
    pub cache: Arc<crate::cache_source::CacheLayer>,
}

impl ApiState {
    /// State serving reads from the watch cache over `storage` (straight from
    /// `storage` with `--watch-cache=false`), with compaction as configured.
    pub fn new(storage: Arc<dyn Storage>, config: ServerConfig) -> Self {
        let cache = crate::cache_source::CacheLayer::start(storage.clone(), &config);
        let source: Arc<dyn ReadSource> = cache.read_source(storage.clone());
        ApiState { cache, ..Self::with_source(storage, source, config) }
    }

    /// State serving reads from `source` (e.g. a watch cache).
    pub fn with_source(storage: Arc<dyn Storage>, source: Arc<dyn ReadSource>, config: ServerConfig) -> Self {
        let cluster_ips = Arc::new(ClusterIpAllocator::new(config.service_cidr));
        let (shutdown, _) = tokio::sync::watch::channel(false);
        ApiState {
            storage,
            source,
            config: Arc::new(config),
            cluster_ips,
            started: Instant::now(),
            shutdown: Arc::new(shutdown),
            cache: crate::cache_source::CacheLayer::none(),
        }
    }

    /// The `--etcd-prefix`.
    pub fn prefix(&self) -> &str {
        &self.config.etcd_prefix
    }
}
