//! The Retry-After layer of every component's client against a real HTTP
//! server on loopback that answers as the test scripts it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

/// One answer of the scripted server: status and `Retry-After`, if any.
type Answer = (StatusCode, Option<&'static str>);

/// What the server saw and has left to say.
#[derive(Default)]
struct Script {
    /// Answers still to give, first first; once empty, every answer is 201 with the object sent.
    answers: Vec<Answer>,
    /// Method, path and body of every request, in order.
    seen: Vec<(Method, String, Bytes)>,
}

/// A server on 127.0.0.1:0 answering with `answers`, then 201; stopped when dropped.
struct Server {
    url: String,
    script: Arc<Mutex<Script>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(answers: Vec<Answer>) -> Server {
    let script = Arc::new(Mutex::new(Script { answers, seen: Vec::new() }));
    let state = script.clone();
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri, _h: HeaderMap, body: Bytes| {
        let state = state.clone();
        async move { answer(&state, method, uri, body) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server { url, script, task }
}

fn answer(state: &Mutex<Script>, method: Method, uri: Uri, body: Bytes) -> Response {
    let mut script = state.lock().expect("script");
    script.seen.push((method, uri.path().to_string(), body.clone()));
    if script.answers.is_empty() {
        return (StatusCode::CREATED, [("content-type", "application/json")], body).into_response();
    }
    let (status, retry_after) = script.answers.remove(0);
    let status_body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Too many requests, please try again later.", "reason": "TooManyRequests", "code": status.as_u16()});
    let mut response = (status, [("content-type", "application/json")], status_body.to_string()).into_response();
    if let Some(secs) = retry_after {
        response.headers_mut().insert("retry-after", secs.parse().expect("header"));
    }
    response
}

fn client(server: &Server) -> kube::Client {
    let config = kube::Config::new(server.url.parse().expect("url"));
    rkube_component::client::client_from_config(config).expect("client")
}

fn config_map() -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "default"}, "data": {"k": "v"}}))
    .expect("config map")
}

/// A create answered 429 `Retry-After: 1` twice is sent a third time, after
/// two waits of a second, with the same body each time, and succeeds.
#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_and_sent_again_with_the_same_body() {
    let too_many = (StatusCode::TOO_MANY_REQUESTS, Some("1"));
    let server = serve(vec![too_many, too_many]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let start = Instant::now();
    let created = api.create(&PostParams::default(), &config_map()).await.expect("created after two retries");
    assert!(start.elapsed() >= Duration::from_secs(2), "waited {:?}", start.elapsed());
    assert_eq!(created.data.and_then(|d| d.get("k").cloned()).as_deref(), Some("v"));
    let seen = server.script.lock().expect("script").seen.clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (method, path, body) in &seen {
        assert_eq!((method, path.as_str()), (&Method::POST, "/api/v1/namespaces/default/configmaps"));
        assert_eq!(body, &seen[0].2);
    }
    let sent: serde_json::Value = serde_json::from_slice(&seen[0].2).expect("json body");
    assert_eq!(sent["data"]["k"], "v");
}

/// Without `Retry-After` client-go's `checkWait` says no wait: the 429 is
/// the answer, after one request.
#[tokio::test]
async fn a_429_without_retry_after_is_not_retried() {
    let server = serve(vec![(StatusCode::TOO_MANY_REQUESTS, None)]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let err = api.create(&PostParams::default(), &config_map()).await.expect_err("429");
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 429), "{err:?}");
    assert_eq!(server.script.lock().expect("script").seen.len(), 1);
}

/// A server that keeps answering 429 (here `Retry-After: 0`) gets the
/// request 1 + `MAX_RETRIES` times, then the client returns the 429; a 503
/// with `Retry-After` is retried as well, as in client-go.
#[tokio::test]
async fn retries_stop_after_client_gos_ten() {
    let tries = 1 + rkube_component::client::MAX_RETRIES as usize;
    let server = serve(vec![(StatusCode::TOO_MANY_REQUESTS, Some("0")); tries + 1]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let err = api.get("cm").await.expect_err("still 429");
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 429), "{err:?}");
    assert_eq!(server.script.lock().expect("script").seen.len(), tries);

    let server = serve(vec![(StatusCode::SERVICE_UNAVAILABLE, Some("0"))]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    api.create(&PostParams::default(), &config_map()).await.expect("created after a 503 with Retry-After");
    assert_eq!(server.script.lock().expect("script").seen.len(), 2);
}
