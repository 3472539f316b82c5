//! CRI endpoints (`unix:///run/rkube/cri.sock`) and a tonic client channel over a unix socket.
//!
//! Endpoint syntax as kubelet's `--container-runtime-endpoint`: `unix://` followed by an absolute
//! path; a bare absolute path is accepted too.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// Errors of endpoint parsing and connecting.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// Not `unix:///abs/path` or `/abs/path`.
    #[error("unsupported CRI endpoint {0:?}: want unix:///absolute/path")]
    Unsupported(String),
    /// The transport could not be set up or the socket could not be reached.
    #[error("connect to {endpoint}: {source}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// The transport error.
        source: tonic::transport::Error,
    },
}

/// The socket path of a `unix://` endpoint.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, EndpointError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(EndpointError::Unsupported(endpoint.to_string()));
    }
    Ok(p.to_path_buf())
}

/// The `unix://` endpoint of a socket path.
pub fn endpoint_of(path: &Path) -> String {
    format!("unix://{}", path.display())
}

fn endpoint_builder() -> Endpoint {
    // The authority is never used: every connection goes to the unix socket.
    Endpoint::from_static("http://cri.sock")
}

type UnixIo = TokioIo<tokio::net::UnixStream>;
type ConnectFuture = std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<UnixIo>> + Send>>;

fn connector(
    path: PathBuf,
) -> impl tower::Service<Uri, Response = UnixIo, Error = std::io::Error, Future = ConnectFuture> + Clone {
    tower::service_fn(move |_: Uri| {
        let path = path.clone();
        Box::pin(async move { Ok(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }) as ConnectFuture
    })
}

/// Connects now; fails if nothing listens on the socket.
pub async fn connect(endpoint: &str) -> Result<Channel, EndpointError> {
    let path = socket_path(endpoint)?;
    endpoint_builder()
        .connect_with_connector(connector(path))
        .await
        .map_err(|source| EndpointError::Connect { endpoint: endpoint.to_string(), source })
}

/// A channel that connects on first use and reconnects after failures (for agents that may start
/// before the runtime, or outlive a runtime restart).
pub fn connect_lazy(endpoint: &str) -> Result<Channel, EndpointError> {
    let path = socket_path(endpoint)?;
    Ok(endpoint_builder().connect_with_connector_lazy(connector(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_endpoints_parse_to_paths() {
        assert_eq!(socket_path("unix:///run/rkube/cri.sock").ok(), Some(PathBuf::from("/run/rkube/cri.sock")));
        assert_eq!(socket_path("/tmp/x.sock").ok(), Some(PathBuf::from("/tmp/x.sock")));
        assert!(matches!(socket_path("tcp://1.2.3.4:5"), Err(EndpointError::Unsupported(_))));
        assert!(matches!(socket_path("unix://relative.sock"), Err(EndpointError::Unsupported(_))));
    }
}
