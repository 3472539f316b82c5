//! JSON patch (RFC 6902, `application/json-patch+json`, applied by the
//! `json-patch` crate) and JSON merge patch
//! (RFC 7396, `application/merge-patch+json`), with the error mapping of
//! upstream's `jsonPatcher.applyJSPatch`
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go`):
//!
//! - a body that is not a JSON array of operations: 400 `BadRequest`;
//! - more than [`MAX_JSON_PATCH_OPERATIONS`]: 413 `RequestEntityTooLarge`;
//! - an operation that cannot be applied (a failed `test`, a missing path,
//!   an unknown `op`): 422 with upstream's generic "the server rejected our
//!   request due to an error in our request";
//! - a merge patch that is not JSON or is `null`: 400 `Invalid JSON Patch`.

use serde_json::Value;

use super::PatchError;

/// Upstream's `maxJSONPatchOperations`.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Applies an RFC 6902 JSON patch to a copy of `original`.
pub(crate) fn json_patch(original: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let ops: Vec<Value> =
        serde_json::from_slice(patch).map_err(|e| PatchError::BadRequest(e.to_string()))?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooManyOperations {
            max: MAX_JSON_PATCH_OPERATIONS,
            got: ops.len(),
        });
    }
    let mut parsed = Vec::with_capacity(ops.len());
    for (i, op) in ops.into_iter().enumerate() {
        let op: json_patch::PatchOperation = serde_json::from_value(op)
            .map_err(|e| PatchError::Unprocessable(format!("operation {i}: {e}")))?;
        parsed.push(op);
    }
    let mut doc = original.clone();
    // `patch_unsafe` leaves `doc` half-patched on error; `doc` is our copy and
    // is dropped then, and unlike `patch` it has no undo path that can panic.
    json_patch::patch_unsafe(&mut doc, &parsed)
        .map_err(|e| PatchError::Unprocessable(e.to_string()))?;
    Ok(doc)
}

/// Applies an RFC 7396 JSON merge patch to a copy of `original`.
pub(crate) fn merge_patch(original: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let patch: Value = serde_json::from_slice(patch)
        .map_err(|_| PatchError::BadRequest("Invalid JSON Patch".to_string()))?;
    if patch.is_null() {
        return Err(PatchError::BadRequest("Invalid JSON Patch".to_string()));
    }
    let mut doc = original.clone();
    merge_into(&mut doc, &patch);
    Ok(doc)
}

/// RFC 7396 `MergePatch(target, patch)`, keeping the order of the fields it
/// leaves (the `json-patch` crate's `merge` swaps a removed field with the
/// last one).
fn merge_into(doc: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(target) = doc {
        for (k, v) in patch {
            if v.is_null() {
                target.shift_remove(k);
            } else {
                merge_into(target.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}
