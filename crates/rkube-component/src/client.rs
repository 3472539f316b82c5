//! The `--kubeconfig` client of a component, and the one thing every
//! component's client does beyond kube-rs's defaults: it waits out and
//! retries a request the API server turns away with `Retry-After`
//! ([`retry_after_layer`]).

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use http::{Request, Response, StatusCode};
use kube::client::{Body, ClientBuilder};
use tower::retry::{Policy, RetryLayer};
use tower::{BoxError, Service};

/// A kube-rs client from the kubeconfig at `kubeconfig` (its current
/// context), or, without one, kube-rs's discovery: in-cluster config, then
/// `$KUBECONFIG`, then `~/.kube/config` (upstream's components use the
/// in-cluster config when `--kubeconfig` is empty). It retries as
/// [`retry_after_layer`] says.
///
/// Errors: the file cannot be read or parsed, or names no usable cluster.
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    Ok(client_from_config(config(kubeconfig).await?)?)
}

/// The kube-rs config [`client`] builds its client from (for a component
/// that makes more clients from it, as the controller manager's
/// per-controller ServiceAccount clients). Errors as [`client`]'s.
pub async fn config(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    })
}

/// kube-rs's default service stack (its `GenericService`, which it does not export).
pub type KubeService = tower::util::BoxService<Request<Body>, Response<Box<kube::client::DynBody>>, BoxError>;

/// kube-rs's default client for `config` with [`retry_after_layer`] in
/// place of kube-rs's own retry ([`builder`], then [`build`]). Needs a Tokio
/// runtime (the retry layer shares the inner service through a
/// `tower::buffer::Buffer`, whose worker is a task).
///
/// Errors: as `kube::Client::try_from` (TLS or auth settings it cannot use).
pub fn client_from_config(config: kube::Config) -> Result<kube::Client, kube::Error> {
    Ok(build(builder(config)?))
}

/// kube-rs's default service stack for `config` without kube-rs's default
/// retry (`Config::default_retry`, which retries 429, 503 and 504 answers
/// with or without `Retry-After`, up to 15 times with a back-off of up to
/// 1000 s), for a caller to add layers to and finish with [`build`].
///
/// Errors: as `kube::Client::try_from`.
pub fn builder(mut config: kube::Config) -> Result<ClientBuilder<KubeService>, kube::Error> {
    config.default_retry = false;
    ClientBuilder::try_from(config)
}

/// Builds `builder`'s client (from [`builder`]) with [`retry_after_layer`] as
/// its outermost layer, so a retried request goes through the builder's own
/// layers again (a bearer-token layer puts the current token on every try).
/// Needs a Tokio runtime, as [`client_from_config`].
pub fn build<S, B>(builder: ClientBuilder<S>) -> kube::Client
where
    S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + Sync,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    // `Retry` calls its inner service again, so that service must be
    // `Clone`; kube-rs's stack is a `BoxService`, hence the buffer (the bound
    // kube-rs's own `Client` uses).
    builder
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&retry_after_layer())
        .build()
}

/// Retries of one request after a `Retry-After` answer (client-go's
/// default `maxRetries` of a `rest.Request`): at most 11 tries in all.
pub const MAX_RETRIES: u32 = 10;

/// The longest wait between two tries, whatever `Retry-After` says (client-go
/// has no cap; a server asking for more is waited for this long).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

/// The tower layer doing what client-go's REST client does for every request
/// (`staging/src/k8s.io/client-go/rest/with_retry.go`, `checkWait` and
/// `retryAfterSeconds` in `request.go`): an answer `429 TooManyRequests` or
/// `5xx` carrying `Retry-After: <integer seconds>` is waited out (at most
/// [`MAX_RETRY_AFTER`]) and the same request sent again, up to
/// [`MAX_RETRIES`] times; the last answer is returned as is. An answer
/// without `Retry-After`, or with one that is not an integer, is never
/// retried (client-go's `checkWait` says no wait).
///
/// Only requests whose body is in memory are retried (kube-rs builds every
/// API request that way; the bytes are shared, not copied); a streamed body
/// cannot be sent twice, so its request is tried once.
pub fn retry_after_layer() -> RetryLayer<RetryAfter> {
    RetryLayer::new(RetryAfter::default())
}

/// The [`Policy`] of [`retry_after_layer`], counting the retries of one request.
#[derive(Clone, Debug, Default)]
pub struct RetryAfter {
    retries: u32,
}

/// How long to wait before trying again after an answer `status` with
/// `headers`: `Some` for a 429 or 5xx with an integer `Retry-After` (a
/// negative value means at once), capped at [`MAX_RETRY_AFTER`]; `None`
/// otherwise (upstream `checkWait`).
pub fn check_wait(status: StatusCode, headers: &http::HeaderMap) -> Option<Duration> {
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let secs: i64 = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?.parse().ok()?;
    Some(Duration::from_secs(u64::try_from(secs).unwrap_or(0)).min(MAX_RETRY_AFTER))
}

impl<B> Policy<Request<Body>, Response<B>, BoxError> for RetryAfter {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, req: &mut Request<Body>, result: &mut Result<Response<B>, BoxError>) -> Option<Self::Future> {
        let response = result.as_ref().ok()?;
        let wait = check_wait(response.status(), response.headers())?;
        if self.retries >= MAX_RETRIES {
            return None;
        }
        self.retries += 1;
        tracing::debug!(
            method = %req.method(), uri = %req.uri(), status = response.status().as_u16(), retry = self.retries,
            wait_seconds = wait.as_secs(), "got a Retry-After answer, trying again"
        );
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        let body = req.body().try_clone()?;
        let mut copy = Request::new(body);
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        Some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(retry_after: Option<&str>) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Some(v) = retry_after {
            h.insert(http::header::RETRY_AFTER, v.parse().expect("header value"));
        }
        h
    }

    #[test]
    fn check_wait_follows_client_go() {
        let too_many = StatusCode::TOO_MANY_REQUESTS;
        assert_eq!(check_wait(too_many, &headers(Some("1"))), Some(Duration::from_secs(1)));
        assert_eq!(check_wait(StatusCode::SERVICE_UNAVAILABLE, &headers(Some("2"))), Some(Duration::from_secs(2)));
        assert_eq!(check_wait(too_many, &headers(Some("0"))), Some(Duration::ZERO));
        assert_eq!(check_wait(too_many, &headers(Some("-3"))), Some(Duration::ZERO));
        assert_eq!(check_wait(too_many, &headers(Some("3600"))), Some(MAX_RETRY_AFTER));
        // No header, an HTTP date, or a status that is no throttling: no wait.
        assert_eq!(check_wait(too_many, &headers(None)), None);
        assert_eq!(check_wait(too_many, &headers(Some("Fri, 31 Dec 1999 23:59:59 GMT"))), None);
        assert_eq!(check_wait(StatusCode::CONFLICT, &headers(Some("1"))), None);
        assert_eq!(check_wait(StatusCode::OK, &headers(Some("1"))), None);
    }
}
