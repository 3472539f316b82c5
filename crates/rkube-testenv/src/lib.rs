//! A real Kubernetes API server inside a Rust test.
//!
//! [`TestEnv::start`] runs rkube's API server in the test's own process: the
//! embedded store in a fresh temporary directory (under `/dev/shm` when the
//! machine has it, so nothing touches a disk), plain HTTP on a free port of
//! 127.0.0.1, no authentication or authorization, bootstrapped like a new
//! cluster (`default`, `kube-system`, … namespaces, the `kubernetes`
//! Service). It answers as kube-apiserver does (discovery, OpenAPI, watch
//! cache, server-side apply, CustomResourceDefinitions with structural
//! schemas, status and scale subresources), so code written against
//! [`kube::Client`] runs against it unchanged. Each test starts its own
//! server; tests run in parallel.
//!
//! What the field's `envtest` does with a downloaded kube-apiserver and etcd
//! (seconds per start, platform binaries), this does in-process in
//! milliseconds. No controller runs unless asked for
//! ([`Builder::controllers`]): objects such as Deployments stay as written.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//!
//! # async fn demo() -> Result<(), rkube_testenv::Error> {
//! let env = rkube_testenv::TestEnv::start().await?;
//! let cms: Api<ConfigMap> = Api::namespaced(env.client(), "default");
//! let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "a"}})).unwrap();
//! cms.create(&PostParams::default(), &cm).await?;
//! env.stop().await;
//! # Ok(()) }
//! ```
//!
//! # Limits
//!
//! The resource table of custom resources is process-wide: two environments
//! in one test binary that install the *same* CRD (same group, version and
//! plural) share its row, so their schemas must agree; objects are never
//! shared (each environment has its own store). Installing different CRDs,
//! or the same CRD with the same schema, in parallel tests is fine.
#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::Kubeconfig;
use kube::runtime::wait::{await_condition, conditions};
use kube::CustomResourceExt;
use tokio::sync::oneshot;

/// How long [`TestEnv::install_crds`] waits for a CRD to be `Established`.
pub const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an environment could not start or a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The temporary directory or the listening socket.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The embedded store would not open or bootstrap.
    #[error("storage: {0}")]
    Storage(String),
    /// The API server answered with an error, or the client could not reach it.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// A controller name rkube does not know (see `rkube controller-manager --controllers`).
    #[error("{0}")]
    Controllers(String),
    /// A CRD was not `Established` within [`ESTABLISH_TIMEOUT`].
    #[error("CustomResourceDefinition {0} was not Established within {ESTABLISH_TIMEOUT:?}")]
    NotEstablished(String),
}

/// Settings of an environment; [`TestEnv::builder`] makes one.
#[derive(Debug, Clone, Default)]
pub struct Builder {
    controllers: Vec<String>,
}

impl Builder {
    /// Also runs these built-in controllers, by the names or aliases of
    /// `rkube controller-manager --controllers` (`"deployment"`,
    /// `"replicaset"`, `"job"`, `"garbage-collector-controller"`, `"*"` for
    /// all of them, …). None run by default.
    pub fn controllers(mut self, names: &[&str]) -> Self {
        self.controllers = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Starts the environment. Errors: an unknown controller name, or the
    /// server could not start (see [`Error`]).
    pub async fn start(self) -> Result<TestEnv, Error> {
        let (selected, _warnings) =
            rkube_controller_manager::controllers::select(&self.controllers).map_err(Error::Controllers)?;
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() { tempfile::Builder::new().prefix("rkube-testenv-").tempdir_in(shm) } else { tempfile::tempdir() }?;
        let storage = rkube_storage::embedded::EmbeddedStorage::open(&dir.path().join("store")).map_err(|e| Error::Storage(e.to_string()))?;
        let st = rkube_apiserver::ApiState::new(Arc::new(storage), rkube_apiserver::ServerConfig::default());
        rkube_apiserver::bootstrap(&st).await.map_err(|e| Error::Storage(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let _ = rkube_apiserver::serve(listener, st, async move {
                let _ = stopped.await;
            })
            .await;
        });
        let kubeconfig = kubeconfig_for(&base);
        let kubeconfig_path = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig_path, serde_json::to_vec(&kubeconfig_json(&base)).unwrap_or_default())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &Default::default())
            .await
            .map_err(|e| Error::Kube(kube::Error::InferKubeconfig(e)))?;
        let client = kube::Client::try_from(config)?;
        let controllers = (!selected.is_empty()).then(|| rkube_controller_manager::cli::start(client.clone(), &selected));
        Ok(TestEnv { client, base, kubeconfig, kubeconfig_path, stop: Some(stop), server: Some(server), controllers, _dir: dir })
    }
}

/// A running API server (and the controllers asked for); it stops when
/// dropped, or with [`TestEnv::stop`] to wait until it has.
pub struct TestEnv {
    client: kube::Client,
    base: String,
    kubeconfig: Kubeconfig,
    kubeconfig_path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
    controllers: Option<rkube_controller_manager::cli::ControllerManager>,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv").field("base", &self.base).finish()
    }
}

impl TestEnv {
    /// Starts an environment with no controllers ([`Builder::start`]).
    pub async fn start() -> Result<TestEnv, Error> {
        Builder::default().start().await
    }

    /// Settings for an environment, e.g. with controllers.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A client of the server (cheap to clone).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The server's URL, `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// A kubeconfig for the server (no credentials are needed).
    pub fn kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }

    /// The same kubeconfig as a file, for `kubectl --kubeconfig` and other
    /// tools; it lives as long as the environment.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// Installs the CRD of `K` (server-side apply) and returns once it is
    /// `Established`, so `Api<K>` works at once.
    pub async fn install_crd<K: CustomResourceExt>(&self) -> Result<CustomResourceDefinition, Error> {
        let mut out = self.install_crds(vec![K::crd()]).await?;
        out.pop().ok_or_else(|| Error::NotEstablished(K::crd_name().to_string()))
    }

    /// Installs `crds` (server-side apply, field manager `rkube-testenv`)
    /// and returns them once every one is `Established`. Errors: the API
    /// server's (e.g. 422 for a schema it refuses), or
    /// [`Error::NotEstablished`].
    pub async fn install_crds(&self, crds: Vec<CustomResourceDefinition>) -> Result<Vec<CustomResourceDefinition>, Error> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let params = PatchParams::apply("rkube-testenv").force();
        let mut names = Vec::new();
        for mut crd in crds {
            crd.metadata.managed_fields = None;
            crd.metadata.resource_version = None;
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &params, &Patch::Apply(&crd)).await?;
            names.push(name);
        }
        let mut out = Vec::new();
        for name in names {
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            match tokio::time::timeout(ESTABLISH_TIMEOUT, established).await {
                Ok(Ok(Some(crd))) => out.push(crd),
                _ => return Err(Error::NotEstablished(name)),
            }
        }
        Ok(out)
    }

    /// Stops the controllers and the server and waits until the server has
    /// stopped serving.
    pub async fn stop(mut self) {
        if let Some(cm) = self.controllers.take() {
            cm.shutdown().await;
        }
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // Controllers' tasks are aborted with their JoinSet; the server stops serving.
        self.controllers.take();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

fn kubeconfig_json(base: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "rkube-testenv", "cluster": {"server": base}}],
        "users": [{"name": "rkube-testenv", "user": {}}],
        "contexts": [{"name": "rkube-testenv", "context": {"cluster": "rkube-testenv", "user": "rkube-testenv"}}],
        "current-context": "rkube-testenv",
    })
}

fn kubeconfig_for(base: &str) -> Kubeconfig {
    serde_json::from_value(kubeconfig_json(base)).unwrap_or_default()
}
