//! The API server's filter chain: everything between the socket and the
//! handlers, in upstream's order (`DefaultBuildHandlerChain` in
//! `staging/src/k8s.io/apiserver/pkg/server/config.go`):
//!
//! ```text
//! request ─▶ request info + audit ID + panic recovery   requestinfo::request_context
//!         ─▶ authentication (401)                        authn
//!         ─▶ audit log                                   audit
//!         ─▶ impersonation (403)                         impersonation
//!         ─▶ priority and fairness / max-inflight (429)  inflight (+ apf)
//!         ─▶ metrics                                     metrics
//!         ─▶ request timeout (504)                       timeout
//!         ─▶ trace log                                   trace
//!         ─▶ authorization (403)                         authz (+ rbac)
//!         ─▶ RBAC escalation checks (403, in handlers)   escalation
//!         ─▶ handler
//! ```
//!
//! Building blocks, each usable on its own: [`requestinfo`] (what a request
//! addresses), [`authn`] (tokens, client certificates, anonymous),
//! [`impersonation`] (`Impersonate-*` headers), [`authz`] and [`rbac`],
//! [`escalation`] (RBAC escalation prevention on role and binding writes),
//! [`audit`], [`inflight`] (with [`apf`]), [`timeout`], [`metrics`] (with [`process`] and
//! [`storage_metrics`]), [`trace`] (trace logs, runtime
//! verbosity), [`tls`] (HTTPS, self-signed PKI, [`serve`]).
//!
//! Wiring: flatten [`FilterArgs`] into the command's flags, turn them into a
//! [`FilterConfig`] with [`FilterArgs::load`], build a [`FilterChain`] and
//! [`apply`] it to the router; serve with [`serve`] (which provides the peer
//! address and client certificates the filters need). [`apply`] also mounts
//! `GET /metrics` and `PUT /debug/flags/v`.

pub mod apf;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod escalation;
pub mod impersonation;
pub(crate) mod body;
pub mod inflight;
pub mod metrics;
pub mod process;
pub mod rbac;
pub mod rbac_controllers;
pub mod rbac_rules;
pub mod rbac_cache;
pub mod rbac_index;
pub mod requestinfo;
pub mod storage_metrics;
pub mod timeout;
pub mod tls;
pub mod trace;
pub mod uri_too_long;
pub mod write_stall;
pub mod x509;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::{any, get};
use axum::Router;
use rustls_pki_types::CertificateDer;

pub use tls::{serve, ConnInfo};

use audit::policy::{Policy, PolicyError};
use audit::writer::{AuditBackend, AuditMode, AuditSink, RotationConfig, WriterError};
use audit::Auditor;
use authn::{AuthnError, Authenticator, AuthnState, TokenFile};
use authz::{AuthorizationMode, Authorizer, AuthzError};
use inflight::InflightLimiter;
use metrics::ApiserverMetrics;
use rbac::RbacSource;
use tls::{TlsConfig, TlsError};
use trace::TraceConfig;

/// Errors turning flags into a working filter chain.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// TLS files.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// `--token-auth-file`.
    #[error(transparent)]
    Authn(#[from] AuthnError),
    /// `--authorization-mode`.
    #[error(transparent)]
    Authz(#[from] AuthzError),
    /// `--audit-policy-file`.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// `--audit-log-path`.
    #[error(transparent)]
    AuditWriter(#[from] WriterError),
    /// A flag value that does not parse.
    #[error("invalid value for --{flag}: {message}")]
    Flag {
        /// The flag, without dashes.
        flag: &'static str,
        /// Why.
        message: String,
    },
}

/// kube-apiserver's flags for the filter chain; `#[command(flatten)]` it
/// into a command's arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct FilterArgs {
    /// File containing the default x509 certificate for HTTPS (CA cert, if any, concatenated after server cert).
    #[arg(long = "tls-cert-file")]
    pub tls_cert_file: Option<PathBuf>,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long = "tls-private-key-file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// If set, any request presenting a client certificate signed by one of the authorities in the client-ca-file is authenticated with an identity corresponding to the CommonName of the client certificate (groups: its Organizations).
    #[arg(long = "client-ca-file")]
    pub client_ca_file: Option<PathBuf>,
    /// If set, the file that will be used to secure the secure port of the API server via token authentication (CSV: token,user,uid,"group1,group2").
    #[arg(long = "token-auth-file")]
    pub token_auth_file: Option<PathBuf>,
    /// Enables anonymous requests to the secure port: requests not rejected by another authentication method are treated as system:anonymous in group system:unauthenticated.
    #[arg(long = "anonymous-auth", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, overrides_with = "anonymous_auth")]
    pub anonymous_auth: bool,
    /// Ordered list of plug-ins to do authorization on secure port: AlwaysAllow, AlwaysDeny, RBAC.
    #[arg(long = "authorization-mode", default_value = "AlwaysAllow", value_delimiter = ',')]
    pub authorization_mode: Vec<String>,
    /// If set, all requests coming to the apiserver will be logged to this file. '-' means standard out.
    #[arg(long = "audit-log-path")]
    pub audit_log_path: Option<String>,
    /// Path to the file that defines the audit policy configuration (audit.k8s.io/v1 Policy).
    #[arg(long = "audit-policy-file")]
    pub audit_policy_file: Option<PathBuf>,
    /// The maximum size in megabytes of the audit log file before it gets rotated (0: 100).
    #[arg(long = "audit-log-maxsize", default_value_t = 0)]
    pub audit_log_maxsize: u64,
    /// The maximum number of old audit log files to retain (0: all).
    #[arg(long = "audit-log-maxbackup", default_value_t = 0)]
    pub audit_log_maxbackup: usize,
    /// The maximum number of days to retain old audit log files based on the timestamp encoded in their filename (0: forever).
    #[arg(long = "audit-log-maxage", default_value_t = 0)]
    pub audit_log_maxage: u64,
    /// Strategy for sending audit events: batch (drop when the buffer is full; rkube's default) or blocking.
    #[arg(long = "audit-log-mode", default_value = "batch")]
    pub audit_log_mode: String,
    /// The size of the buffer to store events before writing them.
    #[arg(long = "audit-log-batch-buffer-size", default_value_t = 10000)]
    pub audit_log_batch_buffer_size: usize,
    /// Format of saved audits: json (legacy is not supported).
    #[arg(long = "audit-log-format", default_value = "json")]
    pub audit_log_format: String,
    /// The maximum number of non-mutating requests in flight at a given time (0: no limit).
    #[arg(long = "max-requests-inflight", default_value_t = inflight::DEFAULT_MAX_REQUESTS_INFLIGHT)]
    pub max_requests_inflight: usize,
    /// The maximum number of mutating requests in flight at a given time (0: no limit).
    #[arg(long = "max-mutating-requests-inflight", default_value_t = inflight::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT)]
    pub max_mutating_requests_inflight: usize,
    /// Enable priority and fairness: requests are classified by FlowSchemas into priority levels sharing --max-requests-inflight + --max-mutating-requests-inflight seats, and wait in their level's queue (rkube: one FIFO queue per level) for up to a quarter of --request-timeout before a 429; false applies the two max-inflight limits and answers 429 at once.
    #[arg(long = "enable-priority-and-fairness", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_priority_and_fairness: bool,
    /// An optional field indicating the duration a handler must keep a request open before timing it out (Go duration).
    #[arg(long = "request-timeout", default_value = "1m0s")]
    pub request_timeout: String,
    /// The minimum number of seconds a watch may run before the server ends it (randomized up to twice this).
    #[arg(long = "min-request-timeout", default_value_t = timeout::DEFAULT_MIN_REQUEST_TIMEOUT)]
    pub min_request_timeout: u64,
    /// rkube: requests slower than this log a trace of their steps (Go duration).
    #[arg(long = "request-trace-threshold", default_value = "500ms")]
    pub request_trace_threshold: String,
}

impl Default for FilterArgs {
    fn default() -> Self {
        FilterArgs {
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            token_auth_file: None,
            anonymous_auth: true,
            authorization_mode: vec!["AlwaysAllow".into()],
            audit_log_path: None,
            audit_policy_file: None,
            audit_log_maxsize: 0,
            audit_log_maxbackup: 0,
            audit_log_maxage: 0,
            audit_log_mode: "batch".into(),
            audit_log_batch_buffer_size: 10000,
            audit_log_format: "json".into(),
            max_requests_inflight: inflight::DEFAULT_MAX_REQUESTS_INFLIGHT,
            max_mutating_requests_inflight: inflight::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            enable_priority_and_fairness: true,
            request_timeout: "1m0s".into(),
            min_request_timeout: timeout::DEFAULT_MIN_REQUEST_TIMEOUT,
            request_trace_threshold: "500ms".into(),
        }
    }
}

/// Audit settings, validated.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// The policy.
    pub policy: Policy,
    /// Where events go.
    pub sink: AuditSink,
    /// Full-buffer behaviour.
    pub mode: AuditMode,
    /// Buffer size, events.
    pub buffer_size: usize,
}

/// The flags, validated and with their files read.
#[derive(Debug, Clone)]
pub struct FilterConfig {
    /// Serving certificate (HTTPS when set).
    pub tls: Option<TlsConfig>,
    /// Client CA certificates (client certificate authentication when set).
    pub client_ca: Option<Vec<CertificateDer<'static>>>,
    /// Static tokens.
    pub tokens: Option<TokenFile>,
    /// Anonymous requests allowed.
    pub anonymous: bool,
    /// Authorization modes, in order.
    pub authorization_modes: Vec<AuthorizationMode>,
    /// Audit logging (`None` without both `--audit-log-path` and `--audit-policy-file`).
    pub audit: Option<AuditConfig>,
    /// Read-only inflight limit.
    pub max_requests_inflight: usize,
    /// Mutating inflight limit.
    pub max_mutating_requests_inflight: usize,
    /// How long a request may wait for an inflight slot (`None`: 429 at once).
    pub inflight_max_wait: Option<Duration>,
    /// Non-long-running request timeout.
    pub request_timeout: Duration,
    /// Trace log threshold.
    pub trace_threshold: Duration,
}

fn duration_flag(flag: &'static str, v: &str) -> Result<Duration, FilterError> {
    timeout::parse_go_duration(v).map_err(|e| FilterError::Flag { flag, message: e.to_string() })
}

impl FilterArgs {
    /// Validates the flags and reads the files they name.
    pub fn load(&self) -> Result<FilterConfig, FilterError> {
        let tls = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(c), Some(k)) => Some(TlsConfig::load(c, k)?),
            (None, None) => None,
            _ => return Err(TlsError::Incomplete.into()),
        };
        let client_ca = self.client_ca_file.as_deref().map(tls::load_certs).transpose()?;
        let tokens = self.token_auth_file.as_deref().map(TokenFile::load).transpose()?;
        let authorization_modes = self
            .authorization_mode
            .iter()
            .filter(|m| !m.trim().is_empty())
            .map(|m| m.parse::<AuthorizationMode>())
            .collect::<Result<Vec<_>, _>>()?;
        if self.audit_log_format != "json" {
            return Err(FilterError::Flag { flag: "audit-log-format", message: format!("{:?}: only json is supported", self.audit_log_format) });
        }
        let mode = match self.audit_log_mode.as_str() {
            "batch" => AuditMode::Batch,
            "blocking" | "blocking-strict" => AuditMode::Blocking,
            other => {
                return Err(FilterError::Flag { flag: "audit-log-mode", message: format!("{other:?}: use batch or blocking") })
            }
        };
        let audit = match (&self.audit_log_path, &self.audit_policy_file) {
            (Some(path), Some(policy)) if !path.is_empty() => Some(AuditConfig {
                policy: Policy::load(policy)?,
                sink: if path == "-" {
                    AuditSink::Stdout
                } else {
                    AuditSink::File(RotationConfig::from_flags(
                        PathBuf::from(path),
                        self.audit_log_maxsize,
                        self.audit_log_maxbackup,
                        self.audit_log_maxage,
                    ))
                },
                mode,
                buffer_size: self.audit_log_batch_buffer_size.max(1),
            }),
            (Some(_), None) => {
                tracing::warn!("--audit-log-path is set without --audit-policy-file: no audit events are logged (as upstream)");
                None
            }
            _ => None,
        };
        let request_timeout = duration_flag("request-timeout", &self.request_timeout)?;
        Ok(FilterConfig {
            tls,
            client_ca,
            tokens,
            anonymous: self.anonymous_auth,
            authorization_modes,
            audit,
            max_requests_inflight: self.max_requests_inflight,
            max_mutating_requests_inflight: self.max_mutating_requests_inflight,
            inflight_max_wait: self.enable_priority_and_fairness.then_some(request_timeout / 4),
            request_timeout,
            trace_threshold: duration_flag("request-trace-threshold", &self.request_trace_threshold)?,
        })
    }
}

/// A built filter chain: shared state of every filter, ready for [`apply`].
pub struct FilterChain {
    metrics: Arc<ApiserverMetrics>,
    authn: Arc<Authenticator>,
    authz: Arc<Authorizer>,
    rbac: Option<Arc<dyn RbacSource>>,
    auditor: Option<Arc<Auditor>>,
    inflight: Arc<InflightLimiter>,
    request_timeout: Duration,
    trace: TraceConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl FilterChain {
    /// Builds the chain from `cfg`: `rbac` backs `--authorization-mode=RBAC`;
    /// `metrics` is the registry `/metrics` serves. Starts the audit writer
    /// thread when auditing is on.
    pub fn build(
        cfg: FilterConfig,
        rbac: Option<Arc<dyn RbacSource>>,
        metrics: Arc<ApiserverMetrics>,
    ) -> Result<FilterChain, FilterError> {
        let client_verifier = cfg.client_ca.as_deref().map(tls::client_verifier).transpose()?;
        let tls = cfg.tls.as_ref().map(|t| tls::server_config(t, client_verifier.clone())).transpose()?;
        let authn = Arc::new(Authenticator {
            tokens: cfg.tokens,
            client_ca: client_verifier,
            anonymous: cfg.anonymous,
            service_accounts: None,
        });
        let authz = Arc::new(Authorizer::new(cfg.authorization_modes, rbac.clone())?);
        let auditor = match cfg.audit {
            Some(a) => {
                let backend = AuditBackend::start(a.sink, a.buffer_size, a.mode, metrics.clone())?;
                Some(Arc::new(Auditor::new(a.policy, backend, metrics.clone())))
            }
            None => None,
        };
        let inflight = Arc::new(InflightLimiter::new(
            cfg.max_requests_inflight,
            cfg.max_mutating_requests_inflight,
            cfg.inflight_max_wait,
            metrics.clone(),
        ));
        Ok(FilterChain {
            metrics,
            authn,
            authz,
            rbac,
            auditor,
            inflight,
            request_timeout: cfg.request_timeout,
            trace: TraceConfig { threshold: cfg.trace_threshold },
            tls,
        })
    }

    /// The rustls config to pass to [`serve`] (`None`: plain HTTP).
    pub fn tls_server_config(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.tls.clone()
    }

    /// This chain, also accepting the ServiceAccount tokens `sa` checks
    /// (built once the server's watch cache exists).
    pub fn with_service_account_tokens(mut self, sa: Arc<crate::serviceaccount::ServiceAccountAuthenticator>) -> Self {
        self.authn = Arc::new(Authenticator {
            tokens: self.authn.tokens.clone(),
            client_ca: self.authn.client_ca.clone(),
            anonymous: self.authn.anonymous,
            service_accounts: Some(sa),
        });
        self
    }

    /// The authenticator (client certificates, tokens, anonymous).
    pub fn authenticator(&self) -> Arc<Authenticator> {
        self.authn.clone()
    }

    /// The authorizer (`--authorization-mode`).
    pub fn authorizer(&self) -> Arc<Authorizer> {
        self.authz.clone()
    }

    /// The API Priority and Fairness classifier (`None` with
    /// `--enable-priority-and-fairness=false`); [`crate::server::serve_api`]
    /// keeps its configuration.
    pub fn flow_control(&self) -> Option<Arc<apf::FlowControl>> {
        self.inflight.flow_control()
    }

    /// The metrics registry.
    pub fn metrics(&self) -> Arc<ApiserverMetrics> {
        self.metrics.clone()
    }

    /// The auditor, when auditing is on.
    pub fn auditor(&self) -> Option<Arc<Auditor>> {
        self.auditor.clone()
    }

    /// Flushes the audit log; call after the server stopped.
    pub async fn shutdown(&self) {
        if let Some(a) = &self.auditor {
            a.backend.flush().await;
        }
    }
}

/// Mounts `GET /metrics` (the chain's registry through
/// [`metrics::metrics_response`], the renderer the router's own `metrics` arm
/// uses too) and `PUT /debug/flags/v` on `router` and wraps every route (and
/// the fallback) in the filter chain, in the order of the module docs.
pub fn apply(router: Router, chain: &FilterChain) -> Router {
    let router = router
        .route("/metrics", get(metrics::metrics_handler).with_state(chain.metrics.clone()))
        .route("/debug/flags/v", any(trace::debug_flags_v));
    let escalation = escalation::EscalationState { authz: chain.authz.clone(), rbac: chain.rbac.clone() };
    let router = router
        .layer(from_fn_with_state(escalation, escalation::escalation_middleware))
        .layer(from_fn_with_state(chain.authz.clone(), authz::authz_middleware))
        .layer(from_fn_with_state(chain.trace, trace::trace_middleware))
        .layer(from_fn_with_state(chain.request_timeout, timeout::timeout_middleware))
        .layer(from_fn_with_state(chain.metrics.clone(), metrics::metrics_middleware))
        .layer(from_fn_with_state(chain.inflight.clone(), inflight::inflight_middleware))
        .layer(from_fn_with_state(chain.authz.clone(), impersonation::impersonation_middleware));
    let router = match &chain.auditor {
        Some(a) => router.layer(from_fn_with_state(a.clone(), audit::audit_middleware)),
        None => router,
    };
    router
        .layer(from_fn_with_state(
            AuthnState { authenticator: chain.authn.clone(), audit: chain.auditor.clone() },
            authn::authn_middleware,
        ))
        .layer(from_fn(requestinfo::request_context))
}
