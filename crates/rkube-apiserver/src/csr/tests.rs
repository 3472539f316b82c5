use super::*;

const NOW: &str = "2030-01-01T00:00:00Z";

fn stored() -> Value {
    json!({
        "metadata": {"name": "c"},
        "spec": {"signerName": "kubernetes.io/kube-apiserver-client", "request": "UkVR", "usages": ["client auth"], "username": "alice"},
        "status": {"conditions": [
            {"type": "Approved", "status": "True", "reason": "KubectlApprove", "lastUpdateTime": "2029-01-01T00:00:00Z", "lastTransitionTime": "2029-01-01T00:00:00Z"}
        ]}
    })
}

#[test]
fn create_records_the_requesting_user_and_clears_status() {
    let user = UserInfo {
        username: "bob".into(),
        uid: "u-1".into(),
        groups: vec!["devs".into(), "system:authenticated".into()],
        extra: [("scopes".to_string(), vec!["a".to_string()])].into(),
    };
    let mut obj = json!({"spec": {"username": "mallory", "groups": ["system:masters"]}, "status": {"conditions": [{"type": "Approved"}]}});
    prepare_create(Some(&user), &mut obj);
    assert_eq!(
        obj,
        json!({"spec": {"username": "bob", "uid": "u-1", "groups": ["devs", "system:authenticated"], "extra": {"scopes": ["a"]}}, "status": {}})
    );
    let mut obj = json!({"spec": {"username": "mallory"}});
    prepare_create(None, &mut obj);
    assert_eq!(obj, json!({"spec": {}, "status": {}}));
}

#[test]
fn the_main_resource_keeps_the_stored_spec() {
    let old = stored();
    let mut new = old.clone();
    new["spec"]["username"] = json!("mallory");
    new["metadata"]["labels"] = json!({"a": "b"});
    assert!(prepare_update(WritePath::Main, &old, &mut new, NOW).is_empty());
    assert_eq!(new["spec"], old["spec"]);
    assert_eq!(new["metadata"]["labels"], json!({"a": "b"}));
}

#[test]
fn status_writes_keep_stored_approval_conditions_and_may_not_add_one() {
    let old = stored();
    let mut new = old.clone();
    new["status"]["conditions"][0]["reason"] = json!("Changed");
    new["status"]["certificate"] = json!("Q0VSVA==");
    assert!(prepare_update(WritePath::Status, &old, &mut new, NOW).is_empty());
    assert_eq!(new["status"]["conditions"], old["status"]["conditions"]);
    let mut new = old.clone();
    new["status"]["conditions"].as_array_mut().unwrap().push(json!({"type": "Denied", "status": "True"}));
    let errs = prepare_update(WritePath::Status, &old, &mut new, NOW);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].to_string(), "status.conditions: Forbidden: updates may not add a condition of type \"Denied\"");
}

#[test]
fn approval_conditions_get_timestamps_keeping_a_stored_transition() {
    let old = json!({"status": {"conditions": [{"type": "Failed", "status": "True", "lastTransitionTime": "2029-05-05T00:00:00Z"}]}});
    let mut new = json!({"status": {"conditions": [
        {"type": "Failed", "status": "True"},
        {"type": "Approved", "status": "True", "reason": "KubectlApprove"}
    ]}});
    assert!(prepare_update(WritePath::Approval, &old, &mut new, NOW).is_empty());
    let c = &new["status"]["conditions"];
    assert_eq!(c[0]["lastTransitionTime"], "2029-05-05T00:00:00Z");
    assert_eq!(c[0]["lastUpdateTime"], NOW);
    assert_eq!((c[1]["lastTransitionTime"].as_str(), c[1]["lastUpdateTime"].as_str()), (Some(NOW), Some(NOW)));
}

#[test]
fn write_paths_come_from_the_subresource() {
    assert_eq!(WritePath::of(None), WritePath::Main);
    assert_eq!(WritePath::of(Some("status")), WritePath::Status);
    assert_eq!(WritePath::of(Some("approval")), WritePath::Approval);
}
