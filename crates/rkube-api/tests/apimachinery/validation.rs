use rkube_api::status::{Status, StatusCause};
use rkube_api::validation::*;

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const QNAME_BODY: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn dns1123_subdomain_rules_and_messages() {
    for ok in ["a", "example.com", "a-b.c-d", "0", &"a".repeat(253)] {
        assert_eq!(is_dns1123_subdomain(ok), Vec::<String>::new(), "{ok}");
    }
    for bad in ["", "A", "-a", "a-", "a..b", ".a", "a_b", "a/b", "é"] {
        assert_eq!(is_dns1123_subdomain(bad), s(&[SUBDOMAIN_MSG]), "{bad:?}");
    }
    assert_eq!(
        is_dns1123_subdomain(&"a".repeat(254)),
        s(&["must be no more than 253 characters"])
    );
}

#[test]
fn dns1123_label_rules_and_messages() {
    for ok in ["a", "my-name", "123-abc", &"a".repeat(63)] {
        assert!(is_dns1123_label(ok).is_empty(), "{ok}");
    }
    assert_eq!(is_dns1123_label("a.b"), s(&["must not contain dots"]));
    assert_eq!(is_dns1123_label("My"), s(&[LABEL_MSG]));
    assert_eq!(is_dns1123_label(""), s(&[LABEL_MSG]));
    assert_eq!(
        is_dns1123_label(&"a".repeat(64)),
        s(&["must be no more than 63 characters"])
    );
}

#[test]
fn qualified_name_rules_and_messages() {
    for ok in [
        "app",
        "MyName",
        "my.name",
        "123-abc",
        "a_b",
        "example.com/app",
        "kubernetes.io/service-name",
    ] {
        assert!(is_qualified_name(ok).is_empty(), "{ok}");
    }
    assert_eq!(
        is_qualified_name("-a"),
        vec![format!("name part {QNAME_BODY}")]
    );
    assert_eq!(
        is_qualified_name("/a"),
        s(&["prefix part must be non-empty"])
    );
    assert_eq!(
        is_qualified_name("Example.com/a"),
        vec![format!("prefix part {SUBDOMAIN_MSG}")]
    );
    assert_eq!(
        is_qualified_name("a/"),
        vec![
            "name part must be non-empty".to_string(),
            format!("name part {QNAME_BODY}")
        ]
    );
    assert_eq!(
        is_qualified_name(&"a".repeat(64)),
        s(&["name part must be no more than 63 characters"])
    );
    assert_eq!(
        is_qualified_name("a/b/c"),
        vec![format!("a qualified name {QNAME_BODY} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")]
    );
}

#[test]
fn label_value_rules_and_messages() {
    for ok in ["", "v", "My_value-1.0", &"a".repeat(63)] {
        assert!(is_valid_label_value(ok).is_empty(), "{ok}");
    }
    assert_eq!(is_valid_label_value("-v"), s(&[VALUE_MSG]));
    assert_eq!(is_valid_label_value("a b"), s(&[VALUE_MSG]));
    assert_eq!(
        is_valid_label_value(&"a".repeat(64)),
        s(&["must be no more than 63 characters"])
    );
}

#[test]
fn path_segment_names_reject_dot_dirs_slash_and_percent() {
    assert_eq!(is_valid_path_segment_name(".."), s(&["may not be '..'"]));
    assert_eq!(
        is_valid_path_segment_name("a/b%c"),
        s(&["may not contain '/'", "may not contain '%'"])
    );
    assert!(is_valid_path_segment_name("ok").is_empty());
}

/// The famous kubectl error for `kubectl create cm Foo`.
#[test]
fn invalid_object_name_gives_upstream_422_message() {
    let causes = validate_object_meta_name("Foo", false);
    assert_eq!(
        causes,
        vec![StatusCause::new(
            "FieldValueInvalid",
            format!("Invalid value: \"Foo\": {SUBDOMAIN_MSG}"),
            "metadata.name"
        )]
    );
    let st = Status::invalid("", "ConfigMap", "Foo", causes);
    assert_eq!(
        st.message(),
        format!(
            "ConfigMap \"Foo\" is invalid: metadata.name: Invalid value: \"Foo\": {SUBDOMAIN_MSG}"
        )
    );
}

#[test]
fn object_meta_name_required_and_dns_label_variants() {
    assert_eq!(
        validate_object_meta_name("", false),
        vec![StatusCause::new(
            "FieldValueRequired",
            "Required value: name or generateName is required",
            "metadata.name"
        )]
    );
    assert_eq!(
        validate_object_meta_name("a.b", true),
        vec![StatusCause::new(
            "FieldValueInvalid",
            "Invalid value: \"a.b\": must not contain dots",
            "metadata.name"
        )]
    );
    assert!(validate_object_meta_name("a.b", false).is_empty());
    assert!(validate_object_meta_name("web-1", true).is_empty());
}

#[test]
fn labels_validate_keys_values_and_types() {
    let labels = serde_json::json!({"ok": "fine", "-bad": "x", "k": "-v", "n": 5});
    let causes = validate_labels(labels.as_object().unwrap());
    assert_eq!(
        causes,
        vec![
            StatusCause::new(
                "FieldValueInvalid",
                format!("Invalid value: \"-bad\": name part {QNAME_BODY}"),
                "metadata.labels"
            ),
            StatusCause::new(
                "FieldValueInvalid",
                format!("Invalid value: \"-v\": {VALUE_MSG}"),
                "metadata.labels"
            ),
            StatusCause::new(
                "FieldValueInvalid",
                "Invalid value: 5: must be a string",
                "metadata.labels"
            ),
        ]
    );
    assert!(
        validate_labels(
            serde_json::json!({"app": "web", "": ""})
                .as_object()
                .unwrap()
        )
        .len()
            == 2
    );
}

#[test]
fn annotations_total_size_limit_is_256_kib() {
    let at_limit = serde_json::json!({"k": "v".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B - 1)});
    assert!(validate_annotations(at_limit.as_object().unwrap()).is_empty());
    let over = serde_json::json!({"k": "v".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B)});
    assert_eq!(
        validate_annotations(over.as_object().unwrap()),
        vec![StatusCause::new(
            "FieldValueTooLong",
            "Too long: may not be more than 262144 bytes",
            "metadata.annotations"
        )]
    );
}

#[test]
fn annotation_keys_are_qualified_names_case_insensitively() {
    let a = serde_json::json!({"Example.COM/Note": "x", "kubectl.kubernetes.io/last-applied-configuration": "{}"});
    assert!(validate_annotations(a.as_object().unwrap()).is_empty());
    let bad = serde_json::json!({"a/b/c": "x"});
    assert_eq!(validate_annotations(bad.as_object().unwrap()).len(), 1);
}

#[test]
fn finalizers_are_qualified_names_and_orphan_excludes_foreground() {
    use serde_json::json;
    let ok = [json!("kubernetes"), json!("example.com/cleanup"), json!("orphan")];
    assert!(validate_finalizers(&ok).is_empty());
    let causes = validate_finalizers(&[json!("a/b/c")]);
    assert_eq!(
        causes,
        vec![StatusCause::new(
            "FieldValueInvalid",
            String::from("Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
            "metadata.finalizers",
        )]
    );
    let both = validate_finalizers(&[json!("orphan"), json!("foregroundDeletion")]);
    assert_eq!(
        both,
        vec![StatusCause::new(
            "FieldValueInvalid",
            "Invalid value: []string{\"orphan\", \"foregroundDeletion\"}: finalizer orphan and foregroundDeletion cannot be both set",
            "metadata.finalizers",
        )]
    );
}

#[test]
fn owner_references_need_their_fields_and_one_controller_at_most() {
    use serde_json::json;
    let owner = |kind: &str, name: &str, controller: bool| {
        json!({"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u-1", "controller": controller})
    };
    assert!(validate_owner_references(&[owner("ReplicaSet", "a", true), owner("Deployment", "b", false)]).is_empty());
    let two = validate_owner_references(&[owner("ReplicaSet", "a", true), owner("Deployment", "b", true)]);
    assert_eq!(two.len(), 1);
    assert_eq!(two[0].field, "metadata.ownerReferences");
    assert_eq!(two[0].reason, "FieldValueInvalid");
    assert!(
        two[0].message.starts_with("Invalid value: []v1.OwnerReference{v1.OwnerReference{APIVersion:\"apps/v1\", Kind:\"ReplicaSet\", Name:\"a\", UID:\"u-1\", Controller:(*bool)(0x")
            && two[0].message.ends_with("}}: Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and Deployment/b"),
        "{}",
        two[0].message
    );
    let empty = validate_owner_references(&[json!({"apiVersion": "apps/", "kind": "", "name": "", "uid": ""})]);
    let got: Vec<(&str, &str)> = empty.iter().map(|c| (c.field.as_str(), c.message.as_str())).collect();
    assert_eq!(
        got,
        vec![
            ("metadata.ownerReferences.apiVersion", "Invalid value: \"apps/\": version must not be empty"),
            ("metadata.ownerReferences.kind", "Invalid value: \"\": must not be empty"),
            ("metadata.ownerReferences.name", "Invalid value: \"\": must not be empty"),
            ("metadata.ownerReferences.uid", "Invalid value: \"\": must not be empty"),
        ]
    );
    let event = validate_owner_references(&[json!({"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "u"})]);
    assert!(event[0].message.ends_with(": /v1, Kind=Event is disallowed from being an owner"), "{}", event[0].message);
}
