//! Load for the benchmarks: realistic pods of about 1.5 KB of JSON, bulk
//! loading into a real store, and pod updates paced at a fixed rate through
//! storage writes, each recorded with its revision and timestamps.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rkube_storage::Storage;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::PODS;

/// Key (full) of bench pod `i`: `/registry/pods/ns-<i%10>/pod-<i:06>`.
pub fn pod_key(i: usize) -> String {
    format!("{PODS}ns-{}/pod-{i:06}", i % 10)
}

/// Name of node `n`.
pub fn node_name(n: usize) -> String {
    format!("node-{n:04}")
}

/// A pod like a scheduled, running Deployment pod as kube-apiserver stores
/// it (no managedFields): about 1.5 KB of JSON with its resourceVersion. `version` changes one
/// fixed-width annotation, so updates keep the size.
pub fn bench_pod(i: usize, node: &str, version: u64) -> Bytes {
    let name = format!("pod-{i:06}");
    let ns = format!("ns-{}", i % 10);
    let app = format!("app-{}", i % 50);
    let uid = format!("6b1f3c2e-0000-4000-8000-{i:012}");
    let ip = format!("10.{}.{}.{}", (i / 62500) % 250, (i / 250) % 250, i % 250);
    let v = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": ns, "uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": app, "pod-template-hash": "7d9c8b6f5"},
            "annotations": {"rkube.bench/version": format!("{version:012}")},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-7d9c8b6f5"),
                "uid": "0c8f6a34-1d2e-4f5a-9b8c-7d6e5f4a3b2c", "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "app", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": true,
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "imagePullPolicy": "IfNotPresent",
            }],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            ]}}],
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "schedulerName": "default-scheduler",
        },
        "status": {
            "phase": "Running", "podIP": ip,
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:04Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0,
                "containerID": format!("containerd://{i:016x}"),
                "state": {"running": {"startedAt": "2026-01-01T00:00:03Z"}}}],
        },
    });
    Bytes::from(serde_json::to_vec(&v).expect("serialize pod"))
}

/// What the loader knows of each pod: its node and its current mod_revision.
#[derive(Debug, Clone, Copy)]
pub struct PodState {
    /// Index of the node the pod is on.
    pub node: usize,
    /// The pod's mod_revision in storage.
    pub mod_revision: i64,
}

/// Creates `n` pods, pod `i` on node `i % nodes`, 256 writes in flight.
pub async fn load_pods(s: &Arc<dyn Storage>, n: usize, nodes: usize) -> Vec<PodState> {
    let mut out: Vec<(usize, PodState)> = futures::stream::iter(0..n)
        .map(|i| {
            let s = s.clone();
            async move {
                let node = i % nodes;
                let kv = s.create(&pod_key(i), bench_pod(i, &node_name(node), 0)).await.expect("create pod");
                (i, PodState { node, mod_revision: kv.mod_revision })
            }
        })
        .buffer_unordered(256)
        .collect()
        .await;
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, p)| p).collect()
}

/// How [`paced_updates`] writes.
#[derive(Debug, Clone, Copy)]
pub struct Pacing {
    /// Updates per second.
    pub rate: f64,
    /// How long.
    pub duration: Duration,
    /// Every `move_every`-th update moves the pod to the next node (0 = never).
    pub move_every: usize,
    /// Number of nodes.
    pub nodes: usize,
}

/// One acknowledged update.
#[derive(Debug, Clone, Copy)]
pub struct Write {
    /// Pod index.
    pub pod: usize,
    /// The revision storage gave it.
    pub rv: i64,
    /// Node before and after.
    pub old_node: usize,
    pub new_node: usize,
    /// When the write was issued and when storage acknowledged it.
    pub started: Instant,
    pub acked: Instant,
}

/// Updates pods at `pacing.rate` for `pacing.duration`: update `k` is issued
/// at `start + k / rate` (as its own task, so a slow commit never delays the
/// schedule; at most 256 in flight) on pod `k * stride mod n`, a stride
/// coprime with `n`, so one pod is never written twice at once. Returns the
/// acknowledged writes in revision order and the achieved rate.
pub async fn paced_updates(s: &Arc<dyn Storage>, pods: Vec<PodState>, pacing: Pacing) -> (Vec<Write>, f64) {
    let n = pods.len();
    let stride = [7919usize, 7907, 7901, 1].into_iter().find(|p| gcd(*p, n) == 1).unwrap_or(1);
    let total = (pacing.rate * pacing.duration.as_secs_f64()).round() as usize;
    let pods = Arc::new(Mutex::new(pods));
    let writes = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let in_flight = Arc::new(Semaphore::new(256));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for k in 0..total {
        tokio::time::sleep_until(start + Duration::from_secs_f64(k as f64 / pacing.rate)).await;
        let permit = in_flight.clone().acquire_owned().await.expect("semaphore open");
        let (s, pods, writes) = (s.clone(), pods.clone(), writes.clone());
        let pod = (k * stride) % n;
        let moves = pacing.move_every > 0 && k % pacing.move_every == pacing.move_every - 1;
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let cur = pods.lock().expect("pods")[pod];
            let new_node = if moves { (cur.node + 1) % pacing.nodes } else { cur.node };
            let started = Instant::now();
            let kv = s
                .update(&pod_key(pod), bench_pod(pod, &node_name(new_node), k as u64 + 1), cur.mod_revision)
                .await
                .expect("update pod");
            let acked = Instant::now();
            pods.lock().expect("pods")[pod] = PodState { node: new_node, mod_revision: kv.mod_revision };
            writes.lock().expect("writes").push(Write {
                pod,
                rv: kv.mod_revision,
                old_node: cur.node,
                new_node,
                started,
                acked,
            });
        }));
    }
    for t in tasks {
        t.await.expect("update task");
    }
    let achieved = total as f64 / start.elapsed().as_secs_f64();
    let mut out = std::mem::take(&mut *writes.lock().expect("writes"));
    out.sort_by_key(|w| w.rv);
    (out, achieved)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Sorted copy's percentile `p` (0..=100) of `v`; zero when empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 * p / 100.0).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

/// Median of `v` (upper median for even lengths); 0 when empty.
pub fn median_f64(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
