//! The runtime proper: sandbox and container lifecycles over [`State`], process supervision, and
//! the events each state change publishes.
//!
//! Lock discipline: one `std::sync::Mutex<State>`; it is never held across an `.await` and never
//! while spawning or waiting for a process. Every state change and the event describing it are
//! made under one hold of the lock, stamped by one [`RuntimeClock`] reading, so events leave in
//! timestamp order and a `PodSandboxStatus` read after an event carries a larger timestamp.
//!
//! Lifecycles (CRI v1 `api.proto`):
//! - sandbox: `RunPodSandbox` → Ready → `StopPodSandbox` (kills every container's process group)
//!   → NotReady → `RemovePodSandbox` (removes its containers too).
//! - container: `CreateContainer` → Created → `StartContainer` → Running → (exit | `StopContainer`)
//!   → Exited → `RemoveContainer`.
//!
//! Events (`GetContainerEvents`): CREATED, STARTED, STOPPED, DELETED for containers; the same four
//! with the sandbox id as `container_id` for sandboxes (as containerd does). Each carries the
//! sandbox status and every container status of the pod at that instant.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::clock::RuntimeClock;
use crate::cri;
use crate::events::{EventBus, DEFAULT_EVENT_BUFFER};
use crate::process::{self, ProcessError, ProcessSpec, DEFAULT_PATH};
use crate::state::{new_id, ContainerRecord, ImageRecord, SandboxRecord, State};

/// How long a forced kill may take before the runtime gives up waiting for the exit.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// How long the log copier may run on after the container's process group was killed.
const LOG_DRAIN_WAIT: Duration = Duration::from_secs(2);

/// Errors of runtime operations; mapped to gRPC codes in one place ([`crate::service`]).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No sandbox or container with that id.
    #[error("{kind} {id:?} not found")]
    NotFound {
        /// `pod sandbox` or `container`.
        kind: &'static str,
        /// The id asked for.
        id: String,
    },
    /// A required field is missing or malformed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A sandbox or container with the same metadata exists already.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The object is not in a state that allows the call.
    #[error("failed precondition: {0}")]
    FailedPrecondition(String),
    /// The runtime could not do what was asked of it (a file it could not open).
    #[error("{0}")]
    Internal(String),
    /// The process could not be started; the container is now Exited with reason `StartError`.
    #[error("start container {id}: {source}")]
    Start {
        /// The container.
        id: String,
        /// Why.
        source: ProcessError,
    },
}

/// Result alias of this module.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Settings of one runtime instance.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Directory reported by `ImageFsInfo` and used for logs of sandboxes without a log directory.
    pub root_dir: PathBuf,
    /// The IP every sandbox reports (host network).
    pub pod_ip: String,
    /// Per-subscriber event buffer of `GetContainerEvents`.
    pub event_buffer: usize,
    /// Give each container a cgroup of its own when the host allows it ([`crate::cgroups`]);
    /// `false` keeps `/proc` accounting.
    pub cgroups: bool,
}

impl RuntimeConfig {
    /// Defaults for a root directory: the host's IP, [`DEFAULT_EVENT_BUFFER`].
    pub fn new(root_dir: impl Into<PathBuf>) -> Self {
        Self {
            root_dir: root_dir.into(),
            pod_ip: detect_host_ip(),
            event_buffer: DEFAULT_EVENT_BUFFER,
            cgroups: true,
        }
    }
}

/// The host's primary IPv4 address (the source address of a route to the outside), or
/// `127.0.0.1` without a route. Sends no packet.
pub fn detect_host_ip() -> String {
    let probe = || -> std::io::Result<String> {
        let sock = std::net::UdpSocket::bind("0.0.0.0:0")?;
        sock.connect("10.255.255.255:1")?;
        Ok(sock.local_addr()?.ip().to_string())
    };
    probe().unwrap_or_else(|_| "127.0.0.1".to_string())
}

/// One runtime: records, clock, event bus. Shared as `Arc<Runtime>` by the gRPC services and the
/// per-container supervisor tasks.
#[derive(Debug)]
pub struct Runtime {
    state: Mutex<State>,
    clock: RuntimeClock,
    events: EventBus,
    config: RuntimeConfig,
    suppress_events: AtomicBool,
    /// Previous CPU samples for `usage_nano_cores` ([`crate::stats`]).
    pub(crate) rates: crate::stats::RateTracker,
    /// Where container usage comes from: a cgroup per container, or `/proc`.
    accounting: crate::cgroups::Accounting,
}

impl Runtime {
    /// A runtime with no sandboxes.
    pub fn new(config: RuntimeConfig) -> Arc<Self> {
        let accounting = crate::cgroups::detect(config.cgroups);
        match &accounting {
            crate::cgroups::Accounting::Proc { reason } => {
                tracing::info!(%reason, "containers get no cgroup of their own: usage is read from /proc")
            }
            cgroups => {
                let swept = cgroups.sweep_stale(crate::cgroups::STALE_AFTER);
                tracing::info!(?cgroups, swept, "each container gets a cgroup of its own");
            }
        }
        Arc::new(Self {
            state: Mutex::new(State::default()),
            clock: RuntimeClock::new(),
            events: EventBus::new(config.event_buffer),
            config,
            suppress_events: AtomicBool::new(false),
            rates: crate::stats::RateTracker::default(),
            accounting,
        })
    }

    /// The settings.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Where container usage comes from (decided when the runtime was made).
    pub fn accounting(&self) -> &crate::cgroups::Accounting {
        &self.accounting
    }

    /// The event bus (`GetContainerEvents` subscribes here).
    pub fn events(&self) -> &EventBus {
        &self.events
    }

    /// The runtime clock's current reading, ns.
    pub fn now_ns(&self) -> i64 {
        self.clock.now_ns()
    }

    /// Fault injection for tests of missed-event detection: while on, state changes happen but
    /// no event is published (a buggy runtime, KEP-3386 *Risks and Mitigations*).
    pub fn set_suppress_events(&self, on: bool) {
        self.suppress_events.store(on, Ordering::SeqCst);
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Publishes one event built from the current records. `sandbox` overrides the sandbox status
    /// (for a sandbox that was just removed).
    fn emit(
        &self,
        st: &State,
        container_id: &str,
        sandbox_id: &str,
        kind: cri::ContainerEventType,
        ts: i64,
        sandbox: Option<cri::PodSandboxStatus>,
    ) {
        if self.suppress_events.load(Ordering::SeqCst) {
            return;
        }
        let pod_sandbox_status =
            sandbox.or_else(|| st.sandboxes.get(sandbox_id).map(SandboxRecord::status));
        self.events.publish(cri::ContainerEventResponse {
            container_id: container_id.to_string(),
            container_event_type: kind as i32,
            created_at: ts,
            pod_sandbox_status,
            containers_statuses: st.pod_container_statuses(sandbox_id),
        });
    }

    // ----- sandboxes -----

    /// `RunPodSandbox`: records a Ready sandbox; publishes CREATED and STARTED for it.
    pub fn run_pod_sandbox(
        &self,
        config: cri::PodSandboxConfig,
        runtime_handler: String,
    ) -> Result<String> {
        let metadata = config.metadata.clone().ok_or_else(|| {
            RuntimeError::InvalidArgument("sandbox config metadata is required".into())
        })?;
        if metadata.name.is_empty() || metadata.namespace.is_empty() {
            return Err(RuntimeError::InvalidArgument(
                "sandbox metadata needs name and namespace".into(),
            ));
        }
        let mut st = self.lock();
        if st.sandboxes.values().any(|s| s.metadata == metadata) {
            return Err(RuntimeError::AlreadyExists(format!(
                "sandbox {}/{} uid {} attempt {}",
                metadata.namespace, metadata.name, metadata.uid, metadata.attempt
            )));
        }
        let id = new_id();
        let ts = self.clock.now_ns();
        st.sandboxes.insert(
            id.clone(),
            SandboxRecord {
                id: id.clone(),
                metadata,
                hostname: config.hostname,
                log_directory: config.log_directory,
                labels: config.labels,
                annotations: config.annotations,
                runtime_handler,
                state: cri::PodSandboxState::SandboxReady,
                created_at: ts,
                ip: self.config.pod_ip.clone(),
            },
        );
        self.emit(
            &st,
            &id,
            &id,
            cri::ContainerEventType::ContainerCreatedEvent,
            ts,
            None,
        );
        let ts = self.clock.now_ns();
        self.emit(
            &st,
            &id,
            &id,
            cri::ContainerEventType::ContainerStartedEvent,
            ts,
            None,
        );
        Ok(id)
    }

    /// `StopPodSandbox`: kills every running container of the sandbox (SIGKILL to each process
    /// group), marks it NotReady, publishes STOPPED for it. Idempotent; a missing sandbox is fine.
    pub async fn stop_pod_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        let running: Vec<String> = {
            let st = self.lock();
            if !st.sandboxes.contains_key(id) {
                return Ok(());
            }
            st.containers
                .values()
                .filter(|c| c.sandbox_id == id)
                .map(|c| c.id.clone())
                .collect()
        };
        for cid in running {
            self.kill_and_wait(&cid).await;
        }
        let mut st = self.lock();
        let Some(sandbox) = st.sandboxes.get_mut(id) else {
            return Ok(());
        };
        if sandbox.state == cri::PodSandboxState::SandboxNotready {
            return Ok(());
        }
        sandbox.state = cri::PodSandboxState::SandboxNotready;
        let ts = self.clock.now_ns();
        self.emit(
            &st,
            id,
            id,
            cri::ContainerEventType::ContainerStoppedEvent,
            ts,
            None,
        );
        Ok(())
    }

    /// `RemovePodSandbox`: stops it if needed, removes its containers (DELETED each) and the
    /// sandbox (DELETED with the sandbox id). Idempotent.
    pub async fn remove_pod_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        self.stop_pod_sandbox(id).await?;
        let cgroups = {
            let mut cgroups = Vec::new();
            let mut st = self.lock();
            let ids: Vec<String> = st
                .containers
                .values()
                .filter(|c| c.sandbox_id == id)
                .map(|c| c.id.clone())
                .collect();
            for cid in ids {
                cgroups.extend(st.containers.remove(&cid).and_then(|c| c.cgroup));
                let ts = self.clock.now_ns();
                self.emit(
                    &st,
                    &cid,
                    id,
                    cri::ContainerEventType::ContainerDeletedEvent,
                    ts,
                    None,
                );
            }
            if let Some(sandbox) = st.sandboxes.remove(id) {
                cgroups.extend(self.accounting.pod(&sandbox.metadata.uid, id));
                let ts = self.clock.now_ns();
                self.emit(
                    &st,
                    id,
                    id,
                    cri::ContainerEventType::ContainerDeletedEvent,
                    ts,
                    Some(sandbox.status()),
                );
            }
            cgroups
        };
        crate::cgroups::destroy(cgroups).await;
        Ok(())
    }

    /// `PodSandboxStatus` with every container status of the pod and the runtime timestamp of
    /// the reading (KEP-3386); `info.pid`-style details are not applicable (no pause process).
    pub fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatusResponse> {
        let st = self.lock();
        let sandbox = st
            .sandboxes
            .get(id)
            .ok_or_else(|| not_found("pod sandbox", id))?;
        Ok(cri::PodSandboxStatusResponse {
            status: Some(sandbox.status()),
            info: HashMap::new(),
            containers_statuses: st.pod_container_statuses(id),
            timestamp: self.clock.now_ns(),
        })
    }

    /// `ListPodSandbox`.
    pub fn list_pod_sandbox(&self, filter: Option<&cri::PodSandboxFilter>) -> Vec<cri::PodSandbox> {
        self.lock().list_sandboxes(filter)
    }

    // ----- containers -----

    /// `CreateContainer`: records a Created container in a Ready sandbox; publishes CREATED.
    pub fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
    ) -> Result<String> {
        let metadata = config.metadata.ok_or_else(|| {
            RuntimeError::InvalidArgument("container config metadata is required".into())
        })?;
        let argv: Vec<String> = config.command.into_iter().chain(config.args).collect();
        if argv.is_empty() {
            return Err(RuntimeError::InvalidArgument(format!(
                "container {:?}: no command (images are names only here, so command or args must be set)",
                metadata.name
            )));
        }
        let mut st = self.lock();
        let sandbox = st
            .sandboxes
            .get(sandbox_id)
            .ok_or_else(|| not_found("pod sandbox", sandbox_id))?;
        if sandbox.state != cri::PodSandboxState::SandboxReady {
            return Err(RuntimeError::FailedPrecondition(format!(
                "pod sandbox {sandbox_id} is not ready"
            )));
        }
        if st
            .containers
            .values()
            .any(|c| c.sandbox_id == sandbox_id && c.metadata == metadata)
        {
            return Err(RuntimeError::AlreadyExists(format!(
                "container {:?} attempt {} in sandbox {sandbox_id}",
                metadata.name, metadata.attempt
            )));
        }
        // PID namespace of another container (`kubectl debug --target`): every process here
        // already shares the node's PID namespace, so the target is visible as it is; as
        // containerd does, the target must be a running container of the same sandbox.
        let pid_ns = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref());
        if let Some(ns) = pid_ns.filter(|ns| ns.pid == cri::NamespaceMode::Target as i32) {
            let target = st
                .containers
                .get(&ns.target_id)
                .ok_or_else(|| not_found("container", &ns.target_id))?;
            if target.sandbox_id != sandbox_id {
                return Err(RuntimeError::InvalidArgument(format!(
                    "container {:?} (sandbox {}) does not belong to sandbox {sandbox_id}",
                    ns.target_id, target.sandbox_id
                )));
            }
            if target.state != cri::ContainerState::ContainerRunning {
                return Err(RuntimeError::FailedPrecondition(format!(
                    "container {:?} is not running - in state {:?}",
                    ns.target_id,
                    target.state.as_str_name()
                )));
            }
        }
        let memory_limit = config
            .linux
            .as_ref()
            .and_then(|l| l.resources.as_ref())
            .map_or(0, |r| r.memory_limit_in_bytes);
        let mut envs = vec![("PATH".to_string(), DEFAULT_PATH.to_string())];
        if !sandbox.hostname.is_empty() {
            envs.push(("HOSTNAME".to_string(), sandbox.hostname.clone()));
        }
        for kv in config.envs {
            envs.retain(|(k, _)| *k != kv.key);
            envs.push((kv.key, kv.value));
        }
        let log_file = resolve_log_path(&sandbox.log_directory, &config.log_path);
        let image = config.image.unwrap_or_default();
        let id = new_id();
        let ts = self.clock.now_ns();
        let (exited, _) = watch::channel(false);
        st.containers.insert(
            id.clone(),
            ContainerRecord {
                id: id.clone(),
                sandbox_id: sandbox_id.to_string(),
                metadata,
                image_ref: image_id(&image.image),
                image,
                argv,
                envs,
                working_dir: config.working_dir,
                mounts: config.mounts,
                labels: config.labels,
                annotations: config.annotations,
                log_path: config.log_path,
                log_file,
                state: cri::ContainerState::ContainerCreated,
                created_at: ts,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
                message: String::new(),
                pid: None,
                starting: false,
                exited,
                stdin: config.stdin,
                stdin_once: config.stdin_once,
                tty: config.tty,
                attach: None,
                log_reopen: None,
                memory_limit,
                cgroup: None,
            },
        );
        self.emit(
            &st,
            &id,
            sandbox_id,
            cri::ContainerEventType::ContainerCreatedEvent,
            ts,
            None,
        );
        Ok(id)
    }

    /// `StartContainer`: spawns the process; publishes STARTED (or STOPPED with reason
    /// `StartError` and exit code 128 if it cannot be started, and returns the error).
    pub async fn start_container(self: &Arc<Self>, id: &str) -> Result<()> {
        let (mut spec, cgroup_for) = {
            let mut guard = self.lock();
            let st = &mut *guard;
            let c = st
                .containers
                .get_mut(id)
                .ok_or_else(|| not_found("container", id))?;
            if c.state != cri::ContainerState::ContainerCreated || c.starting {
                return Err(RuntimeError::FailedPrecondition(format!(
                    "container {id} is not in created state"
                )));
            }
            c.starting = true;
            let mounts = process::bind_mounts(&c.mounts, &c.metadata.name);
            let pod_uid = st.sandboxes.get(&c.sandbox_id).map(|s| s.metadata.uid.clone()).unwrap_or_default();
            let cgroup_for = (pod_uid, c.sandbox_id.clone(), c.memory_limit);
            let spec = ProcessSpec {
                argv: c.argv.clone(),
                envs: c.envs.clone(),
                working_dir: c.working_dir.clone(),
                mounts,
                stdin: c.stdin,
                tty: c.tty,
                cgroup_procs: Vec::new(),
            };
            (spec, cgroup_for)
        };
        let (pod_uid, sandbox_id, memory_limit) = cgroup_for;
        let cgroup = match self.accounting.create(&pod_uid, &sandbox_id, id, memory_limit) {
            Ok(cg) => cg,
            Err(source) => {
                let err = ProcessError::Spawn { program: format!("cgroup of container {id}"), source };
                return self.record_start(id, Err(err)).map(|_| ());
            }
        };
        if let Some(cg) = &cgroup {
            spec.cgroup_procs = cg.procs_files();
            if let Some(c) = self.lock().containers.get_mut(id) {
                c.cgroup = Some(cg.clone());
            }
        }
        let (spawned, pty) = match process::spawn(&spec) {
            Ok(s) => (Ok(s.child), s.pty.map(Arc::new)),
            Err(err) => (Err(err), None),
        };
        let (mut child, pid, log_file) = match self.record_start(id, spawned) {
            Ok(Started::Running {
                child,
                pid,
                log_file,
            }) => (child, pid, log_file),
            Ok(Started::Orphan { mut child, pid }) => {
                // Removed while we were spawning: do not leave the process behind.
                process::signal_group(pid, libc::SIGKILL);
                let _ = child.wait().await;
                crate::cgroups::destroy(cgroup.into_iter().collect()).await;
                return Err(not_found("container", id));
            }
            Err(err) => return Err(err),
        };

        let stdin_once = self.lock().containers.get(id).is_some_and(|c| c.stdin_once);
        let hub = Arc::new(match &pty {
            Some(pty) => {
                crate::attach::AttachIo::with_terminal(Arc::clone(pty), spec.stdin, stdin_once)
            }
            None => crate::attach::AttachIo::new(child.stdin.take(), stdin_once),
        });
        let (reopen_tx, reopen_rx) = tokio::sync::mpsc::channel(1);
        if let Some(c) = self.lock().containers.get_mut(id) {
            c.attach = Some(Arc::clone(&hub));
            c.log_reopen = Some(reopen_tx);
        }
        type Output = Box<dyn tokio::io::AsyncRead + Unpin + Send>;
        let (stdout, stderr): (Option<Output>, Option<Output>) = match pty {
            // A terminal is one stream: the log's stdout.
            Some(pty) => (
                Some(Box::new(crate::exec::PtyReader(pty))),
                Some(Box::new(tokio::io::empty())),
            ),
            None => (
                child.stdout.take().map(|s| Box::new(s) as Output),
                child.stderr.take().map(|s| Box::new(s) as Output),
            ),
        };
        let stdout = stdout.map(|s| hub.tee(s, 1));
        let stderr = stderr.map(|s| hub.tee(s, 2));
        drop(hub);
        let rt = Arc::clone(self);
        let logs = tokio::spawn(async move {
            let (Some(out), Some(err)) = (stdout, stderr) else {
                return;
            };
            let clock_rt = Arc::clone(&rt);
            if let Err(err) =
                crate::logs::copy_to_log(log_file, out, err, move || clock_rt.now_ns(), reopen_rx)
                    .await
            {
                tracing::warn!(%err, "container log copy failed");
            }
        });
        let rt = Arc::clone(self);
        let id = id.to_string();
        tokio::spawn(async move {
            let code = match child.wait().await {
                Ok(status) => process::exit_code(&status),
                Err(_) => 255,
            };
            // The main process is gone: the rest of its group goes too (a container's PID
            // namespace dies with its init), which also closes the log pipes; so does every
            // other process in its cgroup.
            process::signal_group(pid, libc::SIGKILL);
            if let Some(cg) = &cgroup {
                cg.kill_all();
            }
            let _ = tokio::time::timeout(LOG_DRAIN_WAIT, logs).await;
            rt.finish(&id, code);
        });
        Ok(())
    }

    /// Second half of `StartContainer`, under the lock: Running + STARTED, or Exited with
    /// `StartError` + STOPPED when the spawn failed.
    fn record_start(
        &self,
        id: &str,
        spawned: std::result::Result<tokio::process::Child, ProcessError>,
    ) -> Result<Started> {
        let mut st = self.lock();
        let child = match spawned {
            Ok(child) => child,
            Err(source) => {
                if let Some(c) = st.containers.get_mut(id) {
                    let ts = self.clock.now_ns();
                    c.starting = false;
                    c.state = cri::ContainerState::ContainerExited;
                    c.finished_at = ts;
                    c.exit_code = 128;
                    c.reason = "StartError".into();
                    c.message = source.to_string();
                    let _ = c.exited.send(true);
                    let sandbox_id = c.sandbox_id.clone();
                    self.emit(
                        &st,
                        id,
                        &sandbox_id,
                        cri::ContainerEventType::ContainerStoppedEvent,
                        ts,
                        None,
                    );
                }
                return Err(RuntimeError::Start {
                    id: id.to_string(),
                    source,
                });
            }
        };
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        let Some(c) = st.containers.get_mut(id) else {
            return Ok(Started::Orphan { child, pid });
        };
        let ts = self.clock.now_ns();
        c.starting = false;
        c.state = cri::ContainerState::ContainerRunning;
        c.started_at = ts;
        c.pid = Some(pid);
        let log_file = c.log_file.clone();
        let sandbox_id = c.sandbox_id.clone();
        self.emit(
            &st,
            id,
            &sandbox_id,
            cri::ContainerEventType::ContainerStartedEvent,
            ts,
            None,
        );
        Ok(Started::Running {
            child,
            pid,
            log_file,
        })
    }

    /// Records the exit of a running container and publishes STOPPED.
    fn finish(&self, id: &str, code: i32) {
        let mut st = self.lock();
        let Some(c) = st.containers.get_mut(id) else {
            return;
        };
        let ts = self.clock.now_ns();
        c.state = cri::ContainerState::ContainerExited;
        c.finished_at = ts;
        c.exit_code = code;
        c.reason = process::exit_reason(code).to_string();
        if code != 0 && c.cgroup.as_ref().is_some_and(crate::cgroups::Cgroup::oom_killed) {
            // The kernel's OOM killer acted in the container's cgroup (as containerd reports it).
            c.reason = "OOMKilled".to_string();
        }
        c.pid = None;
        c.attach = None;
        c.log_reopen = None;
        let _ = c.exited.send(true);
        let sandbox_id = c.sandbox_id.clone();
        self.emit(
            &st,
            id,
            &sandbox_id,
            cri::ContainerEventType::ContainerStoppedEvent,
            ts,
            None,
        );
    }

    /// `ReopenContainerLog`: the log writer of a running container opens its log path again
    /// (after the node agent renamed the file to rotate it). Errors: not found; failed
    /// precondition when the container is not running (containerd's answer too); internal when
    /// the file cannot be opened.
    pub async fn reopen_container_log(&self, id: &str) -> Result<()> {
        let writer = {
            let st = self.lock();
            let c = st
                .containers
                .get(id)
                .ok_or_else(|| not_found("container", id))?;
            match (&c.state, &c.log_reopen) {
                (cri::ContainerState::ContainerRunning, Some(w)) => w.clone(),
                _ => {
                    return Err(RuntimeError::FailedPrecondition(format!(
                        "container {id} is not running"
                    )))
                }
            }
        };
        let (answer, reply) = tokio::sync::oneshot::channel();
        let gone = || RuntimeError::FailedPrecondition(format!("container {id} is not running"));
        writer.send(answer).await.map_err(|_| gone())?;
        match reply.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(RuntimeError::Internal(err.to_string())),
            Err(_) => Err(gone()),
        }
    }

    /// `StopContainer`: SIGTERM to the container's process group, SIGKILL after `timeout_s`
    /// seconds (at once when `timeout_s` is 0); returns once it has exited. A created container
    /// becomes Exited without running; an exited one is left alone.
    pub async fn stop_container(self: &Arc<Self>, id: &str, timeout_s: i64) -> Result<()> {
        let (pid, mut exited) = {
            let mut st = self.lock();
            let c = st
                .containers
                .get_mut(id)
                .ok_or_else(|| not_found("container", id))?;
            match (c.state, c.pid) {
                (cri::ContainerState::ContainerRunning, Some(pid)) => (pid, c.exited.subscribe()),
                (cri::ContainerState::ContainerCreated, _) if !c.starting => {
                    let ts = self.clock.now_ns();
                    c.state = cri::ContainerState::ContainerExited;
                    c.finished_at = ts;
                    c.reason = "Error".into();
                    c.message = "stopped before it was started".into();
                    let _ = c.exited.send(true);
                    let sandbox_id = c.sandbox_id.clone();
                    self.emit(
                        &st,
                        id,
                        &sandbox_id,
                        cri::ContainerEventType::ContainerStoppedEvent,
                        ts,
                        None,
                    );
                    return Ok(());
                }
                (cri::ContainerState::ContainerCreated, _) => {
                    return Err(RuntimeError::FailedPrecondition(format!(
                        "container {id} is being started"
                    )));
                }
                _ => return Ok(()),
            }
        };
        if timeout_s > 0 {
            process::signal_group(pid, libc::SIGTERM);
            let grace = Duration::from_secs(u64::try_from(timeout_s).unwrap_or(0));
            if tokio::time::timeout(grace, exited.wait_for(|done| *done))
                .await
                .is_ok()
            {
                return Ok(());
            }
        }
        process::signal_group(pid, libc::SIGKILL);
        let _ = tokio::time::timeout(KILL_WAIT, exited.wait_for(|done| *done)).await;
        Ok(())
    }

    /// SIGKILLs a running container's group and waits (bounded) for its exit to be recorded.
    async fn kill_and_wait(&self, id: &str) {
        let (pid, mut exited) = {
            let st = self.lock();
            match st.containers.get(id) {
                Some(c) if c.state == cri::ContainerState::ContainerRunning => {
                    (c.pid, c.exited.subscribe())
                }
                _ => return,
            }
        };
        if let Some(pid) = pid {
            process::signal_group(pid, libc::SIGKILL);
        }
        let _ = tokio::time::timeout(KILL_WAIT, exited.wait_for(|done| *done)).await;
    }

    /// `RemoveContainer`: kills it if still running, forgets it, publishes DELETED. Idempotent.
    pub async fn remove_container(self: &Arc<Self>, id: &str) -> Result<()> {
        self.kill_and_wait(id).await;
        let cgroup = {
            let mut st = self.lock();
            let Some(c) = st.containers.remove(id) else { return Ok(()) };
            if let Some(pid) = c.pid {
                process::signal_group(pid, libc::SIGKILL);
            }
            let ts = self.clock.now_ns();
            self.emit(
                &st,
                id,
                &c.sandbox_id,
                cri::ContainerEventType::ContainerDeletedEvent,
                ts,
                None,
            );
            c.cgroup
        };
        crate::cgroups::destroy(cgroup.into_iter().collect()).await;
        Ok(())
    }

    /// `ListContainers`.
    pub fn list_containers(&self, filter: Option<&cri::ContainerFilter>) -> Vec<cri::Container> {
        self.lock().list_containers(filter)
    }

    /// `ContainerStatus`; with `verbose`, `info["pid"]` holds the main process id while it runs.
    pub fn container_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<cri::ContainerStatusResponse> {
        let st = self.lock();
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| not_found("container", id))?;
        let mut info = HashMap::new();
        if verbose {
            if let Some(pid) = c.pid {
                info.insert("pid".to_string(), pid.to_string());
            }
        }
        Ok(cri::ContainerStatusResponse {
            status: Some(c.status()),
            info,
        })
    }

    /// What a process exec'd into container `id` inherits (CRI `Exec`, `ExecSync`).
    ///
    /// # Errors
    /// `NotFound` for an unknown container; `FailedPrecondition` (`container is in
    /// CONTAINER_EXITED state`, as containerd words it) when it is not running.
    pub fn exec_target(&self, id: &str) -> Result<crate::exec::ExecTarget> {
        let st = self.lock();
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| not_found("container", id))?;
        match (c.state, c.pid) {
            (cri::ContainerState::ContainerRunning, Some(pid)) => Ok(crate::exec::ExecTarget {
                pid,
                cgroup_procs: c.cgroup.as_ref().map(crate::cgroups::Cgroup::procs_files).unwrap_or_default(),
                envs: c.envs.clone(),
                working_dir: c.working_dir.clone(),
            }),
            (state, _) => Err(RuntimeError::FailedPrecondition(format!(
                "container is in {} state",
                state.as_str_name()
            ))),
        }
    }

    /// The attach hub of running container `id` and a receiver that turns true when it exits
    /// (CRI `Attach`).
    ///
    /// # Errors
    /// As [`Self::exec_target`].
    pub fn attach_io(
        &self,
        id: &str,
    ) -> Result<(Arc<crate::attach::AttachIo>, watch::Receiver<bool>)> {
        let st = self.lock();
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| not_found("container", id))?;
        match (c.state, &c.attach) {
            (cri::ContainerState::ContainerRunning, Some(hub)) => {
                Ok((Arc::clone(hub), c.exited.subscribe()))
            }
            (state, _) => Err(RuntimeError::FailedPrecondition(format!(
                "container is in {} state",
                state.as_str_name()
            ))),
        }
    }

    /// Process ids of every running container (for shutdown and tests).
    pub fn running_pids(&self) -> Vec<i32> {
        self.lock()
            .containers
            .values()
            .filter_map(|c| c.pid)
            .collect()
    }

    /// SIGKILLs every running container and waits (bounded) until their exits are recorded.
    pub async fn kill_all(&self) {
        let ids: Vec<String> = self.lock().containers.keys().cloned().collect();
        for id in ids {
            self.kill_and_wait(&id).await;
        }
    }

    /// Removes the cgroup of every container and pod (at shutdown, after [`Self::kill_all`]);
    /// the records stay.
    pub async fn remove_cgroups(&self) {
        let cgroups: Vec<crate::cgroups::Cgroup> = {
            let st = self.lock();
            let containers = st.containers.values().filter_map(|c| c.cgroup.clone());
            let pods = st.sandboxes.values().filter_map(|s| self.accounting.pod(&s.metadata.uid, &s.id));
            containers.chain(pods).collect()
        };
        crate::cgroups::destroy(cgroups).await;
    }

    // ----- images -----

    /// `PullImage`: records the name; returns its id (`sha256:` of the name). Nothing is fetched.
    pub fn pull_image(&self, image: &str) -> Result<String> {
        if image.is_empty() {
            return Err(RuntimeError::InvalidArgument(
                "image name is required".into(),
            ));
        }
        let id = image_id(image);
        self.lock().images.insert(
            image.to_string(),
            ImageRecord {
                id: id.clone(),
                name: image.to_string(),
            },
        );
        Ok(id)
    }

    /// `ImageStatus`: the image by name or id, `None` if never pulled.
    pub fn image_status(&self, image: &str) -> Option<cri::Image> {
        let st = self.lock();
        st.images
            .values()
            .find(|i| i.name == image || i.id == image)
            .map(to_cri_image)
    }

    /// `ListImages`, optionally only the one matching `filter`.
    pub fn list_images(&self, filter: Option<&str>) -> Vec<cri::Image> {
        let st = self.lock();
        st.images
            .values()
            .filter(|i| filter.is_none_or(|f| f.is_empty() || i.name == f || i.id == f))
            .map(to_cri_image)
            .collect()
    }

    /// `RemoveImage`: forgets the image (by name or id). Idempotent.
    pub fn remove_image(&self, image: &str) {
        self.lock()
            .images
            .retain(|_, i| i.name != image && i.id != image);
    }
}

/// Outcome of [`Runtime::record_start`].
enum Started {
    Running {
        child: tokio::process::Child,
        pid: i32,
        log_file: Option<PathBuf>,
    },
    Orphan {
        child: tokio::process::Child,
        pid: i32,
    },
}

fn to_cri_image(i: &ImageRecord) -> cri::Image {
    cri::Image {
        id: i.id.clone(),
        repo_tags: vec![i.name.clone()],
        repo_digests: vec![],
        size: 0,
        uid: None,
        username: String::new(),
        spec: Some(cri::ImageSpec {
            image: i.name.clone(),
            ..Default::default()
        }),
        pinned: false,
    }
}

/// `sha256:<hex>` of an image name: a stable id for a name-only image.
pub fn image_id(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn not_found(kind: &'static str, id: &str) -> RuntimeError {
    RuntimeError::NotFound {
        kind,
        id: id.to_string(),
    }
}

/// The log file of a container: `log_directory/log_path` (kubelet's layout), an absolute
/// `log_path` on its own, or none.
fn resolve_log_path(log_directory: &str, log_path: &str) -> Option<PathBuf> {
    if log_path.is_empty() {
        return None;
    }
    let p = Path::new(log_path);
    if p.is_absolute() {
        return Some(p.to_path_buf());
    }
    if log_directory.is_empty() {
        return None;
    }
    Some(Path::new(log_directory).join(p))
}
