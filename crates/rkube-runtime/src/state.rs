//! The runtime's records: pod sandboxes, containers and images, and their CRI views.
//!
//! Everything here is plain data guarded by the one `Mutex<State>` in [`crate::runtime::Runtime`];
//! no method blocks or does I/O. Conversions to CRI messages (`PodSandboxStatus`,
//! `ContainerStatus`, `Container`, `PodSandbox`) and the filters of `ListContainers` /
//! `ListPodSandbox` live here so every RPC and every event renders a record the same way.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use tokio::sync::watch;

use crate::cri;

/// A pod sandbox: a record (host network, no namespaces) owning the containers created in it.
#[derive(Debug, Clone)]
pub struct SandboxRecord {
    /// 64 hex characters.
    pub id: String,
    /// Name, uid, namespace, attempt as given by the node agent.
    pub metadata: cri::PodSandboxMetadata,
    /// `PodSandboxConfig.hostname`; given to containers as `HOSTNAME`.
    pub hostname: String,
    /// `PodSandboxConfig.log_directory`; container `log_path`s are relative to it.
    pub log_directory: String,
    /// Labels of the sandbox config.
    pub labels: HashMap<String, String>,
    /// Annotations of the sandbox config.
    pub annotations: HashMap<String, String>,
    /// `RunPodSandboxRequest.runtime_handler`.
    pub runtime_handler: String,
    /// Ready until `StopPodSandbox`.
    pub state: cri::PodSandboxState,
    /// Runtime clock, ns.
    pub created_at: i64,
    /// The pod IP: the host's address (containers share the host network).
    pub ip: String,
}

/// A container: one host process (and its process group) once started.
#[derive(Debug)]
pub struct ContainerRecord {
    /// 64 hex characters.
    pub id: String,
    /// The sandbox it was created in.
    pub sandbox_id: String,
    /// Name and attempt.
    pub metadata: cri::ContainerMetadata,
    /// The image as requested (names only; nothing is unpacked).
    pub image: cri::ImageSpec,
    /// `sha256:` digest of the image name.
    pub image_ref: String,
    /// `command` followed by `args`; `argv[0]` is looked up in `PATH`.
    pub argv: Vec<String>,
    /// Environment of the process (after the defaults `PATH`, `HOSTNAME`).
    pub envs: Vec<(String, String)>,
    /// Working directory; empty means the runtime's own.
    pub working_dir: String,
    /// Bind mounts of the container config (volumes the node agent prepared).
    pub mounts: Vec<cri::Mount>,
    /// Labels of the container config.
    pub labels: HashMap<String, String>,
    /// Annotations of the container config.
    pub annotations: HashMap<String, String>,
    /// `ContainerConfig.log_path` as given (relative to the sandbox's log directory).
    pub log_path: String,
    /// The file the log is written to, if any.
    pub log_file: Option<PathBuf>,
    /// Created → Running → Exited (or Created → Exited when stopped before starting).
    pub state: cri::ContainerState,
    /// Runtime clock, ns.
    pub created_at: i64,
    /// Runtime clock, ns; 0 until started.
    pub started_at: i64,
    /// Runtime clock, ns; 0 until exited.
    pub finished_at: i64,
    /// The process's exit status, or 128 + signal number when a signal ended it.
    pub exit_code: i32,
    /// `Completed`, `Error` or `StartError` once exited.
    pub reason: String,
    /// Human-readable detail for `StartError`.
    pub message: String,
    /// The main process id, which is also its process group id, while the process exists.
    pub pid: Option<i32>,
    /// True while `StartContainer` is spawning the process (guards against a second start).
    pub starting: bool,
    /// Flips to true once the container has exited (waiters in `StopContainer` and shutdown).
    pub exited: watch::Sender<bool>,
    /// `ContainerConfig.stdin`: the process's stdin is a pipe kept open for `Attach`.
    pub stdin: bool,
    /// `ContainerConfig.stdin_once`: stdin closes when the first attached writer detaches.
    pub stdin_once: bool,
    /// `ContainerConfig.tty`: the process runs on a terminal of its own.
    pub tty: bool,
    /// The attach hub while the process runs.
    pub attach: Option<std::sync::Arc<crate::attach::AttachIo>>,
    /// Reopens the log file while the process runs (CRI `ReopenContainerLog`).
    pub log_reopen: Option<tokio::sync::mpsc::Sender<crate::logs::Reopen>>,
    /// CRI `LinuxContainerResources.memory_limit_in_bytes` (0: none), set on its cgroup.
    pub memory_limit: i64,
    /// Its cgroup, made when it starts (`None` under `/proc` accounting).
    pub cgroup: Option<crate::cgroups::Cgroup>,
}

/// An image name recorded by `PullImage`.
#[derive(Debug, Clone)]
pub struct ImageRecord {
    /// `sha256:<hex of sha256(name)>`.
    pub id: String,
    /// The pulled name (the only repo tag).
    pub name: String,
}

/// All records; guarded by the runtime's mutex.
#[derive(Debug, Default)]
pub struct State {
    /// By sandbox id.
    pub sandboxes: HashMap<String, SandboxRecord>,
    /// By container id.
    pub containers: HashMap<String, ContainerRecord>,
    /// By image name.
    pub images: BTreeMap<String, ImageRecord>,
}

impl SandboxRecord {
    /// The CRI `PodSandboxStatus` of this sandbox.
    pub fn status(&self) -> cri::PodSandboxStatus {
        cri::PodSandboxStatus {
            id: self.id.clone(),
            metadata: Some(self.metadata.clone()),
            state: self.state as i32,
            created_at: self.created_at,
            network: Some(cri::PodSandboxNetworkStatus {
                ip: self.ip.clone(),
                additional_ips: vec![],
            }),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace {
                    options: Some(cri::NamespaceOption {
                        network: cri::NamespaceMode::Node as i32,
                        pid: cri::NamespaceMode::Node as i32,
                        ipc: cri::NamespaceMode::Node as i32,
                        ..Default::default()
                    }),
                }),
            }),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }

    /// The CRI `PodSandbox` (list item) of this sandbox.
    pub fn summary(&self) -> cri::PodSandbox {
        cri::PodSandbox {
            id: self.id.clone(),
            metadata: Some(self.metadata.clone()),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }
}

impl ContainerRecord {
    /// The CRI `ContainerStatus` of this container.
    pub fn status(&self) -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: self.id.clone(),
            metadata: Some(self.metadata.clone()),
            state: self.state as i32,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            exit_code: self.exit_code,
            image: Some(self.image.clone()),
            image_ref: self.image_ref.clone(),
            reason: self.reason.clone(),
            message: self.message.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            mounts: self.mounts.clone(),
            log_path: self
                .log_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            resources: None,
            image_id: self.image_ref.clone(),
            user: None,
        }
    }

    /// The CRI `Container` (list item) of this container.
    pub fn summary(&self) -> cri::Container {
        cri::Container {
            id: self.id.clone(),
            pod_sandbox_id: self.sandbox_id.clone(),
            metadata: Some(self.metadata.clone()),
            image: Some(self.image.clone()),
            image_ref: self.image_ref.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            image_id: self.image_ref.clone(),
        }
    }
}

impl State {
    /// Statuses of every container of a sandbox, oldest first.
    pub fn pod_container_statuses(&self, sandbox_id: &str) -> Vec<cri::ContainerStatus> {
        let mut list: Vec<&ContainerRecord> = self
            .containers
            .values()
            .filter(|c| c.sandbox_id == sandbox_id)
            .collect();
        list.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        list.into_iter().map(ContainerRecord::status).collect()
    }

    /// Containers matching a `ListContainers` filter, oldest first.
    pub fn list_containers(&self, filter: Option<&cri::ContainerFilter>) -> Vec<cri::Container> {
        let mut list: Vec<&ContainerRecord> = self
            .containers
            .values()
            .filter(|c| container_matches(c, filter))
            .collect();
        list.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        list.into_iter().map(ContainerRecord::summary).collect()
    }

    /// Sandboxes matching a `ListPodSandbox` filter, oldest first.
    pub fn list_sandboxes(&self, filter: Option<&cri::PodSandboxFilter>) -> Vec<cri::PodSandbox> {
        let mut list: Vec<&SandboxRecord> = self
            .sandboxes
            .values()
            .filter(|s| sandbox_matches(s, filter))
            .collect();
        list.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        list.into_iter().map(SandboxRecord::summary).collect()
    }
}

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn container_matches(c: &ContainerRecord, filter: Option<&cri::ContainerFilter>) -> bool {
    let Some(f) = filter else { return true };
    (f.id.is_empty() || c.id == f.id)
        && f.state.as_ref().is_none_or(|s| s.state == c.state as i32)
        && (f.pod_sandbox_id.is_empty() || c.sandbox_id == f.pod_sandbox_id)
        && labels_match(&c.labels, &f.label_selector)
}

fn sandbox_matches(s: &SandboxRecord, filter: Option<&cri::PodSandboxFilter>) -> bool {
    let Some(f) = filter else { return true };
    (f.id.is_empty() || s.id == f.id)
        && f.state.as_ref().is_none_or(|st| st.state == s.state as i32)
        && labels_match(&s.labels, &f.label_selector)
}

/// A new 64-hex-character id (the shape containerd uses).
pub fn new_id() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}
