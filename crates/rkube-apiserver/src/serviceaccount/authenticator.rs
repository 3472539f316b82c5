//! The ServiceAccount token authenticator (upstream
//! `pkg/serviceaccount/jwt.go` `JWTTokenAuthenticator` with the validators of
//! `claims.go` and `legacy.go`): a token this server issued is accepted while
//! what it names still exists.
//!
//! - bound tokens: the ServiceAccount must exist with the UID of the claim,
//!   and not be being deleted; a bound Secret or Node must exist with its UID;
//!   a bound Pod must exist with its UID, and stops authenticating 60 s after
//!   its deletion started (upstream's grace for a terminating pod's last calls);
//! - legacy tokens: the Secret must exist, hold this very token in
//!   `data.token`, and its ServiceAccount must exist with the UID of the claim.
//!
//! The user is `system:serviceaccount:<ns>:<name>` with the ServiceAccount's
//! UID, groups `system:serviceaccounts` and `system:serviceaccounts:<ns>`,
//! and for bound tokens the extras `authentication.kubernetes.io/pod-name`,
//! `pod-uid`, `node-name`, `node-uid` and `credential-id` (`JTI=<jti>`).
//! Objects are read from the watch cache (any resourceVersion), and read
//! again consistently when the cache does not have them yet.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::claims::{service_account_username, ObjectRef, TokenConfig, TokenError};
use crate::filters::authn::UserInfo;

/// Group of every ServiceAccount.
pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";

/// How long a bound Pod's tokens keep working after its deletion started, seconds.
const POD_DELETION_GRACE_SECONDS: i64 = 60;

/// Reads core/v1 objects for the authenticator.
#[async_trait::async_trait]
pub trait ObjectGetter: Send + Sync {
    /// The object `name` of core/v1 `resource` (`serviceaccounts`, `pods`,
    /// `secrets`, `nodes`) in `namespace` (`""` for nodes); `Ok(None)` when
    /// it does not exist; `Err` with a message when it could not be read.
    async fn get(&self, resource: &str, namespace: &str, name: &str) -> Result<Option<Value>, String>;
}

/// [`ObjectGetter`] over the API server's watch cache.
pub struct CacheGetter {
    cache: Arc<rkube_cache::CacheLayer>,
}

impl CacheGetter {
    /// Reads through `cache`.
    pub fn new(cache: Arc<rkube_cache::CacheLayer>) -> Self {
        CacheGetter { cache }
    }
}

#[async_trait::async_trait]
impl ObjectGetter for CacheGetter {
    async fn get(&self, resource: &str, namespace: &str, name: &str) -> Result<Option<Value>, String> {
        let info = rkube_api::registry::lookup("", "v1", resource).ok_or_else(|| format!("{resource} are not served"))?;
        // From memory first; a miss may only mean the cache has not seen the object yet.
        for rv in [Some("0"), None] {
            match self.cache.get(info, namespace, name, rv).await.map_err(|e| e.to_string())? {
                Some(obj) => return serde_json::from_slice(&obj.json).map(Some).map_err(|e| e.to_string()),
                None => continue,
            }
        }
        Ok(None)
    }
}

/// Authenticates ServiceAccount tokens: [`TokenConfig`] checks the JWT,
/// [`ObjectGetter`] the objects it names.
pub struct ServiceAccountAuthenticator {
    config: Arc<TokenConfig>,
    objects: Arc<dyn ObjectGetter>,
}

impl std::fmt::Debug for ServiceAccountAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountAuthenticator").field("issuers", &self.config.issuers).finish_non_exhaustive()
    }
}

fn uid_of(obj: &Value) -> &str {
    obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("")
}

fn deletion_started(obj: &Value) -> Option<i64> {
    let ts = obj.pointer("/metadata/deletionTimestamp").and_then(Value::as_str)?;
    chrono::DateTime::parse_from_rfc3339(ts).ok().map(|t| t.timestamp())
}

impl ServiceAccountAuthenticator {
    /// An authenticator checking tokens with `config` and objects with `objects`.
    pub fn new(config: Arc<TokenConfig>, objects: Arc<dyn ObjectGetter>) -> Self {
        ServiceAccountAuthenticator { config, objects }
    }

    /// The API audiences (`--api-audiences`).
    pub fn api_audiences(&self) -> Vec<String> {
        self.config.api_audiences.clone()
    }

    /// The user of `token` when it is valid for one of `audiences` (the API
    /// audiences when empty); [`TokenError::NotOurs`] when it is not a
    /// ServiceAccount token of this server.
    pub async fn authenticate(&self, token: &str, audiences: &[String]) -> Result<(UserInfo, Vec<String>), TokenError> {
        let audiences = if audiences.is_empty() { &self.config.api_audiences[..] } else { audiences };
        match self.config.verify_bound(token, audiences) {
            Ok(claims) => {
                let k = &claims.kubernetes;
                let ns = k.namespace.as_str();
                self.check_service_account(ns, &k.serviceaccount).await?;
                let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
                if let Some(secret) = &k.secret {
                    self.check_object("secrets", ns, secret, "secret").await?;
                }
                if let Some(pod) = &k.pod {
                    let obj = self.check_object("pods", ns, pod, "pod").await?;
                    let now = chrono::Utc::now().timestamp();
                    if deletion_started(&obj).is_some_and(|t| t + POD_DELETION_GRACE_SECONDS < now) {
                        return Err(TokenError::Invalid(format!("pod {}/{} is being deleted", ns, pod.name)));
                    }
                    extra.insert("authentication.kubernetes.io/pod-name".into(), vec![pod.name.clone()]);
                    extra.insert("authentication.kubernetes.io/pod-uid".into(), vec![pod.uid.clone()]);
                }
                if let Some(node) = &k.node {
                    if k.pod.is_none() {
                        self.check_object("nodes", "", node, "node").await?;
                    }
                    extra.insert("authentication.kubernetes.io/node-name".into(), vec![node.name.clone()]);
                    if !node.uid.is_empty() {
                        extra.insert("authentication.kubernetes.io/node-uid".into(), vec![node.uid.clone()]);
                    }
                }
                if !claims.jti.is_empty() {
                    extra.insert("authentication.kubernetes.io/credential-id".into(), vec![format!("JTI={}", claims.jti)]);
                }
                let mut user = service_account_user(ns, &k.serviceaccount);
                user.extra = extra;
                let matched: Vec<String> = claims.aud.iter().filter(|a| audiences.contains(a)).cloned().collect();
                Ok((user, matched))
            }
            Err(TokenError::NotOurs) => {
                let claims = self.config.verify_legacy(token)?;
                let ns = claims.namespace.as_str();
                let secret = self
                    .objects
                    .get("secrets", ns, &claims.secret_name)
                    .await
                    .map_err(TokenError::Invalid)?
                    .ok_or_else(|| TokenError::Invalid(format!("secret {ns}/{} not found", claims.secret_name)))?;
                let stored = secret.pointer("/data/token").and_then(Value::as_str).unwrap_or("");
                use base64::Engine as _;
                let stored = base64::engine::general_purpose::STANDARD.decode(stored).unwrap_or_default();
                if stored != token.as_bytes() {
                    return Err(TokenError::Invalid(format!("token does not match secret {ns}/{}", claims.secret_name)));
                }
                let sa = ObjectRef { name: claims.service_account_name.clone(), uid: claims.service_account_uid.clone() };
                self.check_service_account(ns, &sa).await?;
                // Legacy tokens are for the API audiences.
                Ok((service_account_user(ns, &sa), audiences.to_vec()))
            }
            Err(e) => Err(e),
        }
    }

    async fn check_service_account(&self, ns: &str, sa: &ObjectRef) -> Result<(), TokenError> {
        let obj = self.check_object("serviceaccounts", ns, sa, "service account").await?;
        if deletion_started(&obj).is_some() {
            return Err(TokenError::Invalid(format!("service account {ns}/{} is being deleted", sa.name)));
        }
        Ok(())
    }

    /// The object `r` of `resource`, which must exist with the UID of the claim.
    async fn check_object(&self, resource: &str, ns: &str, r: &ObjectRef, what: &str) -> Result<Value, TokenError> {
        let shown = if ns.is_empty() { r.name.clone() } else { format!("{ns}/{}", r.name) };
        let obj = self
            .objects
            .get(resource, ns, &r.name)
            .await
            .map_err(TokenError::Invalid)?
            .ok_or_else(|| TokenError::Invalid(format!("{what} {shown} has been deleted")))?;
        if !r.uid.is_empty() && uid_of(&obj) != r.uid {
            return Err(TokenError::Invalid(format!(
                "{what} UID ({}) does not match claim ({})",
                uid_of(&obj),
                r.uid
            )));
        }
        Ok(obj)
    }
}

/// The user of ServiceAccount `sa` in `namespace` (without extras).
pub fn service_account_user(namespace: &str, sa: &ObjectRef) -> UserInfo {
    UserInfo {
        username: service_account_username(namespace, &sa.name),
        uid: sa.uid.clone(),
        groups: vec![SERVICE_ACCOUNTS_GROUP.to_string(), format!("{SERVICE_ACCOUNTS_GROUP}:{namespace}")],
        extra: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serviceaccount::claims::TokenSpec;
    use crate::serviceaccount::keys;
    use serde_json::json;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Objects(Mutex<BTreeMap<(String, String, String), Value>>);

    impl Objects {
        fn put(&self, resource: &str, ns: &str, obj: Value) {
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            self.0.lock().unwrap().insert((resource.into(), ns.into(), name), obj);
        }
        fn remove(&self, resource: &str, ns: &str, name: &str) {
            self.0.lock().unwrap().remove(&(resource.into(), ns.into(), name.into()));
        }
    }

    #[async_trait::async_trait]
    impl ObjectGetter for Objects {
        async fn get(&self, resource: &str, namespace: &str, name: &str) -> Result<Option<Value>, String> {
            Ok(self.0.lock().unwrap().get(&(resource.into(), namespace.into(), name.into())).cloned())
        }
    }

    fn setup() -> (Arc<TokenConfig>, Arc<Objects>, ServiceAccountAuthenticator) {
        let dir = tempfile::tempdir().unwrap();
        let (key, _) = keys::ensure_key_files(dir.path()).unwrap();
        let signer = keys::load_signing_key(&key).unwrap();
        let config = Arc::new(TokenConfig {
            issuers: vec!["https://issuer".into()],
            api_audiences: vec!["https://issuer".into()],
            keys: vec![signer.public.clone()],
            signer: Some(signer),
            max_expiration_seconds: None,
        });
        let objects = Arc::new(Objects::default());
        objects.put("serviceaccounts", "dev", json!({"metadata": {"name": "builder", "uid": "sa-1"}}));
        objects.put("pods", "dev", json!({"metadata": {"name": "web", "uid": "pod-1"}}));
        let authn = ServiceAccountAuthenticator::new(config.clone(), objects.clone());
        (config, objects, authn)
    }

    fn pod_token(config: &TokenConfig) -> String {
        let spec = TokenSpec {
            namespace: "dev".into(),
            service_account: ObjectRef { name: "builder".into(), uid: "sa-1".into() },
            audiences: config.api_audiences.clone(),
            expiration_seconds: 3600,
            pod: Some(ObjectRef { name: "web".into(), uid: "pod-1".into() }),
            node: Some(ObjectRef { name: "n1".into(), uid: "node-1".into() }),
            ..TokenSpec::default()
        };
        config.issue(&spec).unwrap().0
    }

    #[tokio::test]
    async fn pod_bound_token_authenticates_with_extras_until_the_pod_is_gone() {
        let (config, objects, authn) = setup();
        let token = pod_token(&config);
        let (user, aud) = authn.authenticate(&token, &[]).await.unwrap();
        assert_eq!(user.username, "system:serviceaccount:dev:builder");
        assert_eq!(user.uid, "sa-1");
        assert_eq!(user.groups, vec!["system:serviceaccounts", "system:serviceaccounts:dev"]);
        assert_eq!(user.extra["authentication.kubernetes.io/pod-name"], vec!["web"]);
        assert_eq!(user.extra["authentication.kubernetes.io/node-name"], vec!["n1"]);
        assert!(user.extra["authentication.kubernetes.io/credential-id"][0].starts_with("JTI="));
        assert_eq!(aud, vec!["https://issuer"]);
        // A pod of the same name but another UID is another pod.
        objects.put("pods", "dev", json!({"metadata": {"name": "web", "uid": "pod-2"}}));
        let err = authn.authenticate(&token, &[]).await.unwrap_err();
        assert_eq!(err, TokenError::Invalid("pod UID (pod-2) does not match claim (pod-1)".into()));
        objects.remove("pods", "dev", "web");
        assert_eq!(authn.authenticate(&token, &[]).await.unwrap_err(), TokenError::Invalid("pod dev/web has been deleted".into()));
    }

    #[tokio::test]
    async fn deleted_service_account_invalidates_its_tokens() {
        let (config, objects, authn) = setup();
        let token = pod_token(&config);
        objects.remove("serviceaccounts", "dev", "builder");
        assert!(matches!(authn.authenticate(&token, &[]).await, Err(TokenError::Invalid(m)) if m.contains("service account dev/builder")));
    }

    #[tokio::test]
    async fn legacy_token_needs_its_secret_to_hold_it() {
        let (config, objects, authn) = setup();
        let sa = ObjectRef { name: "builder".into(), uid: "sa-1".into() };
        let token = config.issue_legacy("dev", &sa, "builder-token").unwrap();
        use base64::Engine as _;
        let data = base64::engine::general_purpose::STANDARD.encode(&token);
        objects.put("secrets", "dev", json!({"metadata": {"name": "builder-token"}, "data": {"token": data}}));
        let (user, _) = authn.authenticate(&token, &[]).await.unwrap();
        assert_eq!(user.username, "system:serviceaccount:dev:builder");
        assert!(user.extra.is_empty());
        objects.put("secrets", "dev", json!({"metadata": {"name": "builder-token"}, "data": {"token": "b3RoZXI="}}));
        assert!(authn.authenticate(&token, &[]).await.is_err());
        assert_eq!(authn.authenticate("abc", &[]).await.unwrap_err(), TokenError::NotOurs);
    }
}
