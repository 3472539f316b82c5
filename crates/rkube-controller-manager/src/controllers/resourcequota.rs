//! `resourcequota-controller`: upstream's `pkg/controller/resourcequota`.
//!
//! Keeps each ResourceQuota's `status.hard` equal to `spec.hard` and its
//! `status.used` equal to what the namespace's objects use, for every
//! resource named in `spec.hard` that an evaluator handles
//! ([`rkube_api::quota`]): `pods` and the pod compute resources
//! (non-terminal pods, selected by the quota's scopes), `services`,
//! `services.nodeports`, `services.loadbalancers`,
//! `persistentvolumeclaims`, `requests.storage` (and their storage-class
//! forms), `configmaps`, `secrets`, `replicationcontrollers`,
//! `resourcequotas`, and `count/<resource>[.<group>]` for any resource the
//! API server serves (found by discovery). Values of other names are kept
//! as they were.
//!
//! rkube polls instead of watching: every [`ResourceQuotaOptions::poll`]
//! (2 s) it recalculates every quota from fresh lists of the namespaces
//! that have quotas, so a change shows within a poll and the full
//! recalculation upstream does every `--resource-quota-sync-period` (5 m)
//! happens on every poll. A status write that conflicts (the admission
//! plugin charged the quota meanwhile) is retried at the next poll.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::ResourceExt;
use rkube_api::quota::{self, ResourceList};
use serde_json::Value;

use crate::context::ControllerContext;

/// Timing of the controller.
#[derive(Debug, Clone, Copy)]
pub struct ResourceQuotaOptions {
    /// How often every quota is recalculated.
    pub poll: Duration,
}

impl Default for ResourceQuotaOptions {
    fn default() -> Self {
        ResourceQuotaOptions { poll: Duration::from_secs(2) }
    }
}

/// Core resources with their own evaluators: (resource, kind).
const CORE: &[(&str, &str)] = &[
    ("pods", "Pod"),
    ("services", "Service"),
    ("persistentvolumeclaims", "PersistentVolumeClaim"),
    ("configmaps", "ConfigMap"),
    ("secrets", "Secret"),
    ("replicationcontrollers", "ReplicationController"),
    ("resourcequotas", "ResourceQuota"),
];

/// Starts the controller with its default timing.
pub fn start(ctx: ControllerContext) -> futures::future::BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(run(ctx, ResourceQuotaOptions::default()))
}

/// Runs the controller with `options` until `ctx` says stop.
pub async fn run(ctx: ControllerContext, options: ResourceQuotaOptions) -> anyhow::Result<()> {
    let stopped = ctx.stopped();
    tokio::pin!(stopped);
    loop {
        if let Err(err) = sync_all(&ctx.client).await {
            tracing::debug!(%err, "resource quota sync");
        }
        tokio::select! {
            _ = &mut stopped => return Ok(()),
            _ = tokio::time::sleep(options.poll) => {}
        }
    }
}

/// The (group, resource) pairs whose objects `hard` needs counted.
pub fn resources_to_count(hard: &ResourceList) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (resource, _) in CORE {
        if !quota::matching_resources("", resource, hard.keys()).is_empty() {
            out.push((String::new(), resource.to_string()));
        }
    }
    for name in hard.keys() {
        if let Some(gr) = quota::parse_object_count_name(name) {
            if !out.contains(&gr) {
                out.push(gr);
            }
        }
    }
    out
}

/// The new `status.used` of `rq` (JSON) given the namespace's objects per
/// (group, resource): previous values, overwritten by the computed ones,
/// limited to the names in `spec.hard` (upstream `syncResourceQuota`).
pub fn compute_used(rq: &Value, objects: &HashMap<(String, String), Vec<Value>>) -> ResourceList {
    let hard = quota::parse_list(rq.pointer("/spec/hard"));
    let mut used = quota::parse_list(rq.pointer("/status/used"));
    for (gr, objs) in objects {
        let names = quota::matching_resources(&gr.0, &gr.1, hard.keys());
        if names.is_empty() {
            continue;
        }
        let mut sum: ResourceList = names.iter().map(|n| (n.clone(), quota::Quantity::zero())).collect();
        for obj in objs.iter().filter(|o| quota::scopes_select(rq, &gr.0, &gr.1, o)) {
            sum = quota::add(&sum, &quota::mask(&quota::usage(&gr.0, &gr.1, obj), &names));
        }
        used.extend(sum);
    }
    quota::mask(&used, hard.keys())
}

async fn api_resource(client: &kube::Client, group: &str, resource: &str) -> Result<Option<ApiResource>, kube::Error> {
    if group.is_empty() {
        if let Some((_, kind)) = CORE.iter().find(|(r, _)| *r == resource) {
            return Ok(Some(ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", kind), resource)));
        }
    }
    let found = match kube::discovery::oneshot::group(client, group).await {
        Ok(g) => g.recommended_resources().into_iter().map(|(ar, _)| ar).find(|ar| ar.plural == resource),
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(e) => return Err(e),
    };
    Ok(found)
}

async fn sync_all(client: &kube::Client) -> Result<(), kube::Error> {
    let quotas = Api::<ResourceQuota>::all(client.clone()).list(&ListParams::default()).await?.items;
    let mut by_ns: BTreeMap<String, Vec<ResourceQuota>> = BTreeMap::new();
    for q in quotas {
        by_ns.entry(q.namespace().unwrap_or_default()).or_default().push(q);
    }
    for (ns, quotas) in by_ns {
        let mut objects: HashMap<(String, String), Vec<Value>> = HashMap::new();
        let mut last_err = None;
        for rq in &quotas {
            let rq_json = serde_json::to_value(rq).unwrap_or(Value::Null);
            let hard = quota::parse_list(rq_json.pointer("/spec/hard"));
            for gr in resources_to_count(&hard) {
                if objects.contains_key(&gr) {
                    continue;
                }
                let Some(ar) = api_resource(client, &gr.0, &gr.1).await? else { continue };
                let list = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar).list(&ListParams::default()).await?;
                let values = list.items.iter().filter_map(|o| serde_json::to_value(o).ok()).collect();
                objects.insert(gr, values);
            }
            let used = compute_used(&rq_json, &objects);
            let want_hard = quota::list_to_json(&hard);
            let want_used = quota::list_to_json(&used);
            if rq_json.pointer("/status/hard") == Some(&want_hard) && rq_json.pointer("/status/used") == Some(&want_used) {
                continue;
            }
            let mut updated = rq_json.clone();
            updated["status"] = serde_json::json!({"hard": want_hard, "used": want_used});
            let Ok(updated) = serde_json::from_value::<ResourceQuota>(updated) else { continue };
            let api: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
            if let Err(e) = api.replace_status(&rq.name_any(), &PostParams::default(), &updated).await {
                if !crate::pod_control::is_conflict(&e) && !crate::pod_control::is_not_found(&e) {
                    last_err = Some(e);
                }
            }
        }
        if let Some(e) = last_err {
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn used_counts_non_terminal_pods_and_scoped_quotas_only_their_pods() {
        let pods = vec![
            json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "250m"}}}]}}),
            json!({"spec": {"activeDeadlineSeconds": 5, "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}}),
            json!({"spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Failed"}}),
        ];
        let objects: HashMap<(String, String), Vec<Value>> = [((String::new(), "pods".to_string()), pods)].into();
        let rq = json!({"spec": {"hard": {"pods": "10", "requests.cpu": "4", "count/pods": "9", "example.com/foo": "1"}},
            "status": {"used": {"example.com/foo": "1", "secrets": "3"}}});
        assert_eq!(quota::pretty(&compute_used(&rq, &objects)), "count/pods=3,example.com/foo=1,pods=2,requests.cpu=1250m");
        let scoped = json!({"spec": {"hard": {"pods": "10"}, "scopes": ["Terminating"]}});
        assert_eq!(quota::pretty(&compute_used(&scoped, &objects)), "pods=1");
        let empty: HashMap<(String, String), Vec<Value>> = [((String::new(), "pods".to_string()), vec![])].into();
        assert_eq!(quota::pretty(&compute_used(&scoped, &empty)), "pods=0");
    }

    #[test]
    fn the_resources_to_list_follow_the_hard_names() {
        let hard = quota::parse_list(Some(&json!({"pods": "1", "count/deployments.apps": "2", "count/configmaps": "3"})));
        let got = resources_to_count(&hard);
        let want: Vec<(String, String)> = vec![
            (String::new(), "pods".into()),
            (String::new(), "configmaps".into()),
            ("apps".into(), "deployments".into()),
        ];
        assert_eq!(got, want);
    }
}
