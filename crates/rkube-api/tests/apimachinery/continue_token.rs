use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use proptest::prelude::*;
use rkube_api::continue_token::ContinueToken;

fn raw(json: &str) -> String {
    URL_SAFE_NO_PAD.encode(json)
}

/// The token is base64 RawURL of the JSON upstream's `EncodeContinue` writes,
/// byte for byte (field order, `\u0000`, Go's HTML escaping).
#[test]
fn encode_is_byte_identical_to_upstream() {
    let t = ContinueToken::for_next_key(5, "default/pod-1");
    assert_eq!(t.start_key, "default/pod-1\u{0}");
    assert_eq!(
        t.encode(),
        raw(r#"{"v":"meta.k8s.io/v1","rv":5,"start":"default/pod-1\u0000"}"#)
    );
    let t = ContinueToken {
        resource_version: -1,
        start_key: "a<b>&c".into(),
    };
    assert_eq!(
        t.encode(),
        raw(r#"{"v":"meta.k8s.io/v1","rv":-1,"start":"a\u003cb\u003e\u0026c"}"#)
    );
    assert!(!t.encode().contains('='), "no padding");
}

#[test]
fn decode_accepts_upstream_tokens_including_negative_rv() {
    let t = ContinueToken::decode(&raw(
        r#"{"v":"meta.k8s.io/v1","rv":10245,"start":"ns/name\u0000"}"#,
    ))
    .unwrap();
    assert_eq!(
        t,
        ContinueToken {
            resource_version: 10245,
            start_key: "ns/name\u{0}".into()
        }
    );
    assert!(!t.is_consistent());
    let t = ContinueToken::decode(&raw(r#"{"v":"meta.k8s.io/v1","rv":-1,"start":"x"}"#)).unwrap();
    assert!(t.is_consistent());
    // A leading "/" is accepted and dropped, as upstream does.
    let t =
        ContinueToken::decode(&raw(r#"{"v":"meta.k8s.io/v1","rv":3,"start":"/ns/a"}"#)).unwrap();
    assert_eq!(t.start_key, "ns/a");
}

/// Every invalid token is a 400 BadRequest `invalid continue token: ...`.
#[test]
fn decode_rejects_invalid_tokens_with_400() {
    let cases: Vec<(String, &str)> = vec![
        ("!!!".into(), "continue key is not valid: "),
        (URL_SAFE.encode(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"a"}"#), "continue key is not valid: "),
        (raw("not json"), "continue key is not valid: "),
        (
            raw(r#"{"v":"meta.k8s.io/v2","rv":1,"start":"a"}"#),
            r#"continue key is not valid: server does not recognize this encoded version "meta.k8s.io/v2""#,
        ),
        (
            raw(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#),
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ),
        (
            raw(r#"{"v":"meta.k8s.io/v1","rv":1}"#),
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)",
        ),
        (raw(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"../secrets/x"}"#), "continue key is not valid: ../secrets/x"),
        (raw(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"ns/../../x"}"#), "continue key is not valid: ns/../../x"),
        (raw(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"ns//x"}"#), "continue key is not valid: ns//x"),
        (raw(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"ns/./x"}"#), "continue key is not valid: ns/./x"),
        (raw(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"ns/"}"#), "continue key is not valid: ns/"),
    ];
    for (token, want_prefix) in cases {
        let err = ContinueToken::decode(&token).expect_err(&token);
        assert_eq!((err.code(), err.reason()), (400, "BadRequest"), "{token}");
        let msg = err.message();
        assert!(
            msg.starts_with(&format!("invalid continue token: {want_prefix}")),
            "token {token}: got {msg:?}, want prefix {want_prefix:?}"
        );
    }
}

#[test]
fn decode_never_panics_on_garbage() {
    for t in ["", "=", "eyJ", "\u{0}", "ééé", &"A".repeat(10_000)] {
        assert!(ContinueToken::decode(t).is_err(), "{t:?}");
    }
}

fn key() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec("[a-z0-9][a-z0-9.<>&-]{0,9}", 1..4),
        any::<bool>(),
    )
        .prop_map(|(segs, nul)| {
            let mut k = segs.join("/");
            if nul {
                k.push('\u{0}');
            }
            k
        })
}

proptest! {
    /// decode(encode(token)) == token for every valid token.
    #[test]
    fn encode_then_decode_round_trips(rv in any::<i64>().prop_filter("rv 0 is invalid", |rv| *rv != 0), start_key in key()) {
        let t = ContinueToken { resource_version: rv, start_key };
        prop_assert_eq!(ContinueToken::decode(&t.encode()), Ok(t));
    }

    #[test]
    fn decode_never_panics(s in "[A-Za-z0-9_=+/-]{0,80}") {
        let _ = ContinueToken::decode(&s);
    }
}
