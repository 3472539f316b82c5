//! Fan-out of `ContainerEventResponse`s to every `GetContainerEvents` subscriber.
//!
//! Publishing never blocks the runtime: each subscriber has a bounded buffer
//! ([`EventBus::new`]'s capacity). A subscriber that falls behind by more than its buffer is told
//! so — its stream ends with `RESOURCE_EXHAUSTED` naming how many events it lost — instead of
//! silently skipping events; the node agent then reconnects and relists (KEP-3386 treats a
//! broken stream exactly so).

use std::sync::Arc;

use futures::Stream;
use tokio::sync::broadcast;

use crate::cri;

/// Default per-subscriber buffer, in events.
pub const DEFAULT_EVENT_BUFFER: usize = 4096;

/// The publisher side; cheap to share.
#[derive(Debug, Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Arc<cri::ContainerEventResponse>>,
}

impl EventBus {
    /// A bus whose subscribers each buffer up to `capacity` events (at least 1).
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Self { tx }
    }

    /// Sends an event to every current subscriber (none is fine).
    pub fn publish(&self, event: cri::ContainerEventResponse) {
        let _ = self.tx.send(Arc::new(event));
    }

    /// Number of open subscriptions.
    pub fn subscribers(&self) -> usize {
        self.tx.receiver_count()
    }

    /// A new subscription: every event published from now on, in order; ends with an error
    /// if the subscriber lags by more than the buffer.
    pub fn subscribe(&self) -> impl Stream<Item = Result<cri::ContainerEventResponse, tonic::Status>> + Send + 'static {
        let rx = self.tx.subscribe();
        futures::stream::unfold(Some(rx), |rx| async move {
            let mut rx = rx?;
            match rx.recv().await {
                Ok(event) => Some((Ok((*event).clone()), Some(rx))),
                Err(broadcast::error::RecvError::Lagged(n)) => Some((
                    Err(tonic::Status::resource_exhausted(format!(
                        "container event subscriber fell behind and lost {n} events; reconnect and relist"
                    ))),
                    None,
                )),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn event(n: i64) -> cri::ContainerEventResponse {
        cri::ContainerEventResponse { created_at: n, ..Default::default() }
    }

    #[tokio::test]
    async fn every_subscriber_gets_every_event_in_order() {
        let bus = EventBus::new(8);
        let a = bus.subscribe();
        let b = bus.subscribe();
        for n in 1..=3 {
            bus.publish(event(n));
        }
        drop(bus);
        let a: Vec<i64> = a.map(|e| e.map(|e| e.created_at).unwrap_or(-1)).collect().await;
        let b: Vec<i64> = b.map(|e| e.map(|e| e.created_at).unwrap_or(-1)).collect().await;
        assert_eq!(a, vec![1, 2, 3]);
        assert_eq!(b, vec![1, 2, 3]);
    }

    #[tokio::test]
    async fn lagging_subscriber_gets_resource_exhausted_then_end() {
        let bus = EventBus::new(2);
        let slow = bus.subscribe();
        for n in 1..=5 {
            bus.publish(event(n));
        }
        let items: Vec<_> = slow.take(4).collect().await;
        assert_eq!(items.len(), 1, "stream ends right after the error");
        let err = items[0].as_ref().expect_err("lag is an error");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(err.message().contains("lost 3 events"), "{}", err.message());
    }
}
