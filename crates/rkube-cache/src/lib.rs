//! rkube's watch cache: LIST and WATCH served from memory, with a snapshot
//! per resourceVersion (KEP-4988), resilient initialization (KEP-4568) and
//! the serving rules of kube-apiserver's cacher
//! (`staging/src/k8s.io/apiserver/pkg/storage/cacher/`). It is the API
//! server's only read path: every GET, LIST and WATCH of every resource goes
//! through [`layer::CacheLayer`], cached or not.
//!
//! One [`Cacher`] per resource fills itself from a [`rkube_storage::Storage`]
//! (a paged LIST at one revision, then a WATCH after it) and serves:
//! - [`Cacher::list`]: routed as upstream's `delegator.go` to the latest state, a
//!   snapshot, or storage ([`ListResult`], [`ServedFrom`]);
//! - [`Cacher::watch`]: a [`CacheWatch`] stream of [`WatchEvent`]s sharing
//!   each object's JSON bytes between all watchers;
//! - [`Cacher::get`], [`Cacher::ready_state`].
//!
//! [`layer::CacheLayer`] holds one cacher per resource of the resource
//! table (rows added while the server runs too) with the background parts:
//! [`storage_readiness`] (the `storage-readiness` post-start hook),
//! [`compaction`] (the `compact_rev_key` watch), [`consistency`] (the
//! consistency checker).
//!
//! Errors are [`CacheError`]; `Status::from(err)` gives what a client sees,
//! and [`error::storage_status`] is the one mapping of a storage error to a
//! `Status`.
//!
//! Modules, one concern each (no `cacher.go`):
//! [`store`] (persistent map + cached objects), [`snapshots`], [`history`]
//! (dynamic ring buffer), [`index`] (pods by node), [`ready`] (readiness
//! state machine), [`reflector`] (list + watch), [`dispatcher`] and
//! [`watchers`] (fan-out, slow watchers), [`bookmarks`], [`delegator`]
//! (LIST routing), [`storage_list`] (LIST from storage), [`watch`], [`metrics`].

#![deny(missing_docs)]

pub mod backoff;
pub mod bookmarks;
pub mod cache_state;
pub mod cacher;
pub mod clock;
pub mod compaction;
pub mod consistency;
pub mod convert;
pub mod delegator;
pub mod dispatcher;
pub mod error;
pub mod event;
pub mod filter;
pub mod history;
pub mod index;
pub mod layer;
pub mod metrics;
pub mod ready;
pub mod reflector;
pub mod snapshots;
pub mod storage_list;
pub mod storage_readiness;
pub mod store;
pub mod watch;
pub mod watchers;

pub use cacher::{Cacher, CacherConfig, FeatureGates, Tuning};
pub use clock::{Clock, FakeClock, TokioClock};
pub use delegator::{ListResult, ServedFrom};
pub use error::CacheError;
pub use event::{Bookmark, WatchEvent};
pub use layer::{CacheEntry, CacheLayer, CacheLayerOptions, Caches};
pub use metrics::{CacheMetrics, ResourceMetrics};
pub use ready::ReadyState;
pub use store::{CachedObject, Encodings, FieldExtractor};
pub use watch::CacheWatch;
