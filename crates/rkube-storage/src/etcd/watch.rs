//! One etcd watch: a gRPC watch stream per [`crate::Storage::watch`] call,
//! turned into [`WatchResponse`]s, plus a small task that forwards progress
//! requests to the stream's request side.
//!
//! Stream messages, in etcd's order:
//! - `created`: consumed by [`open`] before it returns;
//! - events: [`WatchResponse::Events`] (etcd sends each revision's events
//!   whole, in revision order);
//! - empty, not created, not canceled: a progress notification (periodic
//!   with `--experimental-watch-progress-notify-interval`, or requested) →
//!   [`WatchResponse::Progress`] at the header revision;
//! - `canceled` with `compact_revision` > 0: `Err(Compacted)`, then the end;
//! - `canceled` otherwise, a gRPC error, or the end of the stream:
//!   `Err(Unavailable)`, then the end. etcd-client does not resume a broken
//!   watch; the consumer re-watches from the last revision it saw.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use etcd_client::{Client, EventType, WatchOptions, WatchRequestSender, WatchResponseStream};
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};

use super::{classify, convert_kv, EtcdStorage, Failure};
use crate::{prefix_end, Event, EventKind, ProgressRequester, Result, Revision, StorageError, Watch, WatchResponse};

/// Forwards progress requests to the watch's progress task.
struct EtcdProgress {
    tx: mpsc::UnboundedSender<()>,
}

impl ProgressRequester for EtcdProgress {
    fn request_progress(&self) {
        // The task is gone only when the stream was dropped: nothing to notify then.
        let _ = self.tx.send(());
    }
}

/// State of the response stream.
struct Responses {
    stream: WatchResponseStream,
    /// Dropped with the stream: tells the progress task to stop and release
    /// the request sender (which closes the gRPC watch).
    _stop: oneshot::Sender<()>,
    after: Revision,
    compacted: Arc<AtomicI64>,
}

/// The outcome of one etcd watch message.
enum Message {
    /// Deliver this.
    Deliver(WatchResponse),
    /// Nothing to deliver (e.g. a stray `created`).
    Skip,
    /// Deliver this error and end.
    End(StorageError),
}

/// Turns one etcd watch response into what the caller sees.
fn interpret(resp: etcd_client::WatchResponse, after: Revision, compacted: &AtomicI64) -> Message {
    if resp.canceled() {
        if resp.compact_revision() > 0 {
            EtcdStorage::learn_compacted(compacted, resp.compact_revision());
            return Message::End(StorageError::Compacted { requested: after, compacted: resp.compact_revision() });
        }
        return Message::End(StorageError::Unavailable(format!("etcd canceled the watch: {}", resp.cancel_reason())));
    }
    if resp.created() {
        return Message::Skip;
    }
    if resp.events().is_empty() {
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        return Message::Deliver(WatchResponse::Progress { revision });
    }
    let mut events = Vec::with_capacity(resp.events().len());
    for ev in resp.events() {
        let Some(kv) = ev.kv() else {
            return Message::End(StorageError::Internal("etcd watch event without kv".into()));
        };
        let kind = match ev.event_type() {
            EventType::Put => EventKind::Put,
            EventType::Delete => EventKind::Delete,
        };
        let kv = match convert_kv(kv.clone()) {
            Ok(kv) => kv,
            Err(e) => return Message::End(e),
        };
        let prev_kv = match ev.prev_kv().cloned().map(convert_kv).transpose() {
            Ok(prev) => prev,
            Err(e) => return Message::End(e),
        };
        events.push(Event { kind, kv, prev_kv });
    }
    Message::Deliver(WatchResponse::Events(events))
}

/// Keeps the request sender alive for the stream's life and forwards
/// progress requests to it.
async fn progress_task(
    mut sender: WatchRequestSender,
    mut requests: mpsc::UnboundedReceiver<()>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut requests_open = true;
    loop {
        tokio::select! {
            _ = &mut stop => break,
            request = requests.recv(), if requests_open => match request {
                // A failed send means the stream broke; the response side reports it.
                Some(()) => { let _ = sender.request_progress().await; }
                None => requests_open = false,
            },
        }
    }
}

/// Opens the watch and waits for etcd's `created` answer (see
/// [`crate::Storage::watch`] on `EtcdStorage`).
pub(super) async fn open(client: &Client, prefix: &str, after: Revision, compacted: Arc<AtomicI64>) -> Result<Watch> {
    let mut options = WatchOptions::new().with_range(prefix_end(prefix)).with_prev_key().with_progress_notify();
    if after > 0 {
        options = options.with_start_revision(after + 1);
    }
    let map = |e: etcd_client::Error| match classify(e) {
        Failure::Other(e) => e,
        _ => StorageError::Unavailable("etcd watch failed".into()),
    };
    let stream = client
        .watch_client()
        .max_decoding_message_size(super::MAX_RESPONSE_BYTES)
        .watch(prefix, Some(options))
        .await
        .map_err(map)?;
    let (sender, mut stream) = stream.split();
    let first = stream.message().await.map_err(map)?;
    match first {
        None => return Err(StorageError::Unavailable("etcd closed the watch stream before it was created".into())),
        Some(resp) => match interpret(resp, after, &compacted) {
            Message::End(e) => return Err(e),
            Message::Skip => {}
            Message::Deliver(_) => {
                return Err(StorageError::Internal("etcd sent a watch response before `created`".into()));
            }
        },
    }
    let (stop_tx, stop_rx) = oneshot::channel();
    let (progress_tx, progress_rx) = mpsc::unbounded_channel();
    tokio::spawn(progress_task(sender, progress_rx, stop_rx));
    let state = Some(Responses { stream, _stop: stop_tx, after, compacted });
    let stream = futures::stream::unfold(state, |state| async move {
        let mut state = state?;
        loop {
            let message = match state.stream.message().await {
                Ok(Some(resp)) => interpret(resp, state.after, &state.compacted),
                Ok(None) => Message::End(StorageError::Unavailable("etcd watch stream ended".into())),
                Err(e) => Message::End(match classify(e) {
                    Failure::Other(e) => e,
                    _ => StorageError::Unavailable("etcd watch stream failed".into()),
                }),
            };
            match message {
                Message::Deliver(resp) => return Some((Ok(resp), Some(state))),
                Message::Skip => continue,
                Message::End(e) => return Some((Err(e), None)),
            }
        }
    })
    .boxed();
    Ok(Watch { stream, progress: Arc::new(EtcdProgress { tx: progress_tx }) })
}
