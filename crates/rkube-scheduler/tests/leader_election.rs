//! Two `rkube scheduler` instances with leader election on the
//! `kube-system/kube-scheduler` Lease against one API server: only the
//! leader binds; when it stops (releasing the Lease) the other takes over.
//! The health and metrics server answers `/healthz` and `/metrics`.

use crate::common;

use std::time::Duration;

use common::{bound_node, create_node, create_pod, eventually, TestServer};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use rkube_component::leader::LeaderElectionArgs;
use rkube_component::serving::self_signed;
use rkube_scheduler::cli::{start, StartOptions, COMPONENT};

/// Shortened durations, as `--leader-elect-lease-duration=3s
/// --leader-elect-renew-deadline=2s --leader-elect-retry-period=500ms` give.
fn options(health: bool) -> StartOptions {
    let args = LeaderElectionArgs {
        leader_elect_lease_duration: Duration::from_secs(3),
        leader_elect_renew_deadline: Duration::from_secs(2),
        leader_elect_retry_period: Duration::from_millis(500),
        ..LeaderElectionArgs::default()
    };
    StartOptions {
        leader_election: args.config(COMPONENT).expect("valid flags"),
        serving: health.then(|| ("127.0.0.1:0".parse().expect("addr"), self_signed().expect("certificate"))),
    }
}

async fn holder(api: &Api<Lease>) -> Option<(String, i32)> {
    let lease = api.get_opt(COMPONENT).await.ok()??;
    let spec = lease.spec?;
    Some((spec.holder_identity.filter(|h| !h.is_empty())?, spec.lease_transitions.unwrap_or(0)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_schedules_and_the_other_takes_over_when_it_stops() {
    let server = TestServer::start().await;
    let client = server.client();
    create_node(&client, "n1", "4", serde_json::json!({})).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let first = start(client.clone(), options(false)).await.expect("start first");
    let (first_id, transitions) = eventually(10, "first leads", || async { holder(&leases).await }).await;
    assert_eq!(transitions, 0);
    assert!(first.is_leader());
    let second = start(client.clone(), options(false)).await.expect("start second");
    create_pod(&client, "p1", "100m", serde_json::json!({})).await;
    assert_eq!(bound_node(&client, "p1", 10).await, "n1");
    // Several renewals later the first still holds the Lease; the second waits.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(holder(&leases).await.map(|h| h.0), Some(first_id.clone()));
    assert!(!second.is_leader(), "the second instance must not lead");
    first.shutdown().await.expect("first stops cleanly");
    let (second_id, transitions) = eventually(10, "second takes over", || async {
        holder(&leases).await.filter(|(h, _)| *h != first_id)
    })
    .await;
    assert_eq!(transitions, 1, "leaseTransitions counts the change of holder");
    let host = hostname_of(&second_id);
    assert_eq!(host, hostname_of(&first_id), "holderIdentity is <hostname>_<uuid>");
    eventually(5, "second reports leading", || async { second.is_leader().then_some(()) }).await;
    create_pod(&client, "p2", "100m", serde_json::json!({})).await;
    assert_eq!(bound_node(&client, "p2", 10).await, "n1");
    second.shutdown().await.expect("second stops cleanly");
    let released = leases.get(COMPONENT).await.expect("lease");
    assert_eq!(released.spec.and_then(|s| s.holder_identity), None, "released on stop");
}

fn hostname_of(identity: &str) -> String {
    let (host, uuid) = identity.rsplit_once('_').expect("<hostname>_<uuid>");
    assert_eq!(uuid.len(), 36, "a UUID: {uuid}");
    host.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_metrics_answer_over_https() {
    let server = TestServer::start().await;
    let client = server.client();
    create_node(&client, "n1", "4", serde_json::json!({})).await;
    let sched = start(client.clone(), options(true)).await.expect("start");
    let addr = sched.health_addr().expect("serving");
    let http = reqwest::Client::builder().danger_accept_invalid_certs(true).build().expect("https client");
    let get = |path: &'static str| {
        let http = http.clone();
        async move {
            let r = http.get(format!("https://{addr}{path}")).send().await.expect("request");
            (r.status().as_u16(), r.text().await.expect("body"))
        }
    };
    for path in ["/healthz", "/livez", "/readyz", "/healthz/leaderElection"] {
        assert_eq!(get(path).await, (200, "ok".to_string()), "{path}");
    }
    assert_eq!(get("/readyz?verbose").await, (200, "[+]ping ok\n[+]leaderElection ok\nreadyz check passed\n".to_string()));
    create_pod(&client, "p1", "100m", serde_json::json!({})).await;
    bound_node(&client, "p1", 10).await;
    let metrics = eventually(10, "metrics after binding", || async {
        let (code, text) = get("/metrics").await;
        (code == 200 && text.contains("scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"} 1"))
            .then_some(text)
    })
    .await;
    assert!(metrics.contains("leader_election_master_status{name=\"kube-scheduler\"} 1"), "{metrics}");
    assert!(metrics.contains("scheduler_pending_pods{queue=\"active\"} 0"), "{metrics}");
    assert!(metrics.contains("scheduler_scheduling_attempt_duration_seconds_count{result=\"scheduled\",profile=\"default-scheduler\"} 1"), "{metrics}");
    assert!(metrics.contains("scheduler_pod_scheduling_sli_duration_seconds_count{attempts=\"1\"} 1"), "{metrics}");
    sched.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_by_another_holder_stops_scheduling_and_fails_healthz() {
    let server = TestServer::start().await;
    let client = server.client();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let mut sched = start(client.clone(), options(true)).await.expect("start");
    eventually(10, "leading", || async { holder(&leases).await }).await;
    // Another candidate overwrites the Lease: renewals now see a live foreign holder.
    let mut lease = leases.get(COMPONENT).await.expect("lease");
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = Some("intruder_00000000-0000-0000-0000-000000000000".into());
        spec.lease_duration_seconds = Some(60);
    }
    leases.replace(COMPONENT, &Default::default(), &lease).await.expect("take the lease");
    let ended = tokio::time::timeout(Duration::from_secs(10), sched.ended()).await.expect("scheduler stops");
    assert_eq!(ended.expect_err("lease lost").to_string(), "leaderelection lost for kube-system/kube-scheduler");
    let addr = sched.health_addr().expect("serving");
    let http = reqwest::Client::builder().danger_accept_invalid_certs(true).build().expect("https client");
    let r = http.get(format!("https://{addr}/healthz")).send().await.expect("healthz");
    assert_eq!(r.status().as_u16(), 500);
    assert_eq!(r.text().await.expect("body"), "[+]ping ok\n[-]leaderElection failed: reason withheld\nhealthz check failed\n");
    let metrics = http.get(format!("https://{addr}/metrics")).send().await.expect("metrics").text().await.expect("body");
    assert!(metrics.contains("leader_election_master_status{name=\"kube-scheduler\"} 0"), "{metrics}");
    let after = leases.get(COMPONENT).await.expect("lease");
    assert_eq!(after.spec.and_then(|s| s.holder_identity).as_deref(), Some("intruder_00000000-0000-0000-0000-000000000000"), "a lost lease is not released");
}
