//! The clients controllers talk to the API server with: the controller
//! manager's own ([`ControllerClients::Shared`]), or, with
//! `--use-service-account-credentials`, one per controller that
//! authenticates as the ServiceAccount `kube-system/<name>`
//! ([`ControllerClients::ServiceAccounts`], upstream's
//! `SAControllerClientBuilder` / `DynamicControllerClientBuilder` in
//! `staging/src/k8s.io/controller-manager/pkg/clientbuilder`).
//!
//! For a ServiceAccount client the manager, with its own credentials,
//! makes sure the ServiceAccount exists (get, then create), asks for a
//! token through the TokenRequest API (`serviceaccounts/<name>/token`,
//! 3600 s) and sends it as `Authorization: Bearer`; a background task asks
//! for a new token when 80 % of the last one's lifetime has passed (the
//! lifetime counted as at least 10 minutes, against clock skew), as
//! upstream's cached token source does.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use http::header::{HeaderValue, AUTHORIZATION};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

/// The namespace the controllers' ServiceAccounts live in.
pub const SERVICE_ACCOUNT_NAMESPACE: &str = "kube-system";

/// Lifetime asked for each token (upstream's `defaultExpirationSeconds`).
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3600;

/// Share of a token's lifetime left when it is replaced (upstream's
/// `defaultLeewayPercent`).
const LEEWAY_PERCENT: u32 = 20;

/// Shortest lifetime a token is assumed to have (upstream pins shorter
/// ones, a sign of clock skew, to 10 minutes).
const MIN_LIFETIME: Duration = Duration::from_secs(600);

/// Where the controllers' clients come from.
#[derive(Clone)]
pub enum ControllerClients {
    /// Every controller uses the manager's own client
    /// (`--use-service-account-credentials=false`, upstream's default).
    Shared(kube::Client),
    /// Each controller authenticates as its own ServiceAccount.
    ServiceAccounts(ServiceAccountClients),
}

impl ControllerClients {
    /// The client of the controller whose ServiceAccount is
    /// `service_account`; token refreshes stop when `stop` turns true.
    ///
    /// Errors: the ServiceAccount cannot be read or created, or no token
    /// is issued for it (after upstream's 4 tries, 0.5 s apart doubling).
    pub async fn client_for(&self, service_account: &str, stop: watch::Receiver<bool>) -> anyhow::Result<kube::Client> {
        match self {
            ControllerClients::Shared(c) => Ok(c.clone()),
            ControllerClients::ServiceAccounts(sa) => sa.client_for(service_account, stop).await,
        }
    }
}

/// Builds ServiceAccount clients from the manager's own client and config.
#[derive(Clone)]
pub struct ServiceAccountClients {
    /// The manager's own client: creates ServiceAccounts and tokens.
    root: kube::Client,
    /// The manager's config without its credentials (server, CA, timeouts).
    anonymous: Arc<kube::Config>,
    /// One client per ServiceAccount (controllers may share one, as the
    /// node lifecycle and taint eviction controllers share `node-controller`).
    built: Arc<tokio::sync::Mutex<HashMap<String, kube::Client>>>,
}

impl ServiceAccountClients {
    /// `root` is the manager's client, `config` the config it was built from.
    pub fn new(root: kube::Client, config: &kube::Config) -> Self {
        let mut anonymous = config.clone();
        anonymous.auth_info = Default::default();
        ServiceAccountClients { root, anonymous: Arc::new(anonymous), built: Default::default() }
    }

    async fn client_for(&self, name: &str, stop: watch::Receiver<bool>) -> anyhow::Result<kube::Client> {
        let mut built = self.built.lock().await;
        if let Some(c) = built.get(name) {
            return Ok(c.clone());
        }
        let api: Api<ServiceAccount> = Api::namespaced(self.root.clone(), SERVICE_ACCOUNT_NAMESPACE);
        let (token, lifetime) = with_retries(|| issue_token(&api, name))
            .await
            .with_context(|| format!("getting a token for {SERVICE_ACCOUNT_NAMESPACE}/{name}"))?;
        let header = Arc::new(RwLock::new(token));
        let client = bearer_client(self.anonymous.as_ref().clone(), header.clone())?;
        tokio::spawn(keep_token_fresh(api, name.to_string(), header, lifetime, stop));
        built.insert(name.to_string(), client.clone());
        Ok(client)
    }
}

/// A client for `config` (no credentials) sending the token in `header`
/// with every request.
fn bearer_client(config: kube::Config, header: Arc<RwLock<HeaderValue>>) -> anyhow::Result<kube::Client> {
    let add_token = tower::util::MapRequestLayer::new(move |mut req: http::Request<kube::client::Body>| {
        let value = header.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        req.headers_mut().insert(AUTHORIZATION, value);
        req
    });
    Ok(rkube_component::client::build(rkube_component::client::builder(config)?.with_layer(&add_token)))
}

/// Gets ServiceAccount `name`, creating it when missing (a concurrent
/// create is fine), then issues a token for it: the `Authorization` header
/// value and how long the token lives.
async fn issue_token(api: &Api<ServiceAccount>, name: &str) -> anyhow::Result<(HeaderValue, Duration)> {
    if api.get_opt(name).await?.is_none() {
        let sa = ServiceAccount {
            metadata: kube::api::ObjectMeta { name: Some(name.to_string()), ..Default::default() },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &sa).await {
            Ok(_) => tracing::info!(service_account = name, "created the controller's ServiceAccount"),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let request = TokenRequest {
        spec: TokenRequestSpec { expiration_seconds: Some(TOKEN_EXPIRATION_SECONDS), ..Default::default() },
        ..Default::default()
    };
    let issued = api.create_token_request(name, &PostParams::default(), &request).await?;
    let status = issued.status.context("the TokenRequest came back without a status")?;
    let mut header = HeaderValue::from_str(&format!("Bearer {}", status.token)).context("the issued token is not a valid header value")?;
    header.set_sensitive(true);
    let left = status.expiration_timestamp.0.duration_since(k8s_openapi::jiff::Timestamp::now());
    Ok((header, Duration::try_from(left).unwrap_or(Duration::ZERO)))
}

/// Runs `f` up to 4 times, waiting between tries with the one jittered
/// backoff (`rkube_cache::backoff`, from 0.5 s doubling, as upstream's
/// token requests back off); returns the last error.
async fn with_retries<T, F, Fut>(mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut backoff = rkube_cache::backoff::Backoff::new(Duration::from_millis(500), Duration::from_secs(4));
    let mut tries = 0;
    loop {
        tries += 1;
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if tries >= 4 => return Err(e),
            Err(e) => tracing::info!(error = %e, "getting a controller token failed; trying again"),
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// When to replace a token that lives `lifetime`: after 80 % of it (with
/// the lifetime counted as at least 10 minutes).
pub fn refresh_after(lifetime: Duration) -> Duration {
    let lifetime = lifetime.max(MIN_LIFETIME);
    lifetime - lifetime * LEEWAY_PERCENT / 100
}

/// Replaces the token in `header` before it expires, until `stop`; a failed
/// request is retried every 10 s while the old token is still used.
async fn keep_token_fresh(
    api: Api<ServiceAccount>,
    name: String,
    header: Arc<RwLock<HeaderValue>>,
    lifetime: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut wait = refresh_after(lifetime);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = rkube_component::leader::stopped(&mut stop) => return,
        }
        match issue_token(&api, &name).await {
            Ok((token, lifetime)) => {
                *header.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = token;
                wait = refresh_after(lifetime);
                tracing::debug!(service_account = %name, next_in = ?wait, "renewed the controller's token");
            }
            Err(e) => {
                tracing::warn!(service_account = %name, error = %e, "renewing the controller's token failed; trying again in 10s");
                wait = Duration::from_secs(10);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_replaced_after_four_fifths_of_their_lifetime_and_never_before_8_minutes() {
        assert_eq!(refresh_after(Duration::from_secs(3600)), Duration::from_secs(2880));
        assert_eq!(refresh_after(Duration::from_secs(3599)), Duration::from_millis(2_879_200));
        // Shorter lifetimes (clock skew) count as 10 minutes.
        assert_eq!(refresh_after(Duration::from_secs(30)), Duration::from_secs(480));
        assert_eq!(refresh_after(Duration::ZERO), Duration::from_secs(480));
    }
}
