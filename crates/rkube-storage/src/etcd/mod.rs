//! etcd v3 backend over gRPC (`etcd-client`), for HA and scale-out: several
//! rkube apiservers may share one etcd cluster.
//!
//! Keys are stored exactly as given (e.g. `/registry/pods/ns/name`), values
//! are the caller's bytes, so an etcd written by rkube reads like one written
//! by kube-apiserver with `--storage-media-type=application/json`. The
//! guarded writes follow upstream `staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go`:
//! - create: `txn(create_revision(key) == 0) then put`;
//! - update: `txn(mod_revision(key) == expected && create_revision(key) > 0) then put(prev_kv) else get`;
//! - delete: `txn([mod_revision(key) == expected &&] create_revision(key) > 0) then delete(prev_kv) else get`.
//!
//! Compaction: etcd does not report its compacted revision. Like
//! kube-apiserver's compactor (`etcd3/compact.go`), [`EtcdStorage::compact`]
//! records each compaction it runs as the decimal revision in the key
//! `compact_rev_key`; [`Storage::compacted_revision`] reads that key and
//! takes the maximum with what this process learnt (its own compactions and
//! the `compact_revision` of canceled watches). A compaction run by another
//! client that does not write `compact_rev_key` is only seen once a read or
//! watch hits it.
//!
//! Errors: gRPC `OutOfRange` "required revision has been compacted" →
//! `Compacted`; "required revision is a future revision" → `FutureRevision`;
//! transport failures and `Unavailable`/`DeadlineExceeded` → `Unavailable`;
//! anything else → `Internal`.

mod watch;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};

use crate::{KeyValue, RangeRequest, RangeResponse, Result, Revision, Storage, StorageError, Watch};

/// The key kube-apiserver's compactor records the last compaction in.
pub const COMPACT_REV_KEY: &str = "compact_rev_key";

/// Connection timeout per endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// gRPC keep-alive ping interval and timeout (kube-apiserver's etcd3 client: 30 s / 10 s).
const KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(10));

/// Largest gRPC response accepted (a LIST of a big collection is one
/// message); kube-apiserver's etcd3 client allows `math.MaxInt32`.
pub(crate) const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

/// The etcd backend. Cheap to share behind an `Arc`; the underlying gRPC
/// channel reconnects by itself.
#[derive(Clone)]
pub struct EtcdStorage {
    client: Client,
    /// Highest compacted revision this process knows of.
    compacted: Arc<AtomicI64>,
    /// `status().version` of the first endpoint at connect time, e.g. `3.4.23`.
    server_version: String,
    progress_reliable: bool,
}

impl std::fmt::Debug for EtcdStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStorage").field("server_version", &self.server_version).finish_non_exhaustive()
    }
}

/// What an etcd error means for the caller.
pub(crate) enum Failure {
    /// "mvcc: required revision has been compacted".
    Compacted,
    /// "mvcc: required revision is a future revision".
    FutureRevision,
    /// Anything else, already mapped.
    Other(StorageError),
}

/// Maps an etcd client error (see the module docs).
pub(crate) fn classify(err: etcd_client::Error) -> Failure {
    use etcd_client::Error as E;
    match err {
        E::GRpcStatus(status) => {
            let msg = status.message();
            if msg.contains("required revision has been compacted") {
                Failure::Compacted
            } else if msg.contains("required revision is a future revision") {
                Failure::FutureRevision
            } else {
                match status.code() {
                    tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Cancelled
                    | tonic::Code::Aborted
                    | tonic::Code::ResourceExhausted
                    | tonic::Code::Unknown => Failure::Other(StorageError::Unavailable(format!("etcd: {status}"))),
                    _ => Failure::Other(StorageError::Internal(format!("etcd: {status}"))),
                }
            }
        }
        E::TransportError(e) => Failure::Other(StorageError::Unavailable(format!("etcd transport: {e}"))),
        E::IoError(e) => Failure::Other(StorageError::Unavailable(format!("etcd io: {e}"))),
        E::WatchError(e) => Failure::Other(StorageError::Unavailable(format!("etcd watch: {e}"))),
        other => Failure::Other(StorageError::Internal(format!("etcd: {other}"))),
    }
}

/// Maps an error of a request that names no revision.
fn plain(err: etcd_client::Error) -> StorageError {
    match classify(err) {
        Failure::Other(e) => e,
        Failure::Compacted => StorageError::Internal("etcd: unexpected compaction error".into()),
        Failure::FutureRevision => StorageError::Internal("etcd: unexpected future revision error".into()),
    }
}

/// Converts an etcd key-value (keys must be UTF-8).
pub(crate) fn convert_kv(kv: etcd_client::KeyValue) -> Result<KeyValue> {
    let (create_revision, mod_revision, version) = (kv.create_revision(), kv.mod_revision(), kv.version());
    let (key, value) = kv.into_key_value();
    let key =
        String::from_utf8(key).map_err(|e| StorageError::Internal(format!("etcd returned a non-UTF-8 key: {e}")))?;
    Ok(KeyValue { key, value: Bytes::from(value), create_revision, mod_revision, version })
}

/// Parses `major.minor.patch` (ignoring any `-suffix`).
fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let core = v.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()?.unwrap_or(0)))
}

/// True when requested progress notifications are trustworthy right after a
/// watch is created: etcd >= 3.4.31 on 3.4, >= 3.5.13 on 3.5, any 3.6+ (etcd
/// issue 15220; upstream Kubernetes checks the same versions).
pub fn progress_notify_reliable_for(version: &str) -> bool {
    match parse_version(version) {
        Some((3, 4, patch)) => patch >= 31,
        Some((3, 5, patch)) => patch >= 13,
        Some((major, minor, _)) => (major, minor) >= (3, 6),
        None => false,
    }
}

impl EtcdStorage {
    /// Connects to etcd at `endpoints` (e.g. `["http://127.0.0.1:2379"]`) and
    /// reads the server version (to decide [`Storage::progress_notify_reliable`]).
    ///
    /// Errors: `Unavailable` when no endpoint answers.
    pub async fn connect(endpoints: &[String]) -> Result<EtcdStorage> {
        if endpoints.is_empty() {
            return Err(StorageError::Unavailable("no etcd endpoints given".into()));
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_keep_alive(KEEP_ALIVE.0, KEEP_ALIVE.1)
            .with_keep_alive_while_idle(true);
        let mut client = Client::connect(endpoints, Some(options))
            .await
            .map_err(|e| StorageError::Unavailable(format!("connect to etcd {endpoints:?}: {e}")))?;
        let status = client.status().await.map_err(|e| match classify(e) {
            Failure::Other(StorageError::Internal(m)) => StorageError::Unavailable(m),
            Failure::Other(e) => e,
            _ => StorageError::Unavailable("etcd status failed".into()),
        })?;
        let server_version = status.version().to_string();
        let progress_reliable = progress_notify_reliable_for(&server_version);
        Ok(EtcdStorage { client, compacted: Arc::new(AtomicI64::new(0)), server_version, progress_reliable })
    }

    /// A KV client accepting responses up to [`MAX_RESPONSE_BYTES`].
    fn kv(&self) -> etcd_client::KvClient {
        self.client.kv_client().max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    /// The etcd server version seen at connect time, e.g. `3.4.23`.
    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    /// The revision recorded in `compact_rev_key` (0 when absent or unparsable).
    async fn recorded_compaction(&self) -> Result<Revision> {
        let mut resp = self.kv().get(COMPACT_REV_KEY, None).await.map_err(plain)?;
        Ok(resp
            .take_kvs()
            .into_iter()
            .next()
            .and_then(|kv| std::str::from_utf8(kv.value()).ok().and_then(|v| v.trim().parse::<i64>().ok()))
            .unwrap_or(0))
    }

    /// Records a compacted revision learnt from etcd.
    pub(crate) fn learn_compacted(compacted: &AtomicI64, revision: Revision) {
        compacted.fetch_max(revision, Ordering::AcqRel);
    }

    /// Maps an error of a request made at `requested`.
    async fn at_revision(&self, err: etcd_client::Error, requested: Revision) -> StorageError {
        match classify(err) {
            Failure::Compacted => {
                let compacted = self.compacted_revision().await.unwrap_or(0);
                StorageError::Compacted { requested, compacted }
            }
            Failure::FutureRevision => {
                let current = self.current_revision().await.unwrap_or(0);
                StorageError::FutureRevision { requested, current }
            }
            Failure::Other(e) => e,
        }
    }

    /// Runs a txn and returns its header revision, success flag and op responses.
    async fn txn(&self, txn: Txn) -> Result<(Revision, bool, Vec<TxnOpResponse>)> {
        let resp = self.kv().txn(txn).await.map_err(plain)?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok((revision, resp.succeeded(), resp.op_responses()))
    }

    /// The failure of a guarded txn whose else branch was a `get(key)`.
    fn guard_failure(key: &str, expected: Option<Revision>, responses: Vec<TxnOpResponse>) -> StorageError {
        let current = responses.into_iter().find_map(|r| match r {
            TxnOpResponse::Get(mut g) => Some(g.take_kvs()),
            _ => None,
        });
        match current.and_then(|kvs| kvs.into_iter().next()) {
            None => StorageError::NotFound { key: key.to_string() },
            Some(kv) => StorageError::Conflict {
                key: key.to_string(),
                expected: expected.unwrap_or(0),
                actual: kv.mod_revision(),
            },
        }
    }
}

#[async_trait::async_trait]
impl Storage for EtcdStorage {
    fn backend_name(&self) -> &'static str {
        "etcd"
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let mut resp = self.kv().get(key, None).await.map_err(plain)?;
        resp.take_kvs().into_iter().next().map(convert_kv).transpose()
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let mut options = GetOptions::new();
        if !req.end.is_empty() {
            options = options.with_range(req.end.as_str());
        }
        if req.revision > 0 {
            options = options.with_revision(req.revision);
        }
        if req.limit > 0 {
            options = options.with_limit(i64::try_from(req.limit).unwrap_or(i64::MAX));
        }
        if req.count_only {
            options = options.with_count_only();
        }
        let mut resp = match self.kv().get(req.start.as_str(), Some(options)).await {
            Ok(resp) => resp,
            Err(e) => return Err(self.at_revision(e, req.revision).await),
        };
        let header_revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        let (more, count) = (resp.more(), resp.count());
        let kvs = resp.take_kvs().into_iter().map(convert_kv).collect::<Result<Vec<_>>>()?;
        Ok(RangeResponse { kvs, more, count, revision: if req.revision > 0 { req.revision } else { header_revision } })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let txn = Txn::new().when([Compare::create_revision(key, CompareOp::Equal, 0)]).and_then([TxnOp::put(
            key,
            value.to_vec(),
            None,
        )]);
        let (revision, succeeded, _) = self.txn(txn).await?;
        if !succeeded {
            return Err(StorageError::AlreadyExists { key: key.to_string() });
        }
        Ok(KeyValue { key: key.to_string(), value, create_revision: revision, mod_revision: revision, version: 1 })
    }

    async fn update(&self, key: &str, value: Bytes, expected_mod_revision: Revision) -> Result<KeyValue> {
        let txn = Txn::new()
            .when([
                Compare::mod_revision(key, CompareOp::Equal, expected_mod_revision),
                Compare::create_revision(key, CompareOp::Greater, 0),
            ])
            .and_then([TxnOp::put(key, value.to_vec(), Some(PutOptions::new().with_prev_key()))])
            .or_else([TxnOp::get(key, None)]);
        let (revision, succeeded, responses) = self.txn(txn).await?;
        if !succeeded {
            return Err(Self::guard_failure(key, Some(expected_mod_revision), responses));
        }
        let prev = responses.into_iter().find_map(|r| match r {
            TxnOpResponse::Put(mut p) => p.take_prev_key(),
            _ => None,
        });
        let prev = prev.ok_or_else(|| StorageError::Internal(format!("etcd: update of {key} returned no prev_kv")))?;
        Ok(KeyValue {
            key: key.to_string(),
            value,
            create_revision: prev.create_revision(),
            mod_revision: revision,
            version: prev.version() + 1,
        })
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let mut compares = vec![Compare::create_revision(key, CompareOp::Greater, 0)];
        if let Some(expected) = expected_mod_revision {
            compares.push(Compare::mod_revision(key, CompareOp::Equal, expected));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then([TxnOp::delete(key, Some(DeleteOptions::new().with_prev_key()))])
            .or_else([TxnOp::get(key, None)]);
        let (revision, succeeded, responses) = self.txn(txn).await?;
        if !succeeded {
            return Err(Self::guard_failure(key, expected_mod_revision, responses));
        }
        let prev = responses.into_iter().find_map(|r| match r {
            TxnOpResponse::Delete(mut d) => d.take_prev_kvs().into_iter().next(),
            _ => None,
        });
        let prev = prev.ok_or_else(|| StorageError::Internal(format!("etcd: delete of {key} returned no prev_kv")))?;
        Ok((convert_kv(prev)?, revision))
    }

    /// Opens one gRPC watch stream with `start_revision = after_revision + 1`
    /// (0 = from now), `prev_kv` and `progress_notify`, and waits for etcd's
    /// `created` answer, so writes made after this returns are seen. A
    /// compacted start is reported either here or as the stream's first item
    /// (`Err(Compacted)`), depending on when etcd cancels the watch.
    async fn watch(&self, prefix: &str, after_revision: Revision) -> Result<Watch> {
        watch::open(&self.client, prefix, after_revision, self.compacted.clone()).await
    }

    /// A linearizable (quorum) range of one key with `count_only`; the header revision.
    async fn current_revision(&self) -> Result<Revision> {
        let resp = self
            .client
            .kv_client()
            .get(COMPACT_REV_KEY, Some(GetOptions::new().with_count_only()))
            .await
            .map_err(plain)?;
        resp.header()
            .map(|h| h.revision())
            .ok_or_else(|| StorageError::Internal("etcd: range response without header".into()))
    }

    /// See the module docs: the maximum of `compact_rev_key` and what this
    /// process learnt; 0 when neither knows of a compaction.
    async fn compacted_revision(&self) -> Result<Revision> {
        let recorded = self.recorded_compaction().await?;
        Self::learn_compacted(&self.compacted, recorded);
        Ok(self.compacted.load(Ordering::Acquire))
    }

    /// Compacts (not physical: returns once etcd accepted it) and records the
    /// revision in `compact_rev_key` (one extra write, as kube-apiserver does).
    /// Errors: `Compacted` when `revision` is at or below etcd's compacted
    /// revision, `FutureRevision` when above the current one.
    async fn compact(&self, revision: Revision) -> Result<()> {
        if let Err(e) = self.kv().compact(revision, None).await {
            return Err(self.at_revision(e, revision).await);
        }
        Self::learn_compacted(&self.compacted, revision);
        if self.recorded_compaction().await? < revision {
            self.kv().put(COMPACT_REV_KEY, revision.to_string(), None).await.map_err(plain)?;
        }
        Ok(())
    }

    fn progress_notify_reliable(&self) -> bool {
        self.progress_reliable
    }
}

#[cfg(test)]
mod tests {
    use super::progress_notify_reliable_for;

    #[test]
    fn progress_notify_reliable_only_on_fixed_etcd_versions() {
        for (version, reliable) in [
            ("3.4.23", false),
            ("3.4.30", false),
            ("3.4.31", true),
            ("3.5.1", false),
            ("3.5.12", false),
            ("3.5.13", true),
            ("3.5.21", true),
            ("3.6.0", true),
            ("3.3.27", false),
            ("garbage", false),
            ("3.5.13-rc.0", true),
        ] {
            assert_eq!(progress_notify_reliable_for(version), reliable, "etcd {version}");
        }
    }
}
