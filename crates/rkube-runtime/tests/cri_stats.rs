//! CRI stats of `rkube runtime` over its real unix socket with a real tonic client: a container
//! burning CPU shows cumulative CPU time, a CPU rate from the second sample on, and resident
//! memory; filters select by id, sandbox and labels; an idle sandbox sums its containers.
//! Every test stops the runtime and checks by PID that no container process is left.

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

async fn start() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let handle = serve(&dir.path().join("cri.sock"), RuntimeConfig::new(dir.path().join("root"))).await.expect("serve");
    let channel = endpoint::connect(&handle.endpoint()).await.expect("connect");
    Fixture { rt: RuntimeServiceClient::new(channel), _dir: dir, handle }
}

impl Fixture {
    async fn sandbox(&mut self, name: &str) -> String {
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata { name: name.into(), uid: format!("uid-{name}"), namespace: "default".into(), attempt: 0 }),
            labels: HashMap::from([("pod".to_string(), name.to_string())]),
            ..Default::default()
        };
        let req = cri::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        self.rt.run_pod_sandbox(req).await.expect("RunPodSandbox").into_inner().pod_sandbox_id
    }

    async fn running(&mut self, sandbox: &str, name: &str, script: &str) -> String {
        let config = cri::ContainerConfig {
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

fn value(v: &Option<cri::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

fn cpu(s: &cri::ContainerStats) -> (Option<u64>, Option<u64>) {
    let c = s.cpu.as_ref().expect("cpu");
    (value(&c.usage_core_nano_seconds), value(&c.usage_nano_cores))
}

#[tokio::test]
async fn burning_container_reports_cumulative_cpu_a_rate_from_the_second_sample_and_memory() {
    let mut f = start().await;
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
