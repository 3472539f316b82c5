//! Controllers that run inside the API server process for now (upstream runs
//! them in kube-controller-manager; they move there once rkube has one):
//!
//! - [`serviceaccounts`]: the `default` ServiceAccount and the
//!   `kube-root-ca.crt` ConfigMap in every namespace (upstream's
//!   `serviceaccount-controller` and `root-ca-certificate-publisher-controller`);
//! - [`tokens`]: fills legacy `kubernetes.io/service-account-token` Secrets
//!   (upstream's `serviceaccount-token-controller`);
//! - the CSR signer, [`crate::csr::signer`], runs on the same loop;
//! - [`crds`]: the CustomResourceDefinition naming, establishing and
//!   finalizing controllers, which also serve established CRDs' custom
//!   resources (upstream runs these in kube-apiserver too); [`crate::serve`]
//!   and [`crate::server::serve_api`] start it.
//!
//! Each follows the same loop ([`run_watching`]): a full pass over what it
//! owns, then storage watches of the prefixes it reacts to from the
//! revision of that pass, handing each batch of events to the controller; a broken or
//! compacted watch starts over with a full pass, after a pause from the one
//! jittered backoff ([`rkube_cache::backoff`]).

pub mod crds;
pub mod serviceaccounts;
pub mod tokens;

use std::future::Future;
use std::sync::Arc;

use futures::stream::{select_all, StreamExt};
use rkube_storage::{Event, Storage, WatchResponse};

/// Runs a controller until `stop` turns true: `full_pass` returns the
/// storage revision it read at; then every batch of events under `prefixes`
/// (relative to `etcd_prefix`, `--etcd-prefix`, e.g. `namespaces/`) after
/// it goes to `on_events`.
pub async fn run_watching<P, PF, E, EF>(
    name: &'static str,
    storage: Arc<dyn Storage>,
    etcd_prefix: &str,
    prefixes: &[&str],
    mut stop: tokio::sync::watch::Receiver<bool>,
    full_pass: P,
    on_events: E,
) where
    P: Fn() -> PF,
    PF: Future<Output = Result<i64, String>>,
    E: Fn(Vec<Event>) -> EF,
    EF: Future<Output = ()>,
{
    let mut backoff = rkube_cache::backoff::Backoff::new(std::time::Duration::from_millis(200), std::time::Duration::from_secs(30));
    let base = etcd_prefix.trim_end_matches('/').to_string();
    'outer: loop {
        if *stop.borrow() {
            return;
        }
        let pause = backoff.next_delay();
        let rev = match full_pass().await {
            Ok(rev) => rev,
            Err(e) => {
                tracing::warn!(controller = name, error = %e, "full pass failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(pause) => continue 'outer,
                    _ = stop.changed() => return,
                }
            }
        };
        let mut streams = Vec::new();
        for p in prefixes {
            match storage.watch(&format!("{base}/{p}"), rev).await {
                Ok(w) => streams.push(w.stream),
                Err(e) => {
                    tracing::warn!(controller = name, error = %e, "watch failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => continue 'outer,
                        _ = stop.changed() => return,
                    }
                }
            }
        }
        backoff.reset();
        let mut events = select_all(streams);
        loop {
            tokio::select! {
                next = events.next() => match next {
                    Some(Ok(WatchResponse::Events(evs))) => on_events(evs).await,
                    Some(Ok(WatchResponse::Progress { .. })) => {}
                    Some(Err(e)) => {
                        tracing::debug!(controller = name, error = %e, "watch ended; starting over");
                        continue 'outer;
                    }
                    None => continue 'outer,
                },
                r = stop.changed() => {
                    if r.is_err() || *stop.borrow() {
                        return;
                    }
                }
            }
        }
    }
}

/// `(namespace, name)` of a namespaced key `<prefix>/<resource>/<ns>/<name>`
/// under `dir` (`<prefix>/<resource>/`).
pub(crate) fn namespaced_key<'a>(key: &'a str, dir: &str) -> Option<(&'a str, &'a str)> {
    key.strip_prefix(dir)?.split_once('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_keys_split_into_namespace_and_name() {
        assert_eq!(namespaced_key("/registry/secrets/dev/tok", "/registry/secrets/"), Some(("dev", "tok")));
        assert_eq!(namespaced_key("/registry/configmaps/dev/x", "/registry/secrets/"), None);
    }
}
