//! Events through events.k8s.io/v1 with kube-runtime's [`Recorder`], one
//! reporting controller name per controller (`replicaset-controller`, …) as
//! upstream's `reportingController`.
//!
//! kube-runtime's recorder folds events with the same reason and object into
//! one series whatever their note; upstream's correlator keys on the message
//! too (`Created pod: a` and `Created pod: b` are two events), so every note
//! is published as its own event here.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Publishes events for one controller.
#[derive(Clone)]
pub struct EventSink {
    client: kube::Client,
    controller: &'static str,
}

impl EventSink {
    /// A sink reporting as `controller` (upstream's component name).
    pub fn new(client: kube::Client, controller: &'static str) -> Self {
        EventSink { client, controller }
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

    async fn publish(&self, regarding: &ObjectReference, type_: EventType, reason: &str, note: String) {
        let reporter = Reporter { controller: self.controller.to_string(), instance: None };
        let recorder = Recorder::new(self.client.clone(), reporter);
        let ev = Event { type_, reason: reason.to_string(), note: Some(note), action: reason.to_string(), secondary: None };
        if let Err(err) = recorder.publish(&ev, regarding).await {
            tracing::warn!(controller = self.controller, reason, %err, "could not record an event");
        }
    }
}
