//! ClusterRole aggregation (upstream
//! `pkg/controller/clusterroleaggregation/clusterroleaggregation_controller.go`),
//! run inside the API server process.
//!
//! A ClusterRole with `aggregationRule.clusterRoleSelectors` (metav1
//! LabelSelectors) gets its `rules` replaced by the rules of every other
//! ClusterRole matching one of the selectors: selectors in order, matching
//! roles sorted by name, each rule once (first occurrence kept). Roles whose
//! aggregated rules already equal their stored rules are not written.
//!
//! [`run_with`] reads the ClusterRoles from the API server's RBAC cache
//! ([`RbacCache`], kept by a watch of `<prefix>/clusterroles/`): it
//! reconciles every aggregated role once the cache has synced, then again
//! after each change to the ClusterRoles (a write by the controller itself
//! triggers one more pass, which finds nothing to change; chains such as
//! `view` → `edit` → `admin` converge that way). Nothing is read from
//! storage per pass. Writes are guarded by the cached `mod_revision`; a lost
//! race is retried when the newer state arrives.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rkube_cache::backoff::Backoff;
use rkube_storage::StorageError;
use serde_json::Value;

use crate::filters::rbac_cache::RbacCache;

/// Errors of one reconciliation pass.
#[derive(Debug, thiserror::Error)]
pub enum AggregationError {
    /// Reading or writing storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A stored ClusterRole could not be encoded back.
    #[error("encoding clusterrole {name}: {source}")]
    Encode {
        /// The role.
        name: String,
        /// Why.
        source: serde_json::Error,
    },
}

fn name_of(role: &Value) -> &str {
    role.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
}

fn selectors(role: &Value) -> Option<&Vec<Value>> {
    role.pointer("/aggregationRule/clusterRoleSelectors").and_then(Value::as_array)
}

/// The rules aggregated ClusterRole `role` should have, given every
/// ClusterRole by name (see the module docs). `None` when `role` does not
/// aggregate.
pub fn aggregated_rules(role: &Value, all: &BTreeMap<String, Value>) -> Option<Vec<Value>> {
    let selectors = selectors(role)?;
    let own = name_of(role);
    let empty = serde_json::Map::new();
    let mut rules: Vec<Value> = Vec::new();
    for sel in selectors {
        for (name, other) in all {
            if name == own {
                continue;
            }
            let labels = other.pointer("/metadata/labels").and_then(Value::as_object).unwrap_or(&empty);
            if !rkube_api::selector::label_selector_matches(sel, labels) {
                continue;
            }
            for r in other.get("rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
                if !rules.contains(r) {
                    rules.push(r.clone());
                }
            }
        }
    }
    Some(rules)
}

/// One pass over the ClusterRoles held by `cache` (no storage read):
/// rewrites the aggregated ones whose rules are out of date, each guarded by
/// the `mod_revision` the cache holds (a lost race is retried when the
/// newer state arrives). Returns how many were written.
pub async fn reconcile_cached(cache: &RbacCache) -> Result<usize, AggregationError> {
    let stored = cache.stored_cluster_roles();
    let all: BTreeMap<String, Value> = stored.iter().map(|(n, c)| (n.clone(), (*c.object).clone())).collect();
    let mut written = 0;
    for (name, role) in &all {
        let Some(rules) = aggregated_rules(role, &all) else { continue };
        let current = role.get("rules").and_then(Value::as_array).cloned().unwrap_or_default();
        if current == rules {
            continue;
        }
        let Some(c) = stored.get(name) else { continue };
        let mut updated = role.clone();
        updated["rules"] = Value::Array(rules);
        let bytes = serde_json::to_vec(&updated).map_err(|source| AggregationError::Encode { name: name.clone(), source })?;
        match cache.storage().update(&c.key, bytes.into(), c.mod_revision).await {
            Ok(_) => written += 1,
            // Someone else changed it: its event brings us back.
            Err(StorageError::Conflict { .. }) | Err(StorageError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(written)
}

/// Runs the controller over `cache` until `stop` turns true (or its sender
/// is dropped): a pass once the cache has synced, then one after every
/// change to the ClusterRoles. A pass that fails (storage unreachable) is
/// retried after a jittered backoff.
pub async fn run_with(cache: Arc<RbacCache>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut changed = cache.cluster_roles_changed();
    tokio::select! {
        _ = cache.wait_synced() => {}
        _ = stop.wait_for(|s| *s) => return,
    }
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    loop {
        if *stop.borrow() {
            return;
        }
        changed.borrow_and_update();
        let wait = match reconcile_cached(&cache).await {
            Ok(_) => {
                backoff.reset();
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "clusterrole aggregation failed; retrying");
                Some(backoff.next_delay())
            }
        };
        tokio::select! {
            r = changed.changed(), if wait.is_none() => {
                if r.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep(wait.unwrap_or_default()), if wait.is_some() => {}
            r = stop.changed() => {
                if r.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(name: &str, labels: Value, rules: Value) -> (String, Value) {
        (name.into(), json!({"metadata": {"name": name, "labels": labels}, "rules": rules}))
    }

    #[test]
    fn rules_come_from_matching_roles_by_name_once_each() {
        let r1 = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
        let r2 = json!({"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]});
        let all: BTreeMap<String, Value> = [
            role("b-role", json!({"agg": "true"}), json!([r2, r1])),
            role("a-role", json!({"agg": "true"}), json!([r1])),
            role("other", json!({}), json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}])),
            (
                "parent".to_string(),
                json!({"metadata": {"name": "parent", "labels": {"agg": "true"}},
                       "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]}, "rules": [r2]}),
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(aggregated_rules(&all["parent"], &all), Some(vec![r1.clone(), r2.clone()]));
        assert_eq!(aggregated_rules(&all["other"], &all), None);
    }

    #[test]
    fn bootstrap_roles_are_already_aggregated() {
        let all: BTreeMap<String, Value> = crate::filters::rbac::bootstrap_policy()
            .into_iter()
            .filter(|o| o["kind"] == "ClusterRole")
            .map(|o| (name_of(&o).to_string(), o))
            .collect();
        for name in ["admin", "edit", "view"] {
            let want = aggregated_rules(&all[name], &all).unwrap();
            assert_eq!(all[name]["rules"].as_array().unwrap(), &want, "{name}");
        }
    }
}
