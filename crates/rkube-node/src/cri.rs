//! The node agent's view of a CRI runtime: a client over any `unix://` endpoint, and the narrow
//! [`RuntimeApi`] trait PLEG reads the runtime through (so PLEG can be fed recorded answers).
//!
//! Labels the agent puts on sandboxes and containers are kubelet's
//! (`pkg/kubelet/types/labels.go`): `io.kubernetes.pod.uid`, `io.kubernetes.pod.name`,
//! `io.kubernetes.pod.namespace`, `io.kubernetes.container.name`.

use futures::stream::BoxStream;
use futures::StreamExt;
use rkube_runtime::cri;
use rkube_runtime::cri::image_service_client::ImageServiceClient;
use rkube_runtime::cri::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

/// Label holding the pod's uid.
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
/// Label holding the pod's name.
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
/// Label holding the pod's namespace.
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Label holding the container's name in the pod spec.
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// Errors talking to the runtime.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The runtime answered with a gRPC error (or the connection failed, as `UNAVAILABLE`).
    #[error("CRI {rpc}: {status}")]
    Status {
        /// The RPC.
        rpc: &'static str,
        /// The gRPC status.
        status: tonic::Status,
    },
    /// The endpoint is not a usable `unix://` path.
    #[error(transparent)]
    Endpoint(#[from] rkube_runtime::endpoint::EndpointError),
    /// The runtime answered without a field CRI requires.
    #[error("CRI {rpc}: response lacks {field}")]
    Incomplete {
        /// The RPC.
        rpc: &'static str,
        /// The missing field.
        field: &'static str,
    },
}

impl CriError {
    /// The gRPC code (`Unknown` for non-gRPC errors).
    pub fn code(&self) -> tonic::Code {
        match self {
            CriError::Status { status, .. } => status.code(),
            _ => tonic::Code::Unknown,
        }
    }

    /// The runtime does not implement the RPC (containerd 1.6 and `GetContainerEvents`).
    pub fn is_unimplemented(&self) -> bool {
        self.code() == tonic::Code::Unimplemented
    }

    /// The object is gone.
    pub fn is_not_found(&self) -> bool {
        self.code() == tonic::Code::NotFound
    }
}

/// Result alias of this module.
pub type Result<T, E = CriError> = std::result::Result<T, E>;

/// A stream of container events as PLEG consumes it.
pub type EventStream = BoxStream<'static, Result<cri::ContainerEventResponse>>;

/// What PLEG needs from a runtime: the two lists of a relist, a pod inspection, and the event
/// stream of KEP-3386.
#[async_trait::async_trait]
pub trait RuntimeApi: Send + Sync + 'static {
    /// `ListPodSandbox` without filter.
    async fn list_pod_sandbox(&self) -> Result<Vec<cri::PodSandbox>>;
    /// `ListContainers` without filter.
    async fn list_containers(&self) -> Result<Vec<cri::Container>>;
    /// `PodSandboxStatus` (verbose, so runtimes that gate container statuses on it send them).
    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatusResponse>;
    /// `ListContainers` filtered to one sandbox (for runtimes whose `PodSandboxStatus` lacks
    /// container statuses) followed by `ContainerStatus` of each.
    async fn sandbox_container_statuses(
        &self,
        sandbox_id: &str,
    ) -> Result<Vec<cri::ContainerStatus>>;
    /// `GetContainerEvents`: Ok once the stream is established.
    async fn get_container_events(&self) -> Result<EventStream>;
}

/// A CRI client (runtime and image services over one channel).
#[derive(Debug, Clone)]
pub struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
}

fn status_err(rpc: &'static str) -> impl FnOnce(tonic::Status) -> CriError {
    move |status| CriError::Status { rpc, status }
}

impl CriClient {
    /// A client that connects on first use and reconnects after failures.
    pub fn connect_lazy(endpoint: &str) -> Result<Self> {
        let channel = rkube_runtime::endpoint::connect_lazy(endpoint)?;
        Ok(Self::from_channel(channel))
    }

    /// A client over an existing channel.
    pub fn from_channel(channel: Channel) -> Self {
        Self {
            runtime: RuntimeServiceClient::new(channel.clone()),
            image: ImageServiceClient::new(channel),
        }
    }

    /// `Version`.
    pub async fn version(&self) -> Result<cri::VersionResponse> {
        let req = cri::VersionRequest {
            version: "v1".into(),
        };
        Ok(self
            .runtime
            .clone()
            .version(req)
            .await
            .map_err(status_err("Version"))?
            .into_inner())
    }

    /// `RunPodSandbox`; returns the sandbox id.
    pub async fn run_pod_sandbox(&self, config: cri::PodSandboxConfig) -> Result<String> {
        let req = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        Ok(self
            .runtime
            .clone()
            .run_pod_sandbox(req)
            .await
            .map_err(status_err("RunPodSandbox"))?
            .into_inner()
            .pod_sandbox_id)
    }

    /// `StopPodSandbox`.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let req = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.runtime
            .clone()
            .stop_pod_sandbox(req)
            .await
            .map_err(status_err("StopPodSandbox"))?;
        Ok(())
    }

    /// `RemovePodSandbox`.
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let req = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.runtime
            .clone()
            .remove_pod_sandbox(req)
            .await
            .map_err(status_err("RemovePodSandbox"))?;
        Ok(())
    }

    /// `PullImage`; returns the image ref.
    pub async fn pull_image(&self, image: &str) -> Result<String> {
        let req = cri::PullImageRequest {
            image: Some(cri::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            auth: None,
            sandbox_config: None,
        };
        Ok(self
            .image
            .clone()
            .pull_image(req)
            .await
            .map_err(status_err("PullImage"))?
            .into_inner()
            .image_ref)
    }

    /// `ImageStatus`: the image when the runtime has it (`None` when absent).
    pub async fn image_status(&self, image: &str) -> Result<Option<cri::Image>> {
        let spec = cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        };
        let req = cri::ImageStatusRequest {
            image: Some(spec),
            verbose: false,
        };
        Ok(self
            .image
            .clone()
            .image_status(req)
            .await
            .map_err(status_err("ImageStatus"))?
            .into_inner()
            .image)
    }

    /// `CreateContainer`; returns the container id.
    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String> {
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        Ok(self
            .runtime
            .clone()
            .create_container(req)
            .await
            .map_err(status_err("CreateContainer"))?
            .into_inner()
            .container_id)
    }

    /// `StartContainer`.
    pub async fn start_container(&self, id: &str) -> Result<()> {
        let req = cri::StartContainerRequest {
            container_id: id.into(),
        };
        self.runtime
            .clone()
            .start_container(req)
            .await
            .map_err(status_err("StartContainer"))?;
        Ok(())
    }

    /// `StopContainer` with a grace period in seconds.
    pub async fn stop_container(&self, id: &str, timeout_s: i64) -> Result<()> {
        let req = cri::StopContainerRequest {
            container_id: id.into(),
            timeout: timeout_s,
        };
        self.runtime
            .clone()
            .stop_container(req)
            .await
            .map_err(status_err("StopContainer"))?;
        Ok(())
    }

    /// `ExecSync`: runs `cmd` in container `id`, waiting at most `timeout_s` seconds.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_s: i64,
    ) -> Result<cri::ExecSyncResponse> {
        let req = cri::ExecSyncRequest {
            container_id: id.into(),
            cmd,
            timeout: timeout_s,
        };
        Ok(self
            .runtime
            .clone()
            .exec_sync(req)
            .await
            .map_err(status_err("ExecSync"))?
            .into_inner())
    }

    /// `RemoveContainer`.
    pub async fn remove_container(&self, id: &str) -> Result<()> {
        let req = cri::RemoveContainerRequest {
            container_id: id.into(),
        };
        self.runtime
            .clone()
            .remove_container(req)
            .await
            .map_err(status_err("RemoveContainer"))?;
        Ok(())
    }

    /// `ReopenContainerLog`: the runtime opens the container's log path again (after it was
    /// renamed to rotate it).
    pub async fn reopen_container_log(&self, id: &str) -> Result<()> {
        let req = cri::ReopenContainerLogRequest {
            container_id: id.into(),
        };
        self.runtime
            .clone()
            .reopen_container_log(req)
            .await
            .map_err(status_err("ReopenContainerLog"))?;
        Ok(())
    }

    /// `Exec`: the streaming URL for the command (one connection, within a minute).
    pub async fn exec(&self, req: cri::ExecRequest) -> Result<String> {
        Ok(self
            .runtime
            .clone()
            .exec(req)
            .await
            .map_err(status_err("Exec"))?
            .into_inner()
            .url)
    }

    /// `Attach`: the streaming URL for the container's streams (one connection, within a minute).
    pub async fn attach(&self, req: cri::AttachRequest) -> Result<String> {
        Ok(self
            .runtime
            .clone()
            .attach(req)
            .await
            .map_err(status_err("Attach"))?
            .into_inner()
            .url)
    }

    /// `PortForward`: the streaming URL for the sandbox's ports (one connection, within a minute).
    pub async fn port_forward(&self, req: cri::PortForwardRequest) -> Result<String> {
        Ok(self
            .runtime
            .clone()
            .port_forward(req)
            .await
            .map_err(status_err("PortForward"))?
            .into_inner()
            .url)
    }

    /// `ContainerStatus`.
    pub async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        let req = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        let resp = self
            .runtime
            .clone()
            .container_status(req)
            .await
            .map_err(status_err("ContainerStatus"))?;
        resp.into_inner().status.ok_or(CriError::Incomplete {
            rpc: "ContainerStatus",
            field: "status",
        })
    }

    /// `ListContainerStats` without filter: usage of every running container.
    pub async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>> {
        let req = cri::ListContainerStatsRequest { filter: None };
        let resp = self
            .runtime
            .clone()
            .list_container_stats(req)
            .await
            .map_err(status_err("ListContainerStats"))?;
        Ok(resp.into_inner().stats)
    }

    /// `ListPodSandboxStats` without filter: usage of every sandbox, with its containers'.
    pub async fn list_pod_sandbox_stats(&self) -> Result<Vec<cri::PodSandboxStats>> {
        let req = cri::ListPodSandboxStatsRequest { filter: None };
        let resp = self
            .runtime
            .clone()
            .list_pod_sandbox_stats(req)
            .await
            .map_err(status_err("ListPodSandboxStats"))?;
        Ok(resp.into_inner().stats)
    }
}

#[async_trait::async_trait]
impl RuntimeApi for CriClient {
    async fn list_pod_sandbox(&self) -> Result<Vec<cri::PodSandbox>> {
        let req = cri::ListPodSandboxRequest { filter: None };
        Ok(self
            .runtime
            .clone()
            .list_pod_sandbox(req)
            .await
            .map_err(status_err("ListPodSandbox"))?
            .into_inner()
            .items)
    }

    async fn list_containers(&self) -> Result<Vec<cri::Container>> {
        let req = cri::ListContainersRequest { filter: None };
        Ok(self
            .runtime
            .clone()
            .list_containers(req)
            .await
            .map_err(status_err("ListContainers"))?
            .into_inner()
            .containers)
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatusResponse> {
        let req = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: true,
        };
        Ok(self
            .runtime
            .clone()
            .pod_sandbox_status(req)
            .await
            .map_err(status_err("PodSandboxStatus"))?
            .into_inner())
    }

    async fn sandbox_container_statuses(
        &self,
        sandbox_id: &str,
    ) -> Result<Vec<cri::ContainerStatus>> {
        let filter = cri::ContainerFilter {
            pod_sandbox_id: sandbox_id.into(),
            ..Default::default()
        };
        let req = cri::ListContainersRequest {
            filter: Some(filter),
        };
        let list = self
            .runtime
            .clone()
            .list_containers(req)
            .await
            .map_err(status_err("ListContainers"))?;
        let mut out = Vec::new();
        for c in list.into_inner().containers {
            match self.container_status(&c.id).await {
                Ok(s) => out.push(s),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    async fn get_container_events(&self) -> Result<EventStream> {
        let stream = self
            .runtime
            .clone()
            .get_container_events(cri::GetEventsRequest {})
            .await
            .map_err(status_err("GetContainerEvents"))?
            .into_inner();
        Ok(stream
            .map(|item| item.map_err(status_err("GetContainerEvents")))
            .boxed())
    }
}
