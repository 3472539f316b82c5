//! The watch-cache consistency checker (KEP-4988, gate
//! `DetectCacheInconsistency`; upstream
//! `staging/src/k8s.io/apiserver/pkg/storage/cacher/consistency_checker.go`).
//!
//! Per cached resource, every period jittered into `[p, 1.5 p]` (upstream:
//! 5 min, jitter 0.5; rkube: `--watch-cache-consistency-check-period`):
//!
//! 1. LIST the cache's latest state, at revision R. Upstream lists at
//!    `resourceVersion=0`; rkube makes it a consistent read from the cache
//!    (the cache first catches up with storage's current revision, asking
//!    for a progress notification) so that an idle resource, whose cache
//!    revision would otherwise stay behind (the embedded store sends no
//!    periodic progress notifications), is compared at a current revision.
//!    With `ConsistentListFromCache` off it lists at `resourceVersion=0`;
//!    a read that fell back to storage is an `error`;
//! 2. LIST storage at exactly R (paged);
//! 3. hash each with 64-bit FNV-1 over `namespace/name/resourceVersion` of
//!    every item in key order, and compare.
//!
//! Outcomes, counted in `apiserver_storage_consistency_checks_total{group,resource,status}`:
//! - `success`: if snapshots were purged by an earlier failure, they resume
//!   ([`crate::Cacher::resume_snapshots`]);
//! - `failure`: logged with both digests; the cache's snapshots are purged
//!   ([`crate::Cacher::purge_snapshots`]), so Exact / continue LISTs
//!   are served from storage until the next success. With env
//!   `KUBE_WATCHCACHE_CONSISTENCY_CHECKER` set to a true value (Go
//!   `ParseBool`), the process aborts instead (for tests), as upstream panics;
//!   that variable also enables the checker when the gate is off.
//! - `error`: the cache is not ready, or a read failed (e.g. R was compacted).
//!
//! Storage items that are not JSON objects are skipped, as the cache skips
//! them when it fills itself.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use rkube_api::list_options::ListOptions;
use rkube_storage::{prefix_end, RangeRequest, Revision, Storage, StorageError};
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::layer::CacheEntry;

/// Environment variable that turns a mismatch into an abort (upstream's name).
pub const CHECKER_ENV: &str = "KUBE_WATCHCACHE_CONSISTENCY_CHECKER";

/// Storage page size while hashing (upstream `storageWatchListPageSize`).
const PAGE: usize = 10_000;

/// Jitter factor of the period (upstream 0.5).
const JITTER: f64 = 0.5;

/// Errors of one check (status `error`).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The cache is (re)initializing.
    #[error("cache is not ready")]
    NotReady,
    /// Reading the cache failed.
    #[error("failed calculating cache digest: {0}")]
    Cache(String),
    /// Reading storage failed.
    #[error("failed calculating etcd digest: {0}")]
    Storage(#[from] StorageError),
}

/// `apiserver_storage_consistency_checks_total`.
#[derive(Debug, Default)]
pub struct ConsistencyMetrics {
    checks: Family<Vec<(&'static str, String)>, Counter>,
}

impl ConsistencyMetrics {
    /// Creates and registers the family.
    pub fn register(registry: &mut Registry) -> Arc<ConsistencyMetrics> {
        let m = ConsistencyMetrics::default();
        registry.register(
            "apiserver_storage_consistency_checks",
            "Counter for status of consistency checks between etcd and watch cache",
            m.checks.clone(),
        );
        Arc::new(m)
    }

    fn labels(group: &str, resource: &str, status: &str) -> Vec<(&'static str, String)> {
        vec![("group", group.to_string()), ("resource", resource.to_string()), ("status", status.to_string())]
    }

    /// Counts one check.
    pub fn record(&self, group: &str, resource: &str, status: &str) {
        self.checks.get_or_create(&Self::labels(group, resource, status)).inc();
    }

    /// Checks so far with these labels.
    pub fn count(&self, group: &str, resource: &str, status: &str) -> u64 {
        self.checks.get_or_create(&Self::labels(group, resource, status)).get()
    }
}

/// 64-bit FNV-1 (multiply, then xor), as Go's `hash/fnv.New64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1(u64);

impl Default for Fnv1 {
    fn default() -> Self {
        Fnv1(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1 {
    /// Adds bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
            self.0 ^= u64::from(*b);
        }
    }

    /// Adds one object: `namespace/name/resourceVersion`.
    pub fn add_object(&mut self, namespace: &str, name: &str, resource_version: Revision) {
        self.write(namespace.as_bytes());
        self.write(b"/");
        self.write(name.as_bytes());
        self.write(b"/");
        self.write(resource_version.to_string().as_bytes());
    }

    /// The hash.
    pub fn sum(&self) -> u64 {
        self.0
    }
}

/// Whether `KUBE_WATCHCACHE_CONSISTENCY_CHECKER` asks for an abort on mismatch.
pub fn abort_on_mismatch() -> bool {
    matches!(
        std::env::var(CHECKER_ENV).ok().as_deref().map(str::trim),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True")
    )
}

/// One check's digests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digests {
    /// The revision both were computed at.
    pub resource_version: Revision,
    /// Hash of the cache's state.
    pub cache: u64,
    /// Hash of storage's state.
    pub storage: u64,
}

#[derive(Deserialize)]
struct MetaOnly {
    #[serde(default)]
    metadata: Meta,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

/// Computes both digests of `entry` (see the module docs).
pub async fn digests(storage: &dyn Storage, entry: &CacheEntry) -> Result<Digests, CheckError> {
    let cacher = &entry.cacher;
    if !cacher.ready_state().is_ready() {
        return Err(CheckError::NotReady);
    }
    let query = if cacher.config().gates.consistent_list_from_cache { "" } else { "resourceVersion=0" };
    let opts = ListOptions::from_query(query).map_err(|s| CheckError::Cache(s.message().to_string()))?;
    let list = cacher.list(None, &opts).await.map_err(|e| CheckError::Cache(e.to_string()))?;
    if list.served_from != crate::ServedFrom::Cache {
        return Err(CheckError::Cache("the cache did not catch up with storage in time".into()));
    }
    let rv = list.resource_version;
    let mut cache = Fnv1::default();
    for o in &list.items {
        cache.add_object(o.namespace.as_deref().unwrap_or(""), &o.name, o.resource_version);
    }
    drop(list);

    let prefix = cacher.config().resource_prefix.clone();
    let end = prefix_end(&prefix);
    let mut start = prefix.clone();
    let mut hash = Fnv1::default();
    loop {
        let resp = storage
            .range(RangeRequest { start: start.clone(), end: end.clone(), revision: rv, limit: PAGE, count_only: false })
            .await?;
        for kv in &resp.kvs {
            let Some(key) = kv.key.strip_prefix(prefix.as_str()) else { continue };
            let Ok(m) = serde_json::from_slice::<MetaOnly>(&kv.value) else { continue };
            // The cache's rule: metadata first, the key's parts when missing.
            let (key_ns, key_name) = match key.rsplit_once('/') {
                Some((ns, name)) => (ns, name),
                None => ("", key),
            };
            let ns = m.metadata.namespace.filter(|s| !s.is_empty()).unwrap_or_else(|| key_ns.to_string());
            let name = m.metadata.name.filter(|s| !s.is_empty()).unwrap_or_else(|| key_name.to_string());
            hash.add_object(&ns, &name, kv.mod_revision);
        }
        match resp.kvs.last() {
            Some(last) if resp.more => start = format!("{}\0", last.key),
            _ => break,
        }
    }
    Ok(Digests { resource_version: rv, cache: cache.sum(), storage: hash.sum() })
}

/// Runs one check of `entry` and acts on it; returns the status label.
pub async fn check(storage: &dyn Storage, entry: &CacheEntry, metrics: &ConsistencyMetrics) -> &'static str {
    let (group, resource) = (entry.info.group, entry.info.resource);
    let d = match digests(storage, entry).await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(group, resource, error = %e, "Cache consistency check error");
            metrics.record(group, resource, "error");
            return "error";
        }
    };
    if d.cache == d.storage {
        tracing::debug!(group, resource, resource_version = d.resource_version, digest = %format!("{:x}", d.cache), "Cache consistency check passed");
        metrics.record(group, resource, "success");
        if entry.purged.swap(false, Ordering::AcqRel) {
            entry.cacher.resume_snapshots();
            tracing::info!(group, resource, "cache is consistent again; serving LISTs from snapshots");
        }
        return "success";
    }
    tracing::error!(
        group,
        resource,
        resource_version = d.resource_version,
        etcd_digest = %format!("{:x}", d.storage),
        cache_digest = %format!("{:x}", d.cache),
        "Cache consistency check failed"
    );
    metrics.record(group, resource, "failure");
    if abort_on_mismatch() {
        eprintln!(
            "Cache consistency check failed, group: {group:?}, resource: {resource:?}, resourceVersion: \"{}\", etcdDigest: \"{:x}\", cacheDigest: \"{:x}\"",
            d.resource_version, d.storage, d.cache
        );
        std::process::abort();
    }
    entry.purged.store(true, Ordering::Release);
    entry.cacher.purge_snapshots();
    "failure"
}

/// `period` stretched by a random factor in `[1, 1 + JITTER]`.
fn jittered(period: Duration) -> Duration {
    let r = f64::from(uuid::Uuid::new_v4().as_bytes()[0]) / 255.0;
    period.mul_f64(1.0 + JITTER * r)
}

/// Starts the periodic check of one cached resource (until the returned
/// task is aborted). [`crate::layer::CacheLayer`] starts one per enabled cache,
/// including caches added while the server runs.
pub fn spawn_entry_checker(
    storage: Arc<dyn Storage>,
    entry: Arc<CacheEntry>,
    period: Duration,
    metrics: Arc<ConsistencyMetrics>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(jittered(period)).await;
            check(storage.as_ref(), &entry, &metrics).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1_64_matches_go_hash_fnv_new64() {
        // Reference values of FNV-1 64 (not FNV-1a).
        let cases: [(&[u8], u64); 3] =
            [(b"", 0xcbf29ce484222325), (b"a", 0xaf63bd4c8601b7be), (b"foobar", 0x340d8765a4dda9c2)];
        for (input, want) in cases {
            let mut h = Fnv1::default();
            h.write(input);
            assert_eq!(h.sum(), want, "{:?}", std::str::from_utf8(input));
        }
    }

    #[test]
    fn digest_covers_namespace_name_and_resource_version() {
        let mut a = Fnv1::default();
        a.add_object("ns", "a", 5);
        let mut b = Fnv1::default();
        b.add_object("ns", "a", 6);
        let mut c = Fnv1::default();
        c.write(b"ns/a/5");
        assert_ne!(a.sum(), b.sum());
        assert_eq!(a.sum(), c.sum());
    }
}
