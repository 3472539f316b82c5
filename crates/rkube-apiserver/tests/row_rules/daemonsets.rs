//! A DaemonSet's template generation (upstream `daemonSetStrategy`'s
//! `PrepareForCreate`/`PrepareForUpdate`; apps/v1 keeps it in the
//! `deprecated.daemonset.template.generation` annotation): 1 on create, one
//! more whenever `spec.template` changes, and never what a client writes.

use serde_json::{json, Value};

use crate::common::TestServer;

const DS: &str = "/apis/apps/v1/namespaces/default/daemonsets";
const ANNOTATION: &str = "deprecated.daemonset.template.generation";

fn daemon_set(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
}

fn template_generation(obj: &Value) -> Option<&str> {
    obj["metadata"]["annotations"][ANNOTATION].as_str()
}

#[tokio::test]
async fn template_generation_starts_at_one_and_counts_template_changes_only() {
    let s = TestServer::embedded().await;
    let mut ds = daemon_set("agent");
    ds["metadata"]["annotations"] = json!({ANNOTATION: "7"});
    let r = s.post(DS, &ds).await;
    assert_eq!(r.code, 201, "{}", r.text);
    assert_eq!(template_generation(&r.body), Some("1"), "a client's value is not kept on create");
    assert_eq!(r.body["metadata"]["generation"], 1);

    // A change outside the template: generation moves, the template generation does not.
    let patch = r#"{"spec": {"minReadySeconds": 5}}"#;
    let r = s.patch(&format!("{DS}/agent"), "application/merge-patch+json", patch).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!((template_generation(&r.body), r.body["metadata"]["generation"].as_i64()), (Some("1"), Some(2)));

    // A template change through PUT counts one, whatever the client wrote in the annotation.
    let mut next = r.body.clone();
    next["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:1.36");
    next["metadata"]["annotations"][ANNOTATION] = json!("40");
    let r = s.put(&format!("{DS}/agent"), &next).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!((template_generation(&r.body), r.body["metadata"]["generation"].as_i64()), (Some("2"), Some(3)));

    // Removing the annotation does not reset it.
    let patch = format!(r#"{{"metadata": {{"annotations": {{"{ANNOTATION}": null}}}}}}"#);
    let r = s.patch(&format!("{DS}/agent"), "application/merge-patch+json", &patch).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(template_generation(&r.body), Some("2"));

    // Writes to the status subresource leave it alone.
    let r = s.patch(&format!("{DS}/agent/status"), "application/merge-patch+json", r#"{"status": {"numberReady": 0}}"#).await;
    assert_eq!(r.code, 200, "{}", r.text);
    assert_eq!(template_generation(&r.body), Some("2"));
    assert_eq!(template_generation(&s.get(&format!("{DS}/agent")).await.body), Some("2"));
}
