//! Stored objects as JSON values for the write paths' read-modify-write
//! loops: objects come out of storage with `metadata.resourceVersion` set to
//! their `mod_revision` (upstream's etcd3 store keeps the stored bytes free
//! of a resourceVersion and sets it on read, `storage/etcd3/store.go`).
//! Reads (GET, LIST, WATCH) go through the watch-cache layer instead
//! ([`rkube_cache::CacheLayer`]).

use rkube_storage::{Revision, StorageError};
use serde_json::Value;

/// Result alias for decoding stored objects.
pub type SourceResult<T> = Result<T, StorageError>;

/// Decodes a stored object and sets its resourceVersion to `revision`.
pub fn decode_stored(kv_key: &str, bytes: &[u8], revision: Revision) -> SourceResult<Value> {
    let mut obj: Value = crate::json_value::from_slice(bytes)
        .map_err(|e| StorageError::Internal(format!("cannot decode object at {kv_key}: {e}")))?;
    set_resource_version(&mut obj, revision);
    Ok(obj)
}

/// Every stored object of `info` (in `namespace` when given), read from storage
/// (not the watch cache) and decoded with [`decode_stored`]; objects that do not
/// decode are skipped. Errors: storage's, as the one `StorageError` → `Status` mapping
/// gives them.
pub async fn stored_objects(
    st: &crate::state::ApiState,
    info: &rkube_api::registry::ResourceInfo,
    namespace: Option<&str>,
) -> crate::error::ApiResult<Vec<Value>> {
    let prefix = info.list_prefix(st.prefix(), namespace);
    let listed = st
        .storage
        .range(rkube_storage::RangeRequest::prefix(&prefix))
        .await
        .map_err(|e| crate::error::ApiError::from_storage(e, info, ""))?;
    Ok(listed.kvs.iter().filter_map(|kv| decode_stored(&kv.key, &kv.value, kv.mod_revision).ok()).collect())
}

/// Sets `metadata.resourceVersion` to `revision`, with the object's keys in
/// typed order ([`rkube_api::wire::order_object_keys`]: `kind` first, the
/// resourceVersion in its `ObjectMeta` place).
pub fn set_resource_version(obj: &mut Value, revision: Revision) {
    if let Some(map) = obj.as_object_mut() {
        let meta = map.entry("metadata").or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("resourceVersion".into(), Value::String(revision.to_string()));
        }
    }
    rkube_api::wire::order_object_keys(obj);
}
