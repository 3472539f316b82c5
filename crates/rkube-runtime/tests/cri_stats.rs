//! CRI stats of `rkube runtime` over its real unix socket with a real tonic client: a container
//! burning CPU shows cumulative CPU time, a CPU rate from the second sample on, and resident
//! memory; filters select by id, sandbox and labels; an idle sandbox sums its containers.
//! Every test stops the runtime and checks by PID that no container process is left.
//!
//! The first test measures from `/proc` (cgroups turned off); the others give each container a
//! cgroup of its own, which a runtime running as root can make (the CI machine's case) and one
//! without privileges cannot (it then reads `/proc`, checked there instead).

use std::collections::HashMap;
use std::time::Duration;

use rkube_runtime::cri;
use rkube_runtime::cri::runtime_service_client::RuntimeServiceClient;
use rkube_runtime::{endpoint, process, serve, RuntimeConfig, RuntimeHandle};
use tonic::transport::Channel;

struct Fixture {
    _dir: tempfile::TempDir,
    handle: RuntimeHandle,
    rt: RuntimeServiceClient<Channel>,
}

async fn start(cgroups: bool) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = RuntimeConfig { cgroups, ..RuntimeConfig::new(dir.path().join("root")) };
    let handle = serve(&dir.path().join("cri.sock"), config).await.expect("serve");
    let channel = endpoint::connect(&handle.endpoint()).await.expect("connect");
    Fixture { rt: RuntimeServiceClient::new(channel), _dir: dir, handle }
}

impl Fixture {
    async fn sandbox(&mut self, name: &str) -> String {
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata { name: name.into(), uid: uid(name), namespace: "default".into(), attempt: 0 }),
            labels: HashMap::from([("pod".to_string(), name.to_string())]),
            ..Default::default()
        };
        let req = cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        self.rt.run_pod_sandbox(req).await.expect("RunPodSandbox").into_inner().pod_sandbox_id
    }

    async fn running(&mut self, sandbox: &str, name: &str, script: &str) -> String {
        self.running_limited(sandbox, name, script, 0).await
    }

    /// A running `sh -c script` with CRI `memory_limit_in_bytes` (0: none).
    async fn running_limited(&mut self, sandbox: &str, name: &str, script: &str, memory_limit: i64) -> String {
        let resources = cri::LinuxContainerResources { memory_limit_in_bytes: memory_limit, ..Default::default() };
        let config = cri::ContainerConfig {
            linux: Some(cri::LinuxContainerConfig { resources: Some(resources), security_context: None }),
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(cri::ImageSpec { image: "busybox".into(), ..Default::default() }),
            command: vec!["sh".into(), "-c".into(), script.into()],
            labels: HashMap::from([("container".to_string(), name.to_string())]),
            ..Default::default()
        };
        let req = cri::CreateContainerRequest { pod_sandbox_id: sandbox.into(), config: Some(config), sandbox_config: None };
        let id = self.rt.create_container(req).await.expect("CreateContainer").into_inner().container_id;
        self.rt.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("StartContainer");
        id
    }

    async fn list(&mut self, filter: cri::ContainerStatsFilter) -> Vec<cri::ContainerStats> {
        let req = cri::ListContainerStatsRequest { filter: Some(filter) };
        self.rt.list_container_stats(req).await.expect("ListContainerStats").into_inner().stats
    }

    async fn finish(self) {
        let pids = self.handle.runtime().running_pids();
        self.handle.shutdown().await;
        for pid in pids {
            for _ in 0..250 {
                if !process::process_exists(pid) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(!process::process_exists(pid), "container process {pid} left behind");
        }
    }
}

/// The pod uid of sandbox `name`: unique to this test process, since every runtime on the
/// host shares the cgroup hierarchy.
fn uid(name: &str) -> String {
    format!("uid-{name}-{}", std::process::id())
}

fn value(v: &Option<cri::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

fn cpu(s: &cri::ContainerStats) -> (Option<u64>, Option<u64>) {
    let c = s.cpu.as_ref().expect("cpu");
    (value(&c.usage_core_nano_seconds), value(&c.usage_nano_cores))
}

#[tokio::test]
async fn burning_container_reports_cumulative_cpu_a_rate_from_the_second_sample_and_memory() {
    let mut f = start(false).await;
    assert!(!f.handle.runtime().accounting().is_cgroup(), "cgroups turned off: /proc");
    let busy_pod = f.sandbox("busy").await;
    let idle_pod = f.sandbox("idle").await;
    let busy = f.running(&busy_pod, "burn", "while :; do :; done").await;
    let idle = f.running(&idle_pod, "sleep", "exec sleep 1000").await;
    tokio::time::sleep(Duration::from_millis(600)).await;

    let first = f.list(cri::ContainerStatsFilter { id: busy.clone(), ..Default::default() }).await;
    assert_eq!(first.len(), 1);
    let attrs = first[0].attributes.as_ref().expect("attributes");
    assert_eq!((attrs.id.as_str(), attrs.metadata.as_ref().map(|m| m.name.as_str())), (busy.as_str(), Some("burn")));
    let (cpu1, rate1) = cpu(&first[0]);
    assert!(cpu1.is_some_and(|c| c >= 50_000_000), "at least 0.05 s of CPU after 0.6 s of burning (a loaded machine shares its cores): {cpu1:?}");
    assert_eq!(rate1, None, "no rate from a single sample");
    let mem = first[0].memory.as_ref().expect("memory");
    assert!(value(&mem.working_set_bytes).is_some_and(|b| b > 0));
    assert_eq!(value(&mem.working_set_bytes), value(&mem.rss_bytes));
    assert!(mem.timestamp > 0 && first[0].cpu.as_ref().is_some_and(|c| c.timestamp == mem.timestamp));

    tokio::time::sleep(Duration::from_millis(600)).await;
    let second = f.rt.container_stats(cri::ContainerStatsRequest { container_id: busy.clone() }).await.expect("ContainerStats");
    let second = second.into_inner().stats.expect("stats");
    let (cpu2, rate2) = cpu(&second);
    assert!(cpu2 > cpu1, "cumulative CPU grows: {cpu1:?} -> {cpu2:?}");
    assert!(rate2.is_some_and(|r| r > 50_000_000), "a busy loop uses a good part of a core: {rate2:?} nanocores");

    // Filters: by sandbox, by labels; every running container without a filter.
    let by_pod = f.list(cri::ContainerStatsFilter { pod_sandbox_id: idle_pod.clone(), ..Default::default() }).await;
    let ids: Vec<String> = by_pod.iter().filter_map(|s| s.attributes.as_ref().map(|a| a.id.clone())).collect();
    assert_eq!(ids, vec![idle.clone()]);
    let (idle_cpu, _) = cpu(&by_pod[0]);
    assert!(idle_cpu < Some(100_000_000), "sleep uses almost no CPU: {idle_cpu:?}");
    let labels = HashMap::from([("container".to_string(), "burn".to_string())]);
    let by_label = f.list(cri::ContainerStatsFilter { label_selector: labels, ..Default::default() }).await;
    assert_eq!(by_label.iter().filter_map(|s| s.attributes.as_ref().map(|a| a.id.clone())).collect::<Vec<_>>(), vec![busy.clone()]);
    let all = f.rt.list_container_stats(cri::ListContainerStatsRequest { filter: None }).await.expect("list").into_inner().stats;
    assert_eq!(all.len(), 2);

    // Sandboxes: the sum of their containers.
    let resp = f.rt.pod_sandbox_stats(cri::PodSandboxStatsRequest { pod_sandbox_id: busy_pod.clone() }).await.expect("PodSandboxStats");
    let pod = resp.into_inner().stats.expect("stats");
    let linux = pod.linux.expect("linux");
    assert_eq!(pod.attributes.as_ref().map(|a| a.id.as_str()), Some(busy_pod.as_str()));
    assert_eq!(linux.containers.len(), 1);
    let pod_cpu = linux.cpu.as_ref().and_then(|c| value(&c.usage_core_nano_seconds));
    assert_eq!(pod_cpu, cpu(&linux.containers[0]).0);
    let labels = HashMap::from([("pod".to_string(), "idle".to_string())]);
    let req = cri::ListPodSandboxStatsRequest { filter: Some(cri::PodSandboxStatsFilter { label_selector: labels, ..Default::default() }) };
    let listed = f.rt.list_pod_sandbox_stats(req).await.expect("ListPodSandboxStats").into_inner().stats;
    assert_eq!(listed.iter().filter_map(|s| s.attributes.as_ref().map(|a| a.id.clone())).collect::<Vec<_>>(), vec![idle_pod]);

    // Unknown ids are NotFound.
    let err = f.rt.container_stats(cri::ContainerStatsRequest { container_id: "nope".into() }).await.expect_err("unknown");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let err = f.rt.pod_sandbox_stats(cri::PodSandboxStatsRequest { pod_sandbox_id: "nope".into() }).await.expect_err("unknown");
    assert_eq!(err.code(), tonic::Code::NotFound);
    f.finish().await;
}

/// Whether this test process may make cgroups (root); otherwise the runtime must have fallen
/// back to `/proc`, which is checked here, and the caller stops.
fn cgroups_expected(f: &Fixture) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let acc = f.handle.runtime().accounting();
    if root {
        // The machines this project builds on mount cgroupfs writable for root.
        assert!(acc.is_cgroup(), "a runtime running as root makes cgroups: {acc:?}");
    } else {
        assert!(!acc.is_cgroup(), "a runtime without privileges reads /proc: {acc:?}");
    }
    root
}

#[tokio::test]
async fn container_in_its_own_cgroup_reports_its_cpu_and_memory_and_the_cgroup_goes_with_it() {
    let mut f = start(true).await;
    if !cgroups_expected(&f) {
        return f.finish().await;
    }
    let pod = f.sandbox("grouped").await;
    let limit: i64 = 256 << 20;
    // 20 MB held in a shell variable, then a busy loop.
    let script = "x=$(head -c 20000000 /dev/zero | tr '\\000' a); while :; do :; done";
    let id = f.running_limited(&pod, "hog", script, limit).await;
    let acc = f.handle.runtime().accounting().clone();
    let cgroup = acc.container(&uid("grouped"), &pod, &id).expect("a cgroup");

    // Its process is in the cgroup `rkube/<pod uid>/<container id>`.
    let status = f.rt.container_status(cri::ContainerStatusRequest { container_id: id.clone(), verbose: true }).await.expect("status");
    let pid: i32 = status.into_inner().info.get("pid").and_then(|p| p.parse().ok()).expect("pid");
    let membership = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("/proc/<pid>/cgroup");
    let leaf = format!("/rkube/{}/{id}", uid("grouped"));
    assert!(membership.lines().any(|l| l.ends_with(&leaf)), "process {pid} not in {leaf}:\n{membership}");

    // CPU and memory from the cgroup: usage includes what the shell holds; available is the
    // limit less the working set (only a cgroup with a limit gives it); faults are counted.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let stats = loop {
        let s = f.list(cri::ContainerStatsFilter { id: id.clone(), ..Default::default() }).await.pop().expect("stats");
        let m = s.memory.as_ref().expect("memory");
        // The shell's variable grows as `tr` writes; wait until all of it is resident.
        if cpu(&s).0 >= Some(100_000_000) && value(&m.working_set_bytes) >= Some(20_000_000) && value(&m.rss_bytes) >= Some(20_000_000) {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no CPU or memory yet: {s:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let m = stats.memory.as_ref().expect("memory");
    let (working, usage, rss) = (value(&m.working_set_bytes), value(&m.usage_bytes), value(&m.rss_bytes));
    assert!(usage >= working && rss >= Some(20_000_000), "usage {usage:?} working set {working:?} rss {rss:?}");
    assert_eq!(value(&m.available_bytes), working.map(|w| u64::try_from(limit).expect("limit") - w));
    assert!(value(&m.page_faults) > Some(0), "{m:?}");
    let direct = cgroup.usage().expect("cgroup readable");
    assert!(direct.cpu_ns >= cpu(&stats).0.expect("cpu"), "the cgroup's counter only grows: {direct:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = f.list(cri::ContainerStatsFilter { id: id.clone(), ..Default::default() }).await.pop().expect("stats");
    assert!(cpu(&again).1.is_some_and(|r| r > 50_000_000), "a busy loop's rate: {again:?}");

    // Removed with the container; the pod's cgroup with the sandbox.
    f.rt.remove_container(cri::RemoveContainerRequest { container_id: id.clone() }).await.expect("RemoveContainer");
    assert!(!cgroup.exists(), "container cgroup left: {cgroup:?}");
    assert!(!process::process_exists(pid), "removing the container kills its process");
    let pod_cgroup = acc.pod(&uid("grouped"), &pod).expect("pod cgroup");
    assert!(pod_cgroup.exists());
    f.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod }).await.expect("RemovePodSandbox");
    assert!(!pod_cgroup.exists(), "pod cgroup left: {pod_cgroup:?}");
    f.finish().await;
}

#[tokio::test]
async fn memory_limit_is_enforced_by_the_kernel_and_reported_as_oom_killed() {
    let mut f = start(true).await;
    if !cgroups_expected(&f) {
        return f.finish().await;
    }
    let pod = f.sandbox("oom").await;
    // 200 MB wanted under a 32 MiB limit.
    let script = "x=$(head -c 200000000 /dev/zero | tr '\\000' a); sleep 1000";
    let id = f.running_limited(&pod, "greedy", script, 32 << 20).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        let resp = f.rt.container_status(cri::ContainerStatusRequest { container_id: id.clone(), verbose: false }).await.expect("status");
        let status = resp.into_inner().status.expect("status");
        if status.state == cri::ContainerState::ContainerExited as i32 {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "not killed: {status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((status.exit_code, status.reason.as_str()), (137, "OOMKilled"));
    let cgroup = f.handle.runtime().accounting().container(&uid("oom"), &pod, &id).expect("cgroup");
    f.rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: pod }).await.expect("RemovePodSandbox");
    assert!(!cgroup.exists(), "removing the sandbox removes its containers' cgroups: {cgroup:?}");
    f.finish().await;
}

#[tokio::test]
async fn shutdown_removes_the_cgroups_of_containers_left_running() {
    let mut f = start(true).await;
    if !cgroups_expected(&f) {
        return f.finish().await;
    }
    let pod = f.sandbox("left").await;
    let id = f.running(&pod, "sleeper", "exec sleep 1000").await;
    let acc = f.handle.runtime().accounting().clone();
    let (container, pod_cgroup) = (acc.container(&uid("left"), &pod, &id).expect("cgroup"), acc.pod(&uid("left"), &pod).expect("pod"));
    assert!(container.exists());
    f.finish().await;
    assert!(!container.exists() && !pod_cgroup.exists(), "cgroups left after shutdown");
}
