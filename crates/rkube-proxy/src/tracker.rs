//! The change tracker: the current Services/EndpointSlices state plus the set of
//! services whose rules changed since the last successful restore.
//!
//! Upstream splits this over `ServiceChangeTracker`, `EndpointsChangeTracker`,
//! `EndpointSliceCache` and the proxier's `svcPortMap`/`endpointsMap`; here one
//! type owns it all and stays pure (no I/O, no clock reads: times are passed in).
//!
//! Lifecycle of a change (the KEP-3453 contract):
//!
//! ```text
//!   update_service / update_slice / delete_*  ──► pending.services (dirty set)
//!   begin_sync()   pending ──moved──► in_flight      (the sync writes these)
//!   finish_sync(true)   in_flight dropped            (rules now match)
//!   finish_sync(false)  in_flight ──merged back──► pending  (nothing lost: kubernetes#112604)
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::model::{self, EndpointInfo, NamespacedName, ServicePortInfo, ServicePortName};

/// Endpoints of one slice, grouped by service port.
type SliceEndpoints = BTreeMap<ServicePortName, Vec<EndpointInfo>>;

/// Changes not yet programmed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PendingChanges {
    /// Services (all their ports) whose Service or EndpointSlices changed, or that were deleted.
    pub services: BTreeSet<NamespacedName>,
    /// `endpoints.kubernetes.io/last-change-trigger-time` values of the EndpointSlice
    /// changes included, for `network_programming_duration_seconds`.
    pub trigger_times: Vec<SystemTime>,
    /// The node's labels changed (forces a full sync).
    pub node_labels_changed: bool,
}

impl PendingChanges {
    fn merge(&mut self, other: PendingChanges) {
        self.services.extend(other.services);
        self.trigger_times.extend(other.trigger_times);
        self.node_labels_changed |= other.node_labels_changed;
    }

    /// Nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && self.trigger_times.is_empty() && !self.node_labels_changed
    }
}

/// Current state and pending changes. Not thread-safe by itself; the proxy wraps it in a mutex.
#[derive(Debug)]
pub struct ChangeTracker {
    node_name: String,
    /// Trigger times at or before this are ignored (they predate the proxy; upstream
    /// `EndpointsChangeTracker.trackerStartTime`).
    start_time: SystemTime,
    services: BTreeMap<NamespacedName, Vec<ServicePortInfo>>,
    slices: HashMap<NamespacedName, BTreeMap<String, SliceEndpoints>>,
    endpoints: HashMap<NamespacedName, BTreeMap<ServicePortName, Vec<EndpointInfo>>>,
    node_labels: BTreeMap<String, String>,
    pending: PendingChanges,
    in_flight: Option<PendingChanges>,
}

impl ChangeTracker {
    /// A tracker for the node `node_name` (endpoints with that `nodeName` are local).
    pub fn new(node_name: impl Into<String>, start_time: SystemTime) -> Self {
        Self {
            node_name: node_name.into(),
            start_time,
            services: BTreeMap::new(),
            slices: HashMap::new(),
            endpoints: HashMap::new(),
            node_labels: BTreeMap::new(),
            pending: PendingChanges::default(),
            in_flight: None,
        }
    }

    /// The node name endpoints are compared against.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// Record a Service add or update. Returns whether its rules change.
    pub fn update_service(&mut self, service: &Service) -> bool {
        let nn = NamespacedName::new(
            service.metadata.namespace.clone().unwrap_or_default(),
            service.metadata.name.clone().unwrap_or_default(),
        );
        let ports = model::service_ports(service);
        let changed = match self.services.get(&nn) {
            Some(old) => *old != ports,
            None => !ports.is_empty(),
        };
        if ports.is_empty() {
            self.services.remove(&nn);
        } else {
            self.services.insert(nn.clone(), ports);
        }
        if changed {
            self.pending.services.insert(nn);
        }
        changed
    }

    /// Record a Service deletion. Returns whether its rules change.
    pub fn delete_service(&mut self, namespace: &str, name: &str) -> bool {
        let nn = NamespacedName::new(namespace, name);
        let changed = self.services.remove(&nn).is_some();
        if changed {
            self.pending.services.insert(nn);
        }
        changed
    }

    /// Record an EndpointSlice add or update; its trigger-time annotation is kept for
    /// `network_programming_duration_seconds`. Returns whether the slice differs from
    /// the one recorded. Slices without a service-name label are ignored (upstream
    /// logs and drops them).
    pub fn update_slice(&mut self, slice: &EndpointSlice) -> bool {
        let Ok(nn) = model::slice_service(slice) else { return false };
        let slice_name = slice.metadata.name.clone().unwrap_or_default();
        let eps = model::slice_endpoints(&nn, slice, &self.node_name);
        let per_service = self.slices.entry(nn.clone()).or_default();
        if per_service.get(&slice_name) == Some(&eps) {
            return false;
        }
        per_service.insert(slice_name, eps);
        if let Some(t) = trigger_time(slice).filter(|t| *t > self.start_time) {
            self.pending.trigger_times.push(t);
        }
        self.recompute_endpoints(&nn);
        true
    }

    /// Record an EndpointSlice deletion. Returns whether the service's endpoints change.
    pub fn delete_slice(&mut self, slice: &EndpointSlice) -> bool {
        let Ok(nn) = model::slice_service(slice) else { return false };
        let slice_name = slice.metadata.name.clone().unwrap_or_default();
        let Some(per_service) = self.slices.get_mut(&nn) else { return false };
        if per_service.remove(&slice_name).is_none() {
            return false;
        }
        if per_service.is_empty() {
            self.slices.remove(&nn);
        }
        self.recompute_endpoints(&nn)
    }

    /// Replace the node's labels. Returns whether they changed (which forces a full sync).
    pub fn set_node_labels(&mut self, labels: BTreeMap<String, String>) -> bool {
        if labels == self.node_labels {
            return false;
        }
        self.node_labels = labels;
        self.pending.node_labels_changed = true;
        true
    }

    /// The node's labels (topology zone for hints).
    pub fn node_labels(&self) -> &BTreeMap<String, String> {
        &self.node_labels
    }

    fn recompute_endpoints(&mut self, nn: &NamespacedName) -> bool {
        let merged = self
            .slices
            .get(nn)
            .map(|s| model::merge_slices(s.values()))
            .unwrap_or_default();
        let old = self.endpoints.get(nn);
        let changed = match old {
            Some(old) => *old != merged,
            None => !merged.is_empty(),
        };
        if merged.is_empty() {
            self.endpoints.remove(nn);
        } else {
            self.endpoints.insert(nn.clone(), merged);
        }
        if changed {
            self.pending.services.insert(nn.clone());
        }
        changed
    }

    /// All service ports, ordered by service then port name.
    pub fn service_ports(&self) -> impl Iterator<Item = &ServicePortInfo> {
        self.services.values().flatten()
    }

    /// Number of service ports.
    pub fn service_port_count(&self) -> usize {
        self.services.values().map(Vec::len).sum()
    }

    /// Endpoints of a service port, sorted by `ip:port` (empty if none).
    pub fn endpoints(&self, spn: &ServicePortName) -> &[EndpointInfo] {
        self.endpoints
            .get(&spn.service)
            .and_then(|m| m.get(spn))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Changes recorded since the last `begin_sync` (not yet handed to a sync).
    pub fn pending(&self) -> &PendingChanges {
        &self.pending
    }

    /// Hand the pending changes to a sync. They stay recoverable until `finish_sync`.
    /// Calling it while a sync is in flight merges into that sync's changes.
    pub fn begin_sync(&mut self) -> PendingChanges {
        let taken = std::mem::take(&mut self.pending);
        let in_flight = self.in_flight.get_or_insert_with(PendingChanges::default);
        in_flight.merge(taken);
        in_flight.clone()
    }

    /// Finish the in-flight sync: on success its changes are programmed; on failure
    /// they return to the pending set so the retry (a full sync) still reports and
    /// writes them.
    pub fn finish_sync(&mut self, success: bool) {
        if let Some(in_flight) = self.in_flight.take() {
            if !success {
                let newer = std::mem::replace(&mut self.pending, in_flight);
                self.pending.merge(newer);
            }
        }
    }
}

/// Parse the slice's `endpoints.kubernetes.io/last-change-trigger-time` annotation.
pub fn trigger_time(slice: &EndpointSlice) -> Option<SystemTime> {
    let value = slice.metadata.annotations.as_ref()?.get(model::ANNOTATION_LAST_CHANGE_TRIGGER_TIME)?;
    chrono::DateTime::parse_from_rfc3339(value).ok().map(SystemTime::from)
}

#[cfg(test)]
#[path = "tracker_tests.rs"]
mod tests;
