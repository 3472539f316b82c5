//! Routing and serving: one fallback handler splits the path into
//! non-resource endpoints, discovery, and resource requests (upstream's
//! `RequestInfoFactory` split), and [`serve`] runs it with graceful shutdown.
//!
//! Paths:
//!
//! ```text
//! /version  /healthz[/<check>]  /livez[/<check>]  /readyz[/<check>]   (<check> may be poststarthook/<name>)
//! /openapi/v2  /openapi/v3  /openapi/v3/<path>
//! /.well-known/openid-configuration  /openid/v1/jwks                   (ServiceAccount issuer discovery)
//! /api  /api/v1[/...]  /apis  /apis/<group>  /apis/<group>/<version>[/...]
//! ```
//!
//! Anything else is 404 `NotFound`; a method other than GET on a read-only
//! endpoint is 405 `MethodNotAllowed`.

use std::future::Future;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::net::TcpListener;

use crate::discovery;
use crate::error::ApiError;
use crate::handlers;
use crate::state::ApiState;
use crate::system::{self, Endpoint};

/// The router serving every endpoint with `st`.
pub fn router(st: ApiState) -> Router {
    Router::new().fallback(handle).with_state(st)
}

fn only_get(method: &Method) -> Result<(), ApiError> {
    if *method == Method::GET || *method == Method::HEAD {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed())
    }
}

async fn handle(State(st): State<ApiState>, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    // Taken here so that streaming subresources (pods/exec) can switch protocols.
    let upgrade = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
    let path = match crate::request::decode_path(parts.uri.path()) {
        Ok(p) => p.into_owned(),
        Err(e) => return e.into_response(),
    };
    let segs: Vec<&str> = path.trim_start_matches('/').trim_end_matches('/').split('/').collect();
    let method = parts.method.clone();
    let user = parts.extensions.get::<crate::filters::authn::UserInfo>().cloned();
    let query: Vec<(String, String)> =
        axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&parts.uri).map(|q| q.0).unwrap_or_default();
    let gets = |f: &dyn Fn() -> Response| match only_get(&method) {
        Ok(()) => f(),
        Err(e) => e.into_response(),
    };
    let started = std::time::Instant::now();
    let annotations = parts.extensions.get::<crate::filters::audit::AuditAnnotations>().cloned().unwrap_or_default();
    let resp = crate::filters::audit::with_request_annotations(annotations, async { match segs.as_slice() {
        ["version"] => gets(&system::version),
        ["metrics"] => gets(&|| crate::filters::metrics::metrics_response(&st.metrics)),
        // `/<endpoint>/<check>`; check names may hold one slash (`poststarthook/<name>`).
        [ep @ ("healthz" | "livez" | "readyz"), rest @ ..] if rest.len() <= 2 => {
            if let Err(e) = only_get(&method) {
                return e.into_response();
            }
            let endpoint = match *ep {
                "healthz" => Endpoint::Healthz,
                "livez" => Endpoint::Livez,
                _ => Endpoint::Readyz,
            };
            let check = (!rest.is_empty()).then(|| rest.join("/"));
            system::health(&st, endpoint, check.as_deref(), &query).await
        }
        [".well-known", "openid-configuration"] => {
            gets(&|| crate::serviceaccount::discovery_response(st.service_account_tokens.as_deref(), false))
        }
        ["openid", "v1", "jwks"] => gets(&|| crate::serviceaccount::discovery_response(st.service_account_tokens.as_deref(), true)),
        ["openapi", "v2"] => gets(&|| system::openapi_v2(&parts.headers)),
        ["openapi", "v3"] => gets(&system::openapi_v3_index),
        ["openapi", "v3", rest @ ..] => {
            let p = rest.join("/");
            gets(&|| system::openapi_v3(&p))
        }
        ["api"] => {
            let host = parts.headers.get("host").and_then(|v| v.to_str().ok()).unwrap_or("127.0.0.1").to_string();
            gets(&|| discovery::api(&parts.headers, &host))
        }
        ["api", "v1"] => gets(&|| discovery::resource_list("", "v1")),
        ["api", "v1", rest @ ..] => {
            handlers::dispatch(
                st.clone(),
                user.clone(),
                method.clone(),
                parts.uri.clone(),
                parts.headers.clone(),
                body,
                "",
                "v1",
                rest,
                upgrade,
            )
            .await
        }
        ["apis"] => gets(&|| discovery::apis(&parts.headers)),
        ["apis", g] => gets(&|| discovery::group(g)),
        ["apis", g, v] => gets(&|| discovery::resource_list(g, v)),
        ["apis", g, v, rest @ ..] => {
            handlers::dispatch(st.clone(), user.clone(), method.clone(), parts.uri.clone(), parts.headers.clone(), body, g, v, rest, None)
                .await
        }
        _ => ApiError::path_not_found().into_response(),
    }})
    .await;
    tracing::debug!(
        method = %method,
        path = %path,
        code = resp.status().as_u16(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request"
    );
    resp
}

/// Serves `st` on `listener` (plain HTTP, through
/// [`crate::filters::tls::serve`], so with its header read timeout), with
/// the CRD controllers ([`crate::controllers::crds::start`]: stored CRDs are
/// served before the first request) until
/// `shutdown` completes; then stops accepting, ends open watches and waits
/// for in-flight requests.
pub async fn serve(
    listener: TcpListener,
    st: ApiState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stopping = st.shutdown.clone();
    let signal = async move {
        shutdown.await;
        let _ = stopping.send(true);
    };
    crate::controllers::crds::start(&st).await;
    crate::filters::tls::serve(listener, router(st), None, signal).await
}

pub use crate::builtin_objects::SYSTEM_NAMESPACES;

/// Creates the objects every cluster has from its first start (system
/// namespaces, built-in PriorityClasses, the mandatory flow-control objects,
/// local APIServices) that are missing: [`crate::builtin_objects`].
pub async fn bootstrap(st: &ApiState) -> Result<(), ApiError> {
    crate::builtin_objects::ensure(st).await
}

/// Convenience for tests and embedding: a state over `storage` with default settings.
pub fn default_state(storage: Arc<dyn rkube_storage::Storage>) -> ApiState {
    ApiState::new(storage, crate::state::ServerConfig::default())
}

/// Serves the API server `st` behind `chain` on `listener` (HTTPS when the
/// chain has a serving certificate) until `shutdown` completes; then ends
/// open watches (`st.shutdown`), waits for open requests and flushes the
/// audit log. `/metrics` renders the chain's registry with the state's cache
/// families attached ([`ApiState::with_metrics`]). With priority and
/// fairness on, the chain classifies requests by the FlowSchemas the watch
/// cache holds ([`crate::flowcontrol::run`]). The filter chain
/// ([`crate::filters`]) knows nothing of the server it wraps.
pub async fn serve_api(
    listener: tokio::net::TcpListener,
    st: ApiState,
    chain: &crate::filters::FilterChain,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stopping = st.shutdown.clone();
    let signal = async move {
        shutdown.await;
        let _ = stopping.send(true);
    };
    crate::controllers::crds::start(&st).await;
    if let Some(fc) = chain.flow_control() {
        tokio::spawn(crate::flowcontrol::run(st.clone(), fc, st.shutdown.subscribe()));
    }
    let st = st.with_metrics(chain.metrics()).with_authorizer(chain.authorizer()).with_authenticator(chain.authenticator());
    let router = crate::filters::apply(router(st), chain);
    let served = crate::filters::serve(listener, router, chain.tls_server_config(), signal).await;
    chain.shutdown().await;
    served
}
