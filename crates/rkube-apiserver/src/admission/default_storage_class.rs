//! `DefaultStorageClass` (upstream `plugin/pkg/admission/storage/storageclass/setdefault`):
//! a PersistentVolumeClaim created without a storage class
//! (`spec.storageClassName` absent and no `volume.beta.kubernetes.io/storage-class`
//! annotation) gets the default StorageClass's name: the class annotated
//! `storageclass.kubernetes.io/is-default-class: "true"` (or the beta
//! `storageclass.beta.kubernetes.io/is-default-class`), the newest when
//! several are (ties: the first by name), as upstream since 1.28. An explicit
//! `storageClassName: ""` means "no class" and is kept. Nothing is refused.

use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::state::ApiState;

/// The annotations that mark a StorageClass as the default.
const DEFAULT_ANNOTATIONS: [&str; 2] = ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"];

/// The name of the default class among `classes` (`(name, StorageClass)`).
pub fn default_class(classes: &[(String, Value)]) -> Option<&str> {
    let is_default = |c: &Value| {
        DEFAULT_ANNOTATIONS.iter().any(|a| c.pointer("/metadata/annotations").and_then(|m| m.get(*a)).and_then(Value::as_str) == Some("true"))
    };
    let created = |c: &Value| c.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or("").to_string();
    let mut best: Option<&(String, Value)> = None;
    for c in classes.iter().filter(|(_, c)| is_default(c)) {
        // RFC 3339 UTC timestamps at second precision order as strings.
        if best.is_none_or(|b| created(&c.1) > created(&b.1)) {
            best = Some(c);
        }
    }
    best.map(|(n, _)| n.as_str())
}

/// Sets `spec.storageClassName` of the claim `claim` to the default class
/// of `classes` when the claim names none.
pub fn set_default(claim: &mut Value, classes: &[(String, Value)]) {
    if claim.pointer("/spec/storageClassName").is_some_and(|v| !v.is_null())
        || claim.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class").is_some()
    {
        return;
    }
    let Some(name) = default_class(classes) else { return };
    if let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("storageClassName".into(), json!(name));
    }
}

/// Runs the plugin on a claim being created, reading StorageClasses from the watch cache.
pub async fn admit(st: &ApiState, claim: &mut Value) -> ApiResult<()> {
    let classes = super::cached_objects(st, "storage.k8s.io", "v1", "storageclasses").await?;
    set_default(claim, &classes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, default: Option<&str>, created: &str) -> (String, Value) {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if let Some(a) = default {
            c["metadata"]["annotations"] = json!({a: "true"});
        }
        (name.to_string(), c)
    }

    fn claim(spec: Value) -> Value {
        json!({"metadata": {"name": "c"}, "spec": spec})
    }

    #[test]
    fn a_claim_without_a_class_gets_the_newest_default_class() {
        let classes = [
            class("old-default", Some(DEFAULT_ANNOTATIONS[0]), "2026-01-01T00:00:00Z"),
            class("new-default", Some(DEFAULT_ANNOTATIONS[1]), "2026-02-01T00:00:00Z"),
            class("plain", None, "2026-03-01T00:00:00Z"),
        ];
        let mut c = claim(json!({}));
        set_default(&mut c, &classes);
        assert_eq!(c["spec"]["storageClassName"], "new-default");
        let mut none = claim(json!({}));
        set_default(&mut none, &classes[2..]);
        assert_eq!(none["spec"].get("storageClassName"), None);
    }

    #[test]
    fn an_explicit_class_or_empty_class_is_kept() {
        let classes = [class("d", Some(DEFAULT_ANNOTATIONS[0]), "2026-01-01T00:00:00Z")];
        let mut empty = claim(json!({"storageClassName": ""}));
        set_default(&mut empty, &classes);
        assert_eq!(empty["spec"]["storageClassName"], "");
        let mut gold = claim(json!({"storageClassName": "gold"}));
        set_default(&mut gold, &classes);
        assert_eq!(gold["spec"]["storageClassName"], "gold");
        let mut beta = json!({"metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": "x"}}, "spec": {}});
        set_default(&mut beta, &classes);
        assert_eq!(beta["spec"].get("storageClassName"), None);
    }
}
