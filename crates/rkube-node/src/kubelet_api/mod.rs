//! The kubelet API of the node agent (upstream `pkg/kubelet/server/server.go`; port 10250):
//! HTTPS, every request authenticated and authorized ([`auth`]), serving
//!
//! - `GET /healthz` — `ok` while the PLEG is healthy;
//! - `GET /containerLogs/<namespace>/<pod>/<container>` — the container's log, with the query
//!   parameters of `PodLogOptions` (`follow`, `previous`, `sinceSeconds`, `sinceTime`,
//!   `timestamps`, `tailLines`, `limitBytes`), read from the CRI log file the runtime writes
//!   ([`logs`]): the live file, as upstream (rotated files are not read). `follow` streams
//!   lines as they are written, across rotations, until the container exits, the client goes
//!   away or the agent stops;
//! - `POST /run/<namespace>/<pod>/<container>?cmd=...` — a command's output (CRI `ExecSync`);
//! - `GET|POST /exec/<namespace>/<pod>/<container>`, `/attach/...` and
//!   `/portForward/<namespace>/<pod>` — an upgrade (WebSocket) proxied to the runtime's
//!   streaming server for CRI `Exec` / `Attach` / `PortForward` ([`stream`]);
//! - `GET /pods`, `/stats/summary`, `/metrics/resource`, `/metrics/cadvisor` and `/metrics` —
//!   the pods the agent knows, and resource usage from the runtime's CRI stats and `/proc`
//!   ([`stats`]).
//!
//! Errors are plain text, as kubelet's: 400 for a query that does not decode, 422 for invalid
//! options, 404 for an unknown pod or container, 400 for a missing previous instance.

pub mod auth;
pub mod logs;
pub mod server_cert;
pub mod stats;
pub mod stream;
pub mod tls;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use k8s_openapi::jiff::Timestamp;
use rkube_runtime::cri;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use crate::cri::{
    CriClient, RuntimeApi as _, LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE,
};
use crate::healthz::HealthCheck;
use crate::shutdown::Shutdown;
use auth::{AuthorizationMode, Authorizer};
use logs::{ByteBudget, LineDecoder, Selection};
use tls::KubeletConn;

/// How often a follower polls the log file and the container's state.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Settings of the kubelet API server (kubelet's flags).
#[derive(Clone, Debug)]
pub struct KubeletServerConfig {
    /// `--address` and `--port` (port 0: any free port).
    pub addr: SocketAddr,
    /// `--tls-cert-file`; `None`: a self-signed certificate in `<root-dir>/pki`.
    pub tls_cert_file: Option<PathBuf>,
    /// `--tls-private-key-file`.
    pub tls_private_key_file: Option<PathBuf>,
    /// `--client-ca-file`; `None`: client certificates are not asked for.
    pub client_ca_file: Option<PathBuf>,
    /// `--anonymous-auth`.
    pub anonymous_auth: bool,
    /// `--authorization-mode`.
    pub authorization_mode: AuthorizationMode,
    /// `--rotate-server-certificates`: without `--tls-cert-file`, the serving certificate is
    /// requested through the certificates API ([`server_cert`]).
    pub rotate_server_certificates: bool,
    /// Approve that request with the agent's own client (`rkube up --node`, whose node agent
    /// holds the cluster admin's credentials).
    pub approve_own_serving_csr: bool,
}

impl Default for KubeletServerConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([0, 0, 0, 0], 10250)),
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            anonymous_auth: false,
            authorization_mode: AuthorizationMode::Webhook,
            rotate_server_certificates: false,
            approve_own_serving_csr: false,
        }
    }
}

#[derive(Clone)]
pub(crate) struct Ctx {
    cri: CriClient,
    health: HealthCheck,
    authorizer: Arc<Authorizer>,
    shutdown: Shutdown,
    stats: stats::StatsDeps,
}

/// What [`serve`] needs besides its settings.
pub struct ServeDeps {
    /// The runtime (containers, log paths, states).
    pub cri: CriClient,
    /// The health check of `/healthz`.
    pub health: HealthCheck,
    /// Client for TokenReviews and SubjectAccessReviews.
    pub client: kube::Client,
    /// The node's name (the `nodes/<name>` authorized against).
    pub node_name: String,
    /// Names (DNS or IPs) of a generated self-signed certificate.
    pub cert_names: Vec<String>,
    /// Where a self-signed certificate goes (`<root-dir>/pki`).
    pub cert_dir: PathBuf,
    /// The pods bound to this node (`/pods`).
    pub pods: crate::pod::manager::PodStore,
    /// The agent's metrics (`/metrics`).
    pub registry: Arc<prometheus_client::registry::Registry>,
}

/// Binds `config.addr` and serves the kubelet API until `shutdown`; returns the bound address.
///
/// # Errors
/// The certificate files cannot be read (or generated) or the address cannot be bound.
pub async fn serve(
    config: &KubeletServerConfig,
    deps: ServeDeps,
    mut shutdown: Shutdown,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>, Arc<tls::CertSlot>)> {
    let slot = Arc::new(tls::CertSlot::default());
    match (&config.tls_cert_file, &config.tls_private_key_file) {
        (Some(c), Some(k)) => slot.load(c, k)?,
        (None, None) if config.rotate_server_certificates => {
            let req = server_cert::ServingRequest {
                node_name: deps.node_name.clone(),
                names: deps.cert_names.clone(),
                dir: deps.cert_dir.clone(),
                approve: config.approve_own_serving_csr,
            };
            let (client, slot, sd) = (deps.client.clone(), Arc::clone(&slot), shutdown.clone());
            tokio::spawn(async move {
                match server_cert::ensure(client, &req, sd).await {
                    Ok(path) => {
                        if let Err(err) = slot.load(&path, &path) {
                            tracing::error!(%err, "the issued serving certificate cannot be served");
                        }
                    }
                    Err(err) => tracing::error!(%err, "no serving certificate for the kubelet API"),
                }
            });
        }
        (None, None) => {
            let (cert, key) = tls::ensure_self_signed(&deps.cert_dir, &deps.cert_names)?;
            slot.load(&cert, &key)?;
        }
        _ => anyhow::bail!("--tls-cert-file and --tls-private-key-file go together"),
    }
    let tls_config = tls::server_config(Arc::clone(&slot), config.client_ca_file.as_deref())?;
    let listener = tokio::net::TcpListener::bind(config.addr).await?;
    let listener = tls::TlsListener::new(listener, tls_config)?;
    let bound = axum::serve::Listener::local_addr(&listener)?;
    let stats = stats::StatsDeps {
        node_name: deps.node_name.clone(),
        pods: deps.pods,
        registry: deps.registry,
        rates: Arc::default(),
    };
    let authorizer = Arc::new(Authorizer::new(
        deps.client,
        deps.node_name,
        config.anonymous_auth,
        config.authorization_mode,
    ));
    let ctx = Ctx {
        cri: deps.cri,
        health: deps.health,
        authorizer,
        shutdown: shutdown.clone(),
        stats,
    };
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/pods", get(stats::pods))
        .route("/stats/summary", get(stats::stats_summary))
        .route("/metrics", get(stats::metrics))
        .route("/metrics/resource", get(stats::metrics_resource))
        .route("/metrics/cadvisor", get(stats::metrics_cadvisor))
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(container_logs),
        )
        .route(
            "/exec/{namespace}/{pod}/{container}",
            get(stream::exec).post(stream::exec),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(stream::attach).post(stream::attach),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            get(stream::port_forward).post(stream::port_forward),
        )
        .route(
            "/run/{namespace}/{pod}/{container}",
            axum::routing::post(run_in_container),
        )
        .route(
            "/run/{namespace}/{pod}/{uid}/{container}",
            axum::routing::post(run_in_container_of_uid),
        )
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            authn_authz,
        ))
        .with_state(ctx);
    let task = tokio::spawn(async move {
        let stop = async move { shutdown.wait().await };
        let service = app.into_make_service_with_connect_info::<KubeletConn>();
        if let Err(err) = axum::serve(listener, service)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::warn!(%err, "kubelet API server failed");
        }
    });
    Ok((bound, task, slot))
}

pub(crate) fn text(code: StatusCode, body: impl Into<String>) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body.into(),
    )
        .into_response()
}

/// Authentication then authorization of every request (see [`auth`]).
async fn authn_authz(
    State(ctx): State<Ctx>,
    ConnectInfo(conn): ConnectInfo<KubeletConn>,
    req: Request,
    next: Next,
) -> Response {
    let cert_user = conn
        .peer_certs
        .as_ref()
        .and_then(|c| c.first())
        .and_then(|leaf| auth::cert_user(leaf.as_ref()));
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string());
    let user = match ctx
        .authorizer
        .authenticate(cert_user, bearer.as_deref())
        .await
    {
        Ok(Some(u)) => u,
        Ok(None) => return text(StatusCode::UNAUTHORIZED, "Unauthorized"),
        Err(err) => {
            tracing::warn!(%err, "kubelet API authentication failed");
            return text(StatusCode::UNAUTHORIZED, "Unauthorized");
        }
    };
    let attrs = auth::path_attributes(req.method(), req.uri().path());
    let describe = |subs: &[&str]| {
        format!(
            "user={}, verb={}, resource=nodes, subresource(s)=[{}]",
            user.name,
            attrs.verb,
            subs.join(" ")
        )
    };
    match ctx.authorizer.authorize(&user, &attrs).await {
        Ok(None) => next.run(req).await,
        Ok(Some(_)) => text(
            StatusCode::FORBIDDEN,
            format!("Forbidden ({})", describe(&attrs.subresources)),
        ),
        Err(err) => {
            tracing::warn!(%err, "kubelet API authorization failed");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Authorization error ({})", describe(&attrs.subresources)),
            )
        }
    }
}

/// How long a `/run` command may take (upstream runs it without a deadline;
/// rkube bounds it so a stuck command cannot hold the request forever).
const RUN_TIMEOUT_SECONDS: i64 = 300;

/// `POST /run/<namespace>/<pod>/<container>?cmd=<command>` (upstream
/// `getRun`): runs `cmd`, split on whitespace, in the running container
/// (CRI `ExecSync`) and answers its stdout and stderr, in that order. 400
/// without `cmd`, 404 for an unknown pod or container, 500 when the runtime fails.
async fn run_in_container(
    State(ctx): State<Ctx>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    run(ctx, namespace, pod, container, req).await
}

/// `POST /run/<namespace>/<pod>/<uid>/<container>`: as [`run_in_container`]
/// (the pod UID is not checked: one pod of a name runs on a node at a time).
async fn run_in_container_of_uid(
    State(ctx): State<Ctx>,
    Path((namespace, pod, _uid, container)): Path<(String, String, String, String)>,
    req: Request,
) -> Response {
    run(ctx, namespace, pod, container, req).await
}

async fn run(
    ctx: Ctx,
    namespace: String,
    pod: String,
    container: String,
    req: Request,
) -> Response {
    let query = req.uri().query().unwrap_or("").to_string();
    let cmd: Vec<String> = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "cmd")
        .map(|(_, v)| v.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    if cmd.is_empty() {
        return text(StatusCode::BAD_REQUEST, "missing cmd parameter");
    }
    let id = match stream::running_container(&ctx, &namespace, &pod, &container).await {
        Ok(id) => id,
        Err(resp) => return *resp,
    };
    match ctx.cri.exec_sync(&id, cmd, RUN_TIMEOUT_SECONDS).await {
        Ok(out) => {
            let mut body = out.stdout;
            body.extend_from_slice(&out.stderr);
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                body,
            )
                .into_response()
        }
        Err(err) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("failed to run in container: {err}"),
        ),
    }
}

async fn healthz(State(ctx): State<Ctx>) -> Response {
    match (ctx.health)() {
        Ok(()) => text(StatusCode::OK, "ok"),
        Err(reason) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("[-]pleg failed: {reason}\nhealthz check failed\n"),
        ),
    }
}

/// The options of `/containerLogs` (upstream `PodLogOptions` as query parameters).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// `follow`.
    pub follow: bool,
    /// `previous`.
    pub previous: bool,
    /// `timestamps`.
    pub timestamps: bool,
    /// `sinceSeconds` (≥ 1).
    pub since_seconds: Option<i64>,
    /// `sinceTime` (RFC 3339).
    pub since_time: Option<Timestamp>,
    /// `tailLines` (≥ 0).
    pub tail_lines: Option<i64>,
    /// `limitBytes` (≥ 1).
    pub limit_bytes: Option<i64>,
}

/// Why a log query was refused: (HTTP code, message).
pub type QueryError = (StatusCode, String);

impl LogQuery {
    /// Decodes and validates the query string (400 for values that do not decode, 422 for
    /// invalid ones, as kubelet's `ValidatePodLogOptions`). The last value of a repeated
    /// parameter wins.
    ///
    /// # Errors
    /// See above.
    pub fn parse(query: &str) -> Result<Self, QueryError> {
        let bad = |what: &str| {
            (
                StatusCode::BAD_REQUEST,
                format!("Unable to decode query: invalid {what}"),
            )
        };
        let mut q = LogQuery::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let (k, v) = (k.into_owned(), v.into_owned());
            let boolean = |v: &str| match v {
                "" | "true" | "1" | "t" | "T" | "TRUE" | "True" => Ok(true),
                "false" | "0" | "f" | "F" | "FALSE" | "False" => Ok(false),
                _ => Err(bad(&k)),
            };
            let int = |v: &str| v.parse::<i64>().map_err(|_| bad(&k));
            match k.as_str() {
                "follow" => q.follow = boolean(&v)?,
                "previous" => q.previous = boolean(&v)?,
                "timestamps" => q.timestamps = boolean(&v)?,
                "sinceSeconds" => q.since_seconds = Some(int(&v)?),
                "tailLines" => q.tail_lines = Some(int(&v)?),
                "limitBytes" => q.limit_bytes = Some(int(&v)?),
                "sinceTime" => q.since_time = Some(v.parse().map_err(|_| bad("sinceTime"))?),
                _ => {}
            }
        }
        let invalid = |msg: &str| Err((StatusCode::UNPROCESSABLE_ENTITY, msg.to_string()));
        if q.since_seconds.is_some() && q.since_time.is_some() {
            return invalid("at most one of `sinceTime` or `sinceSeconds` may be specified");
        }
        if q.since_seconds.is_some_and(|s| s < 1) {
            return invalid("sinceSeconds: Invalid value: must be greater than 0");
        }
        if q.tail_lines.is_some_and(|t| t < 0) {
            return invalid("tailLines: Invalid value: must be greater than or equal to 0");
        }
        if q.limit_bytes.is_some_and(|l| l < 1) {
            return invalid("limitBytes: Invalid value: must be greater than 0");
        }
        Ok(q)
    }

    /// The selection at instant `now`.
    pub fn selection(&self, now: Timestamp) -> Selection {
        let since = match (self.since_time, self.since_seconds) {
            (Some(t), _) => Some(t),
            (None, Some(s)) => now
                .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(s))
                .ok(),
            (None, None) => None,
        };
        Selection {
            since,
            tail_lines: self.tail_lines.and_then(|t| u64::try_from(t).ok()),
            limit_bytes: self.limit_bytes.and_then(|t| u64::try_from(t).ok()),
            timestamps: self.timestamps,
        }
    }
}

/// The instances of a pod's container known to the runtime, newest first.
pub(crate) fn instances(
    all: Vec<cri::Container>,
    namespace: &str,
    pod: &str,
    container: &str,
) -> (bool, Vec<cri::Container>) {
    let of_pod: Vec<cri::Container> = all
        .into_iter()
        .filter(|c| {
            c.labels.get(LABEL_POD_NAMESPACE).map(String::as_str) == Some(namespace)
                && c.labels.get(LABEL_POD_NAME).map(String::as_str) == Some(pod)
        })
        .collect();
    let pod_known = !of_pod.is_empty();
    let mut mine: Vec<cri::Container> = of_pod
        .into_iter()
        .filter(|c| c.labels.get(LABEL_CONTAINER_NAME).map(String::as_str) == Some(container))
        .collect();
    mine.sort_by_key(|c| {
        std::cmp::Reverse((
            c.created_at,
            c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
        ))
    });
    (pod_known, mine)
}

async fn container_logs(
    State(ctx): State<Ctx>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    let query = match LogQuery::parse(req.uri().query().unwrap_or("")) {
        Ok(q) => q,
        Err((code, msg)) => return text(code, msg),
    };
    let all = match ctx.cri.list_containers().await {
        Ok(all) => all,
        Err(err) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("listing containers: {err}"),
            )
        }
    };
    let (pod_known, found) = instances(all, &namespace, &pod, &container);
    if !pod_known {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod \"{namespace}/{pod}\" does not exist\n"),
        );
    }
    let index = usize::from(query.previous);
    let Some(instance) = found.get(index) else {
        return if query.previous {
            text(
                StatusCode::BAD_REQUEST,
                format!("previous terminated container \"{container}\" in pod \"{pod}\" not found"),
            )
        } else {
            text(
                StatusCode::NOT_FOUND,
                format!("container \"{container}\" not found in pod \"{namespace}/{pod}\"\n"),
            )
        };
    };
    let status = match ctx.cri.container_status(&instance.id).await {
        Ok(s) => s,
        Err(err) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("container status: {err}"),
            )
        }
    };
    if status.log_path.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            format!("container \"{container}\" in pod \"{pod}\" has no log file"),
        );
    }
    let selection = query.selection(Timestamp::now());
    let (tx, rx) = mpsc::channel::<bytes::Bytes>(16);
    let follow = query.follow && !query.previous;
    let follower = Follower {
        cri: ctx.cri.clone(),
        id: instance.id.clone(),
        path: PathBuf::from(status.log_path),
        selection,
        follow,
    };
    tokio::spawn(follower.run(tx, ctx.shutdown.clone()));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "building the response"))
}

/// Copies one container's log to a client.
struct Follower {
    cri: CriClient,
    id: String,
    path: PathBuf,
    selection: Selection,
    follow: bool,
}

impl Follower {
    async fn running(&self) -> bool {
        match self.cri.container_status(&self.id).await {
            Ok(s) => {
                s.state == cri::ContainerState::ContainerRunning as i32
                    || s.state == cri::ContainerState::ContainerCreated as i32
            }
            Err(_) => false,
        }
    }

    /// The file now at the log path, when it is not `current` (the log was rotated).
    async fn rotated(&self, current: &tokio::fs::File) -> Option<tokio::fs::File> {
        use std::os::unix::fs::MetadataExt as _;
        let now = tokio::fs::metadata(&self.path).await.ok()?;
        let open = current.metadata().await.ok()?;
        if (now.dev(), now.ino()) == (open.dev(), open.ino()) {
            return None;
        }
        tokio::fs::File::open(&self.path).await.ok()
    }

    async fn run(self, tx: mpsc::Sender<bytes::Bytes>, mut shutdown: Shutdown) {
        let mut budget = ByteBudget::new(self.selection.limit_bytes);
        let mut decoder = LineDecoder::default();
        let mut file = match tokio::fs::File::open(&self.path).await {
            Ok(f) => f,
            Err(err) => {
                tracing::debug!(path = %self.path.display(), %err, "container log not readable");
                return;
            }
        };
        let mut existing = Vec::new();
        if file.read_to_end(&mut existing).await.is_err() {
            return;
        }
        let first = self.selection.initial(decoder.feed(&existing));
        let mut out = Vec::new();
        for line in first {
            match budget.take(line.render(self.selection.timestamps)) {
                Some(b) => out.extend_from_slice(&b),
                None => break,
            }
        }
        if !out.is_empty() && tx.send(out.into()).await.is_err() {
            return;
        }
        if !self.follow || budget.spent() {
            return;
        }
        let mut chunk = vec![0u8; 64 * 1024];
        let mut exited = false;
        loop {
            let n = match file.read(&mut chunk).await {
                Ok(n) => n,
                Err(_) => return,
            };
            if n > 0 {
                let mut out = Vec::new();
                for line in decoder.feed(&chunk[..n]) {
                    if !self.selection.wanted(&line) {
                        continue;
                    }
                    match budget.take(line.render(self.selection.timestamps)) {
                        Some(b) => out.extend_from_slice(&b),
                        None => break,
                    }
                }
                if !out.is_empty() && tx.send(out.into()).await.is_err() {
                    return;
                }
                if budget.spent() {
                    return;
                }
                continue;
            }
            // Rotated (renamed away, and the runtime writes a new file at the path): the old
            // file is read to its end above, so the new one is read from its start.
            if let Some(next) = self.rotated(&file).await {
                file = next;
                continue;
            }
            if exited {
                return;
            }
            tokio::select! {
                _ = tx.closed() => return,
                _ = shutdown.wait() => return,
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
            }
            // One more read after the container stopped picks up its last lines.
            exited = !self.running().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_query_decodes_pod_log_options_and_validates_them() {
        let q =
            LogQuery::parse("follow=true&timestamps=1&tailLines=5&limitBytes=10&sinceSeconds=3")
                .expect("valid");
        assert!(q.follow && q.timestamps && !q.previous);
        assert_eq!(
            (q.tail_lines, q.limit_bytes, q.since_seconds),
            (Some(5), Some(10), Some(3))
        );
        let q = LogQuery::parse("sinceTime=2026-01-02T03%3A04%3A05Z&previous=true").expect("valid");
        assert_eq!(
            q.since_time,
            Some("2026-01-02T03:04:05Z".parse().expect("ts"))
        );
        assert!(q.previous);
        let now: Timestamp = "2026-01-02T03:04:10Z".parse().expect("ts");
        assert_eq!(
            LogQuery::parse("sinceSeconds=10")
                .expect("valid")
                .selection(now)
                .since,
            Some("2026-01-02T03:04:00Z".parse().expect("ts"))
        );
        assert_eq!(
            LogQuery::parse("tailLines=x").map_err(|e| e.0),
            Err(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            LogQuery::parse("follow=maybe").map_err(|e| e.0),
            Err(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            LogQuery::parse("tailLines=-1").map_err(|e| e.0),
            Err(StatusCode::UNPROCESSABLE_ENTITY)
        );
        assert_eq!(
            LogQuery::parse("limitBytes=0").map_err(|e| e.0),
            Err(StatusCode::UNPROCESSABLE_ENTITY)
        );
        assert_eq!(
            LogQuery::parse("sinceSeconds=0").map_err(|e| e.0),
            Err(StatusCode::UNPROCESSABLE_ENTITY)
        );
        let both = "sinceSeconds=1&sinceTime=2026-01-02T03:04:05Z";
        assert_eq!(
            LogQuery::parse(both).map_err(|e| e.0),
            Err(StatusCode::UNPROCESSABLE_ENTITY)
        );
    }
}
