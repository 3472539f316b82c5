//! The gRPC edge: CRI v1 `RuntimeService` and `ImageService` over [`Runtime`].
//!
//! This is the one place where [`RuntimeError`]s become gRPC statuses:
//! not found → `NOT_FOUND`, bad request → `INVALID_ARGUMENT`, duplicate → `ALREADY_EXISTS`,
//! wrong state → `FAILED_PRECONDITION`, process start failure → `UNKNOWN`. `Exec` answers a URL
//! of the streaming server ([`crate::streaming`]), and so does `Attach` and `PortForward`; `ExecSync` runs
//! the command to its end. RPCs rkube does not implement (stats, checkpoint, metrics, resource
//! updates) answer `UNIMPLEMENTED`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::cri;
use crate::cri::image_service_server::ImageService;
use crate::cri::runtime_service_server::RuntimeService;
use crate::exec::ExecStreams;
use crate::runtime::{Runtime, RuntimeError};
use crate::streaming::{Pending, StreamingServer};

/// Name in `VersionResponse.runtime_name` (also the scheme of container ids in pod status).
pub const RUNTIME_NAME: &str = "rkube";
/// CRI API version served.
pub const RUNTIME_API_VERSION: &str = "v1";

impl From<RuntimeError> for Status {
    fn from(err: RuntimeError) -> Self {
        let msg = err.to_string();
        match err {
            RuntimeError::NotFound { .. } => Status::not_found(msg),
            RuntimeError::InvalidArgument(_) => Status::invalid_argument(msg),
            RuntimeError::AlreadyExists(_) => Status::already_exists(msg),
            RuntimeError::FailedPrecondition(_) => Status::failed_precondition(msg),
            RuntimeError::Start { .. } => Status::unknown(msg),
            RuntimeError::Internal(_) => Status::internal(msg),
        }
    }
}

/// Both CRI services over one runtime.
#[derive(Debug, Clone)]
pub struct CriService {
    rt: Arc<Runtime>,
    stopping: tokio::sync::watch::Receiver<bool>,
    streaming: Arc<StreamingServer>,
}

impl CriService {
    /// Services backed by `rt`; open event streams end when `stopping` turns true (so a
    /// graceful server shutdown is not held up by subscribers that never hang up); `Exec`
    /// URLs point at `streaming`.
    pub fn new(
        rt: Arc<Runtime>,
        stopping: tokio::sync::watch::Receiver<bool>,
        streaming: Arc<StreamingServer>,
    ) -> Self {
        Self {
            rt,
            stopping,
            streaming,
        }
    }

    /// Runs `f` (which reads `/proc`: the stats RPCs) on tokio's blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Runtime) -> T + Send + 'static,
    ) -> Result<T, Status> {
        let rt = Arc::clone(&self.rt);
        tokio::task::spawn_blocking(move || f(&rt))
            .await
            .map_err(|e| Status::internal(format!("stats task: {e}")))
    }
}

type Res<T> = Result<Response<T>, Status>;

fn unimplemented<T>(rpc: &str) -> Res<T> {
    Err(Status::unimplemented(format!(
        "{rpc} is not implemented by rkube runtime"
    )))
}

#[tonic::async_trait]
impl RuntimeService for CriService {
    async fn version(&self, _req: Request<cri::VersionRequest>) -> Res<cri::VersionResponse> {
        Ok(Response::new(cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: RUNTIME_NAME.into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: RUNTIME_API_VERSION.into(),
        }))
    }

    async fn run_pod_sandbox(
        &self,
        req: Request<cri::RunPodSandboxRequest>,
    ) -> Res<cri::RunPodSandboxResponse> {
        let req = req.into_inner();
        let config = req
            .config
            .ok_or_else(|| Status::invalid_argument("sandbox config is required"))?;
        let pod_sandbox_id = self.rt.run_pod_sandbox(config, req.runtime_handler)?;
        Ok(Response::new(cri::RunPodSandboxResponse { pod_sandbox_id }))
    }

    async fn stop_pod_sandbox(
        &self,
        req: Request<cri::StopPodSandboxRequest>,
    ) -> Res<cri::StopPodSandboxResponse> {
        self.rt
            .stop_pod_sandbox(&req.into_inner().pod_sandbox_id)
            .await?;
        Ok(Response::new(cri::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        req: Request<cri::RemovePodSandboxRequest>,
    ) -> Res<cri::RemovePodSandboxResponse> {
        self.rt
            .remove_pod_sandbox(&req.into_inner().pod_sandbox_id)
            .await?;
        Ok(Response::new(cri::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        req: Request<cri::PodSandboxStatusRequest>,
    ) -> Res<cri::PodSandboxStatusResponse> {
        Ok(Response::new(
            self.rt
                .pod_sandbox_status(&req.into_inner().pod_sandbox_id)?,
        ))
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<cri::ListPodSandboxRequest>,
    ) -> Res<cri::ListPodSandboxResponse> {
        let items = self.rt.list_pod_sandbox(req.into_inner().filter.as_ref());
        Ok(Response::new(cri::ListPodSandboxResponse { items }))
    }

    async fn create_container(
        &self,
        req: Request<cri::CreateContainerRequest>,
    ) -> Res<cri::CreateContainerResponse> {
        let req = req.into_inner();
        let config = req
            .config
            .ok_or_else(|| Status::invalid_argument("container config is required"))?;
        let container_id = self.rt.create_container(&req.pod_sandbox_id, config)?;
        Ok(Response::new(cri::CreateContainerResponse { container_id }))
    }

    async fn start_container(
        &self,
        req: Request<cri::StartContainerRequest>,
    ) -> Res<cri::StartContainerResponse> {
        self.rt
            .start_container(&req.into_inner().container_id)
            .await?;
        Ok(Response::new(cri::StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        req: Request<cri::StopContainerRequest>,
    ) -> Res<cri::StopContainerResponse> {
        let req = req.into_inner();
        self.rt
            .stop_container(&req.container_id, req.timeout)
            .await?;
        Ok(Response::new(cri::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        req: Request<cri::RemoveContainerRequest>,
    ) -> Res<cri::RemoveContainerResponse> {
        self.rt
            .remove_container(&req.into_inner().container_id)
            .await?;
        Ok(Response::new(cri::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        req: Request<cri::ListContainersRequest>,
    ) -> Res<cri::ListContainersResponse> {
        let containers = self.rt.list_containers(req.into_inner().filter.as_ref());
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        req: Request<cri::ContainerStatusRequest>,
    ) -> Res<cri::ContainerStatusResponse> {
        let req = req.into_inner();
        Ok(Response::new(
            self.rt.container_status(&req.container_id, req.verbose)?,
        ))
    }

    async fn update_container_resources(
        &self,
        _req: Request<cri::UpdateContainerResourcesRequest>,
    ) -> Res<cri::UpdateContainerResourcesResponse> {
        unimplemented("UpdateContainerResources")
    }

    async fn reopen_container_log(
        &self,
        req: Request<cri::ReopenContainerLogRequest>,
    ) -> Res<cri::ReopenContainerLogResponse> {
        self.rt
            .reopen_container_log(&req.into_inner().container_id)
            .await?;
        Ok(Response::new(cri::ReopenContainerLogResponse {}))
    }

    async fn exec_sync(&self, req: Request<cri::ExecSyncRequest>) -> Res<cri::ExecSyncResponse> {
        let req = req.into_inner();
        if req.cmd.is_empty() {
            return Err(Status::invalid_argument("cmd must not be empty"));
        }
        let target = self.rt.exec_target(&req.container_id)?;
        let timeout = u64::try_from(req.timeout)
            .ok()
            .filter(|t| *t > 0)
            .map(std::time::Duration::from_secs);
        let out = crate::exec::run_sync(&target, &req.cmd, timeout)
            .await
            .map_err(|e| Status::unknown(e.to_string()))?;
        Ok(Response::new(cri::ExecSyncResponse {
            stdout: out.stdout,
            stderr: out.stderr,
            exit_code: out.exit_code,
        }))
    }

    async fn exec(&self, req: Request<cri::ExecRequest>) -> Res<cri::ExecResponse> {
        let req = req.into_inner();
        if req.cmd.is_empty() {
            return Err(Status::invalid_argument("cmd must not be empty"));
        }
        if !(req.stdin || req.stdout || req.stderr) {
            return Err(Status::invalid_argument(
                "one of stdin, stdout, or stderr must be set",
            ));
        }
        // Fail now, not on connect, for a container that cannot take an exec.
        self.rt.exec_target(&req.container_id)?;
        // A terminal merges stderr into its output (kubelet drops stderr with a tty, too).
        let streams = ExecStreams {
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr && !req.tty,
            tty: req.tty,
        };
        let url = self.streaming.register(Pending::Exec {
            container_id: req.container_id,
            cmd: req.cmd,
            streams,
        });
        Ok(Response::new(cri::ExecResponse { url }))
    }

    async fn attach(&self, req: Request<cri::AttachRequest>) -> Res<cri::AttachResponse> {
        let req = req.into_inner();
        if !(req.stdin || req.stdout || req.stderr) {
            return Err(Status::invalid_argument(
                "one of stdin, stdout, or stderr must be set",
            ));
        }
        self.rt.attach_io(&req.container_id)?;
        let streams = ExecStreams {
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr && !req.tty,
            tty: req.tty,
        };
        let url = self.streaming.register(Pending::Attach {
            container_id: req.container_id,
            streams,
        });
        Ok(Response::new(cri::AttachResponse { url }))
    }

    async fn port_forward(
        &self,
        req: Request<cri::PortForwardRequest>,
    ) -> Res<cri::PortForwardResponse> {
        let req = req.into_inner();
        self.rt.pod_sandbox_status(&req.pod_sandbox_id)?;
        let mut ports = Vec::with_capacity(req.port.len());
        for p in req.port {
            match u16::try_from(p) {
                Ok(port) if port > 0 => ports.push(port),
                _ => return Err(Status::invalid_argument(format!("invalid port {p}"))),
            }
        }
        let url = self.streaming.register(Pending::PortForward { ports });
        Ok(Response::new(cri::PortForwardResponse { url }))
    }

    async fn container_stats(
        &self,
        req: Request<cri::ContainerStatsRequest>,
    ) -> Res<cri::ContainerStatsResponse> {
        let id = req.into_inner().container_id;
        let stats = self.blocking(move |rt| rt.container_stats(&id)).await??;
        Ok(Response::new(cri::ContainerStatsResponse {
            stats: Some(stats),
        }))
    }

    async fn list_container_stats(
        &self,
        req: Request<cri::ListContainerStatsRequest>,
    ) -> Res<cri::ListContainerStatsResponse> {
        let filter = req.into_inner().filter;
        let stats = self
            .blocking(move |rt| rt.list_container_stats(filter.as_ref()))
            .await?;
        Ok(Response::new(cri::ListContainerStatsResponse { stats }))
    }

    async fn pod_sandbox_stats(
        &self,
        req: Request<cri::PodSandboxStatsRequest>,
    ) -> Res<cri::PodSandboxStatsResponse> {
        let id = req.into_inner().pod_sandbox_id;
        let stats = self.blocking(move |rt| rt.pod_sandbox_stats(&id)).await??;
        Ok(Response::new(cri::PodSandboxStatsResponse {
            stats: Some(stats),
        }))
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: Request<cri::ListPodSandboxStatsRequest>,
    ) -> Res<cri::ListPodSandboxStatsResponse> {
        let filter = req.into_inner().filter;
        let stats = self
            .blocking(move |rt| rt.list_pod_sandbox_stats(filter.as_ref()))
            .await?;
        Ok(Response::new(cri::ListPodSandboxStatsResponse { stats }))
    }

    async fn update_runtime_config(
        &self,
        _req: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> Res<cri::UpdateRuntimeConfigResponse> {
        // Kubelet sends the pod CIDR here; host-network processes have nothing to configure.
        Ok(Response::new(cri::UpdateRuntimeConfigResponse {}))
    }

    async fn status(&self, _req: Request<cri::StatusRequest>) -> Res<cri::StatusResponse> {
        let cond = |t: &str| cri::RuntimeCondition {
            r#type: t.into(),
            status: true,
            ..Default::default()
        };
        Ok(Response::new(cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![cond("RuntimeReady"), cond("NetworkReady")],
            }),
            info: HashMap::new(),
            runtime_handlers: vec![],
            features: None,
        }))
    }

    async fn checkpoint_container(
        &self,
        _req: Request<cri::CheckpointContainerRequest>,
    ) -> Res<cri::CheckpointContainerResponse> {
        unimplemented("CheckpointContainer")
    }

    type GetContainerEventsStream =
        Pin<Box<dyn Stream<Item = Result<cri::ContainerEventResponse, Status>> + Send + 'static>>;

    async fn get_container_events(
        &self,
        _req: Request<cri::GetEventsRequest>,
    ) -> Res<Self::GetContainerEventsStream> {
        let mut stopping = self.stopping.clone();
        let stop = async move {
            let _ = stopping.wait_for(|s| *s).await;
        };
        Ok(Response::new(Box::pin(
            self.rt.events().subscribe().take_until(stop),
        )))
    }

    async fn list_metric_descriptors(
        &self,
        _req: Request<cri::ListMetricDescriptorsRequest>,
    ) -> Res<cri::ListMetricDescriptorsResponse> {
        unimplemented("ListMetricDescriptors")
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _req: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> Res<cri::ListPodSandboxMetricsResponse> {
        unimplemented("ListPodSandboxMetrics")
    }

    async fn runtime_config(
        &self,
        _req: Request<cri::RuntimeConfigRequest>,
    ) -> Res<cri::RuntimeConfigResponse> {
        unimplemented("RuntimeConfig")
    }
}

#[tonic::async_trait]
impl ImageService for CriService {
    async fn list_images(
        &self,
        req: Request<cri::ListImagesRequest>,
    ) -> Res<cri::ListImagesResponse> {
        let req = req.into_inner();
        let filter = req.filter.and_then(|f| f.image).map(|i| i.image);
        Ok(Response::new(cri::ListImagesResponse {
            images: self.rt.list_images(filter.as_deref()),
        }))
    }

    async fn image_status(
        &self,
        req: Request<cri::ImageStatusRequest>,
    ) -> Res<cri::ImageStatusResponse> {
        let name = req.into_inner().image.map(|i| i.image).unwrap_or_default();
        Ok(Response::new(cri::ImageStatusResponse {
            image: self.rt.image_status(&name),
            info: HashMap::new(),
        }))
    }

    async fn pull_image(&self, req: Request<cri::PullImageRequest>) -> Res<cri::PullImageResponse> {
        let name = req.into_inner().image.map(|i| i.image).unwrap_or_default();
        Ok(Response::new(cri::PullImageResponse {
            image_ref: self.rt.pull_image(&name)?,
        }))
    }

    async fn remove_image(
        &self,
        req: Request<cri::RemoveImageRequest>,
    ) -> Res<cri::RemoveImageResponse> {
        let name = req.into_inner().image.map(|i| i.image).unwrap_or_default();
        self.rt.remove_image(&name);
        Ok(Response::new(cri::RemoveImageResponse {}))
    }

    async fn image_fs_info(
        &self,
        _req: Request<cri::ImageFsInfoRequest>,
    ) -> Res<cri::ImageFsInfoResponse> {
        let usage = cri::FilesystemUsage {
            timestamp: self.rt.now_ns(),
            fs_id: Some(cri::FilesystemIdentifier {
                mountpoint: self.rt.config().root_dir.display().to_string(),
            }),
            used_bytes: Some(cri::UInt64Value { value: 0 }),
            inodes_used: Some(cri::UInt64Value { value: 0 }),
        };
        Ok(Response::new(cri::ImageFsInfoResponse {
            image_filesystems: vec![usage.clone()],
            container_filesystems: vec![usage],
        }))
    }
}
