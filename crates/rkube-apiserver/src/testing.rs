//! An API server in the caller's process, for tests of components that talk
//! to one (controllers, the scheduler): the embedded store in a directory
//! the caller owns, plain HTTP on `127.0.0.1:0`, no authentication or
//! authorization, bootstrapped like `rkube apiserver` at first start.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::{ApiState, ServerConfig};

/// A running in-process server; it stops when dropped.
#[derive(Debug)]
pub struct InProcessServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    stop: Option<oneshot::Sender<()>>,
}

impl InProcessServer {
    /// Opens the embedded store in `data_dir`, bootstraps it and serves it
    /// with `config`. Panics when the store cannot be opened or the port
    /// bound: it is meant for tests.
    pub async fn start(data_dir: &Path, config: ServerConfig) -> InProcessServer {
        let storage: Arc<dyn rkube_storage::Storage> =
            Arc::new(rkube_storage::embedded::EmbeddedStorage::open(data_dir).expect("open embedded store"));
        let st = ApiState::new(storage, config);
        crate::bootstrap(&st).await.expect("bootstrap");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = crate::serve(listener, st, async move {
                let _ = rx.await;
            })
            .await;
        });
        InProcessServer { base: format!("http://{addr}"), stop: Some(tx) }
    }

    /// Stops serving (also done on drop).
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl Drop for InProcessServer {
    fn drop(&mut self) {
        self.stop();
    }
}
