//! A real client against the cache-backed server: kube-rs's `watcher` +
//! `reflector` store (what controllers use), with client-go-style paged
//! LIST + WATCH and with WatchList (`InitialListStrategy::StreamingList`).
//! After a burst of creates, updates and deletes the store must equal the
//! server's state, with no re-list (one `Init` only).

use crate::cache_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cache_support::Apiserver;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use serde_json::json;

const CM: &str = "/api/v1/namespaces/default/configmaps";

/// name → resourceVersion as the server lists it (a consistent LIST).
async fn server_state(api: &cache_support::Api) -> BTreeMap<String, String> {
    let r = api.get(CM).await;
    assert_eq!(r.code, 200, "{}", r.text);
    r.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            let m = &i["metadata"];
            (m["name"].as_str().unwrap_or("").to_string(), m["resourceVersion"].as_str().unwrap_or("").to_string())
        })
        .collect()
}

async fn reflector_follows_a_burst(config: watcher::Config) {
    let s = Apiserver::spawn(&[], &[]);
    let api = s.api.clone();
    api.wait_ready(30).await;
    for i in 0..12 {
        api.configmap(&format!("pre-{i:02}")).await;
    }

    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = kube::Config::new(api.base.parse().expect("server URL"));
    let client = kube::Client::try_from(kc).expect("kube client");
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    let (store, writer) = reflector::store();
    let inits = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let (i2, e2) = (inits.clone(), errors.clone());
    let task = tokio::spawn(async move {
        let stream = watcher(cms, config).reflect(writer);
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Init) => {
                    i2.fetch_add(1, Ordering::SeqCst);
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("watcher error: {e}");
                    e2.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(20), store.wait_until_ready()).await.expect("store ready").expect("ready");

    // The burst: 40 creates, 25 updates, 15 deletes.
    for i in 0..40 {
        api.configmap(&format!("burst-{i:02}")).await;
    }
    for i in 0..25 {
        let path = format!("{CM}/burst-{i:02}");
        let mut obj = api.get(&path).await.body;
        obj["data"] = json!({"k": format!("v{i}")});
        assert_eq!(api.send("PUT", &path, Some(&obj)).await.code, 200);
    }
    for i in 25..40 {
        assert_eq!(api.send("DELETE", &format!("{CM}/burst-{i:02}"), None).await.code, 200);
    }

    let want = server_state(&api).await;
    assert_eq!(want.len(), 12 + 25);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got: BTreeMap<String, String> = store
            .state()
            .iter()
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), c.metadata.resource_version.clone().unwrap_or_default()))
            .collect();
        if got == want {
            break;
        }
        assert!(Instant::now() < deadline, "store never matched the server:\nstore {got:?}\nserver {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(inits.load(Ordering::SeqCst), 1, "the watcher re-listed");
    assert_eq!(errors.load(Ordering::SeqCst), 0, "the watcher saw errors");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reflector_with_paged_list_and_watch_matches_the_server_after_a_burst() {
    // Pages of 5: the initial LIST walks continue tokens.
    reflector_follows_a_burst(watcher::Config::default().page_size(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reflector_with_streaming_list_matches_the_server_after_a_burst() {
    reflector_follows_a_burst(watcher::Config::default().streaming_lists()).await;
}
