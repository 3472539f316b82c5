//! Property-based fuzzing of request body decoding: JSON, YAML and
//! Kubernetes protobuf bodies into the generic object the create/update
//! handlers work on (`media::decode_object`), and whole POSTs through the
//! real handler (router in process, embedded store).
//!
//! Properties:
//! - decoding never panics and never overflows the stack (any bytes, YAML
//!   built from anchors/aliases/tags/flow syntax, nesting 10,000 deep);
//! - an error is 400 `BadRequest`, or 415 `UnsupportedMediaType` for a
//!   media type that is not a body type;
//! - what decodes is an object storage can decode again, and JSON objects
//!   (and YAML renderings of them) decode to themselves;
//! - through the handler: every answer is a Status with a client error code
//!   (or 201), and a refused POST writes nothing (store revision unchanged).
//!
//! Case count: `PROPTEST_CASES` (default small, for CI). Run long with
//! `PROPTEST_CASES=20000 cargo test -p rkube-apiserver --test integration fuzz_body::` (the
//! property through the handler runs a tenth of that).

use crate::fuzz_support;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request};
use fuzz_support::{cases, depth, handler_cases, server};
use http_body_util::BodyExt;
use proptest::prelude::*;
use rkube_apiserver::media;
use serde_json::{json, Map, Value};
use tower::ServiceExt;

const BODY_TYPES: [&str; 6] = [
    "application/json",
    "application/yaml",
    "application/x-yaml",
    "text/yaml",
    "application/vnd.kubernetes.protobuf",
    "text/plain",
];

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,10}".prop_map(Value::from),
        prop::sample::select(vec!["yes", "no", "on", "off", "~", "null", "1e3", "0x1F", ".inf", "-", "'", "\"", ": ", "#"])
            .prop_map(Value::from),
    ]
}

fn arb_value() -> impl Strategy<Value = Value> {
    arb_scalar().prop_recursive(6, 96, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(("\\PC{0,8}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn arb_object() -> impl Strategy<Value = Value> {
    prop::collection::vec(("\\PC{0,8}", arb_value()), 0..6)
        .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>()))
}

/// YAML made of its hostile pieces: anchors, aliases, tags, flow syntax,
/// merge keys, documents, odd indentation.
fn arb_yaml() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "apiVersion: v1\n", "kind: ConfigMap\n", "metadata:\n", "  name: x\n", "data:\n", "  a: b\n", "- ",
            "  ", ": ", "[", "]", "{", "}", ",", "&a ", "*a", "&b [*a,*a,*a,*a]\n", "<<: *a\n", "!!str ", "!!binary ",
            "!!float ", "!custom ", "---\n", "...\n", "? ", "\"", "'", "\t", "\n", "1: 2\n", "~", "%YAML 1.2\n",
            "|\n", ">-\n", "# c\n", "\u{feff}", "\\x00", "0o17", ".nan", "2001-12-14t21:59:43.10-05:00",
        ]),
        0..32,
    )
    .prop_map(|parts| parts.concat())
}

/// Bytes behind the protobuf magic: a runtime.Unknown envelope with random content.
fn arb_protobuf() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..96).prop_map(|rest| {
        let mut b = b"k8s\0".to_vec();
        b.extend(rest);
        b
    })
}

fn check_decode(ct: &str, body: &[u8]) -> Result<Option<Value>, TestCaseError> {
    match media::decode_object(ct, body) {
        Ok(v) => {
            prop_assert!(v.is_object());
            prop_assert!(depth(&v) < 128, "decoded body nests {} levels", depth(&v));
            let bytes = serde_json::to_vec(&v).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(serde_json::from_slice::<Value>(&bytes).is_ok(), "stored form does not decode");
            Ok(Some(v))
        }
        Err(e) => {
            let st = &e.0;
            prop_assert!(!st.message.is_empty());
            if ct == "text/plain" {
                prop_assert_eq!(st.code, 415);
                prop_assert_eq!(st.reason.as_str(), "UnsupportedMediaType");
            } else if st.code == 415 {
                // A protobuf body of a kind rkube cannot decode asks for JSON.
                prop_assert_eq!(ct, "application/vnd.kubernetes.protobuf");
            } else {
                prop_assert_eq!(st.code, 400, "{:?}", st);
                prop_assert_eq!(st.reason.as_str(), "BadRequest");
            }
            Ok(None)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_body_any_bytes_any_type(ct in prop::sample::select(BODY_TYPES.to_vec()), body in prop::collection::vec(any::<u8>(), 0..128)) {
        check_decode(ct, &body)?;
    }

    #[test]
    fn fuzz_body_json_values(v in arb_value()) {
        let got = check_decode("application/json", v.to_string().as_bytes())?;
        if v.is_object() {
            prop_assert_eq!(got, Some(v));
        } else {
            prop_assert!(got.is_none(), "a non-object body was accepted");
        }
    }

    #[test]
    fn fuzz_body_yaml_renderings_decode_to_the_same_object(v in arb_object()) {
        let yaml = serde_yaml::to_string(&v).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(check_decode("application/yaml", yaml.as_bytes())?, Some(v), "{}", yaml);
    }

    /// JSON sent as YAML (what `kubectl apply --server-side` does) takes the
    /// JSON decoder's fast path and decodes to the object a JSON body would.
    #[test]
    fn fuzz_body_json_sent_as_yaml_decodes_like_json(v in arb_object()) {
        let text = v.to_string();
        prop_assert_eq!(check_decode("application/yaml", text.as_bytes())?, check_decode("application/json", text.as_bytes())?, "{}", text);
    }

    #[test]
    fn fuzz_body_hostile_yaml(y in arb_yaml()) {
        check_decode("application/yaml", y.as_bytes())?;
    }

    #[test]
    fn fuzz_body_protobuf_envelopes(b in arb_protobuf()) {
        check_decode("application/vnd.kubernetes.protobuf", &b)?;
    }

    #[test]
    fn fuzz_body_content_type_headers_never_panic(h in "[ -~]{0,48}") {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&h) {
            headers.insert("content-type", v);
        }
        let ct = media::content_type(&headers);
        prop_assert!(!ct.is_empty() || h.trim().is_empty() || h.starts_with(';') || h.starts_with(','));
        let _ = media::parse_media_ranges(&h);
    }
}

/// Bodies nested 10,000 deep (JSON objects, arrays, YAML blocks and flows)
/// are 400 BadRequest, without a stack overflow.
#[test]
fn deeply_nested_bodies_are_bad_requests() {
    let n = 10_000;
    let bodies = [
        ("application/json", format!("{}{}", "{\"a\":".repeat(n), "}".repeat(n))),
        ("application/json", format!("{{\"a\":{}{}}}", "[".repeat(n), "]".repeat(n))),
        ("application/yaml", format!("a: {}{}", "[".repeat(n), "]".repeat(n))),
        ("application/yaml", format!("a: {}{}", "{b: ".repeat(n), "}".repeat(n))),
        ("application/yaml", (0..n).map(|i| format!("{}a:\n", " ".repeat(i))).collect::<String>()),
    ];
    for (ct, body) in bodies {
        let err = media::decode_object(ct, body.as_bytes()).expect_err("too deep");
        assert_eq!(err.code(), 400, "{ct}: {err:?}");
    }
}

/// A YAML "billion laughs" (aliases of aliases) is refused, not expanded.
#[test]
fn yaml_alias_amplification_is_a_bad_request() {
    let mut y = String::from("a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n");
    for i in 1..12 {
        let p = i - 1;
        y.push_str(&format!("a{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n"));
    }
    let started = std::time::Instant::now();
    let err = media::decode_object("application/yaml", y.as_bytes()).expect_err("amplification");
    assert_eq!(err.code(), 400, "{err:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

// ------------------------------------------------------------------ through the handler

fn arb_post_body() -> impl Strategy<Value = (String, Vec<u8>)> {
    let configmap = || {
        (arb_value(), arb_value(), "\\PC{0,12}").prop_map(|(data, meta, name)| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": meta}, "data": data})
        })
    };
    prop_oneof![
        3 => configmap().prop_map(|v| ("application/json".to_string(), v.to_string().into_bytes())),
        2 => configmap().prop_map(|v| ("application/yaml".to_string(), serde_yaml::to_string(&v).unwrap_or_default().into_bytes())),
        1 => arb_value().prop_map(|v| ("application/json".to_string(), v.to_string().into_bytes())),
        1 => arb_yaml().prop_map(|y| ("application/yaml".to_string(), y.into_bytes())),
        1 => (prop::sample::select(BODY_TYPES.to_vec()), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(ct, b)| (ct.to_string(), b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: handler_cases(96), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_body_posts_through_the_handler((ct, body) in arb_post_body()) {
        let srv = server();
        srv.rt.block_on(async {
            let before = srv.st.storage.current_revision().await.map_err(|e| TestCaseError::fail(e.to_string()))?;
            let req = Request::builder()
                .method("POST")
                .uri("/api/v1/namespaces/default/configmaps")
                .header("content-type", ct.as_str())
                .body(Body::from(body))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let resp = rkube_apiserver::router(srv.st.clone()).oneshot(req).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
            let code = resp.status().as_u16();
            let bytes = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let after = srv.st.storage.current_revision().await.map_err(|e| TestCaseError::fail(e.to_string()))?;
            match code {
                201 => prop_assert!(after > before),
                400 | 409 | 415 | 422 => {
                    prop_assert_eq!(&v["kind"], "Status", "{}", v);
                    prop_assert_eq!(&v["code"], code);
                    prop_assert_eq!(before, after, "a refused POST ({}) wrote: {}", code, v);
                    if code == 422 {
                        prop_assert_eq!(&v["reason"], "Invalid");
                        prop_assert!(v.pointer("/details/causes/0").is_some(), "422 without causes: {}", v);
                    }
                }
                other => prop_assert!(false, "unexpected {} for {}: {}", other, ct, v),
            }
            Ok(())
        })?;
    }
}

/// At the edge of the decoders' nesting limit, JSON and YAML agree: what
/// decodes can be stored and decoded again (a YAML decoder allowing one
/// level more would store objects no read could decode).
#[test]
fn nesting_limit_is_the_same_for_json_and_yaml() {
    for n in 120..136 {
        let json_body = format!("{{\"a\":{}{}}}", "[".repeat(n - 1), "]".repeat(n - 1));
        let yaml_body = format!("a: {}{}\n", "[".repeat(n - 1), "]".repeat(n - 1));
        let yaml_block = (0..n).map(|i| format!("{}a:\n", "  ".repeat(i))).collect::<String>() + &"  ".repeat(n) + "x\n";
        let j = media::decode_object("application/json", json_body.as_bytes());
        let y = media::decode_object("application/yaml", yaml_body.as_bytes());
        let b = media::decode_object("application/yaml", yaml_block.as_bytes());
        assert_eq!(j.is_ok(), y.is_ok(), "depth {n}: JSON {j:?} vs YAML {y:?}");
        for v in [j, y, b].into_iter().flatten() {
            assert!(depth(&v) <= 127, "depth {n}: decoded {} levels", depth(&v));
            let bytes = serde_json::to_vec(&v).unwrap();
            assert!(serde_json::from_slice::<Value>(&bytes).is_ok(), "depth {n}: stored form does not decode");
        }
    }
}
