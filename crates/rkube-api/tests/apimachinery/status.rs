use rkube_api::status::{Status, StatusCause, StatusDetails};

fn json(s: &Status) -> String {
    serde_json::to_string(s).expect("Status serializes")
}

#[test]
fn not_found_json_is_exactly_upstream_metav1_status() {
    let s = Status::not_found("", "pods", "x");
    assert_eq!(
        json(&s),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}"#
    );
    assert_eq!(
        s.to_json(),
        serde_json::from_str::<serde_json::Value>(&json(&s)).unwrap()
    );
}

#[test]
fn not_found_with_group_qualifies_resource() {
    let s = Status::not_found("apps", "deployments", "web");
    assert_eq!(s.message(), r#"deployments.apps "web" not found"#);
    assert_eq!(
        s.details,
        Some(StatusDetails {
            name: "web".into(),
            group: "apps".into(),
            kind: "deployments".into(),
            ..StatusDetails::default()
        })
    );
}

#[test]
fn names_are_quoted_like_go_percent_q() {
    let s = Status::not_found("", "pods", "a\"b\\c\u{1}");
    assert_eq!(s.message(), r#"pods "a\"b\\c\x01" not found"#);
}

/// Every constructor's code, reason and message (upstream errors.go wording).
#[test]
fn constructors_use_upstream_code_reason_and_message() {
    let cases: Vec<(Status, u16, &str, &str)> = vec![
        (Status::already_exists("", "configmaps", "c"), 409, "AlreadyExists", r#"configmaps "c" already exists"#),
        (
            Status::conflict("", "pods", "x", "the object has been modified; please apply your changes to the latest version and try again"),
            409,
            "Conflict",
            r#"Operation cannot be fulfilled on pods "x": the object has been modified; please apply your changes to the latest version and try again"#,
        ),
        (
            Status::conflict("coordination.k8s.io", "leases", "l", "boom"),
            409,
            "Conflict",
            r#"Operation cannot be fulfilled on leases.coordination.k8s.io "l": boom"#,
        ),
        (Status::bad_request("bad"), 400, "BadRequest", "bad"),
        (Status::unauthorized(""), 401, "Unauthorized", "not authorized"),
        (Status::unauthorized("token expired"), 401, "Unauthorized", "token expired"),
        (Status::method_not_allowed("nope"), 405, "MethodNotAllowed", "nope"),
        (Status::not_acceptable("only json"), 406, "NotAcceptable", "only json"),
        (Status::expired("old"), 410, "Expired", "old"),
        (Status::gone("gone"), 410, "Gone", "gone"),
        (
            Status::request_entity_too_large("limit is 3145728"),
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        ),
        (Status::unsupported_media_type("text/plain"), 415, "UnsupportedMediaType", "text/plain"),
        (
            Status::too_many_requests("storage is (re)initializing", 3),
            429,
            "TooManyRequests",
            "storage is (re)initializing",
        ),
        (Status::timeout("took too long", 2), 504, "Timeout", "Timeout: took too long"),
        (Status::internal("disk on fire"), 500, "InternalError", "Internal error occurred: disk on fire"),
        (Status::service_unavailable("shutting down"), 503, "ServiceUnavailable", "shutting down"),
    ];
    for (s, code, reason, message) in cases {
        assert_eq!(
            (s.code(), s.reason(), s.message()),
            (code, reason, message),
            "{s:?}"
        );
        assert_eq!(s.status, "Failure");
        assert_eq!(s.to_json()["kind"], "Status");
        assert_eq!(s.to_json()["apiVersion"], "v1");
        assert_eq!(s.to_json()["metadata"], serde_json::json!({}));
    }
}

#[test]
fn bad_request_has_no_details_and_no_retry_after() {
    let s = Status::bad_request("x");
    assert_eq!(
        json(&s),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"x","reason":"BadRequest","code":400}"#
    );
    assert_eq!(s.retry_after(), None);
}

#[test]
fn too_many_requests_carries_retry_after_seconds() {
    let s = Status::too_many_requests("slow down", 7);
    assert_eq!(s.retry_after(), Some(7));
    assert_eq!(
        s.to_json()["details"],
        serde_json::json!({"retryAfterSeconds": 7})
    );
    // 0 means "no hint": omitted like Go's omitempty, details stays `{}`.
    let s = Status::too_many_requests("slow down", 0);
    assert_eq!(s.retry_after(), None);
    assert_eq!(s.to_json()["details"], serde_json::json!({}));
}

#[test]
fn too_large_resource_version_is_504_timeout_with_cause_and_retry_after_1() {
    let s = Status::too_large_resource_version(120, 100);
    assert_eq!(
        json(&s),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 120, current: 100","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#
    );
    assert_eq!(s.retry_after(), Some(1));
}

#[test]
fn too_old_resource_version_is_410_expired() {
    let s = Status::too_old_resource_version(5, 42);
    assert_eq!(
        (s.code(), s.reason(), s.message()),
        (410, "Expired", "too old resource version: 5 (42)")
    );
    assert_eq!(s.details, None);
}

#[test]
fn invalid_with_one_cause_prints_field_and_message() {
    let cause = StatusCause::new(
        "FieldValueRequired",
        "Required value: name or generateName is required",
        "metadata.name",
    );
    let s = Status::invalid("", "Pod", "", vec![cause.clone()]);
    assert_eq!(s.code(), 422);
    assert_eq!(s.reason(), "Invalid");
    assert_eq!(
        s.message(),
        r#"Pod "" is invalid: metadata.name: Required value: name or generateName is required"#
    );
    assert_eq!(
        s.details.as_ref().map(|d| d.causes.clone()),
        Some(vec![cause])
    );
    assert_eq!(
        s.to_json()["details"],
        serde_json::json!({
            "kind": "Pod",
            "causes": [{"reason": "FieldValueRequired", "message": "Required value: name or generateName is required", "field": "metadata.name"}]
        })
    );
}

#[test]
fn invalid_with_several_causes_brackets_and_dedupes_like_aggregate() {
    let a = StatusCause::new(
        "FieldValueInvalid",
        "Invalid value: \"A\": bad",
        "metadata.labels",
    );
    let b = StatusCause::new(
        "FieldValueInvalid",
        "Invalid value: \"B\": bad",
        "metadata.labels",
    );
    let s = Status::invalid(
        "apps",
        "Deployment",
        "web",
        vec![a.clone(), b.clone(), a.clone()],
    );
    assert_eq!(
        s.message(),
        r#"Deployment.apps "web" is invalid: [metadata.labels: Invalid value: "A": bad, metadata.labels: Invalid value: "B": bad]"#
    );
    // The causes themselves are kept as given.
    assert_eq!(s.details.as_ref().map(|d| d.causes.len()), Some(3));
    let dup = Status::invalid("", "Pod", "p", vec![a.clone(), a]);
    assert_eq!(
        dup.message(),
        r#"Pod "p" is invalid: metadata.labels: Invalid value: "A": bad"#
    );
}

#[test]
fn forbidden_words_namespaced_cluster_and_collection_requests_like_the_authorizer() {
    let s = Status::forbidden("bob", "get", "", "pods", "p", "default");
    assert_eq!(s.code(), 403);
    assert_eq!(s.reason(), "Forbidden");
    assert_eq!(
        s.message(),
        r#"pods "p" is forbidden: User "bob" cannot get resource "pods" in API group "" in the namespace "default""#
    );
    let s = Status::forbidden("bob", "list", "apps", "deployments", "", "");
    assert_eq!(
        s.message(),
        r#"deployments.apps is forbidden: User "bob" cannot list resource "deployments" in API group "apps" at the cluster scope"#
    );
    let s = Status::forbidden("bob", "get", "", "pods/log", "p", "ns");
    assert_eq!(
        s.message(),
        r#"pods "p" is forbidden: User "bob" cannot get resource "pods/log" in API group "" in the namespace "ns""#
    );
    assert_eq!(s.details.as_ref().map(|d| d.kind.as_str()), Some("pods"));
}

#[test]
fn internal_error_keeps_the_cause_message() {
    let s = Status::internal("boom");
    assert_eq!(
        s.to_json()["details"],
        serde_json::json!({"causes": [{"message": "boom"}]})
    );
}

#[test]
fn status_round_trips_through_upstream_json() {
    let upstream = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list","reason":"Invalid","details":{"group":"meta.k8s.io","kind":"ListOptions","causes":[{"reason":"FieldValueForbidden","message":"Forbidden: sendInitialEvents is forbidden for list","field":"sendInitialEvents"}]},"code":422}"#;
    let s: Status = serde_json::from_str(upstream).expect("parses");
    assert_eq!(s.code(), 422);
    assert_eq!(json(&s), upstream);
}

#[test]
fn status_is_a_std_error_displaying_its_message() {
    let e: Box<dyn std::error::Error> = Box::new(Status::gone("bye"));
    assert_eq!(e.to_string(), "bye");
}

#[test]
fn success_status_has_code_200() {
    let s = Status::success();
    assert_eq!(
        json(&s),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":200}"#
    );
}
