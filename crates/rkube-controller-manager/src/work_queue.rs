//! The work queue shared by rkube's hand-written controller loops
//! (endpoints, endpointslice, disruption): reflected watches turned into
//! [`Trigger`]s, and a de-duplicating [`Queue`] of object keys with per-key
//! exponential retry delays (client-go's default controller rate limiter:
//! 5 ms doubling to 1000 s).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use kube::runtime::reflector;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use tokio::time::Instant;

/// An object's namespace and name.
pub type Key = (String, String);

/// What an event asks for.
pub enum Trigger {
    /// Reflector `i` finished a (re)list.
    Listed(usize),
    /// Queue these keys.
    Keys(Vec<Key>),
}

/// A reflected watch of `api` turned into triggers by `map`; `index` names
/// it in [`Trigger::Listed`].
pub fn reflected<K, F>(api: Api<K>, config: watcher::Config, writer: reflector::store::Writer<K>, index: usize, map: F) -> BoxStream<'static, Trigger>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    F: Fn(&K) -> Vec<Key> + Send + 'static,
{
    reflector::reflector(writer, watcher::watcher(api, config).default_backoff())
        .filter_map(move |ev| {
            let t = match ev {
                Ok(Event::InitDone) => Some(Trigger::Listed(index)),
                Ok(Event::Apply(o) | Event::Delete(o)) => Some(Trigger::Keys(map(&o))),
                Ok(Event::Init | Event::InitApply(_)) => None,
                Err(e) => {
                    tracing::debug!(error = %e, "watch error; the watcher retries");
                    None
                }
            };
            futures::future::ready(t)
        })
        .boxed()
}

/// A de-duplicating work queue with per-key exponential retry delays.
#[derive(Default)]
pub struct Queue {
    ready: VecDeque<Key>,
    queued: HashSet<Key>,
    waiting: BTreeMap<(Instant, Key), ()>,
    failures: HashMap<Key, u32>,
}

impl Queue {
    /// Queues `key` unless it is queued already.
    pub fn add(&mut self, key: Key) {
        if self.queued.insert(key.clone()) {
            self.ready.push_back(key);
        }
    }

    /// Whether a key is ready to sync.
    pub fn has_work(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The next key to sync (it may be queued again meanwhile).
    pub fn pop(&mut self) -> Option<Key> {
        let key = self.ready.pop_front()?;
        self.queued.remove(&key);
        Some(key)
    }

    /// Forgets `key`'s failures after a successful sync.
    pub fn forget(&mut self, key: &Key) {
        self.failures.remove(key);
    }

    /// Queues `key` again after 5 ms × 2^failures, at most 1000 s.
    pub fn retry(&mut self, key: Key) {
        let n = self.failures.entry(key.clone()).or_insert(0);
        let delay = Duration::from_millis(5).saturating_mul(1u32 << (*n).min(20)).min(Duration::from_secs(1000));
        *n += 1;
        self.waiting.insert((Instant::now() + delay, key), ());
    }

    /// When the earliest delayed retry is due.
    pub fn next_retry(&self) -> Option<Instant> {
        self.waiting.keys().next().map(|(t, _)| *t)
    }

    /// Moves the retries that are due to the ready queue.
    pub fn promote_due(&mut self) {
        let now = Instant::now();
        while let Some(((t, _), _)) = self.waiting.first_key_value() {
            if *t > now {
                break;
            }
            if let Some(((_, key), _)) = self.waiting.pop_first() {
                self.add(key);
            }
        }
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: &str) -> Key {
        ("default".into(), n.into())
    }

    #[test]
    fn keys_are_queued_once_in_order() {
        let mut q = Queue::default();
        q.add(key("a"));
        q.add(key("b"));
        q.add(key("a"));
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(key("a")), Some(key("b")), None));
    }

    #[tokio::test(start_paused = true)]
    async fn failed_keys_come_back_after_a_doubling_delay() {
        let mut q = Queue::default();
        q.retry(key("a"));
        let first = q.next_retry().unwrap() - Instant::now();
        q.promote_due();
        assert!(!q.has_work(), "not due yet");
        tokio::time::sleep(first).await;
        q.promote_due();
        assert_eq!(q.pop(), Some(key("a")));
        q.retry(key("a"));
        assert_eq!(q.next_retry().unwrap() - Instant::now(), first * 2);
        q.forget(&key("a"));
        assert!(q.failures.is_empty());
    }
}
