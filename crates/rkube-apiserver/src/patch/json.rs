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
//!
//! Two guards against patches that grow the document (both 422 like any
//! failed operation): `copy` operations may add at most
//! [`MAX_JSON_PATCH_COPY_BYTES`] in total (upstream's `JSONPatchMaxCopyBytes`,
//! the `AccumulatedCopySizeLimit` of `evanphx/json-patch`), and no operation
//! may nest the document deeper than [`MAX_NESTING_DEPTH`] (what every JSON
//! decoder here accepts, so the stored object stays readable; without it,
//! `add`/`copy` chains build documents deep enough to overflow the stack).

use serde_json::Value;

use super::PatchError;

/// Upstream's `maxJSONPatchOperations`.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Upstream's `JSONPatchMaxCopyBytes` (3 MiB): the most the `copy`
/// operations of one JSON patch may add to the document, in bytes of JSON.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// The deepest nesting of objects and arrays a patched document may have:
/// serde_json's decoder (bodies, stored objects) stops at 128 levels, so
/// anything deeper could be stored but never read again.
pub const MAX_NESTING_DEPTH: usize = 127;

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
    let mut copied = 0usize;
    // One operation at a time, so the growth of each is checked before it
    // happens. `patch_unsafe` leaves `doc` half-patched on error; `doc` is our
    // copy and is dropped then, and unlike `patch` it has no undo path that can panic.
    for (i, op) in parsed.iter().enumerate() {
        if tests_absent_member_for_null(&doc, op) {
            continue;
        }
        check_growth(&doc, i, op, &mut copied)?;
        json_patch::patch_unsafe(&mut doc, std::slice::from_ref(op)).map_err(|mut e| {
            e.operation = i;
            PatchError::Unprocessable(e.to_string())
        })?;
    }
    Ok(doc)
}

/// Whether `op` is a `test` for `null` at a member its (existing) parent
/// object lacks: upstream's `evanphx/json-patch` reads an absent member as
/// `null`, so the test passes (clients rely on it, e.g. kube-rs's
/// finalizer helper testing that `/metadata/finalizers` is unset).
fn tests_absent_member_for_null(doc: &Value, op: &json_patch::PatchOperation) -> bool {
    let json_patch::PatchOperation::Test(t) = op else { return false };
    if !t.value.is_null() {
        return false;
    }
    let path = t.path.to_string();
    let Some((parent, _)) = path.rsplit_once('/') else { return false };
    doc.pointer(&path).is_none() && doc.pointer(parent).is_some_and(Value::is_object)
}

/// Refuses operation `i` when it would nest `doc` deeper than
/// [`MAX_NESTING_DEPTH`], or when it is a `copy` taking the bytes copied so
/// far (`copied`) over [`MAX_JSON_PATCH_COPY_BYTES`]. Operations that would
/// fail anyway (a missing `from`) are left to the patch library.
fn check_growth(doc: &Value, i: usize, op: &json_patch::PatchOperation, copied: &mut usize) -> Result<(), PatchError> {
    use json_patch::PatchOperation as Op;
    let path = op.path();
    let at = path.count();
    let placed_depth = match op {
        Op::Add(o) => nesting_depth(&o.value),
        Op::Replace(o) => nesting_depth(&o.value),
        Op::Copy(o) => {
            let Some(source) = doc.pointer(o.from.as_str()) else { return Ok(()) };
            let mut counter = ByteCounter(0);
            // Writing a Value to a counter cannot fail.
            let _ = serde_json::to_writer(&mut counter, source);
            *copied = copied.saturating_add(counter.0);
            if *copied > MAX_JSON_PATCH_COPY_BYTES {
                return Err(PatchError::Unprocessable(format!(
                    "Unable to complete the copy, the accumulated size increase of copy is {}, exceeding the limit {}",
                    *copied, MAX_JSON_PATCH_COPY_BYTES
                )));
            }
            nesting_depth(source)
        }
        // A value moved no deeper than it was cannot exceed the limit.
        Op::Move(o) if at > o.from.count() => match doc.pointer(o.from.as_str()) {
            Some(source) => nesting_depth(source),
            None => return Ok(()),
        },
        Op::Move(_) | Op::Remove(_) | Op::Test(_) => return Ok(()),
    };
    if at + placed_depth > MAX_NESTING_DEPTH {
        return Err(PatchError::Unprocessable(format!(
            "operation '/{i}' failed at path '{}': the patched object would be nested more than {MAX_NESTING_DEPTH} levels deep",
            path.as_str()
        )));
    }
    Ok(())
}

/// Levels of objects and arrays in `v` (a scalar is 0), without recursion.
pub(crate) fn nesting_depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(items) => {
                max = max.max(d + 1);
                stack.extend(items.iter().map(|c| (c, d + 1)));
            }
            Value::Object(fields) => {
                max = max.max(d + 1);
                stack.extend(fields.values().map(|c| (c, d + 1)));
            }
            _ => max = max.max(d),
        }
    }
    max
}

/// An `io::Write` that only counts bytes.
struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Applies an RFC 7396 JSON merge patch to a copy of `original`.
pub(crate) fn merge_patch(original: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let patch: Value = crate::json_value::from_slice(patch)
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
