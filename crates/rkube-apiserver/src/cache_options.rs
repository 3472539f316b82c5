//! Flags and settings of the watch-cache layer: `--watch-cache`,
//! `--watch-cache-sizes`, `--feature-gates`, `--storage-initialization-timeout`,
//! `--etcd-compaction-interval` (kube-apiserver's names and defaults), and
//! rkube's `--watch-cache-consistency-check-period` (upstream hard-codes 5 min).
//!
//! Durations are Go `time.ParseDuration` strings (`1m`, `2s`, `1h30m`, `500ms`, `0`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::feature_gates::FeatureGates;

/// Errors parsing the cache flags.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheOptionsError {
    /// A `--watch-cache-sizes` entry not of the form `resource[.group]#size`.
    #[error("invalid value of watch cache size: {0}")]
    InvalidSize(String),
    /// A negative size.
    #[error("watch cache size cannot be negative: {0}")]
    NegativeSize(String),
    /// A duration Go's `time.ParseDuration` would reject.
    #[error("time: invalid duration {0:?}")]
    InvalidDuration(String),
}

/// Parses a Go duration (`300ms`, `1.5h`, `2h45m`, `0`); no negative values.
/// One parser serves every duration flag: [`crate::filters::timeout::parse_go_duration`].
pub fn parse_duration(s: &str) -> Result<Duration, CacheOptionsError> {
    crate::filters::timeout::parse_go_duration(s).map_err(|_| CacheOptionsError::InvalidDuration(s.to_string()))
}

/// Parses `--watch-cache-sizes` entries `resource[.group]#size` into
/// `resource[.group]` → size (upstream `ParseWatchCacheSizes`).
pub fn parse_watch_cache_sizes(entries: &[String]) -> Result<BTreeMap<String, usize>, CacheOptionsError> {
    let mut out = BTreeMap::new();
    for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let (resource, size) = entry.split_once('#').ok_or_else(|| CacheOptionsError::InvalidSize(entry.to_string()))?;
        if resource.is_empty() {
            return Err(CacheOptionsError::InvalidSize(entry.to_string()));
        }
        let size: i64 = size.trim().parse().map_err(|_| CacheOptionsError::InvalidSize(entry.to_string()))?;
        let size = usize::try_from(size).map_err(|_| CacheOptionsError::NegativeSize(entry.to_string()))?;
        out.insert(resource.trim().to_string(), size);
    }
    Ok(out)
}

/// The cache flags of `rkube apiserver` (flatten into its clap args).
#[derive(clap::Args, Debug, Clone)]
pub struct CacheFlags {
    /// Enable watch caching in the apiserver (`--watch-cache=false` serves every read from storage).
    #[arg(long = "watch-cache", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub watch_cache: bool,
    /// Watch cache size settings, comma separated, each `resource[.group]#size`
    /// (e.g. `pods#1000,deployments.apps#100`). 0 disables the cache of that
    /// resource (reads go to storage). Events default to 0, as upstream.
    #[arg(long = "watch-cache-sizes", value_delimiter = ',')]
    pub watch_cache_sizes: Vec<String>,
    /// `Name=bool` pairs, comma separated: ListFromCacheSnapshot,
    /// ConsistentListFromCache, ResilientWatchCacheInitialization,
    /// WatchCacheInitializationPostStartHook, DetectCacheInconsistency, WatchList.
    #[arg(long = "feature-gates", default_value = "")]
    pub feature_gates: FeatureGates,
    /// Longest wait of the `storage-readiness` post-start hook for the caches
    /// of built-in resources before `/readyz` passes anyway.
    #[arg(long = "storage-initialization-timeout", default_value = "1m", value_parser = parse_duration)]
    pub storage_initialization_timeout: Duration,
    /// How often the compaction of storage is attempted (0 disables).
    #[arg(long = "etcd-compaction-interval", default_value = "5m", value_parser = parse_duration)]
    pub etcd_compaction_interval: Duration,
    /// rkube only: base period of the watch-cache consistency check
    /// (jittered into [p, 1.5 p]; upstream hard-codes 5m).
    #[arg(long = "watch-cache-consistency-check-period", default_value = "5m", value_parser = parse_duration)]
    pub consistency_check_period: Duration,
}

impl CacheFlags {
    /// The settings these flags give. Errors: a malformed `--watch-cache-sizes`.
    pub fn options(&self) -> Result<WatchCacheOptions, CacheOptionsError> {
        Ok(WatchCacheOptions {
            enabled: self.watch_cache,
            sizes: parse_watch_cache_sizes(&self.watch_cache_sizes)?,
            gates: self.feature_gates,
            storage_initialization_timeout: self.storage_initialization_timeout,
            compaction_interval: self.etcd_compaction_interval,
            consistency_check_period: self.consistency_check_period,
        })
    }
}

/// Settings of the watch-cache layer of one server.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchCacheOptions {
    /// `--watch-cache`.
    pub enabled: bool,
    /// `--watch-cache-sizes`: `resource[.group]` → history size (0 = no cache).
    pub sizes: BTreeMap<String, usize>,
    /// `--feature-gates`.
    pub gates: FeatureGates,
    /// `--storage-initialization-timeout`.
    pub storage_initialization_timeout: Duration,
    /// `--etcd-compaction-interval` (zero: no compaction).
    pub compaction_interval: Duration,
    /// `--watch-cache-consistency-check-period`.
    pub consistency_check_period: Duration,
}

impl Default for WatchCacheOptions {
    fn default() -> Self {
        WatchCacheOptions {
            enabled: true,
            sizes: BTreeMap::new(),
            gates: FeatureGates::default(),
            storage_initialization_timeout: Duration::from_secs(60),
            compaction_interval: Duration::from_secs(300),
            consistency_check_period: Duration::from_secs(300),
        }
    }
}

impl WatchCacheOptions {
    /// The configured history size of `resource` in `group`: `None` =
    /// dynamic. Events default to 0 (upstream `DefaultWatchCacheSizes`).
    pub fn size_of(&self, group: &str, resource: &str) -> Option<usize> {
        rkube_cache::layer::size_of(&self.sizes, group, resource)
    }

    /// The watch-cache layer's settings, with `--etcd-prefix` `etcd_prefix`.
    pub fn layer_options(&self, etcd_prefix: &str) -> rkube_cache::CacheLayerOptions {
        rkube_cache::CacheLayerOptions {
            etcd_prefix: etcd_prefix.to_string(),
            enabled: self.enabled,
            sizes: self.sizes.clone(),
            gates: self.gates.cache_gates(),
            post_start_hook: self.gates.watch_cache_initialization_post_start_hook,
            detect_cache_inconsistency: self.gates.detect_cache_inconsistency,
            storage_initialization_timeout: self.storage_initialization_timeout,
            compaction_interval: self.compaction_interval,
            consistency_check_period: self.consistency_check_period,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_time_parse_duration() {
        let cases = [
            ("0", Some(0.0)),
            ("1m", Some(60.0)),
            ("5m0s", Some(300.0)),
            ("2s", Some(2.0)),
            ("1h30m", Some(5400.0)),
            ("500ms", Some(0.5)),
            ("1.5s", Some(1.5)),
            ("", None),
            ("5", None),
            ("-1s", None),
            ("1d", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration(s).ok().map(|d| d.as_secs_f64()), want, "{s:?}");
        }
    }

    #[test]
    fn watch_cache_sizes_parse_resource_group_and_size() {
        let sizes = parse_watch_cache_sizes(&["pods#1000".into(), "deployments.apps#0".into()]).unwrap();
        let opts = WatchCacheOptions { sizes, ..Default::default() };
        assert_eq!(opts.size_of("", "pods"), Some(1000));
        assert_eq!(opts.size_of("apps", "deployments"), Some(0));
        assert_eq!(opts.size_of("", "configmaps"), None);
        assert_eq!(opts.size_of("", "events"), Some(0), "events are not cached by default");
        assert!(matches!(parse_watch_cache_sizes(&["pods".into()]), Err(CacheOptionsError::InvalidSize(_))));
        assert!(matches!(parse_watch_cache_sizes(&["pods#-1".into()]), Err(CacheOptionsError::NegativeSize(_))));
        assert!(matches!(parse_watch_cache_sizes(&["pods#x".into()]), Err(CacheOptionsError::InvalidSize(_))));
    }
}
