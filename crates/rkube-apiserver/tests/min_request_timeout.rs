//! `--min-request-timeout`: a watch whose client gave no `timeoutSeconds`
//! ends after a random duration in `[min, 2·min)` (upstream
//! `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go`,
//! `ListResource`), whether the watch cache or storage serves it.

use crate::common;

use std::time::{Duration, Instant};

use common::TestServer;
use rkube_apiserver::ServerConfig;

/// Opens a watch without `timeoutSeconds` and returns how long its stream lasted.
async fn watch_lasts(srv: &TestServer) -> Duration {
    let started = Instant::now();
    let resp = srv
        .client
        .get(format!("{}/api/v1/namespaces/default/configmaps?watch=true", srv.base))
        .send()
        .await
        .expect("watch");
    assert_eq!(resp.status().as_u16(), 200);
    let body = tokio::time::timeout(Duration::from_secs(30), resp.bytes()).await;
    body.expect("the server ended the watch").expect("a clean end");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_end_between_min_request_timeout_and_twice_it() {
    for cache in [true, false] {
        let mut config = ServerConfig { min_request_timeout: 1, ..ServerConfig::default() };
        config.watch_cache.enabled = cache;
        let srv = TestServer::embedded_with(config).await;
        for _ in 0..3 {
            let lasted = watch_lasts(&srv).await;
            // [1 s, 2 s) on the server, plus the client's round trips.
            assert!(lasted >= Duration::from_secs(1) && lasted < Duration::from_secs(4), "cache {cache}: {lasted:?}");
        }
    }
}
