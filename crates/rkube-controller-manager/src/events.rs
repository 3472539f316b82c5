//! Events through events.k8s.io/v1, one reporting controller name per
//! controller (`replicaset-controller`, …) as upstream's `reportingController`,
//! correlated as client-go's event broadcaster does before writing
//! ([`correlator`]: identical events become one Event whose `series` counts
//! them, similar ones are aggregated, and each object's events are rate
//! limited).
//!
//! kube-runtime's `Recorder` is not used: it folds events with the same
//! reason and object into one series whatever their note (upstream keys on
//! the note too: `Created pod: a` and `Created pod: b` are two events), has
//! no aggregation or spam filter, and decides and writes in one call, while
//! the correlator decides before the write.

pub mod correlator;

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;

use correlator::{EventCorrelator, Occurrence};

/// Publishes events for one controller; clones share one correlator.
#[derive(Clone)]
pub struct EventSink {
    client: kube::Client,
    controller: &'static str,
    correlator: Arc<Mutex<EventCorrelator>>,
}

impl EventSink {
    /// A sink reporting as `controller` (upstream's component name).
    pub fn new(client: kube::Client, controller: &'static str) -> Self {
        EventSink { client, controller, correlator: Arc::new(Mutex::new(EventCorrelator::new(controller))) }
    }

    /// Publishes a `Normal` event; failures are logged, never returned
    /// (events are best effort, as upstream's broadcaster).
    pub async fn normal(&self, regarding: &ObjectReference, reason: &str, note: String) {
        self.publish(regarding, EventType::Normal, reason, note).await;
    }

    /// Publishes a `Warning` event (best effort, as [`EventSink::normal`]).
    pub async fn warning(&self, regarding: &ObjectReference, reason: &str, note: String) {
        self.publish(regarding, EventType::Warning, reason, note).await;
    }

    /// Correlates the event, then writes what the correlator says (upstream
    /// `recordToSink`/`recordEvent`): a new Event is created; a later
    /// occurrence patches the Event's `series` and `note`, and creates it
    /// when it is gone (expired, or not written yet by a concurrent
    /// publish); an event the spam filter drops is logged at debug level.
    async fn publish(&self, regarding: &ObjectReference, type_: EventType, reason: &str, note: String) {
        let now = k8s_openapi::jiff::Timestamp::now();
        let occurrence = Occurrence { regarding, type_, reason, note: &note };
        let correlated = self.correlator.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).correlate(&occurrence, now);
        let Some(event) = correlated else {
            tracing::debug!(
                controller = self.controller, reason, kind = regarding.kind.as_deref().unwrap_or(""),
                namespace = regarding.namespace.as_deref().unwrap_or(""), name = regarding.name.as_deref().unwrap_or(""),
                "event dropped by the spam filter (too many events about this object)"
            );
            return;
        };
        let namespace = event.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let name = event.metadata.name.clone().unwrap_or_default();
        let written = match &event.series {
            None => api.create(&PostParams::default(), &event).await.map(drop),
            Some(series) => {
                let patch = serde_json::json!({"series": series, "note": event.note});
                match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => api.create(&PostParams::default(), &event).await.map(drop),
                    other => other.map(drop),
                }
            }
        };
        match written {
            Ok(()) => {}
            // A concurrent publish created it first (upstream logs AlreadyExists at V(5)).
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::debug!(controller = self.controller, reason, event = %name, "event already exists");
            }
            Err(err) => tracing::warn!(controller = self.controller, reason, %err, "could not record an event"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use correlator::{AGGREGATE_MAX_EVENTS, AGGREGATE_NOTE_PREFIX};
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::ListParams;

    /// A sink writing to a real API server (in this process, on loopback):
    /// what the correlator decides is what the server keeps.
    #[tokio::test]
    async fn the_server_keeps_one_event_per_identical_note_and_one_aggregate() {
        let dir = tempfile::tempdir().expect("temp dir");
        let server =
            rkube_apiserver::testing::InProcessServer::start(dir.path(), rkube_apiserver::ServerConfig::default()).await;
        let client = kube::Client::try_from(kube::Config::new(server.base.parse().expect("url"))).expect("client");
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "ns"}})).expect("namespace");
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("create namespace");
        let sink = EventSink::new(client.clone(), "replicaset-controller");
        let rs = ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("ReplicaSet".into()),
            namespace: Some("ns".into()),
            name: Some("web".into()),
            uid: Some("u1".into()),
            ..ObjectReference::default()
        };
        for _ in 0..3 {
            sink.warning(&rs, "FailedCreate", "quota exceeded".into()).await;
        }
        for i in 1..=AGGREGATE_MAX_EVENTS + 2 {
            sink.normal(&rs, "SuccessfulCreate", format!("Created pod: web-{i}")).await;
        }
        let events = Api::<K8sEvent>::namespaced(client, "ns").list(&ListParams::default()).await.expect("events").items;
        let failed: Vec<&K8sEvent> = events.iter().filter(|e| e.reason.as_deref() == Some("FailedCreate")).collect();
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0].series.as_ref().map(|s| s.count), Some(3));
        assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
        let created: Vec<&K8sEvent> = events.iter().filter(|e| e.reason.as_deref() == Some("SuccessfulCreate")).collect();
        assert_eq!(created.len(), AGGREGATE_MAX_EVENTS, "{created:?}");
        let aggregate: Vec<&K8sEvent> = created
            .iter()
            .copied()
            .filter(|e| e.note.as_deref().is_some_and(|n| n.starts_with(AGGREGATE_NOTE_PREFIX)))
            .collect();
        assert_eq!(aggregate.len(), 1);
        assert_eq!(aggregate[0].note.as_deref(), Some("(combined from similar events): Created pod: web-12"));
        assert_eq!(aggregate[0].series.as_ref().map(|s| s.count), Some(3));
        assert_eq!(aggregate[0].reporting_controller.as_deref(), Some("replicaset-controller"));
    }
}
