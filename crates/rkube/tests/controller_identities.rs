//! `rkube up` runs its controllers with `--use-service-account-credentials`:
//! each acts as the ServiceAccount `kube-system/<controller>` bound to the
//! ClusterRole `system:controller:<controller>`, so the audit log names the
//! controller that made each write, a controller may do what its role
//! allows and no more (`kubectl auth can-i --as=...`, kubectl 1.27 and
//! 1.33), and no controller request is refused while workloads run.
//!
//! `rkube controller-manager` takes the same flag (default false).
//!
//! The cluster and controller manager processes are killed by PID when
//! their guards drop.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::cluster::rkube_bin;
use common::process::ChildGuard;
use common::{Backend, Cluster, Kubectl};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

/// The audit events written so far (one JSON object per line).
fn audit_events(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The users that successfully created `resource` objects in namespace
/// `ns` (by the audit log's ResponseComplete events).
fn creators(events: &[Value], resource: &str, ns: &str) -> BTreeSet<String> {
    events
        .iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["verb"] == "create"
                && e["objectRef"]["resource"] == resource
                && e["objectRef"]["subresource"].is_null()
                && e["objectRef"]["namespace"] == ns
                && e["responseStatus"]["code"] == 201
        })
        .filter_map(|e| e["user"]["username"].as_str().map(String::from))
        .collect()
}

/// `system:serviceaccount:kube-system:<name>` for each of `names`.
fn controllers(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| format!("system:serviceaccount:kube-system:{n}")).collect()
}

/// Runs `kubectl auth can-i <verb> <resource> --as=<user>` and returns its
/// answer, checking the exit code matches it (0 yes, 1 no).
fn can_i(k: &Kubectl, user: &str, verb: &str, resource: &str, extra: &[&str]) -> bool {
    let who = format!("--as={user}");
    let mut args = vec!["auth", "can-i", verb, resource, "-n", "default", who.as_str()];
    args.extend_from_slice(extra);
    let out = k.run(&args);
    match (out.code, out.stdout.trim()) {
        (Some(0), "yes") => true,
        (Some(1), "no") => false,
        _ => panic!("{}: {:?} {:?} {:?}", out.cmdline, out.code, out.stdout, out.stderr),
    }
}

const DEPLOYMENT_CONTROLLER: &str = "system:serviceaccount:kube-system:deployment-controller";

#[test]
fn up_controllers_write_as_their_service_accounts_and_are_never_refused() {
    let fixtures = tempfile::tempdir().expect("tempdir");
    let (builder, log) = Cluster::builder(Backend::Embedded).metadata_audit_log(fixtures.path());
    let cluster = builder.start();
    let k = cluster.kubectl("1.33");

    // Deployment → ReplicaSet → pods; a Service with a selector → Endpoints
    // and an EndpointSlice; a Job → its pods; a namespace deleted with its
    // contents.
    k.ok(&["create", "deployment", "web", "--image=busybox", "--replicas=2", "--", "sleep", "3600"]);
    k.ok(&["expose", "deployment", "web", "--port=80"]);
    k.ok(&["create", "job", "once", "--image=busybox", "--", "true"]);
    k.ok(&["create", "namespace", "scratch"]);
    k.ok(&["create", "configmap", "leftover", "-n", "scratch"]);
    k.ok(&["delete", "namespace", "scratch", "--wait=false"]);

    let wanted = [
        ("replicasets", controllers(&["deployment-controller"])),
        ("pods", controllers(&["replicaset-controller", "job-controller"])),
        ("endpoints", controllers(&["endpoint-controller"])),
        ("endpointslices", controllers(&["endpointslice-controller"])),
    ];
    // The namespace controller empties and finalizes `scratch`.
    let finalized = |e: &&Value| {
        e["objectRef"]["resource"] == "namespaces" && e["objectRef"]["subresource"] == "finalize" && e["stage"] == "ResponseComplete"
    };
    // The audit writer is asynchronous: wait for the events, not only the objects.
    let events = cluster.wait_until("the controllers' writes in the audit log", LIMIT, || {
        let events = audit_events(&log);
        let all = wanted.iter().all(|(resource, by)| creators(&events, resource, "default").len() >= by.len());
        (all && events.iter().any(|e| finalized(&e))).then_some(events)
    });
    for (resource, by) in &wanted {
        assert_eq!(&creators(&events, resource, "default"), by, "creators of {resource}");
    }
    let finalizers: BTreeSet<&str> = events.iter().filter(finalized).filter_map(|e| e["user"]["username"].as_str()).collect();
    assert_eq!(finalizers, BTreeSet::from(["system:serviceaccount:kube-system:namespace-controller"]));
    cluster.wait_until("namespace scratch to go", LIMIT, || (k.run(&["get", "namespace", "scratch"]).code == Some(1)).then_some(()));
    k.fails_with(&["get", "namespace", "scratch"], "Error from server (NotFound): namespaces \"scratch\" not found");

    // Their ServiceAccounts exist in kube-system.
    let sas = k.json(&["get", "serviceaccounts", "-n", "kube-system"]);
    let names: Vec<&str> = sas["items"].as_array().into_iter().flatten().filter_map(|s| s["metadata"]["name"].as_str()).collect();
    for want in ["deployment-controller", "replicaset-controller", "generic-garbage-collector", "namespace-controller", "node-controller"] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }

    // No request of a controller was refused (a role missing a rule the
    // controller's reflectors or writes need shows up here as a 403).
    let refused: Vec<String> = audit_events(&log)
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 403)
        .filter(|e| e["user"]["username"].as_str().is_some_and(|u| u.starts_with("system:serviceaccount:kube-system:")))
        .map(|e| format!("{} {} {}", e["user"]["username"], e["verb"], e["requestURI"]))
        .collect();
    assert!(refused.is_empty(), "refused controller requests: {refused:#?}");
}

#[test]
fn a_controller_s_service_account_may_do_what_its_role_allows_and_no_more() {
    let cluster = Cluster::start(Backend::Embedded);
    for version in ["1.27", "1.33"] {
        let k = cluster.kubectl(version);
        assert!(can_i(&k, DEPLOYMENT_CONTROLLER, "create", "replicasets", &[]), "kubectl {version}");
        assert!(can_i(&k, DEPLOYMENT_CONTROLLER, "update", "deployments", &["--subresource=status"]), "kubectl {version}");
        assert!(!can_i(&k, DEPLOYMENT_CONTROLLER, "create", "secrets", &[]), "kubectl {version}");
        assert!(!can_i(&k, DEPLOYMENT_CONTROLLER, "create", "pods", &[]), "kubectl {version}");
        let jobs = "system:serviceaccount:kube-system:job-controller";
        assert!(can_i(&k, jobs, "create", "pods", &[]), "kubectl {version}");
        assert!(!can_i(&k, jobs, "create", "replicasets", &[]), "kubectl {version}");
    }
    let role = cluster.kubectl("1.33").json(&["get", "clusterrolebinding", "system:controller:deployment-controller"]);
    assert_eq!(role["roleRef"]["name"], "system:controller:deployment-controller", "{role}");
    assert_eq!(
        role["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "deployment-controller", "namespace": "kube-system"}]),
        "{role}"
    );
}

/// Audit events of `who` doing `verb` on `resource` (`/subresource`) with `code`.
fn count(events: &[Value], who: &str, verb: &str, resource: &str, subresource: Option<&str>, code: i64) -> usize {
    events
        .iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == who
                && e["verb"] == verb
                && e["objectRef"]["resource"] == resource
                && e["objectRef"]["subresource"].as_str() == subresource
                && e["responseStatus"]["code"] == code
        })
        .count()
}

/// `rkube controller-manager` with `controller-manager.kubeconfig`
/// (`system:kube-controller-manager`), running only the TTL-after-finished
/// controller, plus `extra` flags.
fn standalone_manager(cluster: &Cluster, extra: &[&str]) -> ChildGuard {
    let kubeconfig = cluster.data_dir().join("controller-manager.kubeconfig");
    let child = std::process::Command::new(rkube_bin())
        .arg("controller-manager")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["--controllers=ttl-after-finished-controller", "--leader-elect=false", "--secure-port=0"])
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn rkube controller-manager");
    ChildGuard::new(child, "rkube controller-manager")
}

#[test]
fn standalone_controller_manager_uses_its_own_identity_unless_asked_for_service_account_credentials() {
    const KCM: &str = "system:kube-controller-manager";
    let fixtures = tempfile::tempdir().expect("tempdir");
    let (builder, log) = Cluster::builder(Backend::Embedded).metadata_audit_log(fixtures.path());
    let cluster = builder.start();
    // `rkube up`'s own controllers asked for their tokens as the manager,
    // one per ServiceAccount of the controllers it runs.
    let spec = ["*".to_string(), "local-path-provisioner-controller".to_string()];
    let (selected, _) = rkube_controller_manager::controllers::select(&spec).expect("rkube up's controllers");
    let accounts: BTreeSet<&str> = selected.iter().map(|c| c.service_account).collect();
    let before = cluster.wait_until("rkube up's token requests in the audit log", LIMIT, || {
        let names = token_requests(&audit_events(&log), KCM);
        accounts.iter().all(|a| names.iter().any(|n| n == a)).then_some(names)
    });
    assert_eq!(count(&audit_events(&log), KCM, "list", "jobs", None, 200), 0, "rkube up's controllers list as their ServiceAccounts");
    const TTL: &str = "ttl-after-finished-controller";
    let ttl_tokens = |names: &[String]| names.iter().filter(|n| *n == TTL).count();

    // Without the flag the TTL controller lists Jobs as the manager itself
    // and asks for no token.
    let manager = standalone_manager(&cluster, &[]);
    cluster.wait_until("a list of jobs by system:kube-controller-manager", LIMIT, || {
        (count(&audit_events(&log), KCM, "list", "jobs", None, 200) > 0).then_some(())
    });
    drop(manager);
    let after = token_requests(&audit_events(&log), KCM);
    assert_eq!(ttl_tokens(&after), ttl_tokens(&before), "token requests before {before:?}, after {after:?}");

    // With it, the manager gets a token for kube-system/ttl-after-finished-controller.
    let _manager = standalone_manager(&cluster, &["--use-service-account-credentials"]);
    cluster.wait_until("one more token request for the TTL controller", LIMIT, || {
        (ttl_tokens(&token_requests(&audit_events(&log), KCM)) > ttl_tokens(&after)).then_some(())
    });
}

/// The ServiceAccounts `who` successfully asked tokens for, in the audit
/// log's order (a name once per request).
fn token_requests(events: &[Value], who: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == who
                && e["verb"] == "create"
                && e["objectRef"]["subresource"] == "token"
                && e["responseStatus"]["code"] == 201
        })
        .filter_map(|e| e["objectRef"]["name"].as_str().map(String::from))
        .collect()
}
