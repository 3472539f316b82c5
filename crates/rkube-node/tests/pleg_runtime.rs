//! Evented and generic PLEG against a real `rkube runtime` on a unix socket.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkube_node::cri::{CriClient, EventStream, RuntimeApi};
use rkube_node::pleg::connection::ConnectionState;
use rkube_node::pleg::metrics::CacheSource;
use rkube_node::pleg::{
    EventedPleg, GenericPleg, PlegMetrics, PlegState, PodCache, PodLifecycleEvent, PodLifecycleEventType,
    EVENTED_RELIST, GENERIC_RELIST, PLEG_CHANNEL_CAPACITY,
};
use rkube_node::shutdown::{self, Trigger};
use rkube_runtime::{cri, serve, serve_runtime, RuntimeConfig, RuntimeHandle};
use tokio::sync::mpsc;

struct Rig {
    _dir: tempfile::TempDir,
    handle: RuntimeHandle,
    client: CriClient,
    cache: Arc<PodCache>,
    metrics: PlegMetrics,
    evented: Arc<EventedPleg>,
    rx: mpsc::Receiver<PodLifecycleEvent>,
    trigger: Trigger,
    run: tokio::task::JoinHandle<()>,
}

async fn rig_with(wrap: impl FnOnce(CriClient) -> Arc<dyn RuntimeApi>) -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    let handle = serve(&dir.path().join("cri.sock"), RuntimeConfig::new(dir.path())).await.expect("serve");
    let client = CriClient::connect_lazy(&handle.endpoint()).expect("client");
    let api = wrap(client.clone());
    let cache = PodCache::new();
    let metrics = PlegMetrics::new();
    let (tx, rx) = mpsc::channel(PLEG_CHANNEL_CAPACITY);
    let generic = GenericPleg::new(Arc::clone(&api), Arc::clone(&cache), tx.clone(), metrics.clone());
    let evented = EventedPleg::new(api, Arc::clone(&cache), tx, metrics.clone(), generic);
    let (trigger, sd) = shutdown::channel();
    let run = tokio::spawn(Arc::clone(&evented).run(sd));
    Rig { _dir: dir, handle, client, cache, metrics, evented, rx, trigger, run }
}

async fn rig() -> Rig {
    rig_with(|c| Arc::new(c) as Arc<dyn RuntimeApi>).await
}

impl Rig {
    /// Waits until the stream is up and the relist its connection triggered has completed.
    async fn streaming(&self) {
        let mut conn = self.evented.connection();
        tokio::time::timeout(Duration::from_secs(5), conn.wait_for(|s| s.is_streaming()))
            .await
            .expect("stream up in time")
            .expect("state");
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.metrics.relists.get() < 2 {
            assert!(Instant::now() < deadline, "start-up and reconnect relists");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn pod(&self, uid: &str, argv: &[&str]) -> (String, String) {
        let sandbox_config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: format!("pod-{uid}"),
                uid: uid.into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        let sb = self.client.run_pod_sandbox(sandbox_config.clone()).await.expect("RunPodSandbox");
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: "main".into(), attempt: 0 }),
            command: argv.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let c = self.client.create_container(&sb, config, sandbox_config).await.expect("CreateContainer");
        self.client.start_container(&c).await.expect("StartContainer");
        (sb, c)
    }

    /// Waits for a lifecycle event of `kind` about `data`; returns the time it took.
    async fn expect_event(&mut self, kind: PodLifecycleEventType, data: &str, within: Duration) -> Duration {
        let start = Instant::now();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let ev = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .unwrap_or_else(|_| panic!("no {kind:?} for {data} within {within:?}"))
                .expect("channel open");
            if ev.r#type == kind && ev.data == data {
                return start.elapsed();
            }
        }
    }

    async fn stop(self) {
        self.trigger.fire();
        let _ = self.run.await;
        self.handle.shutdown().await;
    }
}

#[tokio::test]
async fn evented_pleg_reports_start_and_death_within_1s_from_events_not_relists() {
    let mut r = rig().await;
    r.streaming().await;
    let relists_before = r.metrics.relists.get();
    let relist_writes_before = r.metrics.cache_updates_by(CacheSource::Relist);
    let (_sb, c) = r.pod("uid-a", &["sh", "-c", "sleep 0.3; exit 7"]).await;
    r.expect_event(PodLifecycleEventType::ContainerStarted, &c, Duration::from_secs(1)).await;
    let died = r.expect_event(PodLifecycleEventType::ContainerDied, &c, Duration::from_secs(2)).await;
    assert!(died < Duration::from_secs(1), "died reported {died:?} after start");
    let status = r.cache.get("uid-a").status;
    let cs = status.container_statuses.iter().find(|s| s.id == c).expect("container in cache");
    assert_eq!((PlegState::from_container(cs.state), cs.exit_code), (PlegState::Exited, 7));
    assert!(r.metrics.cache_updates_by(CacheSource::Event) >= 4);
    assert_eq!(r.metrics.cache_updates_by(CacheSource::Relist), relist_writes_before, "no relist had to find it");
    assert_eq!(r.metrics.relists.get(), relists_before, "no relist at all while streaming");
    assert_eq!(r.evented.generic().relist_duration(), EVENTED_RELIST);
    assert_eq!(r.metrics.missed_events.get(), 0);
    r.stop().await;
}

#[tokio::test]
async fn relist_found_changes_without_events_count_as_missed() {
    let r = rig().await;
    r.streaming().await; // its reconnect relist marks the stream as covering the next interval
    // Control: a change with events is not missed.
    r.pod("uid-ok", &["sleep", "1000"]).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.evented.generic().relist().await.expect("relist");
    // A buggy runtime: the same kind of change, no events.
    r.handle.runtime().set_suppress_events(true);
    r.pod("uid-missed", &["sleep", "1000"]).await;
    let report = r.evented.generic().relist().await.expect("relist");
    let missed_pod: Vec<_> = report.changes.iter().filter(|c| c.pod == "uid-missed").collect();
    assert_eq!(missed_pod.len(), 2, "sandbox and container appeared: {:?}", report.changes);
    tokio::time::sleep(rkube_node::pleg::missed::EVENT_GRACE + Duration::from_millis(300)).await;
    assert_eq!(r.metrics.missed_events.get(), 2, "sandbox + container, nothing from the control pod");
    r.stop().await;
}

#[tokio::test]
async fn runtime_restart_backs_off_relists_at_1s_reconnects_and_keeps_status_right() {
    let mut r = rig().await;
    r.streaming().await;
    let (_sb, c) = r.pod("uid-r", &["sh", "-c", "sleep 1.5; exit 4"]).await;
    r.expect_event(PodLifecycleEventType::ContainerStarted, &c, Duration::from_secs(1)).await;
    // The runtime's server goes away (its processes stay, like a restarting daemon's shims).
    r.handle.stop_server().await;
    let mut conn = r.evented.connection();
    conn.wait_for(|s| !s.is_streaming()).await.expect("stream lost");
    assert_eq!(r.evented.generic().relist_duration(), GENERIC_RELIST, "generic at 1 s while down");
    // The container exits while no stream is open; the 1 s relist cannot reach the runtime either.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(matches!(*conn.borrow(), ConnectionState::BackingOff { .. }));
    let socket = r.handle.socket().to_path_buf();
    let runtime = Arc::clone(r.handle.runtime());
    let restarted = serve_runtime(&socket, runtime).await.expect("serve again");
    let old = std::mem::replace(&mut r.handle, restarted);
    drop(old);
    tokio::time::timeout(Duration::from_secs(10), conn.wait_for(|s| s.is_streaming()))
        .await
        .expect("reconnected within the back-off")
        .expect("state");
    // The reconnect relist finds the exit no event could deliver.
    r.expect_event(PodLifecycleEventType::ContainerDied, &c, Duration::from_secs(3)).await;
    let status = r.cache.get("uid-r").status;
    let cs = status.container_statuses.iter().find(|s| s.id == c).expect("container");
    assert_eq!(cs.exit_code, 4);
    assert!(r.metrics.connection_errors.get() >= 1);
    assert_eq!(r.metrics.connection_successes.get(), 2);
    assert_eq!(r.evented.generic().relist_duration(), EVENTED_RELIST);
    r.stop().await;
}

/// A runtime like containerd 1.6: everything but container events.
struct NoEvents(CriClient);

#[async_trait::async_trait]
impl RuntimeApi for NoEvents {
    async fn list_pod_sandbox(&self) -> rkube_node::cri::Result<Vec<cri::PodSandbox>> {
        self.0.list_pod_sandbox().await
    }
    async fn list_containers(&self) -> rkube_node::cri::Result<Vec<cri::Container>> {
        self.0.list_containers().await
    }
    async fn pod_sandbox_status(&self, id: &str) -> rkube_node::cri::Result<cri::PodSandboxStatusResponse> {
        // containerd 1.6 sends neither container statuses nor a timestamp.
        let mut resp = self.0.pod_sandbox_status(id).await?;
        resp.containers_statuses.clear();
        resp.timestamp = 0;
        Ok(resp)
    }
    async fn sandbox_container_statuses(&self, id: &str) -> rkube_node::cri::Result<Vec<cri::ContainerStatus>> {
        self.0.sandbox_container_statuses(id).await
    }
    async fn get_container_events(&self) -> rkube_node::cri::Result<EventStream> {
        Err(rkube_node::cri::CriError::Status {
            rpc: "GetContainerEvents",
            status: tonic::Status::unimplemented("unknown method GetContainerEvents"),
        })
    }
}

#[tokio::test]
async fn runtime_without_container_events_is_served_by_generic_relisting() {
    let mut r = rig_with(|c| Arc::new(NoEvents(c)) as Arc<dyn RuntimeApi>).await;
    let mut conn = r.evented.connection();
    tokio::time::timeout(Duration::from_secs(2), conn.wait_for(|s| *s == ConnectionState::Relisting))
        .await
        .expect("fell back")
        .expect("state");
    let (_sb, c) = r.pod("uid-g", &["sh", "-c", "exit 5"]).await;
    r.expect_event(PodLifecycleEventType::ContainerDied, &c, Duration::from_secs(3)).await;
    let status = r.cache.get("uid-g").status;
    let exit: HashMap<&str, i32> = status.container_statuses.iter().map(|s| (s.id.as_str(), s.exit_code)).collect();
    assert_eq!(exit.get(c.as_str()), Some(&5));
    assert_eq!(r.metrics.cache_updates_by(CacheSource::Event), 0);
    assert!(r.metrics.cache_updates_by(CacheSource::Relist) >= 1);
    assert!(r.evented.healthy().is_ok());
    r.stop().await;
}
