//! Tests of the pure pod logic: plan, phase, API status, and the worker's "status reflects my
//! actions" guard.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rkube_runtime::cri;
use serde_json::json;

use super::actions::{compute_pod_actions, Backoff, ToCreate};
use super::api_status::{api_pod_status, StatusContext};
use super::phase::{pod_phase, Phase};
use super::worker::{reflects, Expectation};
use crate::cri::LABEL_CONTAINER_NAME;
use crate::pleg::{PodStatus, Timestamp};

const S: i64 = 1_000_000_000;

fn pod(restart: &str, inits: &[&str], containers: &[&str]) -> Pod {
    let c = |n: &&str| json!({"name": n, "image": "busybox", "command": ["true"]});
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
        "spec": {
            "restartPolicy": restart,
            "initContainers": inits.iter().map(c).collect::<Vec<_>>(),
            "containers": containers.iter().map(c).collect::<Vec<_>>(),
        }
    }))
    .expect("pod")
}

fn sandbox(ready: bool) -> cri::PodSandboxStatus {
    cri::PodSandboxStatus {
        id: "sb".into(),
        metadata: Some(cri::PodSandboxMetadata {
            name: "p".into(),
            uid: "uid-p".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        state: if ready {
            cri::PodSandboxState::SandboxReady
        } else {
            cri::PodSandboxState::SandboxNotready
        } as i32,
        created_at: 1,
        network: Some(cri::PodSandboxNetworkStatus {
            ip: "10.1.1.1".into(),
            additional_ips: vec![],
        }),
        ..Default::default()
    }
}

/// A container of `name`, `attempt`: "created" | "running" | exit code (exited), times in s.
fn ctr(
    id: &str,
    name: &str,
    attempt: u32,
    state: &str,
    started: i64,
    finished: i64,
) -> cri::ContainerStatus {
    let (st, code) = match state {
        "created" => (cri::ContainerState::ContainerCreated, 0),
        "running" => (cri::ContainerState::ContainerRunning, 0),
        code => (
            cri::ContainerState::ContainerExited,
            code.parse().expect("exit code"),
        ),
    };
    cri::ContainerStatus {
        id: id.into(),
        metadata: Some(cri::ContainerMetadata {
            name: name.into(),
            attempt,
        }),
        state: st as i32,
        created_at: (started.max(1) * S) - 1 + i64::from(attempt),
        started_at: started * S,
        finished_at: finished * S,
        exit_code: code,
        reason: if code == 0 {
            "Completed".into()
        } else {
            "Error".into()
        },
        labels: HashMap::from([(LABEL_CONTAINER_NAME.to_string(), name.to_string())]),
        image_ref: "sha256:x".into(),
        ..Default::default()
    }
}

fn status(sandbox_ready: Option<bool>, containers: Vec<cri::ContainerStatus>) -> PodStatus {
    let ev = cri::ContainerEventResponse {
        container_id: "sb".into(),
        container_event_type: 0,
        created_at: 100 * S,
        pod_sandbox_status: sandbox_ready.map(sandbox),
        containers_statuses: containers,
    };
    PodStatus::from_event(&ev).unwrap_or_else(|| PodStatus::empty("uid-p"))
}

fn plan(p: &Pod, st: &PodStatus, now_s: i64) -> super::actions::PodActions {
    compute_pod_actions(
        p,
        st,
        &HashMap::new(),
        None,
        Timestamp(now_s * S),
        &Backoff::default(),
    )
}

fn create(name: &str, init: bool, attempt: u32) -> ToCreate {
    ToCreate {
        name: name.into(),
        init,
        ephemeral: false,
        attempt,
    }
}

#[test]
fn first_sync_creates_the_sandbox_and_the_first_init_container_only() {
    let a = plan(
        &pod("Always", &["i1", "i2"], &["a", "b"]),
        &PodStatus::empty("uid-p"),
        1,
    );
    assert_eq!(a.create_sandbox, Some(0));
    assert_eq!(a.create, vec![create("i1", true, 0)]);
    let a = plan(
        &pod("Always", &[], &["a", "b"]),
        &PodStatus::empty("uid-p"),
        1,
    );
    assert_eq!(a.create, vec![create("a", false, 0), create("b", false, 0)]);
}

/// `pod` with ephemeral container `dbg`.
fn with_debugger(mut p: Pod) -> Pod {
    if let Some(spec) = p.spec.as_mut() {
        spec.ephemeral_containers = Some(vec![serde_json::from_value(
            json!({"name": "dbg", "image": "busybox", "command": ["true"]}),
        )
        .expect("ephemeral")]);
    }
    p
}

#[test]
fn ephemeral_containers_start_once_even_during_init_and_are_never_restarted() {
    let p = with_debugger(pod("Always", &["i1"], &["a"]));
    let a = plan(
        &p,
        &status(Some(true), vec![ctr("1", "i1", 0, "running", 1, 0)]),
        2,
    );
    assert_eq!(
        a.create,
        vec![ToCreate {
            name: "dbg".into(),
            init: false,
            ephemeral: true,
            attempt: 0
        }]
    );
    // Exited: not restarted, whatever the restart policy says.
    let st = status(
        Some(true),
        vec![
            ctr("1", "i1", 0, "0", 1, 2),
            ctr("2", "a", 0, "running", 3, 0),
            ctr("3", "dbg", 0, "0", 2, 3),
        ],
    );
    let a = plan(&p, &st, 30);
    assert!(a.create.is_empty(), "{a:?}");
    // Already created by this worker (not yet in the status): not created twice.
    let seen = HashMap::from([("dbg".to_string(), 0)]);
    let st = status(Some(true), vec![ctr("1", "i1", 0, "running", 1, 0)]);
    let a = compute_pod_actions(&p, &st, &seen, None, Timestamp(2 * S), &Backoff::default());
    assert!(a.create.is_empty(), "{a:?}");
}

#[test]
fn ephemeral_containers_are_reported_in_their_own_statuses_never_ready() {
    let p = with_debugger(pod("Always", &[], &["a"]));
    let st = status(
        Some(true),
        vec![
            ctr("1", "a", 0, "running", 1, 0),
            ctr("2", "dbg", 0, "running", 2, 0),
        ],
    );
    let none = HashMap::new();
    let api = api_pod_status(&p, &st, &ctx(Phase::Running, &none));
    let ecs = api.ephemeral_container_statuses.unwrap_or_default();
    assert_eq!(ecs.len(), 1);
    assert_eq!(ecs[0].name, "dbg");
    assert!(!ecs[0].ready);
    assert!(
        ecs[0].state.as_ref().is_some_and(|s| s.running.is_some()),
        "{ecs:?}"
    );
    assert_eq!(api.container_statuses.unwrap_or_default().len(), 1);
}

#[test]
fn init_containers_run_in_order_then_the_app_containers() {
    let p = pod("Always", &["i1", "i2"], &["a"]);
    let a = plan(
        &p,
        &status(Some(true), vec![ctr("1", "i1", 0, "running", 1, 0)]),
        2,
    );
    assert!(a.is_noop(), "i2 waits for i1: {a:?}");
    let a = plan(
        &p,
        &status(Some(true), vec![ctr("1", "i1", 0, "0", 1, 2)]),
        3,
    );
    assert_eq!(a.create, vec![create("i2", true, 0)]);
    let a = plan(
        &p,
        &status(
            Some(true),
            vec![ctr("1", "i1", 0, "0", 1, 2), ctr("2", "i2", 0, "0", 3, 4)],
        ),
        5,
    );
    assert_eq!(a.create, vec![create("a", false, 0)]);
}

#[test]
fn a_created_container_is_started_and_never_duplicated() {
    // The state that made upstream create a second container (kubernetes#120942): the status
    // shows our container still Created. The plan starts that one; it creates nothing.
    let p = pod("Always", &[], &["a"]);
    let a = plan(
        &p,
        &status(Some(true), vec![ctr("c1", "a", 0, "created", 0, 0)]),
        2,
    );
    assert_eq!(a.start, vec!["c1".to_string()]);
    assert!(a.create.is_empty());
}

#[test]
fn exited_containers_restart_per_policy_after_the_backoff() {
    // (policy, exit code, restarts?)
    for (policy, code, restarts) in [
        ("Always", "0", true),
        ("Always", "1", true),
        ("OnFailure", "0", false),
        ("OnFailure", "1", true),
        ("Never", "1", false),
        ("Never", "0", false),
    ] {
        let p = pod(policy, &[], &["a"]);
        // Second run (attempt 1) ended at t=2: the restart waits 10 s.
        let st = status(Some(true), vec![ctr("c1", "a", 1, code, 1, 2)]);
        let early = plan(&p, &st, 5);
        let late = plan(&p, &st, 12);
        if restarts {
            assert!(
                early.create.is_empty(),
                "{policy}/{code}: backing off until t=12"
            );
            assert_eq!(early.wake_at, Some(Timestamp(12 * S)));
            assert!(early.backing_off.contains_key("a"));
            assert_eq!(late.create, vec![create("a", false, 2)], "{policy}/{code}");
            let first = status(Some(true), vec![ctr("c1", "a", 0, code, 1, 2)]);
            assert_eq!(
                plan(&p, &first, 2).create,
                vec![create("a", false, 1)],
                "first restart at once"
            );
        } else {
            assert!(
                late.create.is_empty() && late.wake_at.is_none(),
                "{policy}/{code}"
            );
        }
    }
}

#[test]
fn backoff_doubles_to_five_minutes_and_resets_after_ten_minutes_of_running() {
    let b = Backoff::default();
    let short = Duration::from_secs(1);
    let delays: Vec<u64> = (0..8).map(|n| b.delay(n, short).as_secs()).collect();
    assert_eq!(delays, vec![0, 10, 20, 40, 80, 160, 300, 300]);
    assert_eq!(b.delay(6, Duration::from_secs(600)).as_secs(), 0);
}

#[test]
fn dead_sandbox_is_replaced_with_the_next_attempt() {
    let p = pod("Always", &[], &["a"]);
    let seen = HashMap::from([("a".to_string(), 2)]);
    let st = status(Some(false), vec![ctr("c1", "a", 2, "137", 1, 2)]);
    let a = compute_pod_actions(&p, &st, &seen, None, Timestamp(3 * S), &Backoff::default());
    assert_eq!(a.remove_sandbox.as_deref(), Some("sb"));
    assert_eq!(a.create_sandbox, Some(1));
    assert_eq!(a.create, vec![create("a", false, 3)]);
    // A finished Never pod is not restarted in a new sandbox.
    let a = plan(&pod("Never", &[], &["a"]), &st, 3);
    assert!(a.is_noop());
}

#[test]
fn terminal_pod_only_gets_its_sandbox_stopped() {
    let p = pod("Never", &[], &["a"]);
    let st = status(Some(true), vec![ctr("c1", "a", 0, "0", 1, 2)]);
    let a = plan(&p, &st, 3);
    assert_eq!(a.stop_sandbox.as_deref(), Some("sb"));
    assert!(a.create.is_empty() && a.start.is_empty());
}

#[test]
fn phase_follows_upstream_get_phase() {
    let running = || ctr("r", "a", 0, "running", 1, 0);
    let ok = |n: &str| ctr(n, n, 0, "0", 1, 2);
    let failed = |n: &str| ctr(n, n, 0, "1", 1, 2);
    type Case<'a> = (
        &'a str,
        &'a [&'a str],
        &'a [&'a str],
        Vec<cri::ContainerStatus>,
        Phase,
    );
    let cases: Vec<Case> = vec![
        ("Always", &[], &["a"], vec![], Phase::Pending),
        ("Always", &[], &["a"], vec![running()], Phase::Running),
        ("Always", &[], &["a"], vec![ok("a")], Phase::Running),
        ("OnFailure", &[], &["a"], vec![ok("a")], Phase::Succeeded),
        ("OnFailure", &[], &["a"], vec![failed("a")], Phase::Running),
        ("Never", &[], &["a"], vec![ok("a")], Phase::Succeeded),
        (
            "Never",
            &[],
            &["a", "b"],
            vec![ok("a"), failed("b")],
            Phase::Failed,
        ),
        ("Never", &["i"], &["a"], vec![failed("i")], Phase::Failed),
        ("Always", &["i"], &["a"], vec![failed("i")], Phase::Pending),
        (
            "Always",
            &[],
            &["a"],
            vec![ctr("x", "a", 1, "created", 0, 0)],
            Phase::Running,
        ),
    ];
    for (policy, inits, containers, list, want) in cases {
        let p = pod(policy, inits, containers);
        assert_eq!(
            pod_phase(&p, &status(Some(true), list.clone())),
            want,
            "{policy} {inits:?} {containers:?} {list:?}"
        );
    }
}

#[test]
fn reflects_requires_every_own_action_to_be_visible() {
    let st = status(Some(true), vec![ctr("c1", "a", 0, "created", 0, 0)]);
    assert!(reflects(&st, &[Expectation::SandboxCreated("sb".into())]));
    assert!(
        !reflects(&st, &[Expectation::Started("c1".into())]),
        "still Created: not our start yet"
    );
    assert!(!reflects(
        &st,
        &[Expectation::SandboxCreated("other".into())]
    ));
    assert!(!reflects(&st, &[Expectation::SandboxStopped("sb".into())]));
    let st = status(Some(true), vec![ctr("c1", "a", 0, "running", 1, 0)]);
    assert!(reflects(&st, &[Expectation::Started("c1".into())]));
}

fn no_probes() -> &'static HashMap<String, (bool, bool)> {
    static EMPTY: std::sync::OnceLock<HashMap<String, (bool, bool)>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(HashMap::new)
}

fn no_errors() -> &'static HashMap<String, String> {
    static EMPTY: std::sync::OnceLock<HashMap<String, String>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(HashMap::new)
}

fn no_image_errors() -> &'static HashMap<String, (String, String)> {
    static EMPTY: std::sync::OnceLock<HashMap<String, (String, String)>> =
        std::sync::OnceLock::new();
    EMPTY.get_or_init(HashMap::new)
}

fn ctx<'a>(phase: Phase, backing_off: &'a HashMap<String, Timestamp>) -> StatusContext<'a> {
    StatusContext {
        phase,
        backing_off,
        config_errors: no_errors(),
        image_errors: no_image_errors(),
        probe_results: no_probes(),
        host_ip: "192.0.2.1",
        runtime_name: "rkube",
        now: Timestamp(50 * S),
    }
}

#[test]
fn api_status_reports_exit_code_ips_and_conditions() {
    let p = pod("Never", &[], &["a"]);
    let st = status(Some(true), vec![ctr("c1", "a", 0, "3", 1, 2)]);
    let none = HashMap::new();
    let api = api_pod_status(&p, &st, &ctx(Phase::Failed, &none));
    assert_eq!(api.phase.as_deref(), Some("Failed"));
    assert_eq!(api.pod_ip.as_deref(), Some("10.1.1.1"));
    assert_eq!(api.host_ip.as_deref(), Some("192.0.2.1"));
    let cs = &api.container_statuses.as_ref().expect("statuses")[0];
    let term = cs
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("terminated");
    assert_eq!((term.exit_code, term.reason.as_deref()), (3, Some("Error")));
    assert_eq!(term.container_id.as_deref(), Some("rkube://c1"));
    assert_eq!(cs.container_id.as_deref(), Some("rkube://c1"));
    assert!(!cs.ready);
    let cond = |t: &str| {
        api.conditions
            .as_ref()
            .and_then(|cs| cs.iter().find(|c| c.type_ == t))
            .map(|c| c.status.clone())
    };
    assert_eq!(cond("Ready").as_deref(), Some("False"));
    assert_eq!(cond("Initialized").as_deref(), Some("True"));
    assert_eq!(cond("PodReadyToStartContainers").as_deref(), Some("True"));
    assert_eq!(cond("PodScheduled").as_deref(), Some("True"));
}

#[test]
fn api_status_shows_crash_loop_back_off_with_the_last_termination() {
    let p = pod("Always", &[], &["a"]);
    let st = status(
        Some(true),
        vec![ctr("c2", "a", 1, "1", 3, 4), ctr("c1", "a", 0, "1", 1, 2)],
    );
    let backing = HashMap::from([("a".to_string(), Timestamp(14 * S))]);
    let api = api_pod_status(&p, &st, &ctx(Phase::Running, &backing));
    let cs = &api.container_statuses.as_ref().expect("statuses")[0];
    let waiting = cs
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .expect("waiting");
    assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
    assert!(waiting
        .message
        .as_deref()
        .is_some_and(|m| m.starts_with("back-off 10s restarting failed container=a")));
    let last = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("last state");
    assert_eq!(last.container_id.as_deref(), Some("rkube://c2"));
    assert_eq!(cs.restart_count, 1);
}

#[test]
fn running_container_is_ready_and_the_pod_running() {
    let p = pod("Always", &[], &["a"]);
    let st = status(Some(true), vec![ctr("c1", "a", 0, "running", 1, 0)]);
    let none = HashMap::new();
    let api = api_pod_status(&p, &st, &ctx(Phase::Running, &none));
    let cs = &api.container_statuses.as_ref().expect("statuses")[0];
    assert!(cs.ready && cs.started == Some(true));
    assert!(cs.state.as_ref().is_some_and(|s| s.running.is_some()));
    let ready = api
        .conditions
        .as_ref()
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .expect("Ready");
    assert_eq!(ready.status, "True");
}

#[test]
fn container_lost_by_the_runtime_keeps_its_reported_termination_or_becomes_status_unknown() {
    let none = HashMap::new();
    // Reported: `a` exited 3, `b` running. Then the runtime restarts and knows neither.
    let mut p = pod("Never", &[], &["a", "b"]);
    let before = status(
        Some(true),
        vec![
            ctr("c1", "a", 0, "3", 1, 2),
            ctr("c2", "b", 0, "running", 1, 0),
        ],
    );
    p.status = Some(api_pod_status(&p, &before, &ctx(Phase::Running, &none)));
    let api = api_pod_status(&p, &PodStatus::empty("uid-p"), &ctx(Phase::Running, &none));
    let statuses = api.container_statuses.expect("statuses");
    let a = statuses[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("a stays terminated");
    assert_eq!(
        (a.exit_code, a.container_id.as_deref()),
        (3, Some("rkube://c1"))
    );
    let b = &statuses[1];
    assert!(
        b.state.as_ref().is_some_and(|s| s.waiting.is_some()),
        "{b:?}"
    );
    let last = b
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("b's last termination");
    assert_eq!(
        (last.exit_code, last.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
    assert_eq!(b.restart_count, 1);
    assert!(!b.ready);
    // Once the pod is terminal, the lost running container is terminated, status unknown.
    let api = api_pod_status(&p, &PodStatus::empty("uid-p"), &ctx(Phase::Failed, &none));
    let b = &api.container_statuses.expect("statuses")[1];
    let term = b
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("terminated");
    assert_eq!(
        (term.exit_code, term.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
    // A container never reported is simply waiting to be created.
    let fresh = api_pod_status(
        &pod("Never", &[], &["a"]),
        &PodStatus::empty("uid-p"),
        &ctx(Phase::Pending, &none),
    );
    let w = fresh.container_statuses.expect("statuses")[0]
        .state
        .clone()
        .and_then(|s| s.waiting)
        .expect("waiting");
    assert_eq!(w.reason.as_deref(), Some("ContainerCreating"));
}

#[test]
fn lost_running_container_makes_a_never_pod_failed_and_an_always_pod_running_again() {
    use super::api_status::lost_containers;
    use super::phase::pod_phase_with_lost;
    let none = HashMap::new();
    for (policy, want) in [
        ("Never", Phase::Failed),
        ("OnFailure", Phase::Running),
        ("Always", Phase::Running),
    ] {
        let mut p = pod(policy, &[], &["a"]);
        let before = status(Some(true), vec![ctr("c1", "a", 0, "running", 1, 0)]);
        p.status = Some(api_pod_status(&p, &before, &ctx(Phase::Running, &none)));
        let empty = PodStatus::empty("uid-p");
        let lost = lost_containers(&p, &empty);
        assert_eq!(lost, HashMap::from([("a".to_string(), false)]), "{policy}");
        assert_eq!(pod_phase_with_lost(&p, &empty, &lost), want, "{policy}");
        assert_eq!(
            pod_phase(&p, &empty),
            Phase::Pending,
            "without the last API status: never ran"
        );
    }
    // A lost container that had succeeded leaves an OnFailure pod Succeeded.
    let mut p = pod("OnFailure", &[], &["a"]);
    let before = status(Some(true), vec![ctr("c1", "a", 0, "0", 1, 2)]);
    p.status = Some(api_pod_status(&p, &before, &ctx(Phase::Succeeded, &none)));
    let empty = PodStatus::empty("uid-p");
    assert_eq!(
        pod_phase_with_lost(&p, &empty, &lost_containers(&p, &empty)),
        Phase::Succeeded
    );
}

#[test]
fn a_new_worker_counts_on_from_the_reported_restart_counts() {
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]},
        "status": {"containerStatuses": [
            {"name": "a", "restartCount": 4, "ready": true, "image": "", "imageID": ""},
            {"name": "b", "restartCount": 0, "ready": true, "image": "", "imageID": ""}],
          "initContainerStatuses": [{"name": "i", "restartCount": 1, "ready": false, "image": "", "imageID": ""}]},
    }))
    .unwrap();
    let seen = super::worker::reported_attempts(&p);
    assert_eq!(seen.get("a"), Some(&4));
    assert_eq!(seen.get("b"), Some(&0));
    assert_eq!(seen.get("i"), Some(&1));
    // With the runtime empty, the plan creates attempt restartCount + 1.
    let plan = compute_pod_actions(
        &p,
        &status(Some(true), vec![]),
        &seen,
        None,
        Timestamp(S),
        &Backoff::default(),
    );
    let a = plan
        .create
        .iter()
        .find(|c| c.name == "i")
        .map(|c| c.attempt);
    assert_eq!(a, Some(2));
    assert!(super::worker::reported_attempts(&pod("Always", &[], &["x"])).is_empty());
}
