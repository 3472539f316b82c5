//! `--feature-gates=Name=bool,...`: the watch-cache feature gates rkube
//! knows, with kube-apiserver 1.35's defaults (upstream
//! `staging/src/k8s.io/apiserver/pkg/features/kube_features.go`), parsed like upstream `component-base/featuregate`
//! (`featureGate.Set`): comma-separated `Name=value` pairs, values parsed as
//! Go's `strconv.ParseBool`, an unknown name is an error.
//!
//! | gate | default | effect in rkube |
//! |---|---|---|
//! | `ListFromCacheSnapshot` | on | Exact / continue LISTs from snapshots (KEP-4988) |
//! | `ConsistentListFromCache` | on | `resourceVersion=""` LISTs from the cache (KEP-2340) |
//! | `ResilientWatchCacheInitialization` | on | 429 instead of waiting while a cache is not ready (KEP-4568) |
//! | `WatchCacheInitializationPostStartHook` | on (upstream beta) | the `storage-readiness` post-start hook in `/readyz` |
//! | `DetectCacheInconsistency` | on | the periodic cache/storage consistency check |
//! | `WatchList` | on | `sendInitialEvents` on watches |

use std::fmt;
use std::str::FromStr;

/// Errors parsing `--feature-gates`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// A name rkube does not know (upstream: `unrecognized feature gate: X`).
    #[error("unrecognized feature gate: {0} (known gates: {known})", known = KNOWN.join(", "))]
    Unknown(String),
    /// An entry without `=` (upstream: `missing bool value for X`).
    #[error("missing bool value for {0}")]
    MissingValue(String),
    /// A value that is not a Go boolean.
    #[error("invalid value of {name}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax")]
    InvalidValue {
        /// The gate.
        name: String,
        /// What was given.
        value: String,
    },
}

/// Every gate name accepted, in the order of the table above.
pub const KNOWN: &[&str] = &[
    "ListFromCacheSnapshot",
    "ConsistentListFromCache",
    "ResilientWatchCacheInitialization",
    "WatchCacheInitializationPostStartHook",
    "DetectCacheInconsistency",
    "WatchList",
];

/// The gates' values (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    /// `ListFromCacheSnapshot`.
    pub list_from_cache_snapshot: bool,
    /// `ConsistentListFromCache`.
    pub consistent_list_from_cache: bool,
    /// `ResilientWatchCacheInitialization`.
    pub resilient_watch_cache_initialization: bool,
    /// `WatchCacheInitializationPostStartHook`.
    pub watch_cache_initialization_post_start_hook: bool,
    /// `DetectCacheInconsistency`.
    pub detect_cache_inconsistency: bool,
    /// `WatchList`.
    pub watch_list: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            list_from_cache_snapshot: true,
            consistent_list_from_cache: true,
            resilient_watch_cache_initialization: true,
            watch_cache_initialization_post_start_hook: true,
            detect_cache_inconsistency: true,
            watch_list: true,
        }
    }
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

impl FeatureGates {
    /// Parses `Name=bool,Name=bool` on top of the defaults. Whitespace
    /// around entries is ignored; an empty string changes nothing.
    pub fn parse(spec: &str) -> Result<FeatureGates, FeatureGateError> {
        let mut gates = FeatureGates::default();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((name, value)) = entry.split_once('=') else {
                return Err(FeatureGateError::MissingValue(entry.to_string()));
            };
            let (name, value) = (name.trim(), value.trim());
            let slot = gates.slot(name).ok_or_else(|| FeatureGateError::Unknown(name.to_string()))?;
            *slot = parse_go_bool(value)
                .ok_or_else(|| FeatureGateError::InvalidValue { name: name.to_string(), value: value.to_string() })?;
        }
        Ok(gates)
    }

    fn slot(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "ListFromCacheSnapshot" => &mut self.list_from_cache_snapshot,
            "ConsistentListFromCache" => &mut self.consistent_list_from_cache,
            "ResilientWatchCacheInitialization" => &mut self.resilient_watch_cache_initialization,
            "WatchCacheInitializationPostStartHook" => &mut self.watch_cache_initialization_post_start_hook,
            "DetectCacheInconsistency" => &mut self.detect_cache_inconsistency,
            "WatchList" => &mut self.watch_list,
            _ => return None,
        })
    }

    /// The gates the cache crate reads.
    pub fn cache_gates(&self) -> rkube_cache::FeatureGates {
        rkube_cache::FeatureGates {
            list_from_cache_snapshot: self.list_from_cache_snapshot,
            consistent_list_from_cache: self.consistent_list_from_cache,
            resilient_watch_cache_initialization: self.resilient_watch_cache_initialization,
            watch_list: self.watch_list,
        }
    }
}

impl FromStr for FeatureGates {
    type Err = FeatureGateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FeatureGates::parse(s)
    }
}

impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut copy = *self;
        let parts: Vec<String> =
            KNOWN.iter().map(|n| format!("{n}={}", copy.slot(n).map(|v| *v).unwrap_or(false))).collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_parse_known_names_over_defaults() {
        let g = FeatureGates::parse("ListFromCacheSnapshot=false, DetectCacheInconsistency=0,WatchList=true").unwrap();
        assert!(!g.list_from_cache_snapshot);
        assert!(!g.detect_cache_inconsistency);
        assert!(g.watch_list && g.consistent_list_from_cache && g.resilient_watch_cache_initialization);
        assert_eq!(FeatureGates::parse("").unwrap(), FeatureGates::default());
        // Display round-trips.
        assert_eq!(FeatureGates::parse(&g.to_string()).unwrap(), g);
    }

    #[test]
    fn feature_gates_reject_unknown_names_and_bad_values() {
        let cases = [
            ("NoSuchGate=true", "unrecognized feature gate: NoSuchGate"),
            ("WatchList", "missing bool value for WatchList"),
            ("WatchList=yes", "invalid value of WatchList=yes"),
        ];
        for (spec, want) in cases {
            let err = FeatureGates::parse(spec).unwrap_err().to_string();
            assert!(err.contains(want), "{spec}: {err}");
        }
    }
}
