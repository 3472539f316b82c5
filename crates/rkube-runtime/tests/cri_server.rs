//! `rkube runtime` over its real unix socket, driven by a real tonic CRI client (the role crictl
//! plays for containerd). Every test stops the runtime and checks by PID that no container
//! process is left.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rkube_runtime::cri;
use rkube_runtime::cri::image_service_client::ImageServiceClient;
use rkube_runtime::cri::runtime_service_client::RuntimeServiceClient;
use rkube_runtime::cri::ContainerEventType as Ev;
use rkube_runtime::{endpoint, process, serve, RuntimeConfig, RuntimeHandle};
use tonic::transport::Channel;

struct Fixture {
    dir: tempfile::TempDir,
    handle: RuntimeHandle,
    rt: RuntimeServiceClient<Channel>,
    img: ImageServiceClient<Channel>,
}

async fn start() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("run/cri.sock");
    let handle = serve(&socket, RuntimeConfig::new(dir.path().join("root"))).await.expect("serve");
    let channel = endpoint::connect(&handle.endpoint()).await.expect("connect");
    Fixture {
        rt: RuntimeServiceClient::new(channel.clone()),
        img: ImageServiceClient::new(channel),
        dir,
        handle,
    }
}

impl Fixture {
    fn log_dir(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    async fn sandbox(&mut self, name: &str) -> String {
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: name.into(),
            log_directory: self.log_dir().display().to_string(),
            ..Default::default()
        };
        let req = cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        self.rt.run_pod_sandbox(req).await.expect("RunPodSandbox").into_inner().pod_sandbox_id
    }

    async fn container(&mut self, sandbox: &str, name: &str, argv: &[&str]) -> String {
        self.container_with(sandbox, name, argv, |_| {}).await
    }

    async fn container_with(
        &mut self,
        sandbox: &str,
        name: &str,
        argv: &[&str],
        edit: impl FnOnce(&mut cri::ContainerConfig),
    ) -> String {
        let mut config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(cri::ImageSpec { image: "busybox".into(), ..Default::default() }),
            command: vec![argv[0].to_string()],
            args: argv[1..].iter().map(|s| s.to_string()).collect(),
            log_path: format!("{name}/0.log"),
            ..Default::default()
        };
        edit(&mut config);
        let req = cri::CreateContainerRequest { pod_sandbox_id: sandbox.into(), config: Some(config), sandbox_config: None };
        self.rt.create_container(req).await.expect("CreateContainer").into_inner().container_id
    }

    async fn start_container(&mut self, id: &str) {
        self.rt
            .start_container(cri::StartContainerRequest { container_id: id.into() })
            .await
            .expect("StartContainer");
    }

    async fn status(&mut self, id: &str) -> (cri::ContainerStatus, HashMap<String, String>) {
        let resp = self
            .rt
            .container_status(cri::ContainerStatusRequest { container_id: id.into(), verbose: true })
            .await
            .expect("ContainerStatus")
            .into_inner();
        (resp.status.expect("status"), resp.info)
    }

    async fn pid(&mut self, id: &str) -> i32 {
        let (_, info) = self.status(id).await;
        info.get("pid").and_then(|p| p.parse().ok()).expect("verbose status has a pid")
    }

    async fn finish(self) -> Vec<i32> {
        let pids = self.handle.runtime().running_pids();
        self.handle.shutdown().await;
        pids
    }
}

async fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while process::process_exists(pid) {
        assert!(Instant::now() < deadline, "process {pid} still exists");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

type Events = tonic::Streaming<cri::ContainerEventResponse>;

async fn subscribe(f: &mut Fixture) -> Events {
    f.rt.get_container_events(cri::GetEventsRequest {}).await.expect("GetContainerEvents").into_inner()
}

/// Reads events until one for `id` of type `until` arrives; returns every event for `id`.
async fn events_for(stream: &mut Events, id: &str, until: Ev) -> Vec<cri::ContainerEventResponse> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next()).await.expect("event before deadline");
        let event = next.expect("stream open").expect("event ok");
        if event.container_id == id {
            let done = event.container_event_type == until as i32;
            seen.push(event);
            if done {
                return seen;
            }
        }
    }
}

fn read_log(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

#[tokio::test]
async fn exited_container_reports_exit_code_through_events_status_and_cri_log() {
    let mut f = start().await;
    let mut events = subscribe(&mut f).await;
    let sandbox = f.sandbox("exit3").await;
    let id = f.container(&sandbox, "main", &["sh", "-c", "echo hi; exit 3"]).await;
    f.start_container(&id).await;

    let seen = events_for(&mut events, &id, Ev::ContainerStoppedEvent).await;
    let kinds: Vec<i32> = seen.iter().map(|e| e.container_event_type).collect();
    assert_eq!(
        kinds,
        vec![Ev::ContainerCreatedEvent as i32, Ev::ContainerStartedEvent as i32, Ev::ContainerStoppedEvent as i32]
    );
    assert!(seen.windows(2).all(|w| w[0].created_at < w[1].created_at), "event timestamps increase");
    let stopped = seen.last().expect("stopped event");
    let sandbox_status = stopped.pod_sandbox_status.as_ref().expect("event carries the sandbox status");
    assert_eq!(sandbox_status.id, sandbox);
    assert_eq!(sandbox_status.metadata.as_ref().map(|m| m.uid.as_str()), Some("uid-exit3"));
    let mine = stopped.containers_statuses.iter().find(|c| c.id == id).expect("event carries the container");
    assert_eq!(mine.state, cri::ContainerState::ContainerExited as i32);
    assert_eq!(mine.exit_code, 3);
    assert_eq!(mine.reason, "Error");
    assert!(mine.finished_at >= mine.started_at && mine.started_at > mine.created_at);

    let (status, _) = f.status(&id).await;
    assert_eq!(status.exit_code, 3);
    assert_eq!(status.finished_at, stopped.created_at);

    let lines = read_log(&f.log_dir().join("main/0.log"));
    assert_eq!(lines.len(), 1, "{lines:?}");
    let (ts, rest) = lines[0].split_once(' ').expect("timestamp first");
    assert_eq!(rest, "stdout F hi");
    assert!(chrono::DateTime::parse_from_rfc3339(ts).is_ok(), "RFC3339Nano timestamp: {ts}");
    assert!(f.finish().await.is_empty());
}

#[tokio::test]
async fn pod_sandbox_status_lists_containers_with_a_timestamp_newer_than_every_event() {
    let mut f = start().await;
    let mut events = subscribe(&mut f).await;
    let sandbox = f.sandbox("status").await;
    let a = f.container(&sandbox, "a", &["true"]).await;
    let b = f.container(&sandbox, "b", &["sleep", "1000"]).await;
    f.start_container(&b).await;
    let last = events_for(&mut events, &b, Ev::ContainerStartedEvent).await;
    let resp = f
        .rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: sandbox.clone(), verbose: true })
        .await
        .expect("PodSandboxStatus")
        .into_inner();
    let ids: Vec<&str> = resp.containers_statuses.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, vec![a.as_str(), b.as_str()]);
    assert_eq!(resp.containers_statuses[1].state, cri::ContainerState::ContainerRunning as i32);
    assert!(resp.timestamp > last.last().map(|e| e.created_at).unwrap_or(i64::MAX));
    let sandbox_status = resp.status.expect("status");
    assert_eq!(sandbox_status.state, cri::PodSandboxState::SandboxReady as i32);
    assert!(!sandbox_status.network.expect("network").ip.is_empty());
    let pid = f.pid(&b).await;
    assert_eq!(f.finish().await, vec![pid]);
    wait_gone(pid).await;
}

#[tokio::test]
async fn stop_container_sigterm_ends_sleep_with_143() {
    let mut f = start().await;
    let sandbox = f.sandbox("stop").await;
    let id = f.container(&sandbox, "sleeper", &["sleep", "1000"]).await;
    f.start_container(&id).await;
    let pid = f.pid(&id).await;
    assert!(process::process_exists(pid));
    let started = Instant::now();
    f.rt.stop_container(cri::StopContainerRequest { container_id: id.clone(), timeout: 10 })
        .await
        .expect("StopContainer");
    assert!(started.elapsed() < Duration::from_secs(5), "SIGTERM was enough");
    wait_gone(pid).await;
    let (status, _) = f.status(&id).await;
    assert_eq!(status.state, cri::ContainerState::ContainerExited as i32);
    assert_eq!(status.exit_code, 128 + libc::SIGTERM);
    assert!(f.finish().await.is_empty());
}

#[tokio::test]
async fn stop_container_sends_sigkill_after_the_timeout() {
    let mut f = start().await;
    let sandbox = f.sandbox("stubborn").await;
    let id = f.container(&sandbox, "stubborn", &["sh", "-c", "trap '' TERM; sleep 1000"]).await;
    f.start_container(&id).await;
    let pid = f.pid(&id).await;
    tokio::time::sleep(Duration::from_millis(200)).await; // let sh install the trap
    let started = Instant::now();
    f.rt.stop_container(cri::StopContainerRequest { container_id: id.clone(), timeout: 1 })
        .await
        .expect("StopContainer");
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(5), "took {took:?}");
    wait_gone(pid).await;
    let (status, _) = f.status(&id).await;
    assert_eq!(status.exit_code, 128 + libc::SIGKILL);
    assert!(f.finish().await.is_empty());
}

#[tokio::test]
async fn stop_pod_sandbox_kills_every_process_group_and_remove_deletes_records() {
    let mut f = start().await;
    let mut events = subscribe(&mut f).await;
    let sandbox = f.sandbox("pod").await;
    let one = f.container(&sandbox, "one", &["sleep", "1000"]).await;
    // The shell forks a background sleep: a grandchild in the container's process group.
    let two = f.container(&sandbox, "two", &["sh", "-c", "sleep 1000 & wait"]).await;
    let workdir = f.dir.path().join("work");
    std::fs::create_dir_all(&workdir).expect("workdir");
    let three = f
        .container_with(&sandbox, "three", &["sleep", "1000"], |c| c.working_dir = workdir.display().to_string())
        .await;
    for id in [&one, &two, &three] {
        f.start_container(id).await;
    }
    let mut pids = vec![f.pid(&one).await, f.pid(&two).await, f.pid(&three).await];
    // The background sleep is the shell's child; find it via /proc.
    let deadline = Instant::now() + Duration::from_secs(5);
    let grandchild = loop {
        let children = std::fs::read_to_string(format!("/proc/{}/task/{}/children", pids[1], pids[1])).unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next().and_then(|p| p.parse::<i32>().ok()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "background sleep did not appear");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    pids.push(grandchild);

    f.rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: sandbox.clone() })
        .await
        .expect("StopPodSandbox");
    for pid in &pids {
        wait_gone(*pid).await;
    }
    let stopped = events_for(&mut events, &sandbox, Ev::ContainerStoppedEvent).await;
    let last = stopped.last().expect("sandbox stopped event");
    assert_eq!(
        last.pod_sandbox_status.as_ref().map(|s| s.state),
        Some(cri::PodSandboxState::SandboxNotready as i32)
    );
    assert!(last.containers_statuses.iter().all(|c| c.state == cri::ContainerState::ContainerExited as i32));

    f.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: sandbox.clone() })
        .await
        .expect("RemovePodSandbox");
    events_for(&mut events, &sandbox, Ev::ContainerDeletedEvent).await;
    let containers =
        f.rt.list_containers(cri::ListContainersRequest { filter: None }).await.expect("ListContainers").into_inner();
    assert!(containers.containers.is_empty());
    let sandboxes =
        f.rt.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await.expect("ListPodSandbox").into_inner();
    assert!(sandboxes.items.is_empty());
    assert!(f.finish().await.is_empty());
}

#[tokio::test]
async fn container_gets_env_working_dir_and_stderr_in_its_log() {
    let mut f = start().await;
    let sandbox = f.sandbox("env").await;
    let workdir = f.dir.path().join("wd");
    std::fs::create_dir_all(&workdir).expect("workdir");
    let mut events = subscribe(&mut f).await;
    let id = f
        .container_with(&sandbox, "env", &["sh", "-c", "pwd; echo \"$FOO $HOSTNAME\"; echo oops >&2"], |c| {
            c.working_dir = workdir.display().to_string();
            c.envs = vec![cri::KeyValue { key: "FOO".into(), value: "bar".into() }];
        })
        .await;
    f.start_container(&id).await;
    events_for(&mut events, &id, Ev::ContainerStoppedEvent).await;
    let lines = read_log(&f.log_dir().join("env/0.log"));
    let bodies: Vec<&str> = lines.iter().filter_map(|l| l.split_once(' ').map(|(_, rest)| rest)).collect();
    assert!(bodies.contains(&format!("stdout F {}", workdir.display()).as_str()), "{bodies:?}");
    assert!(bodies.contains(&"stdout F bar env"), "{bodies:?}");
    assert!(bodies.contains(&"stderr F oops"), "{bodies:?}");
    let (status, _) = f.status(&id).await;
    assert_eq!((status.exit_code, status.reason.as_str()), (0, "Completed"));
    assert!(f.finish().await.is_empty());
}

#[tokio::test]
async fn missing_binary_fails_start_with_start_error_and_a_stopped_event() {
    let mut f = start().await;
    let mut events = subscribe(&mut f).await;
    let sandbox = f.sandbox("nobin").await;
    let id = f.container(&sandbox, "nobin", &["/nonexistent/binary"]).await;
    let err = f
        .rt
        .start_container(cri::StartContainerRequest { container_id: id.clone() })
        .await
        .expect_err("start fails");
    assert_eq!(err.code(), tonic::Code::Unknown);
    let seen = events_for(&mut events, &id, Ev::ContainerStoppedEvent).await;
    assert_eq!(seen.len(), 2, "CREATED then STOPPED");
    let (status, _) = f.status(&id).await;
    assert_eq!((status.exit_code, status.reason.as_str()), (128, "StartError"));
    assert!(f.finish().await.is_empty());
}

#[tokio::test]
async fn shutdown_kills_running_containers() {
    let mut f = start().await;
    let sandbox = f.sandbox("shutdown").await;
    let id = f.container(&sandbox, "s", &["sleep", "1000"]).await;
    f.start_container(&id).await;
    let pid = f.pid(&id).await;
    let left = f.finish().await;
    assert_eq!(left, vec![pid]);
    wait_gone(pid).await;
}

#[tokio::test]
async fn create_errors_map_to_grpc_codes() {
    let mut f = start().await;
    let sandbox = f.sandbox("codes").await;
    let missing = cri::CreateContainerRequest {
        pod_sandbox_id: "nope".into(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: "x".into(), attempt: 0 }),
            command: vec!["true".into()],
            ..Default::default()
        }),
        sandbox_config: None,
    };
    assert_eq!(f.rt.create_container(missing).await.expect_err("no sandbox").code(), tonic::Code::NotFound);
    let no_command = cri::CreateContainerRequest {
        pod_sandbox_id: sandbox.clone(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: "x".into(), attempt: 0 }),
            ..Default::default()
        }),
        sandbox_config: None,
    };
    assert_eq!(f.rt.create_container(no_command).await.expect_err("no command").code(), tonic::Code::InvalidArgument);
    f.container(&sandbox, "dup", &["true"]).await;
    let dup = cri::CreateContainerRequest {
        pod_sandbox_id: sandbox.clone(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: "dup".into(), attempt: 0 }),
            command: vec!["true".into()],
            ..Default::default()
        }),
        sandbox_config: None,
    };
    assert_eq!(f.rt.create_container(dup).await.expect_err("duplicate").code(), tonic::Code::AlreadyExists);
    let err = f
        .rt
        .exec_sync(cri::ExecSyncRequest { container_id: "x".into(), cmd: vec![], timeout: 1 })
        .await
        .expect_err("an empty command");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = f
        .rt
        .port_forward(cri::PortForwardRequest { pod_sandbox_id: sandbox.clone(), port: vec![70000] })
        .await
        .expect_err("not a port");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(f.finish().await.is_empty());
}

/// `NamespaceMode::TARGET` (`kubectl debug --target`): every container here is a host process
/// in the node's PID namespace, so one targeting a running container of its sandbox is created
/// as any other and sees the target's process; a target that does not exist, belongs to another
/// sandbox or is not running is refused, as containerd refuses it.
#[tokio::test]
async fn target_pid_namespace_needs_a_running_container_of_the_same_sandbox() {
    let mut f = start().await;
    let sandbox = f.sandbox("target").await;
    let other = f.sandbox("other").await;
    let app = f.container(&sandbox, "app", &["sleep", "30"]).await;
    let targeting = |id: &str| {
        let id = id.to_string();
        move |c: &mut cri::ContainerConfig| {
            c.linux = Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        pid: cri::NamespaceMode::Target as i32,
                        target_id: id,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
    };
    let request = |sandbox: &str, name: &str, target: &str| {
        let mut config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
            command: vec!["true".into()],
            ..Default::default()
        };
        targeting(target)(&mut config);
        cri::CreateContainerRequest { pod_sandbox_id: sandbox.into(), config: Some(config), sandbox_config: None }
    };
    let err = f.rt.create_container(request(&sandbox, "early", &app)).await.expect_err("target not running");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    f.start_container(&app).await;
    let app_pid = f.pid(&app).await;
    let err = f.rt.create_container(request(&sandbox, "nobody", "no-such-id")).await.expect_err("no such target");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    let err = f.rt.create_container(request(&other, "elsewhere", &app)).await.expect_err("another sandbox's container");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    // The debugging container sees the target's process (the node's PID namespace).
    let probe = format!("test -d /proc/{app_pid} && echo sees-{app_pid}");
    let dbg = f.container_with(&sandbox, "dbg", &["sh", "-c", &probe], targeting(&app)).await;
    let mut events = subscribe(&mut f).await;
    f.start_container(&dbg).await;
    events_for(&mut events, &dbg, Ev::ContainerStoppedEvent).await;
    let log = read_log(&f.log_dir().join("dbg/0.log"));
    assert!(log.iter().any(|l| l.ends_with(&format!(" stdout F sees-{app_pid}"))), "{log:?}");
    f.finish().await;
    wait_gone(app_pid).await;
}

#[tokio::test]
async fn pulled_image_names_are_listed_and_removable() {
    let mut f = start().await;
    let spec = |n: &str| Some(cri::ImageSpec { image: n.into(), ..Default::default() });
    let pulled = f
        .img
        .pull_image(cri::PullImageRequest { image: spec("busybox:1.36"), auth: None, sandbox_config: None })
        .await
        .expect("PullImage")
        .into_inner();
    assert!(pulled.image_ref.starts_with("sha256:"));
    let list = f.img.list_images(cri::ListImagesRequest { filter: None }).await.expect("ListImages").into_inner();
    assert_eq!(list.images.len(), 1);
    assert_eq!(list.images[0].repo_tags, vec!["busybox:1.36".to_string()]);
    let status = f
        .img
        .image_status(cri::ImageStatusRequest { image: spec("busybox:1.36"), verbose: false })
        .await
        .expect("ImageStatus")
        .into_inner();
    assert_eq!(status.image.map(|i| i.id), Some(pulled.image_ref.clone()));
    f.img.remove_image(cri::RemoveImageRequest { image: spec(&pulled.image_ref) }).await.expect("RemoveImage");
    let status = f
        .img
        .image_status(cri::ImageStatusRequest { image: spec("busybox:1.36"), verbose: false })
        .await
        .expect("ImageStatus")
        .into_inner();
    assert!(status.image.is_none());
    let fs = f.img.image_fs_info(cri::ImageFsInfoRequest {}).await.expect("ImageFsInfo").into_inner();
    assert_eq!(fs.image_filesystems.len(), 1);
    let version = f.rt.version(cri::VersionRequest { version: "v1".into() }).await.expect("Version").into_inner();
    assert_eq!((version.runtime_name.as_str(), version.runtime_api_version.as_str()), ("rkube", "v1"));
    let st = f.rt.status(cri::StatusRequest { verbose: false }).await.expect("Status").into_inner();
    let conds = st.status.expect("status").conditions;
    assert!(conds.iter().all(|c| c.status) && conds.len() == 2);
    assert!(f.finish().await.is_empty());
}

#[tokio::test]
async fn every_subscriber_receives_the_same_events() {
    let mut f = start().await;
    let mut a = subscribe(&mut f).await;
    let mut b = subscribe(&mut f).await;
    let sandbox = f.sandbox("fanout").await;
    let id = f.container(&sandbox, "c", &["true"]).await;
    f.start_container(&id).await;
    let ea = events_for(&mut a, &id, Ev::ContainerStoppedEvent).await;
    let eb = events_for(&mut b, &id, Ev::ContainerStoppedEvent).await;
    assert_eq!(ea, eb);
    assert_eq!(ea.len(), 3);
    assert!(f.finish().await.is_empty());
}
