use super::*;
use serde_json::json;

fn deployment(replicas: i32, surge: Value, unavailable: Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {"kubernetes.io/change-cause": "v2", LAST_APPLIED: "{}", REVISION: "7"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }))
    .unwrap()
}

#[test]
fn percent_surge_rounds_up_and_unavailable_rounds_down() {
    let d = deployment(10, json!("25%"), json!("25%"));
    assert_eq!(fenceposts(&d, 10), (3, 2));
    assert_eq!((max_surge(&d), max_unavailable(&d)), (3, 2));
    let d = deployment(3, json!("25%"), json!("25%"));
    assert_eq!(fenceposts(&d, 3), (1, 0));
    let d = deployment(3, json!(0), json!(0));
    assert_eq!(fenceposts(&d, 3), (0, 1), "both zero becomes maxUnavailable 1");
    let d = deployment(2, json!(1), json!(5));
    assert_eq!(max_unavailable(&d), 2, "capped at replicas");
    assert!(scaled_value(&IntOrString::String("x%".into()), 10, true).is_err());
}

#[test]
fn hash_is_stable_ignores_its_own_label_and_changes_with_the_template_and_collisions() {
    let d = deployment(3, json!(1), json!(0));
    let t = d.spec.as_ref().unwrap().template.clone();
    let h = compute_hash(&t, None);
    assert_eq!(h, compute_hash(&t.clone(), None));
    assert!(h.bytes().all(|b| ALPHANUMS.contains(&b)), "{h}");
    let mut labeled = t.clone();
    labeled.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert(POD_TEMPLATE_HASH.into(), h.clone());
    assert_eq!(compute_hash(&labeled, None), h);
    assert!(equal_ignore_hash(&labeled, &t));
    let mut other = t.clone();
    other.spec.as_mut().unwrap().containers[0].image = Some("j".into());
    assert_ne!(compute_hash(&other, None), h);
    assert!(!equal_ignore_hash(&other, &t));
    assert_ne!(compute_hash(&t, Some(1)), h);
    // A client that omits false and empty values sends the same template.
    let mut explicit = t.clone();
    explicit.spec.as_mut().unwrap().containers[0].stdin = Some(false);
    explicit.spec.as_mut().unwrap().host_ipc = Some(false);
    assert!(equal_ignore_hash(&explicit, &t));
    assert_eq!(compute_hash(&explicit, None), h);
    assert_eq!(safe_encode("0123"), "4567");
}

#[test]
fn new_replica_set_revision_records_history_and_copies_annotations() {
    let d = deployment(3, json!(1), json!(0));
    let fresh = new_rs_annotations(&d, &ReplicaSet::default(), 1, false);
    assert_eq!(fresh.get(REVISION).map(String::as_str), Some("1"));
    assert_eq!(fresh.get(DESIRED_REPLICAS).map(String::as_str), Some("3"));
    assert_eq!(fresh.get(MAX_REPLICAS).map(String::as_str), Some("4"));
    assert_eq!(fresh.get("kubernetes.io/change-cause").map(String::as_str), Some("v2"));
    assert!(!fresh.contains_key(LAST_APPLIED));
    let mut old = ReplicaSet::default();
    old.metadata.annotations = Some([(REVISION.to_string(), "1".to_string())].into());
    let reused = new_rs_annotations(&d, &old, 3, true);
    assert_eq!(reused.get(REVISION).map(String::as_str), Some("3"));
    assert_eq!(reused.get(REVISION_HISTORY).map(String::as_str), Some("1"));
    let mut again = old.clone();
    again.metadata.annotations = Some(reused.clone());
    assert_eq!(new_rs_annotations(&d, &again, 5, true).get(REVISION_HISTORY).map(String::as_str), Some("1,3"));
    assert_eq!(new_rs_annotations(&d, &again, 2, true).get(REVISION).map(String::as_str), Some("3"), "never lowered");
}

#[test]
fn rolling_update_steps_stay_within_surge_and_unavailability() {
    // 3 replicas, maxSurge 1, maxUnavailable 0: the new RS grows one at a time.
    let d = deployment(3, json!(1), json!(0));
    assert_eq!(new_rs_new_replicas(&d, 3, 0), 1);
    assert_eq!(new_rs_new_replicas(&d, 4, 1), 1, "at 4 pods the surge is used up");
    // Old RS of 3 all available, new RS of 1 not yet available: nothing may go.
    let old = vec![OldRs { name: "old".into(), replicas: 3, available: 3 }];
    assert!(plan_old_scale_down(&d, &old, Some((1, 0))).is_empty());
    // Once the new pod is available, one old pod goes.
    assert_eq!(plan_old_scale_down(&d, &old, Some((1, 1))), vec![("old".to_string(), 2)]);
    // Unhealthy old replicas go first, then healthy ones down to minAvailable.
    let sick = vec![OldRs { name: "a".into(), replicas: 2, available: 0 }, OldRs { name: "b".into(), replicas: 2, available: 2 }];
    assert_eq!(plan_old_scale_down(&deployment(3, json!(1), json!(1)), &sick, Some((1, 1))), vec![("a".to_string(), 0), ("b".to_string(), 1)]);
    // maxSurge 0, maxUnavailable 1: old scales down first.
    let d = deployment(3, json!(0), json!(1));
    assert_eq!(new_rs_new_replicas(&d, 3, 0), 0);
    let old = vec![OldRs { name: "old".into(), replicas: 3, available: 3 }];
    assert_eq!(plan_old_scale_down(&d, &old, Some((0, 0))), vec![("old".to_string(), 2)]);
    assert_eq!(new_rs_new_replicas(&d, 2, 0), 1);
}

#[test]
fn resizing_mid_rollout_shares_replicas_proportionally() {
    // 10 → 15 replicas with maxSurge 3: two RSes of 8 and 5 (max-replicas 13)
    // grow to share 18 pods.
    let d = deployment(15, json!(3), json!(0));
    let live = vec![
        LiveRs { name: "old".into(), replicas: 8, max_replicas: Some(13), created: 1 },
        LiveRs { name: "new".into(), replicas: 5, max_replicas: Some(13), created: 2 },
    ];
    let sizes = proportional_sizes(&d, &live, 13);
    let total: i32 = sizes.iter().map(|s| s.1).sum();
    assert_eq!(total, 18);
    assert_eq!(sizes, vec![("old".to_string(), 11), ("new".to_string(), 7)]);
    // Scaling to 0 empties both.
    let zero = deployment(0, json!(3), json!(0));
    assert!(proportional_sizes(&zero, &live, 13).iter().all(|s| s.1 == 0));
}
