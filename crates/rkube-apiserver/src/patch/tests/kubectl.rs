//! The strategic merge patches kubectl's client-side `apply` sends
//! (`CreateThreeWayMergePatch` of last-applied, new config and live object),
//! written out by hand as kubectl 1.33 produces them: Go's `json.Marshal`
//! sorts map keys, deletions come after additions in a merged list,
//! `$setElementOrder` accompanies every merged list that changed.

use serde_json::{json, Value};

use super::{smp, NOW};
use crate::patch::{record_update, UpdateRecord, LAST_APPLIED_ANNOTATION};

/// The configuration a user applied first.
fn old_config() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"labels": {"app": "web", "tier": "fe"}, "name": "web", "namespace": "default",
                     "finalizers": ["example.com/a", "example.com/b"]},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.25",
                    "ports": [{"containerPort": 80}],
                    "env": [{"name": "MODE", "value": "prod"}, {"name": "OLD", "value": "x"}]}]}}}})
}

/// The Deployment as stored after that first apply (server defaults filled in).
fn live() -> Value {
    let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": "6f1c", "resourceVersion": "812", "generation": 1,
            "creationTimestamp": "2024-05-01T11:00:00Z",
            "annotations": {"deployment.kubernetes.io/revision": "1",
                            LAST_APPLIED_ANNOTATION: format!("{}\n", old_config())},
            "labels": {"app": "web", "tier": "fe"},
            "finalizers": ["example.com/a", "example.com/b"]},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.25", "imagePullPolicy": "IfNotPresent",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "env": [{"name": "MODE", "value": "prod"}, {"name": "OLD", "value": "x"}],
                        "resources": {}, "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File"}],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                    "securityContext": {}, "schedulerName": "default-scheduler"}}},
        "status": {"observedGeneration": 1, "replicas": 2}});
    record_update(
        &UpdateRecord {
            manager: "kubectl-client-side-apply",
            api_version: "apps/v1",
            subresource: "",
            now: NOW,
        },
        None,
        &mut d,
    );
    d
}

#[test]
fn kubectl_client_side_apply_of_changed_image_env_and_port() {
    let mut new_config = old_config();
    let c = &mut new_config["spec"]["template"]["spec"]["containers"][0];
    c["image"] = json!("nginx:1.27");
    c["env"] = json!([{"name": "MODE", "value": "staging"}, {"name": "NEW", "value": "y"}]);
    c["ports"] = json!([{"containerPort": 8080}]);
    let annotation = format!("{new_config}\n");
    // What kubectl 1.33 sends (`kubectl apply -f` with the changed manifest).
    let patch = json!({
        "metadata": {"annotations": {LAST_APPLIED_ANNOTATION: annotation}},
        "spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}],
            "containers": [{
                "$setElementOrder/env": [{"name": "MODE"}, {"name": "NEW"}],
                "$setElementOrder/ports": [{"containerPort": 8080}],
                "env": [{"name": "MODE", "value": "staging"}, {"name": "NEW", "value": "y"},
                        {"$patch": "delete", "name": "OLD"}],
                "image": "nginx:1.27",
                "name": "web",
                "ports": [{"containerPort": 8080}, {"$patch": "delete", "containerPort": 80}]
            }]
        }}}
    });
    let before = live();
    let mut after = smp("Deployment", &before, patch).unwrap();
    let c = &after["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "nginx:1.27");
    assert_eq!(
        c["env"],
        json!([{"name": "MODE", "value": "staging"}, {"name": "NEW", "value": "y"}])
    );
    assert_eq!(c["ports"], json!([{"containerPort": 8080}]));
    assert_eq!(
        c["imagePullPolicy"], "IfNotPresent",
        "server-defaulted fields survive"
    );
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(
        after["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
        "25%"
    );
    assert_eq!(
        after["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    assert_eq!(
        after["metadata"]["annotations"][LAST_APPLIED_ANNOTATION],
        format!("{new_config}\n")
    );
    assert_eq!(after["metadata"]["uid"], "6f1c");

    // The server then records the patch as kubectl-client-side-apply's Update.
    crate::patch::update_managed_fields(
        "kubectl-client-side-apply",
        "Update",
        "apps/v1",
        Some(&before),
        &mut after,
    );
    let fields = &after["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:template"]
        ["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
    assert!(fields["f:image"].is_object());
    assert!(fields["f:env"]["k:{\"name\":\"NEW\"}"]["f:value"].is_object());
    assert!(
        fields["f:env"].get("k:{\"name\":\"OLD\"}").is_none(),
        "removed items leave managedFields"
    );
    assert!(fields["f:ports"]
        .get("k:{\"containerPort\":80,\"protocol\":\"TCP\"}")
        .is_none());
}

#[test]
fn kubectl_client_side_apply_of_removed_label_finalizer_and_strategy_switch() {
    let patch = json!({
        "metadata": {
            "$deleteFromPrimitiveList/finalizers": ["example.com/b"],
            "$setElementOrder/finalizers": ["example.com/a"],
            "labels": {"tier": null}
        },
        "spec": {"replicas": 3, "strategy": {"$retainKeys": ["type"], "rollingUpdate": null, "type": "Recreate"}}
    });
    let after = smp("Deployment", &live(), patch).unwrap();
    assert_eq!(after["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(after["metadata"]["finalizers"], json!(["example.com/a"]));
    assert_eq!(after["spec"]["replicas"], 3);
    assert_eq!(after["spec"]["strategy"], json!({"type": "Recreate"}));
    assert_eq!(after["spec"]["revisionHistoryLimit"], 10);
}

#[test]
fn kubectl_client_side_apply_adding_a_container_keeps_manifest_order() {
    let patch = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "web"}, {"name": "log"}],
        "containers": [{"image": "fluent-bit:3", "name": "log"}]
    }}}});
    let after = smp("Deployment", &live(), patch).unwrap();
    assert_eq!(
        super::names(&after, "/spec/template/spec/containers"),
        ["web", "log"]
    );
}
