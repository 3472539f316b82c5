//! One task per pod (upstream `pod_workers.go` + `kuberuntime_manager.go` `SyncPod`/`KillPod`).
//!
//! Each sync: read the pod's runtime status from the cache, waiting for one newer than the last
//! runtime call this worker made; verify it reflects this worker's own last actions (the
//! sandbox it created, the containers it started or stopped) and otherwise inspect the pod
//! directly — so no sync ever acts on a status that predates its previous one, whatever order
//! events, relists and global-timestamp releases arrive in (the duplicate-container bugs
//! kubernetes#120942 / #123087). Then plan ([`compute_pod_actions`]), act through CRI, and write
//! `pods/status` when it changed.
//!
//! Deletion: once `deletionTimestamp` is set, containers get `StopContainer` with the pod's
//! grace period, the sandbox is stopped and removed, and the pod object is deleted with
//! `gracePeriodSeconds=0` (what kubelet's status manager does once a pod can be deleted).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::Api;
use tokio::sync::mpsc;

use super::actions::{compute_pod_actions, Backoff, PodActions};
use super::api_status::{api_pod_status, lost_containers, StatusContext};
use super::cri_config::{container_config, pod_identity, sandbox_config, DownwardValues};
use super::env::{environment, Sources};
use super::hooks;
use super::phase::{pod_phase_with_lost, Phase};
use super::prober::{Prober, Running};
use super::volumes;
use crate::cri::{CriClient, RuntimeApi};
use crate::events::{self, PodEvents};
use crate::pleg::metrics::{CacheSource, PlegMetrics};
use crate::pleg::status::container_name;
use crate::pleg::{GenericPleg, PlegState, PodCache, PodStatus, Timestamp};

/// How long a sync waits for the cache before inspecting the pod itself.
const STATUS_WAIT: Duration = Duration::from_secs(5);

/// What every worker shares.
pub struct WorkerEnv {
    /// The runtime.
    pub cri: CriClient,
    /// Pod inspection (and the relist that fills the cache).
    pub pleg: Arc<GenericPleg>,
    /// The pod status cache.
    pub cache: Arc<PodCache>,
    /// PLEG metrics (cache writes by source).
    pub metrics: PlegMetrics,
    /// API client.
    pub client: kube::Client,
    /// Root of pod log directories.
    pub logs_root: PathBuf,
    /// kubelet's `--root-dir`: pods' volumes ([`crate::pod::volumes`]).
    pub root_dir: PathBuf,
    /// CrashLoopBackOff parameters.
    pub backoff: Backoff,
    /// This node's IP.
    pub host_ip: String,
    /// This node's name.
    pub node_name: String,
    /// The runtime's name (container id scheme).
    pub runtime_name: String,
    /// Periodic resync (kubelet `--sync-frequency`, 1 min).
    pub resync: Duration,
    /// Where pod events go.
    pub events: PodEvents,
    /// The node's allocatable resources (thousandths of their unit), for
    /// `resourceFieldRef` limits a container does not set.
    pub allocatable: std::collections::BTreeMap<String, i128>,
}

impl std::fmt::Debug for WorkerEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerEnv")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

/// Messages to a worker.
#[derive(Debug, Clone)]
pub enum WorkerMsg {
    /// The pod object changed.
    Update(Arc<Pod>),
    /// Something happened in the runtime (a PLEG event).
    Sync,
    /// The pod object is gone from the API.
    Removed,
}

/// A runtime change this worker made and must see in any status it acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expectation {
    /// The sandbox exists.
    SandboxCreated(String),
    /// The container exists and is past Created.
    Started(String),
    /// The sandbox is NotReady or gone.
    SandboxStopped(String),
}

/// Whether `status` shows every expected change.
pub fn reflects(status: &PodStatus, expect: &[Expectation]) -> bool {
    expect.iter().all(|e| match e {
        Expectation::SandboxCreated(id) => status.sandbox_statuses.iter().any(|s| &s.id == id),
        Expectation::Started(id) => status.container_statuses.iter().any(|c| {
            &c.id == id && c.state != rkube_runtime::cri::ContainerState::ContainerCreated as i32
        }),
        Expectation::SandboxStopped(id) => status.state_of(id) != PlegState::Running,
    })
}

/// Makes sure the container's image is in the runtime, by its `imagePullPolicy` (upstream
/// `images/image_manager.go` `EnsureImageExists`): `Always` pulls; `IfNotPresent` (the default for
/// tagged images) pulls only when `ImageStatus` finds no image; `Never` fails when it is absent.
/// Runtimes with local-only images (containerd without a registry) need the `ImageStatus` check.
/// Returns the `Pulled` event's message (`None` without an image).
async fn ensure_image(
    cri: &CriClient,
    container: &k8s_openapi::api::core::v1::Container,
) -> Result<Option<String>, ImageError> {
    let Some(image) = container.image.as_deref().filter(|i| !i.is_empty()) else {
        return Ok(None);
    };
    let policy = container
        .image_pull_policy
        .as_deref()
        .unwrap_or("IfNotPresent");
    if policy != "Always" && cri.image_status(image).await?.is_some() {
        return Ok(Some(format!(
            "Container image {image:?} already present on machine"
        )));
    }
    if policy == "Never" {
        return Err(ImageError::NeverPull(format!(
            "Container image {image:?} is not present with pull policy of Never"
        )));
    }
    let began = std::time::Instant::now();
    cri.pull_image(image)
        .await
        .map_err(|e| ImageError::Pull(format!("Failed to pull image {image:?}: {e}")))?;
    Ok(Some(format!(
        "Successfully pulled image {image:?} in {:?}",
        began.elapsed()
    )))
}

/// Why a container's image could not be had (upstream `images.ErrImagePull`,
/// `ErrImageNeverPull`); the message is upstream's event message.
#[derive(Debug)]
enum ImageError {
    /// `ImageStatus` failed.
    Status(String),
    /// The pull failed.
    Pull(String),
    /// Absent, and the pull policy is `Never`.
    NeverPull(String),
}

impl From<crate::cri::CriError> for ImageError {
    fn from(e: crate::cri::CriError) -> Self {
        ImageError::Status(e.to_string())
    }
}

/// First wait before a failed image pull is tried again, doubled after each failure up to
/// [`IMAGE_BACKOFF_MAX`] (kubelet's image back-off: 10 s to 300 s).
const IMAGE_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// The longest wait between pulls of an image that failed.
const IMAGE_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// A container whose image could not be had, and when it is tried again.
#[derive(Debug, Clone)]
struct ImagePull {
    /// `ErrImagePull`, `ImagePullBackOff` or `ErrImageNeverPull`.
    reason: &'static str,
    message: String,
    backoff: Duration,
    next_try: std::time::Instant,
}

/// The restart counts the pod's API status reports, per container (init
/// and regular): a worker started after the agent itself restarted goes on
/// counting from them, so a container the runtime no longer has is created
/// as attempt `restartCount + 1`, not 0 (kubelet reads the same from the
/// runtime's surviving containers).
pub fn reported_attempts(pod: &Pod) -> HashMap<String, u32> {
    let Some(status) = pod.status.as_ref() else {
        return HashMap::new();
    };
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .chain(status.ephemeral_container_statuses.iter().flatten())
        .map(|c| {
            (
                c.name.clone(),
                u32::try_from(c.restart_count.max(0)).unwrap_or(0),
            )
        })
        .collect()
}

/// The per-pod task.
pub struct PodWorker {
    env: Arc<WorkerEnv>,
    uid: String,
    pod: Arc<Pod>,
    removed: bool,
    seen_attempts: HashMap<String, u32>,
    terminal: Option<Phase>,
    expect: Vec<Expectation>,
    /// Wait for a status newer than this before the next sync (start: newer than nothing, i.e.
    /// until the first relist has filled the cache).
    await_after: Timestamp,
    last_written: Option<ApiPodStatus>,
    wake_at: Option<Timestamp>,
    /// Containers whose configuration could not be made (a missing
    /// ConfigMap, Secret or key): name → error, shown as
    /// `CreateContainerConfigError` until a retry succeeds.
    config_errors: HashMap<String, String>,
    /// Volumes that could not be set up: name → the `FailedMount` message
    /// last reported (reported again only when it changes).
    mount_errors: HashMap<String, String>,
    /// Containers whose image could not be had, by name.
    image_pulls: HashMap<String, ImagePull>,
    /// When the file-backed volumes were last rewritten from their sources.
    volumes_refreshed: Option<std::time::Instant>,
    /// Liveness, readiness and startup probe results.
    prober: Prober,
    /// What the last probe round decided: name → (ready, started).
    probe_results: HashMap<String, (bool, bool)>,
}

/// How often ConfigMap, Secret, downward API and projected volumes are
/// rewritten from their sources (kubelet's `Fetch` change detection, on a
/// period of its own rather than the pod resync).
const VOLUME_REFRESH: Duration = Duration::from_secs(10);

/// How soon a container whose configuration failed is tried again.
const CONFIG_RETRY: Duration = Duration::from_secs(2);

fn now() -> Timestamp {
    Timestamp::now()
}

impl PodWorker {
    /// A worker for `pod` (terminal phases in its API status stay terminal).
    pub fn new(env: Arc<WorkerEnv>, pod: Arc<Pod>) -> Self {
        let terminal = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Succeeded") => Some(Phase::Succeeded),
            Some("Failed") => Some(Phase::Failed),
            _ => None,
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let seen_attempts = reported_attempts(&pod);
        Self {
            env,
            uid,
            pod,
            removed: false,
            seen_attempts,
            terminal,
            expect: Vec::new(),
            await_after: Timestamp(0),
            last_written: None,
            wake_at: None,
            config_errors: HashMap::new(),
            mount_errors: HashMap::new(),
            image_pulls: HashMap::new(),
            volumes_refreshed: None,
            prober: Prober::default(),
            probe_results: HashMap::new(),
        }
    }

    fn absorb(&mut self, msg: WorkerMsg) {
        match msg {
            WorkerMsg::Update(pod) => self.pod = pod,
            WorkerMsg::Sync => {}
            WorkerMsg::Removed => self.removed = true,
        }
    }

    /// Runs until the pod is gone from the API and from the runtime; then reports its uid on
    /// `done`.
    pub async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<WorkerMsg>,
        done: mpsc::UnboundedSender<String>,
    ) {
        loop {
            if self.removed || self.pod.metadata.deletion_timestamp.is_some() {
                self.terminate().await;
                break;
            }
            if let Err(err) = self.sync().await {
                tracing::warn!(pod = %self.name(), %err, "sync failed; retrying");
                self.wake_at = Some(Timestamp(now().0 + 1_000_000_000));
            }
            let wake = self
                .wake_at
                .map(|w| Duration::from_nanos(u64::try_from(w.0 - now().0).unwrap_or(0)));
            let sleep = wake.map_or(self.env.resync, |w| w.min(self.env.resync));
            tokio::select! {
                msg = rx.recv() => match msg {
                    None => { self.removed = true; }
                    Some(m) => {
                        self.absorb(m);
                        while let Ok(m) = rx.try_recv() {
                            self.absorb(m);
                        }
                    }
                },
                _ = tokio::time::sleep(sleep) => {}
            }
        }
        let _ = done.send(self.uid.clone());
    }

    fn name(&self) -> String {
        let (name, namespace, _) = pod_identity(&self.pod);
        format!("{namespace}/{name}")
    }

    /// The pod's sandboxes in the runtime (when the cache cannot tell).
    async fn find_sandboxes(&self) -> Vec<String> {
        match self.env.cri.list_pod_sandbox().await {
            Ok(list) => list
                .into_iter()
                .filter(|s| s.metadata.as_ref().is_some_and(|m| m.uid == self.uid))
                .map(|s| s.id)
                .collect(),
            Err(_) => vec![],
        }
    }

    /// A status that reflects this worker's last actions.
    async fn status(&mut self) -> Arc<PodStatus> {
        let read = tokio::time::timeout(
            STATUS_WAIT,
            self.env.cache.get_newer_than(&self.uid, self.await_after),
        )
        .await;
        if let Ok(read) = &read {
            if reflects(&read.status, &self.expect) {
                self.expect.clear();
                return Arc::clone(&read.status);
            }
        }
        // Late event, release by the global timestamp only, or a stale entry: ask the runtime.
        let mut sandboxes: Vec<String> = match &read {
            Ok(r) => r
                .status
                .sandbox_statuses
                .iter()
                .map(|s| s.id.clone())
                .collect(),
            Err(_) => vec![],
        };
        for e in &self.expect {
            if let Expectation::SandboxCreated(id) | Expectation::SandboxStopped(id) = e {
                if !sandboxes.contains(id) {
                    sandboxes.push(id.clone());
                }
            }
        }
        if sandboxes.is_empty() {
            sandboxes = self.find_sandboxes().await;
        }
        match self.env.pleg.inspect(&self.uid, &sandboxes).await {
            Ok(status) => {
                self.expect.clear();
                let ts = status.timestamp;
                if self.env.cache.set(&self.uid, status.clone(), None, ts) {
                    self.env.metrics.cache_update(CacheSource::Inspect);
                }
                Arc::new(status)
            }
            Err(err) => {
                tracing::warn!(pod = %self.name(), %err, "inspecting pod failed");
                match read {
                    Ok(r) => r.status,
                    Err(_) => Arc::new(PodStatus::empty(&self.uid)),
                }
            }
        }
    }

    async fn sync(&mut self) -> anyhow::Result<()> {
        let status = self.status().await;
        for c in &status.container_statuses {
            let attempt = c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0);
            let e = self
                .seen_attempts
                .entry(container_name(c).to_string())
                .or_insert(attempt);
            *e = (*e).max(attempt);
        }
        let now_ts = now();
        // The pod as last reported (spec from the API, status as this worker last wrote it),
        // built once for the lost containers and the new API status. Containers the runtime
        // lost (it restarted) count as stopped, per the last API status: decided before
        // planning, so a `Never` pod that lost its running container is Failed rather than
        // started again.
        let mut reported = (*self.pod).clone();
        if let Some(last) = &self.last_written {
            reported.status = Some(last.clone());
        }
        let lost = lost_containers(&reported, &status);
        let phase = self
            .terminal
            .unwrap_or_else(|| pod_phase_with_lost(&self.pod, &status, &lost));
        if phase.is_terminal() {
            self.terminal = Some(phase);
        }
        let actions = compute_pod_actions(
            &self.pod,
            &status,
            &self.seen_attempts,
            self.terminal,
            now_ts,
            &self.env.backoff,
        );
        self.wake_at = actions.wake_at;
        if self.terminal.is_none() {
            self.probe(&status).await;
        }
        self.write_status(&reported, &status, phase, &actions.backing_off, now_ts)
            .await;
        if !actions.is_noop() {
            let errors_before = (self.config_errors.clone(), self.image_errors());
            self.execute(&actions, &status).await?;
            if (self.config_errors.clone(), self.image_errors()) != errors_before {
                self.write_status(&reported, &status, phase, &actions.backing_off, now_ts)
                    .await;
            }
        }
        self.refresh_volumes(&status).await;
        if !self.config_errors.is_empty()
            || !self.mount_errors.is_empty()
            || !self.image_pulls.is_empty()
        {
            // Image pulls in back-off are looked at again as often: the first look after an
            // error reports ImagePullBackOff, a look past the back-off pulls again.
            let retry =
                Timestamp(now().0 + i64::try_from(CONFIG_RETRY.as_nanos()).unwrap_or(i64::MAX));
            self.wake_at = Some(
                self.wake_at
                    .map_or(retry, |w| if w.0 < retry.0 { w } else { retry }),
            );
        }
        Ok(())
    }

    /// The waiting reason and message of each container whose image could not be had.
    fn image_errors(&self) -> HashMap<String, (String, String)> {
        self.image_pulls
            .iter()
            .map(|(name, p)| (name.clone(), (p.reason.to_string(), p.message.clone())))
            .collect()
    }

    async fn execute(&mut self, actions: &PodActions, status: &PodStatus) -> anyhow::Result<()> {
        let cri = self.env.cri.clone();
        let mut sandbox_id = status.newest_sandbox().map(|s| s.id.clone());
        if let Some(old) = &actions.remove_sandbox {
            cri.stop_pod_sandbox(old).await?;
            cri.remove_pod_sandbox(old).await?;
            sandbox_id = None;
        }
        let sandbox_attempt = status
            .newest_sandbox()
            .and_then(|s| s.metadata.as_ref())
            .map(|m| m.attempt)
            .unwrap_or(0);
        let attempt = actions.create_sandbox.unwrap_or(sandbox_attempt);
        let sandbox_config = sandbox_config(&self.pod, attempt, &self.env.logs_root);
        if actions.create_sandbox.is_some() {
            self.await_after = now();
            let id = cri.run_pod_sandbox(sandbox_config.clone()).await?;
            self.expect.push(Expectation::SandboxCreated(id.clone()));
            sandbox_id = Some(id);
        }
        for id in &actions.start {
            self.await_after = now();
            cri.start_container(id).await?;
            self.expect.push(Expectation::Started(id.clone()));
        }
        let pod = Arc::clone(&self.pod);
        let (containers, inits) = match pod.spec.as_ref() {
            Some(s) => (
                s.containers.as_slice(),
                s.init_containers.as_deref().unwrap_or_default(),
            ),
            None => (&[][..], &[][..]),
        };
        let ephemeral = super::ephemeral::containers(&pod);
        let dw = self.downward(status);
        for plan in &actions.create {
            let Some(sandbox) = sandbox_id.as_deref() else {
                break;
            };
            let list = if plan.ephemeral {
                ephemeral.as_slice()
            } else if plan.init {
                inits
            } else {
                containers
            };
            let Some(container) = list.iter().find(|c| c.name == plan.name) else {
                continue;
            };
            let mut regarding = PodEvents::reference(&pod, Some((&plan.name, plan.init)));
            if plan.ephemeral {
                regarding.field_path = Some(format!("spec.ephemeralContainers{{{}}}", plan.name));
            }
            let events = &self.env.events;
            let mounts = match volumes::container_mounts(
                &self.env.client,
                &self.env.root_dir,
                &pod,
                container,
                &dw,
            )
            .await
            {
                Ok(m) => {
                    self.mount_errors.clear();
                    m
                }
                Err(err) => {
                    let message = err.to_string();
                    if self
                        .mount_errors
                        .insert(err.volume.clone(), message.clone())
                        .as_deref()
                        != Some(message.as_str())
                    {
                        events
                            .publish(
                                &PodEvents::reference(&pod, None),
                                true,
                                events::FAILED_MOUNT,
                                message,
                            )
                            .await;
                    }
                    continue;
                }
            };
            let image = container.image.clone().unwrap_or_default();
            if let Some(pull) = self.image_pulls.get_mut(&plan.name) {
                if std::time::Instant::now() < pull.next_try {
                    // Waiting out the back-off (upstream's `ImagePullBackOff`).
                    if pull.reason == "ErrImagePull" {
                        pull.reason = "ImagePullBackOff";
                        pull.message = format!("Back-off pulling image {image:?}");
                        events
                            .publish(&regarding, false, events::BACK_OFF, pull.message.clone())
                            .await;
                    }
                    continue;
                }
            }
            let pulled = match ensure_image(&cri, container).await {
                Ok(pulled) => {
                    self.image_pulls.remove(&plan.name);
                    pulled
                }
                Err(err) => {
                    let (reason, message, event_reason) = match err {
                        ImageError::NeverPull(m) => {
                            ("ErrImageNeverPull", m, events::ERR_IMAGE_NEVER_PULL)
                        }
                        ImageError::Pull(m) | ImageError::Status(m) => {
                            ("ErrImagePull", m, events::FAILED)
                        }
                    };
                    let backoff = self
                        .image_pulls
                        .get(&plan.name)
                        .map_or(IMAGE_BACKOFF_INITIAL, |p| {
                            (p.backoff * 2).min(IMAGE_BACKOFF_MAX)
                        });
                    events
                        .publish(&regarding, true, event_reason, message.clone())
                        .await;
                    events
                        .publish(&regarding, true, events::FAILED, format!("Error: {reason}"))
                        .await;
                    self.image_pulls.insert(
                        plan.name.clone(),
                        ImagePull {
                            reason,
                            message,
                            backoff,
                            next_try: std::time::Instant::now() + backoff,
                        },
                    );
                    continue;
                }
            };
            // `kubectl debug --target`: the target's container id, resolved before the
            // config is made (upstream `startContainer`: `getTargetID`).
            let target = match plan
                .ephemeral
                .then(|| super::ephemeral::target_of(&pod, &plan.name))
                .flatten()
                .map(|t| super::ephemeral::target_id(status, t))
                .transpose()
            {
                Ok(target) => target,
                Err(message) => {
                    if self
                        .config_errors
                        .insert(plan.name.clone(), message.clone())
                        .as_deref()
                        != Some(message.as_str())
                    {
                        events
                            .publish(&regarding, true, events::FAILED, format!("Error: {message}"))
                            .await;
                    }
                    continue;
                }
            };
            let namespace = pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let sources = Sources::fetch(&self.env.client, &namespace, container).await?;
            let env = match environment(&pod, container, &dw, &sources) {
                Ok((env, invalid)) => {
                    self.config_errors.remove(&plan.name);
                    for skipped in invalid {
                        events
                            .publish(
                                &regarding,
                                true,
                                events::INVALID_ENV_NAMES,
                                skipped.message(),
                            )
                            .await;
                    }
                    env
                }
                Err(err) => {
                    // Reported once per distinct error; retried every CONFIG_RETRY.
                    if self
                        .config_errors
                        .insert(plan.name.clone(), err.0.clone())
                        .as_deref()
                        != Some(err.0.as_str())
                    {
                        events
                            .publish(&regarding, true, events::FAILED, format!("Error: {err}"))
                            .await;
                    }
                    continue;
                }
            };
            if let Some(note) = pulled {
                events
                    .publish(&regarding, false, events::PULLED, note)
                    .await;
            }
            let mut config = container_config(&pod, container, plan.attempt, &env);
            config.mounts = mounts;
            if let Some(target_id) = &target {
                super::ephemeral::join_target(&mut config, target_id);
            }
            let id = match cri
                .create_container(sandbox, config, sandbox_config.clone())
                .await
            {
                Ok(id) => id,
                Err(err) => {
                    events
                        .publish(&regarding, true, events::FAILED, format!("Error: {err}"))
                        .await;
                    return Err(err.into());
                }
            };
            events
                .publish(
                    &regarding,
                    false,
                    events::CREATED,
                    format!("Created container: {}", plan.name),
                )
                .await;
            self.seen_attempts.insert(plan.name.clone(), plan.attempt);
            self.await_after = now();
            // A start failure leaves the container Exited (StartError); back-off handles it.
            match cri.start_container(&id).await {
                Ok(()) => {
                    events
                        .publish(
                            &regarding,
                            false,
                            events::STARTED,
                            format!("Started container {}", plan.name),
                        )
                        .await;
                    if let Some(hook) = container
                        .lifecycle
                        .as_ref()
                        .and_then(|l| l.post_start.as_ref())
                    {
                        let pod_ip = status
                            .ips
                            .first()
                            .cloned()
                            .unwrap_or_else(|| self.env.host_ip.clone());
                        let grace = pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.termination_grace_period_seconds)
                            .unwrap_or(30);
                        if let Err(err) = hooks::run(
                            hook,
                            container,
                            &id,
                            &cri,
                            &pod_ip,
                            Duration::from_secs(u64::try_from(grace.max(1)).unwrap_or(30)),
                        )
                        .await
                        {
                            events
                                .publish(
                                    &regarding,
                                    true,
                                    events::FAILED_POST_START_HOOK,
                                    format!("PostStartHook failed: {err}"),
                                )
                                .await;
                            events
                                .publish(
                                    &regarding,
                                    false,
                                    events::KILLING,
                                    format!(
                                        "FailedPostStartHook: container {} will be restarted",
                                        plan.name
                                    ),
                                )
                                .await;
                            let _ = cri.stop_container(&id, grace).await;
                        }
                    }
                }
                Err(err) => {
                    tracing::warn!(pod = %self.name(), container = %plan.name, %err, "start failed");
                    events
                        .publish(&regarding, true, events::FAILED, format!("Error: {err}"))
                        .await;
                }
            }
            self.expect.push(Expectation::Started(id));
        }
        for id in &actions.prune {
            let _ = cri.remove_container(id).await;
        }
        if let Some(id) = &actions.stop_sandbox {
            self.await_after = now();
            cri.stop_pod_sandbox(id).await?;
            self.expect.push(Expectation::SandboxStopped(id.clone()));
        }
        Ok(())
    }

    /// Writes the API status computed from `reported` (the pod with its last written status)
    /// and `status`, unless it equals the last one written.
    async fn write_status(
        &mut self,
        reported: &Pod,
        status: &PodStatus,
        phase: Phase,
        backing_off: &HashMap<String, Timestamp>,
        now_ts: Timestamp,
    ) {
        let image_errors = self.image_errors();
        let ctx = StatusContext {
            phase,
            backing_off,
            config_errors: &self.config_errors,
            image_errors: &image_errors,
            probe_results: &self.probe_results,
            host_ip: &self.env.host_ip,
            runtime_name: &self.env.runtime_name,
            now: now_ts,
        };
        let api = api_pod_status(reported, status, &ctx);
        if self.last_written.as_ref() == Some(&api) {
            return;
        }
        let (name, namespace, _) = pod_identity(&self.pod);
        let pods: Api<Pod> = Api::namespaced(self.env.client.clone(), &namespace);
        let patch = serde_json::json!({ "status": api });
        match pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.last_written = Some(api),
            Err(err) => tracing::warn!(pod = %self.name(), %err, "writing pod status failed"),
        }
    }

    /// Runs the probes that are due on the running containers (see
    /// [`super::prober`]): records readiness, reports `Unhealthy`, kills
    /// containers whose liveness or startup probe failed, and wakes the
    /// worker for the next probe.
    async fn probe(&mut self, status: &PodStatus) {
        let pod = Arc::clone(&self.pod);
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let now_ns = now().0;
        let running: Vec<Running<'_>> = status
            .container_statuses
            .iter()
            .filter(|c| PlegState::from_container(c.state) == PlegState::Running)
            .filter_map(|c| {
                let spec = spec
                    .containers
                    .iter()
                    .find(|s| s.name == container_name(c))?;
                let age = Duration::from_nanos(u64::try_from(now_ns - c.started_at).unwrap_or(0));
                let started_at = std::time::Instant::now()
                    .checked_sub(age)
                    .unwrap_or_else(std::time::Instant::now);
                Some(Running {
                    spec,
                    id: c.id.clone(),
                    started_at,
                })
            })
            .collect();
        let pod_ip = status
            .ips
            .first()
            .cloned()
            .unwrap_or_else(|| self.env.host_ip.clone());
        let round = self.prober.round(&running, &self.env.cri, &pod_ip).await;
        self.probe_results = running
            .iter()
            .map(|r| {
                (
                    r.spec.name.clone(),
                    (self.prober.ready(r.spec), self.prober.started(r.spec)),
                )
            })
            .collect();
        for (name, message) in round.unhealthy {
            let regarding = PodEvents::reference(&pod, Some((&name, false)));
            self.env
                .events
                .publish(&regarding, true, events::UNHEALTHY, message)
                .await;
        }
        for (name, id, message) in round.kill {
            let regarding = PodEvents::reference(&pod, Some((&name, false)));
            self.env
                .events
                .publish(&regarding, false, events::KILLING, message)
                .await;
            let grace = spec.termination_grace_period_seconds.unwrap_or(30);
            let probe_grace = spec
                .containers
                .iter()
                .find(|c| c.name == name)
                .and_then(|c| {
                    c.liveness_probe
                        .as_ref()
                        .and_then(|p| p.termination_grace_period_seconds)
                });
            self.await_after = now();
            if let Err(err) = self
                .env
                .cri
                .stop_container(&id, probe_grace.unwrap_or(grace))
                .await
            {
                tracing::warn!(pod = %self.name(), container = %name, %err, "stopping an unhealthy container failed");
            }
        }
        if let Some(next) = self.prober.next_due(&running) {
            let wait = next.saturating_duration_since(std::time::Instant::now());
            let at = Timestamp(now().0 + i64::try_from(wait.as_nanos()).unwrap_or(i64::MAX));
            self.wake_at = Some(self.wake_at.map_or(at, |w| if w.0 < at.0 { w } else { at }));
        }
    }

    /// What the downward API reads besides the pod.
    fn downward(&self, status: &PodStatus) -> DownwardValues {
        DownwardValues {
            allocatable: self.env.allocatable.clone(),
            pod_ip: status
                .ips
                .first()
                .cloned()
                .unwrap_or_else(|| self.env.host_ip.clone()),
            host_ip: self.env.host_ip.clone(),
            node_name: self.env.node_name.clone(),
        }
    }

    /// Rewrites the pod's file-backed volumes from their sources every
    /// [`VOLUME_REFRESH`] while a container of the pod runs, and wakes the
    /// worker for the next round.
    async fn refresh_volumes(&mut self, status: &PodStatus) {
        if !volumes::has_file_volumes(&self.pod) || self.terminal.is_some() {
            return;
        }
        let running = status
            .container_statuses
            .iter()
            .any(|c| PlegState::from_container(c.state) == PlegState::Running);
        if running
            && self
                .volumes_refreshed
                .is_none_or(|t| t.elapsed() >= VOLUME_REFRESH)
        {
            let dw = self.downward(status);
            for err in volumes::refresh(&self.env.client, &self.env.root_dir, &self.pod, &dw).await
            {
                tracing::warn!(pod = %self.name(), %err, "volume refresh failed");
            }
            self.volumes_refreshed = Some(std::time::Instant::now());
        }
        let next =
            Timestamp(now().0 + i64::try_from(VOLUME_REFRESH.as_nanos()).unwrap_or(i64::MAX));
        self.wake_at = Some(
            self.wake_at
                .map_or(next, |w| if w.0 < next.0 { w } else { next }),
        );
    }

    /// Kills the pod (grace period from the deletion), removes its sandbox, deletes the object.
    async fn terminate(&mut self) {
        let grace = if self.removed {
            0
        } else {
            self.pod
                .metadata
                .deletion_grace_period_seconds
                .or_else(|| {
                    self.pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.termination_grace_period_seconds)
                })
                .unwrap_or(30)
        };
        let sandboxes = self.find_sandboxes().await;
        if let Ok(status) = self.env.pleg.inspect(&self.uid, &sandboxes).await {
            let running: Vec<String> = status
                .container_statuses
                .iter()
                .filter(|c| PlegState::from_container(c.state) == PlegState::Running)
                .map(|c| c.id.clone())
                .collect();
            if !self.removed {
                for c in status
                    .container_statuses
                    .iter()
                    .filter(|c| PlegState::from_container(c.state) == PlegState::Running)
                {
                    let name = container_name(c);
                    let init = self
                        .pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.init_containers.as_ref())
                        .is_some_and(|i| i.iter().any(|x| x.name == name));
                    let regarding = PodEvents::reference(&self.pod, Some((name, init)));
                    self.env
                        .events
                        .publish(
                            &regarding,
                            false,
                            events::KILLING,
                            format!("Stopping container {name}"),
                        )
                        .await;
                }
            }
            // preStop hooks first, all at once, within the grace period.
            let began = std::time::Instant::now();
            if !self.removed {
                let pod = Arc::clone(&self.pod);
                let pod_ip = status
                    .ips
                    .first()
                    .cloned()
                    .unwrap_or_else(|| self.env.host_ip.clone());
                let limit = Duration::from_secs(u64::try_from(grace.max(1)).unwrap_or(30));
                let hooked: Vec<_> = status
                    .container_statuses
                    .iter()
                    .filter(|c| PlegState::from_container(c.state) == PlegState::Running)
                    .filter_map(|c| {
                        let spec = pod
                            .spec
                            .as_ref()?
                            .containers
                            .iter()
                            .find(|s| s.name == container_name(c))?;
                        Some((
                            spec,
                            c.id.clone(),
                            spec.lifecycle.as_ref()?.pre_stop.as_ref()?,
                        ))
                    })
                    .collect();
                let runs = hooked.iter().map(|(spec, id, hook)| {
                    hooks::run(hook, spec, id, &self.env.cri, &pod_ip, limit)
                });
                for ((spec, _, _), result) in
                    hooked.iter().zip(futures::future::join_all(runs).await)
                {
                    if let Err(err) = result {
                        let regarding = PodEvents::reference(&pod, Some((&spec.name, false)));
                        self.env
                            .events
                            .publish(
                                &regarding,
                                true,
                                events::FAILED_PRE_STOP_HOOK,
                                format!("PreStopHook failed: {err}"),
                            )
                            .await;
                    }
                }
            }
            let grace = if grace > 0 {
                hooks::grace_after_hook(grace, began)
            } else {
                0
            };
            let stops = running
                .iter()
                .map(|id| self.env.cri.stop_container(id, grace));
            for res in futures::future::join_all(stops).await {
                if let Err(err) = res {
                    tracing::warn!(pod = %self.name(), %err, "stopping container failed");
                }
            }
        }
        for id in &sandboxes {
            let _ = self.env.cri.stop_pod_sandbox(id).await;
            let _ = self.env.cri.remove_pod_sandbox(id).await;
        }
        volumes::clean_up(&self.env.root_dir, &self.uid);
        if self.removed {
            return;
        }
        let (name, namespace, uid) = pod_identity(&self.pod);
        let pods: Api<Pod> = Api::namespaced(self.env.client.clone(), &namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        if let Err(err) = pods.delete(&name, &params).await {
            if !matches!(&err, kube::Error::Api(s) if s.code == 404) {
                tracing::warn!(pod = %self.name(), %err, "deleting terminated pod failed");
            }
        }
    }
}
