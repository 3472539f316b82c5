//! Property-based fuzzing of `continue` tokens (upstream
//! `k8s.io/apiserver/pkg/storage/continue.go`): a client can send any string
//! back as `?continue=`.
//!
//! Properties:
//! - `ContinueToken::decode` never panics on any string, on base64 of any
//!   bytes, nor on base64 of JSON shaped like a token with hostile fields;
//! - every rejection is 400 `BadRequest` with `invalid continue token: ...`,
//!   also through `ListOptions::from_query`;
//! - a decoded token never names a start key that escapes the resource
//!   prefix (no `..`/`.` segment, no `//`, no trailing `/`; `"/"` is the
//!   prefix itself, accepted like upstream);
//! - `decode(encode(t)) == t` for every valid token (`rv != 0`, clean key).
//!
//! Case count: `PROPTEST_CASES` (default small, for CI). Run long with
//! `PROPTEST_CASES=200000 cargo test -p rkube-api --release --test integration fuzz_continue_token::`.

use crate::fuzz_support;

use base64::Engine;
use fuzz_support::cases;
use proptest::prelude::*;
use rkube_api::{ContinueToken, ListOptions, Status};

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

/// A path segment that is neither empty, `.` nor `..`.
fn segment() -> impl Strategy<Value = String> {
    "[^/]{1,12}".prop_filter("not a dot segment", |s| s != "." && s != "..")
}

fn clean_key() -> impl Strategy<Value = String> {
    (prop::collection::vec(segment(), 1..5), any::<bool>()).prop_map(|(segs, nul)| {
        let mut k = segs.join("/");
        if nul {
            k.push('\u{0}');
        }
        k
    })
}

/// Keys built from the pieces that make a path unclean.
fn hostile_key() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("/".to_string()),
        Just("//".to_string()),
        Just(".".to_string()),
        Just("..".to_string()),
        Just("../".to_string()),
        Just("\u{0}".to_string()),
        "[a-z]{1,4}",
    ];
    prop::collection::vec(piece, 0..10).prop_map(|v| v.concat())
}

fn check_rejection(status: &Status) -> Result<(), TestCaseError> {
    prop_assert_eq!(status.code, 400);
    prop_assert_eq!(status.reason.as_str(), "BadRequest");
    prop_assert!(status.message.starts_with("invalid continue token: "), "{}", status.message);
    Ok(())
}

fn check_token(token: &str) -> Result<(), TestCaseError> {
    match ContinueToken::decode(token) {
        Ok(t) => {
            prop_assert!(t.resource_version != 0);
            // `start: "/"` is the resource prefix itself (the first page), as upstream.
            prop_assert!(!t.start_key.starts_with('/'), "{:?}", t.start_key);
            prop_assert!(!t.start_key.ends_with('/'), "{:?}", t.start_key);
            if !t.start_key.is_empty() {
                for seg in t.start_key.split('/') {
                    prop_assert!(!seg.is_empty() && seg != "." && seg != "..", "unclean key {:?}", t.start_key);
                }
            }
            // Re-encoding gives a token that decodes to the same thing (the
            // prefix itself has no token of its own: its start key is empty).
            if !t.start_key.is_empty() {
                prop_assert_eq!(ContinueToken::decode(&t.encode()), Ok(t.clone()));
            }
            let opts = ListOptions::from_query(&format!("continue={token}&limit=5"));
            prop_assert!(opts.is_ok(), "query rejected a valid token: {:?}", opts);
        }
        Err(status) => {
            check_rejection(&status)?;
            if !token.is_empty() && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                let via_query = ListOptions::from_query(&format!("continue={token}"))
                    .err()
                    .ok_or_else(|| TestCaseError::fail("query accepted an invalid token"))?;
                prop_assert_eq!(via_query, status);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), ..ProptestConfig::default() })]

    /// Any string as a token.
    #[test]
    fn continue_token_decode_never_panics_on_any_string(s in "\\PC{0,80}") {
        check_token(&s)?;
    }

    /// base64 RawURL of any bytes.
    #[test]
    fn continue_token_decode_never_panics_on_any_payload(data in prop::collection::vec(any::<u8>(), 0..120)) {
        check_token(&b64(&data))?;
    }

    /// Token-shaped JSON with hostile versions, revisions and start keys.
    #[test]
    fn continue_token_rejects_keys_outside_the_prefix(
        v in prop_oneof![Just("meta.k8s.io/v1".to_string()), "\\PC{0,16}"],
        rv in prop_oneof![Just(0i64), any::<i64>()],
        start in prop_oneof![hostile_key(), "\\PC{0,24}"],
        extra in prop::option::of("[a-z]{1,6}"),
    ) {
        let mut obj = serde_json::json!({"v": v, "rv": rv, "start": start});
        if let Some(k) = extra {
            obj[k] = serde_json::json!([1, {"x": null}]);
        }
        check_token(&b64(obj.to_string().as_bytes()))?;
    }

    /// Wrong JSON types for every field.
    #[test]
    fn continue_token_wrong_field_types_are_bad_requests(
        field in prop_oneof![Just("v"), Just("rv"), Just("start")],
        value in prop_oneof![
            Just(serde_json::json!(null)),
            Just(serde_json::json!(1.5)),
            Just(serde_json::json!("12")),
            Just(serde_json::json!([])),
            Just(serde_json::json!({})),
            Just(serde_json::json!(u64::MAX)),
            Just(serde_json::json!(true)),
        ],
    ) {
        let mut obj = serde_json::json!({"v": "meta.k8s.io/v1", "rv": 7, "start": "default/a\u{0}"});
        obj[field] = value;
        check_token(&b64(obj.to_string().as_bytes()))?;
    }

    /// Every valid token round-trips.
    #[test]
    fn continue_token_round_trips(rv in any::<i64>().prop_filter("rv 0 is invalid", |r| *r != 0), key in clean_key()) {
        let t = ContinueToken { resource_version: rv, start_key: key };
        prop_assert_eq!(ContinueToken::decode(&t.encode()), Ok(t));
    }
}
