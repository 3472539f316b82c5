use proptest::prelude::*;
use rkube_api::continue_token::ContinueToken;
use rkube_api::list_options::{
    parse_query, parse_resource_version, ListOptions, ResourceVersionMatch,
};
use rkube_api::status::StatusCause;

fn ok(q: &str) -> ListOptions {
    ListOptions::from_query(q).unwrap_or_else(|e| panic!("{q:?}: {}", e.message()))
}

fn err(q: &str) -> rkube_api::Status {
    ListOptions::from_query(q).expect_err(q)
}

fn token(rv: i64) -> String {
    ContinueToken::for_next_key(rv, "default/a").encode()
}

#[test]
fn empty_query_is_a_plain_consistent_list() {
    let o = ok("");
    assert_eq!(o, ListOptions::default());
    assert!(o.is_consistent_read());
    assert!(!o.has_selectors());
    assert_eq!(o.resource_version_number(), 0);
}

#[test]
fn from_query_decodes_every_parameter() {
    let o = ok("labelSelector=app%3Dweb%2Ctier+in+(fe%2Cbe)&fieldSelector=metadata.name%3Dx&resourceVersion=10\
                &resourceVersionMatch=NotOlderThan&limit=500&timeoutSeconds=30&pretty=true&timeout=32s");
    assert_eq!(o.label_selector.to_string(), "app=web,tier in (be,fe)");
    assert_eq!(o.field_selector.exact_match("metadata.name"), Some("x"));
    assert_eq!(o.resource_version.as_deref(), Some("10"));
    assert_eq!(o.resource_version_number(), 10);
    assert_eq!(
        o.resource_version_match,
        Some(ResourceVersionMatch::NotOlderThan)
    );
    assert_eq!(o.limit, 500);
    assert_eq!(o.timeout_seconds, Some(30));
    assert!(o.has_selectors());

    let o = ok("watch=true&allowWatchBookmarks=true&resourceVersion=7&timeoutSeconds=0");
    assert!(o.watch && o.allow_watch_bookmarks);
    assert_eq!(o.timeout_seconds, Some(0));

    let t = token(42);
    let o = ok(&format!("limit=2&continue={t}"));
    assert_eq!(o.continue_token.as_deref(), Some(t.as_str()));
    assert_eq!(
        o.decoded_continue(),
        Some(ContinueToken {
            resource_version: 42,
            start_key: "default/a\u{0}".into()
        })
    );
}

/// Upstream `Convert_Slice_string_To_bool`: only `0` and `false` (any case)
/// are false; any other value, even empty, is true.
#[test]
fn booleans_follow_upstream_conversion() {
    for (v, want) in [
        ("true", true),
        ("1", true),
        ("True", true),
        ("yes", true),
        ("", true),
        ("0", false),
        ("false", false),
        ("FALSE", false),
    ] {
        assert_eq!(ok(&format!("watch={v}")).watch, want, "watch={v:?}");
        assert_eq!(
            ok(&format!("allowWatchBookmarks={v}")).allow_watch_bookmarks,
            want
        );
    }
    assert!(ok("watch").watch, "a bare parameter is true");
    assert!(!ok("").watch);
}

#[test]
fn repeated_parameter_uses_first_value_and_empty_strings_mean_unset() {
    assert_eq!(ok("limit=5&limit=abc").limit, 5);
    let o = ok("resourceVersion=&continue=&resourceVersionMatch=");
    assert_eq!(
        (
            o.resource_version,
            o.continue_token,
            o.resource_version_match
        ),
        (None, None, None)
    );
}

/// Decoding errors are 400 BadRequest with upstream's text.
#[test]
fn undecodable_values_are_400_bad_request() {
    let cases = [
        (
            "limit=abc",
            r#"strconv.ParseInt: parsing "abc": invalid syntax"#,
        ),
        ("limit=", r#"strconv.ParseInt: parsing "": invalid syntax"#),
        (
            "limit=99999999999999999999",
            r#"strconv.ParseInt: parsing "99999999999999999999": value out of range"#,
        ),
        (
            "timeoutSeconds=1.5",
            r#"strconv.ParseInt: parsing "1.5": invalid syntax"#,
        ),
        (
            "timeoutSeconds=-1",
            "timeoutSeconds: must be a non-negative integer, got -1",
        ),
        (
            "labelSelector=a%20b",
            "unable to parse requirement: found 'b', expected: '=', '!=', '==', 'in', notin'",
        ),
        (
            "fieldSelector=a",
            "invalid selector: 'a'; can't understand 'a'",
        ),
    ];
    for (q, msg) in cases {
        let e = err(q);
        assert_eq!(
            (e.code(), e.reason(), e.message()),
            (400, "BadRequest", msg),
            "{q}"
        );
    }
}

fn forbidden(field: &str, msg: &str) -> StatusCause {
    StatusCause::new("FieldValueForbidden", format!("Forbidden: {msg}"), field)
}

/// Upstream `ValidateListOptions`: 422 Invalid on `ListOptions.meta.k8s.io`,
/// one cause per rule broken.
#[test]
fn validate_list_options_rules_are_422_invalid() {
    let t = token(5);
    let cases: Vec<(String, Vec<StatusCause>)> = vec![
        (
            "resourceVersionMatch=NotOlderThan".into(),
            vec![forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )],
        ),
        (
            format!("resourceVersionMatch=Exact&resourceVersion=5&continue={t}"),
            vec![forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            )],
        ),
        (
            "resourceVersionMatch=Latest&resourceVersion=5".into(),
            vec![StatusCause::new(
                "FieldValueNotSupported",
                r#"Unsupported value: "Latest": supported values: "Exact", "NotOlderThan", """#,
                "resourceVersionMatch",
            )],
        ),
        (
            "resourceVersionMatch=Exact&resourceVersion=0".into(),
            vec![forbidden(
                "resourceVersionMatch",
                r#"resourceVersionMatch "exact" is forbidden for resourceVersion "0""#,
            )],
        ),
        (
            "sendInitialEvents=true".into(),
            vec![forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            )],
        ),
        (
            "watch=1&sendInitialEvents=true&allowWatchBookmarks=1".into(),
            vec![forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )],
        ),
        (
            "watch=1&resourceVersionMatch=NotOlderThan".into(),
            vec![forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )],
        ),
        (
            "watch=1&sendInitialEvents=true&resourceVersionMatch=Exact".into(),
            vec![
                forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ),
                StatusCause::new(
                    "FieldValueNotSupported",
                    r#"Unsupported value: "Exact": supported values: "NotOlderThan""#,
                    "resourceVersionMatch",
                ),
            ],
        ),
        (
            format!(
                "watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&continue={t}"
            ),
            vec![forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            )],
        ),
    ];
    for (q, causes) in cases {
        let e = err(&q);
        assert_eq!((e.code(), e.reason()), (422, "Invalid"), "{q}");
        let d = e.details.clone().expect("details");
        assert_eq!(
            (d.group.as_str(), d.kind.as_str(), d.name.as_str()),
            ("meta.k8s.io", "ListOptions", "")
        );
        assert_eq!(d.causes, causes, "{q}");
    }
    assert_eq!(
        err("sendInitialEvents=false").message(),
        r#"ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"#
    );
}

#[test]
fn valid_watch_list_and_exact_requests_are_accepted() {
    let o = ok(
        "watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan",
    );
    assert_eq!(o.send_initial_events, Some(true));
    assert_eq!(
        o.resource_version_match,
        Some(ResourceVersionMatch::NotOlderThan)
    );
    // Upstream does not require allowWatchBookmarks here (it only gates the
    // initial-events-end bookmark).
    ok("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan");
    let o = ok("resourceVersion=12&resourceVersionMatch=Exact&limit=10");
    assert_eq!(o.resource_version_match, Some(ResourceVersionMatch::Exact));
}

/// Storage-level checks (`storage.ValidateListOptions`): 400 BadRequest.
#[test]
fn storage_rules_bad_rv_bad_token_and_rv_with_continue_are_400() {
    let t = token(5);
    let cases = [
        ("resourceVersion=abc".to_string(), r#"invalid resource version: resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax"#.to_string()),
        ("watch=1&resourceVersion=-3".to_string(), r#"invalid resource version: resourceVersion: Invalid value: "-3": strconv.ParseUint: parsing "-3": invalid syntax"#.to_string()),
        (format!("continue={t}&resourceVersion=5"), "specifying resource version is not allowed when using continue".to_string()),
    ];
    for (q, msg) in cases {
        let e = err(&q);
        assert_eq!(
            (e.code(), e.reason(), e.message()),
            (400, "BadRequest", msg.as_str()),
            "{q}"
        );
    }
    let e = err("continue=garbage!");
    assert_eq!(e.code(), 400);
    assert!(
        e.message()
            .starts_with("invalid continue token: continue key is not valid"),
        "{}",
        e.message()
    );
    // resourceVersion=0 alongside continue is allowed, as upstream.
    ok(&format!("continue={t}&resourceVersion=0"));
}

#[test]
fn watch_list_defaults_apply_only_to_legacy_watches() {
    let mut o = ok("watch=1");
    o.apply_watch_list_defaults();
    assert_eq!(
        (o.send_initial_events, o.resource_version_match),
        (Some(true), Some(ResourceVersionMatch::NotOlderThan))
    );
    let mut o = ok("watch=1&resourceVersion=0");
    o.apply_watch_list_defaults();
    assert_eq!(o.send_initial_events, Some(true));
    let mut o = ok("watch=1&resourceVersion=9");
    o.apply_watch_list_defaults();
    assert_eq!(
        (o.send_initial_events, o.resource_version_match),
        (None, None)
    );
    let mut o = ok("");
    o.apply_watch_list_defaults();
    assert_eq!(o.send_initial_events, None);
}

#[test]
fn parse_resource_version_accepts_unsigned_decimal_only() {
    for (s, want) in [
        ("", 0),
        ("0", 0),
        ("00", 0),
        ("123", 123),
        ("9223372036854775807", i64::MAX),
    ] {
        assert_eq!(
            parse_resource_version(s).map_err(|e| e.message().to_string()),
            Ok(want),
            "{s:?}"
        );
    }
    for s in ["abc", "-1", "+1", " 1", "1.0", "9223372036854775808"] {
        let e = parse_resource_version(s).expect_err(s);
        assert_eq!((e.code(), e.reason()), (400, "BadRequest"));
        assert!(
            e.message()
                .starts_with("invalid resource version: resourceVersion: Invalid value: "),
            "{}",
            e.message()
        );
    }
}

#[test]
fn parse_query_decodes_like_go_url_query() {
    assert_eq!(
        parse_query("a=1&b=x+y%2Fz&c&d=%zz&e;f=1&=v"),
        vec![
            ("a".into(), "1".into()),
            ("b".into(), "x y/z".into()),
            ("c".into(), "".into()),
            ("".into(), "v".into())
        ]
    );
}

proptest! {
    #[test]
    fn from_query_never_panics(q in ".{0,60}") {
        let _ = ListOptions::from_query(&q);
    }
}
