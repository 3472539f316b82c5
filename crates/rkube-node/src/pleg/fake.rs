//! A scripted [`RuntimeApi`] for PLEG unit tests: lists and statuses come from a shared
//! [`FakeWorld`], events from a channel the test feeds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use rkube_runtime::cri;
use tokio::sync::mpsc;

use crate::cri::{CriError, EventStream, Result, RuntimeApi};

/// The runtime's records as the fake reports them.
#[derive(Debug, Default)]
pub struct FakeWorld {
    pub sandboxes: Vec<cri::PodSandbox>,
    pub containers: Vec<cri::Container>,
    /// Runtime clock for status timestamps.
    pub now: i64,
    /// Sandbox ids whose PodSandboxStatus fails.
    pub failing: Vec<String>,
    /// Number of PodSandboxStatus calls.
    pub inspections: usize,
    /// GetContainerEvents answers Unimplemented.
    pub no_events: bool,
}

/// The fake runtime.
#[derive(Debug, Clone, Default)]
pub struct FakeRuntime {
    pub world: Arc<Mutex<FakeWorld>>,
    pub streams: Arc<Mutex<Vec<mpsc::UnboundedReceiver<Result<cri::ContainerEventResponse>>>>>,
}

impl FakeRuntime {
    pub fn with<R>(&self, f: impl FnOnce(&mut FakeWorld) -> R) -> R {
        f(&mut self.world.lock().expect("world"))
    }

    /// Queues a stream for the next GetContainerEvents call; returns its feeding end.
    pub fn next_stream(&self) -> mpsc::UnboundedSender<Result<cri::ContainerEventResponse>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.streams.lock().expect("streams").push(rx);
        tx
    }
}

pub fn sandbox(id: &str, uid: &str, ready: bool, created_at: i64) -> cri::PodSandbox {
    cri::PodSandbox {
        id: id.into(),
        metadata: Some(cri::PodSandboxMetadata { name: format!("pod-{uid}"), uid: uid.into(), namespace: "default".into(), attempt: 0 }),
        state: if ready { cri::PodSandboxState::SandboxReady } else { cri::PodSandboxState::SandboxNotready } as i32,
        created_at,
        ..Default::default()
    }
}

pub fn container(id: &str, sandbox: &str, name: &str, state: cri::ContainerState, created_at: i64) -> cri::Container {
    cri::Container {
        id: id.into(),
        pod_sandbox_id: sandbox.into(),
        metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
        state: state as i32,
        created_at,
        ..Default::default()
    }
}

pub fn sandbox_status(s: &cri::PodSandbox) -> cri::PodSandboxStatus {
    cri::PodSandboxStatus {
        id: s.id.clone(),
        metadata: s.metadata.clone(),
        state: s.state,
        created_at: s.created_at,
        network: Some(cri::PodSandboxNetworkStatus { ip: "10.0.0.1".into(), additional_ips: vec![] }),
        ..Default::default()
    }
}

pub fn container_status(c: &cri::Container, exit_code: i32) -> cri::ContainerStatus {
    cri::ContainerStatus {
        id: c.id.clone(),
        metadata: c.metadata.clone(),
        state: c.state,
        created_at: c.created_at,
        exit_code,
        ..Default::default()
    }
}

/// An event describing the world's pod `uid` right now.
pub fn event_for(world: &FakeWorld, uid: &str, cid: &str, kind: cri::ContainerEventType, at: i64) -> cri::ContainerEventResponse {
    let sb = world.sandboxes.iter().find(|s| s.metadata.as_ref().is_some_and(|m| m.uid == uid));
    cri::ContainerEventResponse {
        container_id: cid.into(),
        container_event_type: kind as i32,
        created_at: at,
        pod_sandbox_status: sb.map(sandbox_status),
        containers_statuses: sb
            .map(|s| {
                world.containers.iter().filter(|c| c.pod_sandbox_id == s.id).map(|c| container_status(c, 0)).collect()
            })
            .unwrap_or_default(),
    }
}

#[async_trait::async_trait]
impl RuntimeApi for FakeRuntime {
    async fn list_pod_sandbox(&self) -> Result<Vec<cri::PodSandbox>> {
        Ok(self.with(|w| w.sandboxes.clone()))
    }

    async fn list_containers(&self) -> Result<Vec<cri::Container>> {
        Ok(self.with(|w| w.containers.clone()))
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatusResponse> {
        self.with(|w| {
            w.inspections += 1;
            if w.failing.iter().any(|f| f == id) {
                return Err(CriError::Status { rpc: "PodSandboxStatus", status: tonic::Status::internal("scripted failure") });
            }
            let sb = w.sandboxes.iter().find(|s| s.id == id).ok_or(CriError::Status {
                rpc: "PodSandboxStatus",
                status: tonic::Status::not_found("no sandbox"),
            })?;
            w.now += 1;
            Ok(cri::PodSandboxStatusResponse {
                status: Some(sandbox_status(sb)),
                info: HashMap::new(),
                containers_statuses: w.containers.iter().filter(|c| c.pod_sandbox_id == id).map(|c| container_status(c, 0)).collect(),
                timestamp: w.now,
            })
        })
    }

    async fn sandbox_container_statuses(&self, sandbox_id: &str) -> Result<Vec<cri::ContainerStatus>> {
        Ok(self.with(|w| w.containers.iter().filter(|c| c.pod_sandbox_id == sandbox_id).map(|c| container_status(c, 0)).collect()))
    }

    async fn get_container_events(&self) -> Result<EventStream> {
        if self.with(|w| w.no_events) {
            return Err(CriError::Status { rpc: "GetContainerEvents", status: tonic::Status::unimplemented("no events") });
        }
        let rx = self.streams.lock().expect("streams").pop();
        match rx {
            Some(rx) => Ok(tokio_stream_from(rx)),
            None => Err(CriError::Status { rpc: "GetContainerEvents", status: tonic::Status::unavailable("no stream scripted") }),
        }
    }
}

fn tokio_stream_from(
    mut rx: mpsc::UnboundedReceiver<Result<cri::ContainerEventResponse>>,
) -> EventStream {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}
