//! Against real containerd 1.6 (Debian's; the KEP-3386 compatibility case): containerd answers
//! `GetContainerEvents` with UNIMPLEMENTED, so the node agent's evented PLEG falls back to the
//! generic PLEG at 1 s for good, and pods still run and report their status to the API server.
//!
//! The test starts its own containerd (config, root, state, runc root and socket in a temp dir;
//! see `containerd_support::daemon`), imports a locally built OCI image (static busybox; no
//! registry is reachable) as both the sandbox image and the pods' image, runs an in-process
//! `rkube up` API server and the node agent from `rkube node` flags
//! (`--container-runtime-endpoint=unix://<socket>`). Pods use `hostNetwork: true`
//! (NamespaceMode NODE), so no CNI plugin or configuration is involved: containerd only needs
//! CNI for pod-network sandboxes. `pods/log` and `pods/exec` go from the API server through the
//! node agent's kubelet API to the file containerd wrote and to containerd's streaming server.
//!
//! Without containerd (or runc, or a static busybox, or root) the test fails when `$CI` is set
//! and is skipped with a message otherwise.

use crate::common;
use crate::containerd_support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use rkube_node::cri::{CriClient, RuntimeApi, LABEL_POD_UID};
use rkube_node::pleg::connection::ConnectionState;
use rkube_node::pleg::metrics::CacheSource;
use rkube_node::pleg::GENERIC_RELIST;

use common::{exec, http_get, wait_phase};
use containerd_support::node::{host_network_pod, ContainerdNode, IMAGE, NODE};
use serde_json::json;

fn main_status(p: &Pod) -> k8s_openapi::api::core::v1::ContainerStatus {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .cloned()
        .expect("containerStatuses[0]")
}

/// Containers of the pod `uid` that containerd still has.
async fn containers_of(cri: &CriClient, uid: &str) -> usize {
    let all = cri.list_containers().await.expect("ListContainers");
    all.iter()
        .filter(|c| c.labels.get(LABEL_POD_UID).map(String::as_str) == Some(uid))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_containerd_1_6_run_via_generic_pleg_fallback_and_report_status() {
    let Some(busybox) = containerd_support::prerequisites() else {
        return;
    };
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let cn = ContainerdNode::start(dir.path(), &busybox).await;
    let (client, agent, endpoint, logs) = (&cn.client, &cn.agent, cn.endpoint.clone(), cn.logs.clone());

    // The Node reports containerd as its runtime.
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(NODE).await.expect("node registered");
    let info = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .expect("nodeInfo");
    assert!(
        info.container_runtime_version
            .starts_with("containerd://1.6"),
        "runtime {}",
        info.container_runtime_version
    );
    let host_ip = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .expect("InternalIP");

    // Three pods at once: a long sleeper, one exiting 0, one exiting 3.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = Instant::now();
    let pp = PostParams::default();
    pods.create(
        &pp,
        &host_network_pod("sleeper", "Always", &["sleep", "3600"]),
    )
    .await
    .expect("create sleeper");
    let ok_pod = host_network_pod(
        "ok",
        "Never",
        &["sh", "-c", "echo hello from containerd; sleep 1; exit 0"],
    );
    pods.create(&pp, &ok_pod).await.expect("create ok");
    pods.create(
        &pp,
        &host_network_pod("bad", "Never", &["sh", "-c", "sleep 1; exit 3"]),
    )
    .await
    .expect("create bad");

    let running = wait_phase(&pods, "sleeper", "Running", Duration::from_secs(30)).await;
    let to_running = created.elapsed();
    let st = main_status(&running);
    assert!(
        st.state.as_ref().and_then(|s| s.running.as_ref()).is_some(),
        "sleeper state {:?}",
        st.state
    );
    assert!(st.ready, "sleeper ready");
    assert!(
        st.container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("containerd://")),
        "containerID {:?}",
        st.container_id
    );
    assert!(!st.image_id.is_empty(), "imageID from containerd");
    let status = running.status.as_ref().expect("status");
    assert_eq!(status.host_ip.as_deref(), Some(host_ip.as_str()));
    assert_eq!(
        status.pod_ip.as_deref(),
        Some(host_ip.as_str()),
        "a host-network pod has the node's IP"
    );

    let ok = wait_phase(&pods, "ok", "Succeeded", Duration::from_secs(30)).await;
    let t = main_status(&ok)
        .state
        .and_then(|s| s.terminated)
        .expect("ok terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    // containerd wrote the container's output in CRI log format where the agent asked.
    let ok_uid = ok.metadata.uid.clone().expect("uid");
    let log_path = logs
        .join(format!("default_ok_{ok_uid}"))
        .join("main")
        .join("0.log");
    let log = std::fs::read_to_string(&log_path)
        .unwrap_or_else(|e| panic!("{}: {e}", log_path.display()));
    assert!(
        log.contains(" stdout F hello from containerd"),
        "log {log:?}"
    );
    // `kubectl logs`: the API server's pods/log, the kubelet API, the file containerd wrote.
    let text = pods
        .logs("ok", &kube::api::LogParams::default())
        .await
        .expect("pods/log through the kubelet API");
    assert_eq!(text, "hello from containerd\n");
    // `kubectl exec`: the API server's pods/exec, the kubelet API, containerd's streaming server
    // (its URL from CRI Exec), runc exec in the sleeper's container (busybox's sh).
    let (out, err, status) = exec(
        &pods,
        "sleeper",
        &["sh", "-c", "echo in containerd; echo to stderr >&2"],
    )
    .await;
    assert_eq!(
        (out.as_str(), err.as_str()),
        ("in containerd\n", "to stderr\n")
    );
    assert_eq!(status.and_then(|s| s.status).as_deref(), Some("Success"));
    let (_, _, status) = exec(&pods, "sleeper", &["sh", "-c", "exit 3"]).await;
    let status = status.expect("a failure status");
    assert_eq!(
        status.reason.as_deref(),
        Some("NonZeroExitCode"),
        "{status:?}"
    );
    let code = status
        .details
        .and_then(|d| d.causes)
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.message);
    assert_eq!(code.as_deref(), Some("3"));
    let bad = wait_phase(&pods, "bad", "Failed", Duration::from_secs(30)).await;
    let t = main_status(&bad)
        .state
        .and_then(|s| s.terminated)
        .expect("bad terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    let to_terminal = created.elapsed();

    // Images that cannot be had: a pull from a registry that refuses connections is
    // `ErrImagePull` with kubelet's message, then `ImagePullBackOff` while the back-off runs;
    // an absent image with `imagePullPolicy: Never` is `ErrImageNeverPull`.
    let unreachable = "127.0.0.1:1/rkube/missing:1.0";
    let mut nopull = host_network_pod("nopull", "Never", &["true"]);
    nopull.spec.as_mut().expect("spec").containers[0].image = Some(unreachable.into());
    pods.create(&pp, &nopull).await.expect("create nopull");
    let mut never = host_network_pod("never", "Never", &["true"]);
    let c = &mut never.spec.as_mut().expect("spec").containers[0];
    c.image = Some("rkube.test/absent:1.0".into());
    c.image_pull_policy = Some("Never".into());
    pods.create(&pp, &never).await.expect("create never");
    let waiting = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.clone())
            .map(|w| (w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
    };
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut seen: Vec<(String, String)> = Vec::new();
    loop {
        if let Some(w) = waiting(&pods.get("nopull").await.expect("get nopull")) {
            if seen.last() != Some(&w) {
                seen.push(w.clone());
            }
            if w.0 == "ImagePullBackOff" {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "nopull never reached ImagePullBackOff: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pulled = seen
        .iter()
        .find(|(r, _)| r == "ErrImagePull")
        .expect("ErrImagePull first");
    assert!(
        pulled
            .1
            .starts_with(&format!("Failed to pull image {unreachable:?}: ")),
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(|w| w.1.clone()),
        Some(format!("Back-off pulling image {unreachable:?}"))
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let w = loop {
        if let Some(w) = waiting(&pods.get("never").await.expect("get never"))
            .filter(|w| w.0 != "ContainerCreating")
        {
            break w;
        }
        assert!(Instant::now() < deadline, "never: no ErrImageNeverPull");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        w,
        (
            "ErrImageNeverPull".to_string(),
            "Container image \"rkube.test/absent:1.0\" is not present with pull policy of Never"
                .to_string()
        )
    );

    // PLEG: containerd 1.6 has no GetContainerEvents, so the evented PLEG gave up for good and
    // the generic PLEG relists every second; every status came from relists/inspections.
    let evented = agent
        .evented
        .as_ref()
        .expect("EventedPLEG is on by default");
    assert_eq!(*evented.connection().borrow(), ConnectionState::Relisting);
    assert!(!evented.in_use());
    assert_eq!(agent.generic.relist_duration(), GENERIC_RELIST);
    let m = &agent.metrics;
    assert_eq!(m.connection_successes.get(), 0);
    assert_eq!(
        m.connection_errors.get(),
        1,
        "one UNIMPLEMENTED answer, no retries"
    );
    assert_eq!(m.cache_updates_by(CacheSource::Event), 0);
    assert!(
        m.cache_updates_by(CacheSource::Relist) > 0,
        "relists wrote the cache"
    );
    assert_eq!(
        m.missed_events.get(),
        0,
        "missed events only count while a stream is up"
    );
    let (code, body) = http_get(agent.healthz_addr, "/healthz").await;
    assert_eq!((code, body.as_str()), (200, "ok"));
    let (_, metrics) = http_get(agent.healthz_addr, "/metrics").await;
    for line in [
        "kubelet_evented_pleg_connection_error_count 1",
        "kubelet_evented_pleg_connection_success_count 0",
    ] {
        assert!(metrics.contains(line), "{line} missing from /metrics");
    }

    // Deleting the running pod stops its container in containerd and removes the object.
    let cri = CriClient::connect_lazy(&endpoint).expect("CRI client");
    let uid = running.metadata.uid.clone().expect("uid");
    assert_eq!(
        containers_of(&cri, &uid).await,
        1,
        "exactly one container for the sleeper (no duplicate)"
    );
    pods.delete("sleeper", &DeleteParams::default())
        .await
        .expect("delete sleeper");
    let deadline = Instant::now() + Duration::from_secs(20);
    while pods.get_opt("sleeper").await.expect("get").is_some() {
        assert!(Instant::now() < deadline, "sleeper not removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        containers_of(&cri, &uid).await,
        0,
        "sleeper's container removed from containerd"
    );
    let sandboxes = cri.list_pod_sandbox().await.expect("ListPodSandbox");
    assert!(
        !sandboxes
            .iter()
            .any(|s| s.metadata.as_ref().is_some_and(|m| m.uid == uid)),
        "sleeper's sandbox removed"
    );

    eprintln!(
        "containerd figures: pod created → Running {:?}; all three pods final after {:?}; whole test {:?}",
        to_running,
        to_terminal,
        started.elapsed()
    );

    cn.shutdown().await;
}

/// The volumes and environment of `rkube up --node`'s tests, here through containerd 1.6: the
/// agent prepares configMap, secret and emptyDir volumes on the host and hands them to
/// containerd as CRI mounts (the API data ones read-only, as kubelet mounts them), and the
/// variables from a ConfigMap key, a Secret key, `envFrom` (with a prefix), `fieldRef` and
/// `$(VAR)` expansion. The container prints what it sees; its log, read through `pods/log`,
/// is compared whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_and_env_reach_a_container_on_containerd_1_6() {
    let Some(busybox) = containerd_support::prerequisites() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let cn = ContainerdNode::start(dir.path(), &busybox).await;
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(cn.client.clone(), "default");
    cms.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": "app-config"}, "data": {"greeting": "hello", "app.conf": "mode=prod"}}))
            .expect("configmap"),
    )
    .await
    .expect("create configmap");
    let secrets: Api<Secret> = Api::namespaced(cn.client.clone(), "default");
    secrets
        .create(&pp, &serde_json::from_value(json!({"metadata": {"name": "app-secret"}, "stringData": {"password": "s3cret"}})).expect("secret"))
        .await
        .expect("create secret");
    let script = [
        "echo CFG=$(cat /etc/cfg/app.conf) MODE=$(stat -L -c %a /etc/cfg/app.conf)",
        "echo SECRET=$(cat /etc/sec/pw) MODE=$(stat -L -c %a /etc/sec/pw)",
        "touch /etc/cfg/new 2>/dev/null && echo CFG_WRITABLE=yes || echo CFG_WRITABLE=no",
        "echo SCRATCH=$(cat /scratch/from-init)",
        "echo main > /scratch/from-main && echo SCRATCH_WRITE=$(cat /scratch/from-main)",
        "echo GREETING=$GREETING PASSWORD=$PASSWORD EXPANDED=$EXPANDED",
        "echo POD=$POD_NAMESPACE/$POD_NAME NODE=$NODE_NAME IP=$POD_IP",
        // The process's own environment (sh does not pass on names that are not identifiers).
        "tr '\\0' '\\n' < /proc/1/environ | grep -e ^CFG_ -e ^password= | sort",
        "echo ARG=$1",
    ]
    .join("\n");
    let env_from = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "vols", "namespace": "default"},
        "spec": {
            "nodeName": NODE, "hostNetwork": true, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "initContainers": [{"name": "init", "image": IMAGE, "command": ["sh", "-c", "echo init > /scratch/from-init"],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "containers": [{
                "name": "main", "image": IMAGE,
                "command": ["sh", "-c", script, "sh", "$(POD_NAME)-arg"],
                "env": [
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "greeting"}}},
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "password"}}},
                    {"name": "EXPANDED", "value": "$(GREETING)-world"},
                    env_from("POD_NAME", "metadata.name"),
                    env_from("POD_NAMESPACE", "metadata.namespace"),
                    env_from("NODE_NAME", "spec.nodeName"),
                    env_from("POD_IP", "status.podIP"),
                ],
                "envFrom": [{"configMapRef": {"name": "app-config"}, "prefix": "CFG_"}, {"secretRef": {"name": "app-secret"}}],
                "volumeMounts": [
                    {"name": "cfg", "mountPath": "/etc/cfg"},
                    {"name": "sec", "mountPath": "/etc/sec"},
                    {"name": "scratch", "mountPath": "/scratch"},
                ],
            }],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "app-config"}},
                {"name": "sec", "secret": {"secretName": "app-secret", "items": [{"key": "password", "path": "pw", "mode": 0o400}]}},
                {"name": "scratch", "emptyDir": {}},
            ],
        }
    }))
    .expect("pod");
    let pods: Api<Pod> = Api::namespaced(cn.client.clone(), "default");
    pods.create(&pp, &pod).await.expect("create vols");
    let done = wait_phase(&pods, "vols", "Succeeded", Duration::from_secs(60)).await;
    let ip = done.status.as_ref().and_then(|s| s.pod_ip.clone()).expect("podIP");
    let params = kube::api::LogParams { container: Some("main".into()), ..Default::default() };
    let log = pods.logs("vols", &params).await.expect("pods/log");
    let expected = [
        "CFG=mode=prod MODE=644".to_string(),
        "SECRET=s3cret MODE=400".into(),
        "CFG_WRITABLE=no".into(),
        "SCRATCH=init".into(),
        "SCRATCH_WRITE=main".into(),
        "GREETING=hello PASSWORD=s3cret EXPANDED=hello-world".into(),
        format!("POD=default/vols NODE={NODE} IP={ip}"),
        "CFG_app.conf=mode=prod".into(),
        "CFG_greeting=hello".into(),
        "password=s3cret".into(),
        "ARG=vols-arg".into(),
    ];
    assert_eq!(log, expected.join("\n") + "\n");
    cn.shutdown().await;
}

/// `kubectl debug -it pod --target=main` on containerd: the ephemeral container joins the
/// target's PID namespace (CRI `NamespaceMode::TARGET` with the target's container id), so
/// `ps` lists the target's process; one added without a target has its own PID namespace and
/// does not see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_container_with_a_target_sees_the_targets_processes_on_containerd_1_6() {
    let Some(busybox) = containerd_support::prerequisites() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let cn = ContainerdNode::start(dir.path(), &busybox).await;
    let pods: Api<Pod> = Api::namespaced(cn.client.clone(), "default");
    pods.create(&PostParams::default(), &host_network_pod("app", "Always", &["sleep", "4242"]))
        .await
        .expect("create app");
    wait_phase(&pods, "app", "Running", Duration::from_secs(30)).await;
    let debug = |name: &str, target: Option<&str>| {
        let mut ec = json!({"name": name, "image": IMAGE, "command": ["ps", "-o", "pid,args"]});
        if let Some(t) = target {
            ec["targetContainerName"] = json!(t);
        }
        ec
    };
    for ec in [debug("dbg", Some("main")), debug("own", None)] {
        // As `kubectl debug` sends it: a strategic merge patch of the ephemeralcontainers subresource.
        pods.patch_subresource(
            "ephemeralcontainers",
            "app",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"ephemeralContainers": [ec]}})),
        )
        .await
        .expect("add an ephemeral container");
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let p = pods.get("app").await.expect("get app");
        let statuses = p.status.and_then(|s| s.ephemeral_container_statuses).unwrap_or_default();
        let exited = |n: &str| {
            statuses
                .iter()
                .any(|s| s.name == n && s.state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code == 0))
        };
        if exited("dbg") && exited("own") {
            break;
        }
        assert!(Instant::now() < deadline, "ephemeral containers did not complete: {statuses:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = |c: &str| {
        let params = kube::api::LogParams { container: Some(c.into()), ..Default::default() };
        let pods = pods.clone();
        async move { pods.logs("app", &params).await.expect("pods/log") }
    };
    let with_target = log("dbg").await;
    let args: Vec<&str> = with_target.lines().skip(1).filter_map(|l| l.trim().split_once(' ').map(|(_, a)| a.trim())).collect();
    assert!(args.contains(&"sleep 4242"), "the target's process is listed: {with_target}");
    assert!(args.contains(&"ps -o pid,args"), "{with_target}");
    let own = log("own").await;
    let args: Vec<&str> = own.lines().skip(1).filter_map(|l| l.trim().split_once(' ').map(|(_, a)| a.trim())).collect();
    assert_eq!(args, ["ps -o pid,args"], "its own PID namespace: {own}");
    cn.shutdown().await;
}

/// Runs everywhere (no containerd needed): what the agent asks a CRI runtime for a host-network
/// pod, as kubelet does — node network namespace for sandbox and containers, no hostname (runc
/// cannot set one in the node's UTS namespace), own PID namespace — and the node's IP as the
/// pod IP when the runtime reports none (containerd does not for host-network sandboxes).
#[test]
fn host_network_pods_get_node_namespaces_no_hostname_and_the_node_ip() {
    use rkube_node::pod::api_status::{api_pod_status, StatusContext};
    use rkube_node::pod::cri_config::{container_config, sandbox_config};
    use rkube_node::pod::phase::Phase;
    use rkube_runtime::cri::NamespaceMode;

    let mut pod = host_network_pod("hn", "Never", &["sleep", "1"]);
    pod.metadata.uid = Some("u1".into());
    let sandbox = sandbox_config(&pod, 0, std::path::Path::new("/logs"));
    assert_eq!(sandbox.hostname, "");
    let ns = sandbox
        .linux
        .and_then(|l| l.security_context)
        .and_then(|s| s.namespace_options)
        .expect("sandbox namespaces");
    let (node, own, shared) = (
        NamespaceMode::Node as i32,
        NamespaceMode::Container as i32,
        NamespaceMode::Pod as i32,
    );
    assert_eq!((ns.network, ns.pid, ns.ipc), (node, own, shared));
    let container = &pod.spec.as_ref().expect("spec").containers[0];
    let config = container_config(&pod, container, 0, &[]);
    let ns = config
        .linux
        .and_then(|l| l.security_context)
        .and_then(|s| s.namespace_options)
        .expect("container namespaces");
    assert_eq!(ns.network, node);

    let backing_off = Default::default();
    let config_errors = Default::default();
    let image_errors = Default::default();
    let probe_results = Default::default();
    let ctx = StatusContext {
        phase: Phase::Pending,
        backing_off: &backing_off,
        config_errors: &config_errors,
        image_errors: &image_errors,
        probe_results: &probe_results,
        host_ip: "10.1.2.3",
        runtime_name: "containerd",
        now: rkube_node::pleg::Timestamp::now(),
    };
    let status = api_pod_status(&pod, &rkube_node::pleg::PodStatus::empty("u1"), &ctx);
    assert_eq!(status.pod_ip.as_deref(), Some("10.1.2.3"));

    // A pod-network pod keeps its own hostname and gets no IP until the runtime reports one.
    let mut pod_net = pod.clone();
    if let Some(spec) = pod_net.spec.as_mut() {
        spec.host_network = Some(false);
    }
    assert_eq!(
        sandbox_config(&pod_net, 0, std::path::Path::new("/logs")).hostname,
        "hn"
    );
    assert_eq!(
        api_pod_status(&pod_net, &rkube_node::pleg::PodStatus::empty("u1"), &ctx).pod_ip,
        None
    );
}
