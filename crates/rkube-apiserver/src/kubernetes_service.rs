//! The `default/kubernetes` Service, its Endpoints and its EndpointSlice: how
//! in-cluster clients (and `rkube proxy`) find the API server.
//!
//! Follows upstream's `pkg/controlplane/controller/kubernetesservice` (the
//! Service) and `pkg/controlplane/reconcilers` (`EndpointsAdapter`: the
//! Endpoints and EndpointSlice):
//!
//! - Service `kubernetes` in `default`: labels `component=apiserver`,
//!   `provider=kubernetes`; `type: ClusterIP`, `sessionAffinity: None`,
//!   `clusterIP` = the first host address of `--service-cluster-ip-range`
//!   (the allocator never hands it out, [`crate::ipalloc`]); one port
//!   `https` 443/TCP whose `targetPort` is the API server's serving port.
//! - Endpoints `kubernetes` (label `endpointslice.kubernetes.io/skip-mirror=true`,
//!   like upstream, so no mirroring controller copies it) with one subset:
//!   the API server addresses and port `https` (the serving port, TCP).
//! - EndpointSlice `kubernetes` (label `kubernetes.io/service-name=kubernetes`
//!   only: upstream's reconciler sets no `endpointslice.kubernetes.io/managed-by`),
//!   `addressType` IPv4 (IPv6 for an IPv6 address), one ready endpoint per
//!   address, the same port.
//!
//! Each is created when missing and rewritten when it differs from what this
//! API server wants, at start and then every [`RECONCILE_INTERVAL`]; an object
//! that is already right is not written (restarts change no resourceVersion).
//! The periodic passes ([`run`]) read the objects from the watch cache, and
//! do not decode one whose resourceVersion they already found right.
//!
//! # Several API servers on one store
//!
//! Upstream's default (`--endpoint-reconciler-type=lease`) keeps one lease per
//! API server and lists exactly the addresses with live leases. rkube has no
//! API server leases yet and does something simpler: each API server makes
//! sure its own address is listed (adding it to the addresses already there)
//! when the stored port is its own, and replaces the list with its own address
//! when the port differs. So API servers sharing a store must serve on the
//! same port (upstream requires that too), they never fight over the objects,
//! and the address of an API server that went away stays listed until the
//! objects are deleted (they are then recreated within one interval).
//! `clusterIP` is immutable: a stored Service with another one (the range was
//! changed) is left alone, with a warning.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use rkube_api::registry::{self, ResourceInfo};
use rkube_storage::{Storage, StorageError};
use serde_json::{json, Value};

use crate::ipalloc::Cidr;

/// Namespace of the Service.
pub const NAMESPACE: &str = "default";
/// Name of the Service, its Endpoints and its EndpointSlice.
pub const NAME: &str = "kubernetes";
/// How often the objects are checked again (upstream `EndpointInterval`, 10 s).
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(10);
/// Writes attempted per object before giving up when other writers keep
/// changing it (the next interval tries again).
const ATTEMPTS: usize = 5;

/// Errors of the reconciler.
#[derive(Debug, thiserror::Error)]
pub enum KubernetesServiceError {
    /// Storage failed.
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// A stored object is not JSON.
    #[error("cannot decode stored {key}: {source}")]
    Decode {
        /// Storage key.
        key: String,
        /// Parse error.
        source: serde_json::Error,
    },
    /// Namespace `default` does not exist (yet).
    #[error("namespace {NAMESPACE:?} does not exist")]
    NoDefaultNamespace,
    /// Other writers changed the object at every attempt.
    #[error("{0} kept changing while being reconciled")]
    Contended(String),
    /// The registry lacks a resource (a build error).
    #[error("resource {0} is not served")]
    NotServed(&'static str),
    /// Reading the watch cache failed.
    #[error("watch cache: {0}")]
    Cache(#[from] rkube_cache::CacheError),
}

/// Where this API server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiserverEndpoint {
    /// The address advertised to the cluster (`--advertise-address`, else
    /// the bind address).
    pub ip: IpAddr,
    /// The serving port (the Service's `targetPort` and the endpoints' port).
    pub port: u16,
}

fn info(group: &str, resource: &'static str) -> Result<&'static ResourceInfo, KubernetesServiceError> {
    registry::lookup(group, "v1", resource).ok_or(KubernetesServiceError::NotServed(resource))
}

/// Makes the Service, Endpoints and EndpointSlice right once, reading them
/// from storage.
pub async fn reconcile(
    storage: &dyn Storage,
    prefix: &str,
    cidr: Cidr,
    me: ApiserverEndpoint,
) -> Result<(), KubernetesServiceError> {
    Reconciler { storage, cache: None, prefix, memo: &Memo::default() }.pass(cidr, me).await
}

/// Reconciles every [`RECONCILE_INTERVAL`] until `shutdown` turns true
/// (the first round runs at once), reading from the watch cache `cache`
/// (memory; storage only after a conflict, and for a resource whose cacher
/// has size 0) and writing to `storage`. An object whose resourceVersion
/// has not changed since it was last found right is not decoded again.
/// Failures are logged and retried.
pub async fn run(
    cache: Arc<rkube_cache::CacheLayer>,
    storage: Arc<dyn Storage>,
    prefix: String,
    cidr: Cidr,
    me: ApiserverEndpoint,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let memo = Memo::default();
    loop {
        let r = Reconciler { storage: storage.as_ref(), cache: Some(cache.as_ref()), prefix: &prefix, memo: &memo };
        if let Err(e) = r.pass(cidr, me).await {
            tracing::warn!(error = %e, "reconciling the default/kubernetes service");
        }
        tokio::select! {
            _ = tokio::time::sleep(RECONCILE_INTERVAL) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// Per resource, the resourceVersion of the object last found right.
#[derive(Default)]
struct Memo(std::sync::Mutex<std::collections::HashMap<&'static str, i64>>);

impl Memo {
    fn get(&self, resource: &'static str) -> Option<i64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get(resource).copied()
    }
    fn set(&self, resource: &'static str, rv: i64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(resource, rv);
    }
}

/// Where one pass reads (the watch cache when given, else storage) and writes.
struct Reconciler<'a> {
    storage: &'a dyn Storage,
    cache: Option<&'a rkube_cache::CacheLayer>,
    prefix: &'a str,
    memo: &'a Memo,
}

/// What a read found: the object's resourceVersion and, unless it was
/// found right at that version before, the decoded object.
enum Current {
    Missing,
    Unchanged,
    Object(Value, i64),
}

impl Reconciler<'_> {
    async fn pass(&self, cidr: Cidr, me: ApiserverEndpoint) -> Result<(), KubernetesServiceError> {
        let ns = info("", "namespaces")?;
        let exists = match self.cache {
            Some(c) => c.get(ns, "", NAMESPACE, Some("0")).await?.is_some(),
            None => self.storage.get(&ns.object_key(self.prefix, "", NAMESPACE)).await?.is_some(),
        };
        if !exists {
            return Err(KubernetesServiceError::NoDefaultNamespace);
        }
        self.ensure(info("", "services")?, |cur| desired_service(cur, cidr, me)).await?;
        self.ensure(info("", "endpoints")?, |cur| desired_endpoints(cur, me)).await?;
        self.ensure(info("discovery.k8s.io", "endpointslices")?, |cur| desired_slice(cur, me)).await?;
        Ok(())
    }

    /// Reads `default/kubernetes` of `info`: from the cache on the first
    /// attempt when there is one, else (and after a conflict) from storage.
    async fn read(&self, info: &'static ResourceInfo, attempt: usize) -> Result<Current, KubernetesServiceError> {
        let key = info.object_key(self.prefix, NAMESPACE, NAME);
        let (bytes, rv) = match self.cache {
            Some(c) if attempt == 0 => match c.get(info, NAMESPACE, NAME, Some("0")).await? {
                Some(o) => (o.json.clone(), o.resource_version),
                None => return Ok(Current::Missing),
            },
            _ => match self.storage.get(&key).await? {
                Some(kv) => (kv.value, kv.mod_revision),
                None => return Ok(Current::Missing),
            },
        };
        if self.memo.get(info.resource) == Some(rv) {
            return Ok(Current::Unchanged);
        }
        let obj = serde_json::from_slice(&bytes).map_err(|source| KubernetesServiceError::Decode { key, source })?;
        Ok(Current::Object(obj, rv))
    }

    /// Reads `default/kubernetes` of `info`, asks `want` what it should be
    /// (`None`: it is right), and creates or updates it, guarded by the read
    /// revision, a few times when another writer gets in between.
    async fn ensure(
        &self,
        info: &'static ResourceInfo,
        want: impl Fn(Option<&Value>) -> Option<Value>,
    ) -> Result<(), KubernetesServiceError> {
        let key = info.object_key(self.prefix, NAMESPACE, NAME);
        for attempt in 0..ATTEMPTS {
            let current = match self.read(info, attempt).await? {
                Current::Unchanged => return Ok(()),
                Current::Missing => None,
                Current::Object(obj, rv) => Some((obj, rv)),
            };
            let Some(mut new) = want(current.as_ref().map(|c| &c.0)) else {
                if let Some((_, rv)) = current {
                    self.memo.set(info.resource, rv);
                }
                return Ok(());
            };
            info.strategy.apply_defaults(&mut new);
            if let Some(m) = new.pointer_mut("/metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            let bytes = bytes::Bytes::from(serde_json::to_vec(&new).unwrap_or_default());
            let written = match &current {
                None => self.storage.create(&key, bytes).await,
                Some((_, rev)) => self.storage.update(&key, bytes, *rev).await,
            };
            match written {
                Ok(kv) => {
                    let verb = if current.is_none() { "created" } else { "updated" };
                    tracing::info!(kind = info.kind, "{verb} {NAMESPACE}/{NAME}");
                    self.memo.set(info.resource, kv.mod_revision);
                    return Ok(());
                }
                Err(StorageError::Conflict { .. } | StorageError::AlreadyExists { .. } | StorageError::NotFound { .. }) => {
                    continue
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(KubernetesServiceError::Contended(format!("{}/{NAMESPACE}/{NAME}", info.resource)))
    }
}

/// A new object of `kind` named `default/kubernetes`.
fn new_object(api_version: &str, kind: &str, labels: Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "uid": crate::object::new_uid(),
            "creationTimestamp": rkube_api::time::now_rfc3339(),
            "labels": labels,
        },
    })
}

fn set(obj: &mut Value, field: &str, value: Value) {
    if let Some(m) = obj.as_object_mut() {
        m.insert(field.to_string(), value);
    }
}

fn set_labels(obj: &mut Value, labels: Value) {
    if let Some(m) = obj.as_object_mut() {
        let meta = m.entry("metadata").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("labels".into(), labels);
        }
    }
}

fn service_labels() -> Value {
    json!({"component": "apiserver", "provider": "kubernetes"})
}

fn service_ports(me: ApiserverEndpoint) -> Value {
    json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": me.port}])
}

/// The Service to write, or `None` when `current` is right.
fn desired_service(current: Option<&Value>, cidr: Cidr, me: ApiserverEndpoint) -> Option<Value> {
    let ip = cidr.first_host().to_string();
    let Some(cur) = current else {
        let mut svc = new_object("v1", "Service", service_labels());
        set(
            &mut svc,
            "spec",
            json!({
                "type": "ClusterIP",
                "sessionAffinity": "None",
                "clusterIP": ip,
                "clusterIPs": [ip],
                "ports": service_ports(me),
            }),
        );
        set(&mut svc, "status", json!({"loadBalancer": {}}));
        return Some(svc);
    };
    let stored_ip = cur.pointer("/spec/clusterIP").and_then(Value::as_str).unwrap_or("");
    if stored_ip != ip {
        tracing::warn!(stored = stored_ip, want = %ip, "default/kubernetes has another clusterIP (immutable); leaving it");
    }
    let right = cur.pointer("/metadata/labels") == Some(&service_labels())
        && cur.pointer("/spec/ports") == Some(&service_ports(me))
        && cur.pointer("/spec/type").and_then(Value::as_str) == Some("ClusterIP")
        && cur.pointer("/spec/sessionAffinity").and_then(Value::as_str) == Some("None");
    if right {
        return None;
    }
    let mut svc = cur.clone();
    set_labels(&mut svc, service_labels());
    if let Some(spec) = svc.as_object_mut().map(|m| m.entry("spec").or_insert_with(|| json!({}))) {
        if let Some(spec) = spec.as_object_mut() {
            spec.insert("ports".into(), service_ports(me));
            spec.insert("type".into(), json!("ClusterIP"));
            spec.insert("sessionAffinity".into(), json!("None"));
        }
    }
    Some(svc)
}

/// The port the endpoints list.
fn endpoint_port(me: ApiserverEndpoint) -> Value {
    json!({"name": "https", "port": me.port, "protocol": "TCP"})
}

/// The addresses to list: the stored ones plus ours when the stored port is
/// ours, else only ours (sorted, without duplicates).
fn addresses(stored_port: Option<&Value>, stored: Vec<String>, me: ApiserverEndpoint) -> Vec<String> {
    let mut out = if stored_port == Some(&endpoint_port(me)) { stored } else { Vec::new() };
    out.push(me.ip.to_string());
    out.sort();
    out.dedup();
    out
}

/// The Endpoints to write, or `None` when `current` is right.
fn desired_endpoints(current: Option<&Value>, me: ApiserverEndpoint) -> Option<Value> {
    let labels = json!({"endpointslice.kubernetes.io/skip-mirror": "true"});
    let stored_port = current.and_then(|c| c.pointer("/subsets/0/ports/0"));
    let stored_ips: Vec<String> = current
        .and_then(|c| c.pointer("/subsets/0/addresses"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.get("ip").and_then(Value::as_str).map(str::to_string))
        .collect();
    let ips = addresses(stored_port, stored_ips, me);
    let subsets = json!([{
        "addresses": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
        "ports": [endpoint_port(me)],
    }]);
    if let Some(cur) = current {
        if cur.get("subsets") == Some(&subsets) && cur.pointer("/metadata/labels") == Some(&labels) {
            return None;
        }
    }
    let mut eps = match current {
        Some(cur) => cur.clone(),
        None => new_object("v1", "Endpoints", labels.clone()),
    };
    set_labels(&mut eps, labels);
    set(&mut eps, "subsets", subsets);
    Some(eps)
}

/// The EndpointSlice to write, or `None` when `current` is right.
fn desired_slice(current: Option<&Value>, me: ApiserverEndpoint) -> Option<Value> {
    let labels = json!({"kubernetes.io/service-name": NAME});
    let address_type = if me.ip.is_ipv4() { "IPv4" } else { "IPv6" };
    let stored_port = current.and_then(|c| c.pointer("/ports/0"));
    let stored_ips: Vec<String> = current
        .and_then(|c| c.get("endpoints"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e.pointer("/addresses/0").and_then(Value::as_str).map(str::to_string))
        .collect();
    let ips = addresses(stored_port, stored_ips, me);
    let endpoints: Vec<Value> =
        ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}})).collect();
    let endpoints = Value::Array(endpoints);
    let ports = json!([endpoint_port(me)]);
    if let Some(cur) = current {
        let right = cur.get("endpoints") == Some(&endpoints)
            && cur.get("ports") == Some(&ports)
            && cur.get("addressType").and_then(Value::as_str) == Some(address_type)
            && cur.pointer("/metadata/labels") == Some(&labels);
        if right {
            return None;
        }
    }
    let mut slice = match current {
        Some(cur) => cur.clone(),
        None => new_object("discovery.k8s.io/v1", "EndpointSlice", labels.clone()),
    };
    set_labels(&mut slice, labels);
    set(&mut slice, "addressType", json!(address_type));
    set(&mut slice, "endpoints", endpoints);
    set(&mut slice, "ports", ports);
    Some(slice)
}

/// The address to advertise when none is configured: the bind address, or
/// when that is unspecified (`0.0.0.0`, `::`) the address of the interface
/// of the default route (found by connecting a UDP socket, which sends
/// nothing), else loopback.
pub fn advertise_address(bind: IpAddr) -> IpAddr {
    if !bind.is_unspecified() {
        return bind;
    }
    let probe = std::net::UdpSocket::bind(("0.0.0.0", 0)).and_then(|s| {
        s.connect(("10.255.255.255", 1))?;
        s.local_addr()
    });
    match probe {
        Ok(a) if !a.ip().is_unspecified() => a.ip(),
        _ => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn me(ip: [u8; 4], port: u16) -> ApiserverEndpoint {
        ApiserverEndpoint { ip: IpAddr::V4(Ipv4Addr::from(ip)), port }
    }

    #[test]
    fn endpoints_merge_addresses_of_apiservers_on_the_same_port() {
        let a = desired_endpoints(None, me([10, 0, 0, 2], 6443)).unwrap();
        assert_eq!(a["subsets"][0]["addresses"], json!([{"ip": "10.0.0.2"}]));
        assert!(desired_endpoints(Some(&a), me([10, 0, 0, 2], 6443)).is_none(), "right already");
        let b = desired_endpoints(Some(&a), me([10, 0, 0, 1], 6443)).unwrap();
        assert_eq!(b["subsets"][0]["addresses"], json!([{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]));
        assert!(desired_endpoints(Some(&b), me([10, 0, 0, 2], 6443)).is_none(), "no fight");
        let c = desired_endpoints(Some(&b), me([10, 0, 0, 2], 7443)).unwrap();
        assert_eq!(c["subsets"][0]["addresses"], json!([{"ip": "10.0.0.2"}]), "another port resets");
        assert_eq!(c["subsets"][0]["ports"], json!([{"name": "https", "port": 7443, "protocol": "TCP"}]));
    }

    #[test]
    fn service_is_rewritten_only_when_ports_labels_or_type_differ() {
        let cidr = Cidr::parse("10.96.0.0/12").unwrap();
        let mut s = desired_service(None, cidr, me([127, 0, 0, 1], 6443)).unwrap();
        rkube_api::registry::lookup("", "v1", "services").expect("services are served").strategy.apply_defaults(&mut s);
        assert_eq!(s["spec"]["clusterIP"], "10.96.0.1");
        assert!(desired_service(Some(&s), cidr, me([127, 0, 0, 1], 6443)).is_none());
        let moved = desired_service(Some(&s), cidr, me([127, 0, 0, 1], 7443)).unwrap();
        assert_eq!(moved["spec"]["ports"][0]["targetPort"], 7443);
        assert_eq!(moved["metadata"]["uid"], s["metadata"]["uid"]);
    }
}
