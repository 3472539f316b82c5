//! Serving the CRI services on a unix socket, and the handle that stops everything.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::cri::image_service_server::ImageServiceServer;
use crate::cri::runtime_service_server::RuntimeServiceServer;
use crate::endpoint::endpoint_of;
use crate::runtime::{Runtime, RuntimeConfig};
use crate::service::CriService;
use crate::streaming::StreamingServer;

/// How long a graceful stop may take before connections are cut.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket's directory could not be created, a stale socket not removed, or bind failed.
    #[error("listen on {path}: {source}")]
    Listen {
        /// The socket path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A running runtime: its records and its gRPC server.
#[derive(Debug)]
pub struct RuntimeHandle {
    runtime: Arc<Runtime>,
    socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    stopping: watch::Sender<bool>,
    server: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl RuntimeHandle {
    /// The runtime (records, clock, event bus).
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The `unix://` endpoint clients pass as `--container-runtime-endpoint`.
    pub fn endpoint(&self) -> String {
        endpoint_of(&self.socket)
    }

    /// Stops serving, SIGKILLs every container and waits for their exits, removes their cgroups
    /// and the socket.
    pub async fn shutdown(mut self) {
        self.stop_server().await;
        self.runtime.kill_all().await;
        self.runtime.remove_cgroups().await;
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Stops serving without touching containers: what a crashed runtime looks like to clients
    /// (containers die too, through `PR_SET_PDEATHSIG`, only when the whole process exits).
    pub async fn stop_server(&mut self) {
        let _ = self.stopping.send(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut server) = self.server.take() {
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await.is_err() {
                server.abort();
                let _ = server.await;
            }
        }
    }

    /// Waits until the server ends (it only ends on error or [`Self::shutdown`]).
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        if let Some(server) = self.server.as_mut() {
            server.await??;
        }
        Ok(())
    }
}

impl Drop for RuntimeHandle {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
        for pid in self.runtime.running_pids() {
            crate::process::signal_group(pid, libc::SIGKILL);
        }
    }
}

/// Starts a runtime serving `RuntimeService` and `ImageService` on the unix socket `socket`
/// (a stale socket file is replaced). Must be called inside a tokio runtime.
pub async fn serve(socket: &Path, config: RuntimeConfig) -> Result<RuntimeHandle, ServeError> {
    serve_runtime(socket, Runtime::new(config)).await
}

/// Like [`serve`], for an existing [`Runtime`] (a restarted server over the same records).
pub async fn serve_runtime(socket: &Path, runtime: Arc<Runtime>) -> Result<RuntimeHandle, ServeError> {
    let listen_err = |source| ServeError::Listen { path: socket.to_path_buf(), source };
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).map_err(listen_err)?;
    }
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(listen_err(e)),
    }
    let listener = tokio::net::UnixListener::bind(socket).map_err(listen_err)?;
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let (stopping, stopping_rx) = watch::channel(false);
    let streaming = StreamingServer::start(Arc::clone(&runtime), stopping_rx.clone())
        .await
        .map_err(|source| ServeError::Listen { path: socket.to_path_buf(), source })?;
    let service = CriService::new(Arc::clone(&runtime), stopping_rx, streaming);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::new(service.clone()))
        .add_service(ImageServiceServer::new(service))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stop_rx.await;
        });
    let server = tokio::spawn(server);
    tracing::info!(socket = %socket.display(), "rkube runtime serving CRI v1");
    Ok(RuntimeHandle { runtime, socket: socket.to_path_buf(), stop: Some(stop_tx), stopping, server: Some(server) })
}
