//! `GET /api/v1/namespaces/<ns>/pods/<name>/log`: the `pods/log` subresource (upstream
//! `pkg/registry/core/pod/rest/log.go` and `LogLocation` in `pkg/registry/core/pod/strategy.go`).
//!
//! The container is checked against the pod (400 `a container name must be specified for pod
//! <pod>, choose one of: [<names>]`, 400 `container <c> is not valid for pod <pod>`), the pod must
//! run on a node with a started container (400 `container "<c>" in pod "<pod>" is waiting to
//! start: <reason>`; `previous` needs a terminated earlier instance: 400 `previous terminated
//! container "<c>" in pod "<pod>" not found`), then the request goes to the kubelet of
//! `spec.nodeName` — its InternalIP (else Hostname, else ExternalIP) and
//! `status.daemonEndpoints.kubeletEndpoint.port` — at `/containerLogs/<ns>/<pod>/<container>`
//! with the `PodLogOptions` query parameters, and its body streams back as `text/plain`. A kubelet
//! error comes back as a `Status` with the kubelet's code and text.

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::Response;
use futures::TryStreamExt;
use serde_json::Value;

use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::kubelet_client::{KubeletClient, DEFAULT_KUBELET_PORT};
use crate::source::decode_stored;
use crate::state::ApiState;

/// The `PodLogOptions` query parameters passed on to the kubelet.
const FORWARDED: &[&str] = &["follow", "previous", "timestamps", "sinceSeconds", "sinceTime", "tailLines", "limitBytes"];

fn names(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|c| c["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The container to read: the one asked for (which must exist in the pod), or the only one.
///
/// # Errors
/// 400 as upstream's `ValidateContainer`.
pub fn choose_container(pod: &Value, asked: Option<&str>) -> ApiResult<String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let spec = &pod["spec"];
    let regular = names(spec.get("containers"));
    let mut all = names(spec.get("initContainers"));
    all.extend(regular.iter().cloned());
    all.extend(names(spec.get("ephemeralContainers")));
    match asked {
        Some(c) if !c.is_empty() => {
            if all.iter().any(|n| n == c) {
                Ok(c.to_string())
            } else {
                Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}")))
            }
        }
        _ => match regular.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!("a container name must be specified for pod {name}"))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                all.join(" ")
            ))),
        },
    }
}

/// Checks the container's status allows reading its log (upstream kubelet's
/// `validateContainerLogStatus`, answered here from the pod's status).
///
/// # Errors
/// 400 when the container has not started, or `previous` has no earlier instance.
pub fn check_status(pod: &Value, container: &str, previous: bool) -> ApiResult<()> {
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or("");
    let status = ["initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"]
        .iter()
        .filter_map(|k| pod["status"][*k].as_array())
        .flatten()
        .find(|s| s["name"].as_str() == Some(container));
    if previous {
        let has_previous = status.is_some_and(|s| s["lastState"]["terminated"].is_object());
        if !has_previous {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{pod_name}\" not found"
            )));
        }
        return Ok(());
    }
    let started = status.is_some_and(|s| {
        s["state"]["running"].is_object() || s["state"]["terminated"].is_object() || s["lastState"]["terminated"].is_object()
    });
    if started {
        return Ok(());
    }
    let reason = status.and_then(|s| s["state"]["waiting"]["reason"].as_str()).unwrap_or("ContainerCreating");
    let why = match reason {
        "ErrImagePull" => "image can't be pulled".to_string(),
        "ImagePullBackOff" => "trying and failing to pull image".to_string(),
        other => other.to_string(),
    };
    Err(ApiError::bad_request(format!("container \"{container}\" in pod \"{pod_name}\" is waiting to start: {why}")))
}

/// The kubelet's `host:port` from a Node: InternalIP, else Hostname, else ExternalIP, and the
/// published kubelet port (10250 when none).
pub fn kubelet_host_port(node: &Value) -> Option<String> {
    let addresses = node["status"]["addresses"].as_array()?;
    let host = ["InternalIP", "Hostname", "ExternalIP"].iter().find_map(|t| {
        addresses.iter().find(|a| a["type"].as_str() == Some(*t)).and_then(|a| a["address"].as_str())
    })?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_i64()
        .filter(|p| *p > 0 && *p < 65536)
        .unwrap_or(i64::from(DEFAULT_KUBELET_PORT));
    let host = if host.contains(':') { format!("[{host}]") } else { host.to_string() };
    Some(format!("{host}:{port}"))
}

/// The kubelet `host:port` of node `node_name` ([`kubelet_host_port`] of the stored Node).
///
/// # Errors
/// 404 `NotFound` for an unknown node; 500 for a node that publishes no address, or a storage
/// error.
pub async fn kubelet_address(st: &ApiState, node_name: &str) -> ApiResult<String> {
    let nodes = rkube_api::registry::lookup("", "v1", "nodes").ok_or_else(|| ApiError::internal("no nodes resource"))?;
    let node_key = nodes.object_key(st.prefix(), "", node_name);
    let kv = st.storage.get(&node_key).await.map_err(|e| ApiError::from_storage(e, nodes, node_name))?;
    let kv = kv.ok_or_else(|| ApiError::not_found(nodes, node_name))?;
    let node = decode_stored(&kv.key, &kv.value, kv.mod_revision).map_err(|e| ApiError::from_storage(e, nodes, node_name))?;
    kubelet_host_port(&node).ok_or_else(|| ApiError::internal(format!("node {node_name:?} publishes no address for its kubelet")))
}

/// The configured kubelet client (`--kubelet-client-certificate`, ...), or one without client
/// certificate or CA when none is configured.
///
/// # Errors
/// 500 when the client cannot be built.
pub fn kubelet_client(st: &ApiState) -> ApiResult<KubeletClient> {
    match &st.config.kubelet_client {
        Some(c) => Ok(c.clone()),
        None => KubeletClient::from_args(&Default::default()).map_err(ApiError::internal),
    }
}

/// The `Status` of a kubelet's error answer: its code, upstream's reason for it, its text.
pub fn status_for(code: u16, text: &str) -> ApiError {
    let reason = match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        422 => "Invalid",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    };
    rkube_api::status::Status::new(code, reason, text.trim().to_string()).into()
}

/// Serves `GET pods/<name>/log` (see the module docs).
///
/// # Errors
/// 404 for a missing pod; the 400s above; a kubelet error's code; 500 when the kubelet cannot be
/// reached.
pub async fn get(ctx: &Ctx) -> ApiResult<Response> {
    let name = ctx.name();
    let (pod, _) = ctx.load(&ctx.key(name), name).await?.ok_or_else(|| ApiError::not_found(ctx.ri.info, name))?;
    let container = choose_container(&pod, ctx.q("container"))?;
    let previous = matches!(ctx.q("previous"), Some("true" | "1" | "t" | "True" | "TRUE"));
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or("");
    if node_name.is_empty() {
        let reason = "ContainerCreating";
        return Err(ApiError::bad_request(format!("container \"{container}\" in pod \"{name}\" is waiting to start: {reason}")));
    }
    check_status(&pod, &container, previous)?;
    let host_port = kubelet_address(&ctx.st, node_name).await?;
    let mut url = format!("https://{host_port}/containerLogs/{}/{name}/{container}", ctx.namespace());
    let params: Vec<(&str, &str)> =
        ctx.query.iter().filter(|(k, _)| FORWARDED.contains(&k.as_str())).map(|(k, v)| (k.as_str(), v.as_str())).collect();
    if !params.is_empty() {
        url.push('?');
        url.push_str(&form_urlencoded::Serializer::new(String::new()).extend_pairs(params).finish());
    }
    let client = kubelet_client(&ctx.st)?;
    let answer = client.http.get(&url).send().await.map_err(|e| ApiError::internal(format!("Get {url:?}: {e}")))?;
    let code = answer.status();
    if !code.is_success() {
        let body = answer.bytes().await.unwrap_or_default();
        let text = String::from_utf8_lossy(&body[..body.len().min(1024)]).into_owned();
        return Err(status_for(code.as_u16(), &text));
    }
    let stream = answer.bytes_stream().map_err(std::io::Error::other);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from_stream(stream))
        .map_err(ApiError::internal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: &[&str]) -> Value {
        let cs: Vec<Value> = containers.iter().map(|c| json!({"name": c, "image": "x"})).collect();
        json!({"metadata": {"name": "web"}, "spec": {"containers": cs, "initContainers": [{"name": "init", "image": "x"}]}})
    }

    fn message(e: ApiError) -> (u16, String) {
        let s = e.to_status();
        (e.code(), s["message"].as_str().unwrap_or("").to_string())
    }

    #[test]
    fn container_is_required_when_the_pod_has_several_and_must_exist() {
        assert_eq!(choose_container(&pod(&["a"]), None).expect("only one"), "a");
        assert_eq!(choose_container(&pod(&["a", "b"]), Some("b")).expect("named"), "b");
        assert_eq!(choose_container(&pod(&["a", "b"]), Some("init")).expect("init containers count"), "init");
        let err = choose_container(&pod(&["a", "b"]), None).expect_err("ambiguous");
        assert_eq!(message(err), (400, "a container name must be specified for pod web, choose one of: [init a b]".into()));
        let err = choose_container(&pod(&["a"]), Some("y")).expect_err("unknown");
        assert_eq!(message(err), (400, "container y is not valid for pod web".into()));
    }

    #[test]
    fn waiting_containers_and_missing_previous_instances_are_bad_requests() {
        let mut p = pod(&["c"]);
        let err = check_status(&p, "c", false).expect_err("no status yet");
        assert_eq!(message(err), (400, "container \"c\" in pod \"web\" is waiting to start: ContainerCreating".into()));
        p["status"] = json!({"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ErrImagePull"}}}]});
        let err = check_status(&p, "c", false).expect_err("image");
        assert_eq!(message(err).1, "container \"c\" in pod \"web\" is waiting to start: image can't be pulled");
        p["status"] = json!({"containerStatuses": [{"name": "c", "state": {"running": {}}, "lastState": {}}]});
        assert!(check_status(&p, "c", false).is_ok());
        let err = check_status(&p, "c", true).expect_err("no previous");
        assert_eq!(message(err), (400, "previous terminated container \"c\" in pod \"web\" not found".into()));
        p["status"]["containerStatuses"][0]["lastState"] = json!({"terminated": {"exitCode": 1}});
        assert!(check_status(&p, "c", true).is_ok());
    }

    #[test]
    fn kubelet_address_prefers_internal_ip_and_the_published_port() {
        let node = json!({"status": {
            "addresses": [{"type": "Hostname", "address": "box"}, {"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 40123}}}});
        assert_eq!(kubelet_host_port(&node).as_deref(), Some("127.0.0.1:40123"));
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "box"}]}});
        assert_eq!(kubelet_host_port(&node).as_deref(), Some("box:10250"));
        let node = json!({"status": {"addresses": [{"type": "InternalIP", "address": "::1"}]}});
        assert_eq!(kubelet_host_port(&node).as_deref(), Some("[::1]:10250"));
        assert_eq!(kubelet_host_port(&json!({"status": {}})), None);
    }
}
