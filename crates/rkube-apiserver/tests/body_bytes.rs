//! The exact bytes of JSON bodies, as kube-apiserver's `json.Encoder` writes
//! them: typed objects start with `kind`, then `apiVersion`, then
//! `metadata` (in `ObjectMeta` order), and every body and every watch event
//! line ends with `\n`. Each test runs with the watch cache and with
//! `--watch-cache=false`.

use crate::common;

use std::time::Duration;

use common::TestServer;
use futures::StreamExt;
use serde_json::Value;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// The one line a watch at `path` sends first (within 5 s), with its `\n`.
async fn first_watch_line(srv: &TestServer, path: &str) -> String {
    let resp = common::http_client(None).get(format!("{}{path}", srv.base)).send().await.expect("watch");
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !buf.contains(&b'\n') {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) => buf.extend_from_slice(&chunk),
            other => panic!("no watch line within 5 s: {other:?}"),
        }
    }
    let end = buf.iter().position(|b| *b == b'\n').unwrap_or(0);
    String::from_utf8(buf[..=end].to_vec()).expect("UTF-8")
}

/// `s` without its trailing `\n` (asserting it has one).
fn line(s: &str) -> &str {
    s.strip_suffix('\n').unwrap_or_else(|| panic!("body does not end with a newline: {s:?}"))
}

/// A ConfigMap whose keys come as kubectl sends them (sorted: `apiVersion`
/// first) is answered, read, listed and watched with `kind` first and a
/// trailing newline, byte for byte the same object everywhere.
async fn objects_lists_and_watch_lines_start_with_kind_and_end_with_newline(srv: &TestServer) {
    let body = r#"{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"labels":{"app":"web"},"name":"cm","namespace":"default"}}"#;
    let created = srv.send("POST", CMS, Some("application/json"), None, Some(body.as_bytes().to_vec())).await;
    assert_eq!(created.code, 201, "{}", created.text);
    let meta = &created.body["metadata"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let expected = format!(
        concat!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"cm","namespace":"default","uid":"{uid}","#,
            r#""resourceVersion":"{rv}","creationTimestamp":"{ts}","labels":{{"app":"web"}},"managedFields":{mf}}},"#,
            r#""data":{{"k":"v"}}}}"#,
            "\n"
        ),
        uid = s(&meta["uid"]),
        rv = s(&meta["resourceVersion"]),
        ts = s(&meta["creationTimestamp"]),
        mf = meta["managedFields"],
    );
    assert_eq!(created.text, expected, "POST response");

    // Reads at resourceVersion=0 are served from the watch cache, which may
    // lag a write; a consistent LIST first waits until the cache holds it.
    let consistent = srv.get(CMS).await;
    assert_eq!(consistent.code, 200, "{}", consistent.text);
    for path in [format!("{CMS}/cm"), format!("{CMS}/cm?resourceVersion=0")] {
        let got = srv.get(&path).await;
        assert_eq!((got.code, got.text.as_str()), (200, expected.as_str()), "GET {path}");
    }
    for path in [CMS.to_string(), format!("{CMS}?resourceVersion=0"), "/api/v1/configmaps?labelSelector=app".to_string()] {
        let list = srv.get(&path).await;
        assert_eq!(list.code, 200, "{}", list.text);
        let want = format!(
            r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"{}"}},"items":[{}]}}"#,
            list.rv(),
            line(&expected)
        );
        assert_eq!(line(&list.text), want, "LIST {path}");
    }
    let watched = first_watch_line(srv, &format!("{CMS}?watch=true&resourceVersion=0")).await;
    assert_eq!(watched, format!("{{\"type\":\"ADDED\",\"object\":{}}}\n", line(&expected)), "watch line");
}

/// Objects stored before rkube kept the typed key order (here: written
/// straight to storage with `apiVersion` first) come out in it too.
async fn objects_stored_in_client_order_come_out_in_typed_order(srv: &TestServer) {
    let stored = r#"{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"uid":"u-1","name":"old","namespace":"default","creationTimestamp":"2024-01-01T00:00:00Z"}}"#;
    let kv = srv.storage.create("/registry/configmaps/default/old", stored.as_bytes().to_vec().into()).await.expect("store");
    let want = format!(
        concat!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"old","namespace":"default","uid":"u-1","#,
            r#""resourceVersion":"{}","creationTimestamp":"2024-01-01T00:00:00Z"}},"data":{{"k":"v"}}}}"#,
        ),
        kv.mod_revision
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        // The watch cache sees the write a little later.
        let got = srv.get(&format!("{CMS}/old?resourceVersion={}", kv.mod_revision)).await;
        if got.code == 200 || tokio::time::Instant::now() > deadline {
            assert_eq!((got.code, line(&got.text)), (200, want.as_str()), "GET");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let list = srv.get(&format!("{CMS}?resourceVersion={}&resourceVersionMatch=NotOlderThan", kv.mod_revision)).await;
    assert!(line(&list.text).ends_with(&format!("\"items\":[{want}]}}")), "LIST: {}", list.text);
    let watched = first_watch_line(srv, &format!("{CMS}?watch=true&resourceVersion=0")).await;
    assert_eq!(watched, format!("{{\"type\":\"ADDED\",\"object\":{want}}}\n"), "watch line");
}

/// The body a GET of `path` at resourceVersion `rv` (not older) reads.
async fn read_at(srv: &TestServer, path: &str, rv: String) -> String {
    srv.get(&format!("{path}?resourceVersion={rv}")).await.text
}

/// Updates, patches, server-side applies and writes that change nothing
/// answer with the bytes a GET then reads (the stored object, its
/// resourceVersion spliced in); a write that changes nothing keeps the
/// resourceVersion.
async fn writes_and_no_op_writes_answer_what_a_get_reads(srv: &TestServer) {
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "w", "labels": {"b": "1", "a": "2"}}, "data": {"z": "1", "y": "2"}});
    assert_eq!(srv.post(CMS, &cm).await.code, 201);
    let path = format!("{CMS}/w");
    let mut changed = cm.clone();
    changed["data"]["x"] = "3".into();
    let put = srv.put(&path, &changed).await;
    assert_eq!(put.code, 200, "{}", put.text);
    assert_eq!(put.text, read_at(srv, &path, put.rv()).await, "PUT answer");

    let patched = srv.patch(&path, "application/merge-patch+json", r#"{"data":{"w":"4"}}"#).await;
    assert_eq!(patched.code, 200, "{}", patched.text);
    assert_eq!(patched.text, read_at(srv, &path, patched.rv()).await, "PATCH answer");

    let same: Value = serde_json::from_str(&patched.text).expect("JSON");
    let again = srv.put(&path, &same).await;
    assert_eq!((again.code, again.rv()), (200, patched.rv()), "a PUT changing nothing keeps the resourceVersion");
    assert_eq!(again.text, patched.text, "no-op PUT answer");

    let apply = format!("{path}?fieldManager=tool&force=true");
    let config = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w"},"data":{"v":"5"}}"#;
    let applied = srv.send("PATCH", &apply, Some("application/apply-patch+yaml"), None, Some(config.as_bytes().to_vec())).await;
    assert_eq!(applied.code, 200, "{}", applied.text);
    assert_eq!(applied.text, read_at(srv, &path, applied.rv()).await, "apply answer");
    let reapplied = srv.send("PATCH", &apply, Some("application/apply-patch+yaml"), None, Some(config.as_bytes().to_vec())).await;
    assert_eq!((reapplied.code, reapplied.rv()), (200, applied.rv()), "re-applying keeps the resourceVersion");
    assert_eq!(reapplied.text, applied.text, "no-op apply answer");
}

/// A large object kept decoded after a write or a read for update is
/// exactly what decoding its stored bytes gives (same value, same key
/// order), through creates, PUTs, patches of each kind, server-side apply
/// and writes that change nothing; and each answer is what a GET reads.
async fn large_objects_kept_decoded_are_what_a_decode_gives(srv: &TestServer) {
    let key = "/registry/configmaps/default/big";
    let check = |what: &'static str| async move {
        let kv = srv.storage.get(key).await.expect("get").expect("stored");
        assert!(kv.value.len() >= rkube_apiserver::decoded::MIN_STORED_BYTES, "{what}: {}", kv.value.len());
        let kept = srv.decoded.get(key, &kv.value, kv.mod_revision).unwrap_or_else(|| panic!("{what}: not kept"));
        let decoded = rkube_apiserver::source::decode_stored(key, &kv.value, kv.mod_revision).expect("decode");
        assert_eq!(*kept, decoded, "{what}");
        assert_eq!(serde_json::to_string(&*kept).unwrap(), serde_json::to_string(&decoded).unwrap(), "{what}: key order");
    };
    // Keys in no typed order, metadata last, a resourceVersion to ignore.
    let mut data = serde_json::Map::new();
    for i in (0..4000).rev() {
        data.insert(format!("key-{i}"), Value::String(format!("value {i}")));
    }
    let cm = serde_json::json!({"data": data, "kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"labels": {"b": "1"}, "resourceVersion": "", "name": "big", "annotations": {"z": "1", "a": "2"}}});
    let created = srv.post(CMS, &cm).await;
    assert_eq!(created.code, 201, "{}", created.text);
    // The create stored its managedFields entry as the text the create walk
    // wrote; the object is kept with that entry written at the first lookup.
    check("create").await;
    // Answered as YAML, the object is written whole for the answer: then
    // it is kept decoded, as a decode gives it.
    let mut as_yaml = cm.clone();
    as_yaml["metadata"]["name"] = "big-yaml".into();
    let created = srv.send("POST", CMS, Some("application/json"), Some("application/yaml"), Some(as_yaml.to_string().into_bytes())).await;
    assert_eq!(created.code, 201, "{}", created.text);
    let yaml_key = "/registry/configmaps/default/big-yaml";
    let kv = srv.storage.get(yaml_key).await.expect("get").expect("stored");
    let kept = srv.decoded.get(yaml_key, &kv.value, kv.mod_revision).expect("kept decoded after a create answered as YAML");
    let decoded = rkube_apiserver::source::decode_stored(yaml_key, &kv.value, kv.mod_revision).expect("decode");
    assert_eq!(serde_json::to_string(&*kept).unwrap(), serde_json::to_string(&decoded).unwrap(), "create answered as YAML");
    let path = format!("{CMS}/big");
    for round in 0..2 {
        let mut changed: Value = serde_json::from_str(&srv.get(&path).await.text).unwrap();
        changed["data"]["key-7"] = format!("changed {round}").into();
        changed["metadata"]["labels"]["c"] = "2".into();
        let put = srv.put(&path, &changed).await;
        assert_eq!(put.code, 200, "{}", put.text);
        assert_eq!(put.text, read_at(srv, &path, put.rv()).await, "PUT answer");
        check("PUT").await;
        let same = srv.put(&path, &serde_json::from_str::<Value>(&put.text).unwrap()).await;
        assert_eq!((same.code, same.rv()), (200, put.rv()), "no-op PUT");
        check("no-op PUT").await;
        for (ct, patch) in [
            ("application/merge-patch+json", format!(r#"{{"data":{{"m{round}":"1"}}}}"#)),
            ("application/strategic-merge-patch+json", format!(r#"{{"metadata":{{"labels":{{"s{round}":"1"}}}}}}"#)),
            ("application/json-patch+json", format!(r#"[{{"op":"add","path":"/data/j{round}","value":"1"}}]"#)),
        ] {
            let patched = srv.patch(&path, ct, &patch).await;
            assert_eq!(patched.code, 200, "{ct}: {}", patched.text);
            assert_eq!(patched.text, read_at(srv, &path, patched.rv()).await, "{ct} answer");
            check(ct).await;
        }
        let apply = format!("{path}?fieldManager=tool&force=true");
        let config = format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big"}},"data":{{"a{round}":"5"}}}}"#);
        for what in ["apply", "re-apply"] {
            let applied = srv.send("PATCH", &apply, Some("application/apply-patch+yaml"), None, Some(config.clone().into_bytes())).await;
            assert_eq!(applied.code, 200, "{what}: {}", applied.text);
            assert_eq!(applied.text, read_at(srv, &path, applied.rv()).await, "{what} answer");
            check(what).await;
        }
    }
}

/// Deleting a large object kept decoded (shared with the delete, not
/// copied): a delete held by a finalizer answers and stores the marked
/// object, while the kept one stays as stored; a dry-run delete and the
/// delete of a pod answer the object with the resourceVersion the delete
/// has (the stored one for a dry run, the delete's revision otherwise).
async fn large_objects_kept_decoded_are_deleted_as_stored(srv: &TestServer) {
    let annotations: serde_json::Map<String, Value> =
        (0..4000).map(|i| (format!("example.com/a-{i}"), Value::String(format!("value {i}")))).collect();
    let held = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "finalizers": ["example.com/hold"], "annotations": annotations}});
    let created = srv.post(CMS, &held).await;
    assert_eq!(created.code, 201, "{}", created.text);
    let path = format!("{CMS}/held");
    let key = "/registry/configmaps/default/held";
    let kv = srv.storage.get(key).await.expect("get").expect("stored");
    assert!(kv.value.len() >= rkube_apiserver::decoded::MIN_STORED_BYTES, "{}", kv.value.len());
    assert!(srv.decoded.get(key, &kv.value, kv.mod_revision).is_some(), "kept after the create");

    let marked = srv.delete(&path, None).await;
    assert_eq!(marked.code, 200, "{}", marked.text);
    assert!(marked.body["metadata"]["deletionTimestamp"].is_string(), "marked: {}", &marked.text[..200]);
    assert_eq!(marked.body["metadata"]["annotations"].as_object().map(|a| a.len()), Some(4000));
    assert_eq!(marked.text, read_at(srv, &path, marked.rv()).await, "the marked object is stored");
    let kept = srv.decoded.get(key, &kv.value, kv.mod_revision).expect("still kept for its bytes");
    assert!(kept.pointer("/metadata/deletionTimestamp").is_none(), "the kept object was not changed");
    assert_eq!(*kept, rkube_apiserver::source::decode_stored(key, &kv.value, kv.mod_revision).expect("decode"));
    let released = srv.patch(&path, "application/merge-patch+json", r#"{"metadata":{"finalizers":null}}"#).await;
    assert_eq!(released.code, 200, "{}", released.text);
    assert_eq!(srv.get(&path).await.code, 404, "the last finalizer's removal deletes it");

    let pods = "/api/v1/namespaces/default/pods";
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "big", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let created = srv.post(pods, &pod).await;
    assert_eq!(created.code, 201, "{}", created.text);
    let path = format!("{pods}/big");
    let key = "/registry/pods/default/big";
    let kv = srv.storage.get(key).await.expect("get").expect("stored");
    assert!(srv.decoded.get(key, &kv.value, kv.mod_revision).is_some(), "the pod is kept after its create");
    let stored: Value = serde_json::from_str(&srv.get(&path).await.text).unwrap();
    let dry = srv.send("DELETE", &format!("{path}?dryRun=All"), None, None, None).await;
    assert_eq!((dry.code, dry.rv()), (200, created.rv()), "{}", dry.text);
    assert_eq!(dry.body, stored, "a dry-run delete answers the stored pod");
    let deleted = srv.delete(&path, None).await;
    assert_eq!(deleted.code, 200, "{}", deleted.text);
    let rv: i64 = deleted.rv().parse().unwrap();
    assert!(rv > created.rv().parse::<i64>().unwrap(), "the delete's revision: {rv}");
    let mut want = stored;
    want["metadata"]["resourceVersion"] = Value::String(rv.to_string());
    assert_eq!(deleted.body, want, "the pod as stored, at the delete's revision");
    assert_eq!(srv.get(&path).await.code, 404);
}

/// Status errors are upstream's exact bytes, newline included; so are
/// discovery documents, while `/version` is indented without one, as
/// upstream's `WriteRawJSON` writes it.
async fn status_and_discovery_bodies_end_with_newline(srv: &TestServer) {
    let missing = srv.get(&format!("{CMS}/nope")).await;
    assert_eq!(
        (missing.code, missing.text.as_str()),
        (
            404,
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"configmaps \"nope\" not found","reason":"NotFound","#,
                r#""details":{"name":"nope","kind":"configmaps"},"code":404}"#,
                "\n"
            )
        )
    );
    let bad = srv.get(&format!("{CMS}?labelSelector=a%20in%20(b")).await;
    assert_eq!(bad.code, 400);
    assert!(bad.text.starts_with(r#"{"kind":"Status","apiVersion":"v1","#) && bad.text.ends_with("}\n"), "{}", bad.text);
    for path in ["/api", "/apis", "/api/v1", "/apis/apps/v1"] {
        let d = srv.get(path).await;
        assert_eq!(d.code, 200, "{path}");
        assert!(d.text.starts_with("{\"kind\":\"") && d.text.ends_with("}\n"), "{path}: {}", d.text);
    }
    let version = srv.get("/version").await;
    assert!(version.text.starts_with("{\n  \"major\": \"1\",\n  \"minor\": \"33\","), "{}", version.text);
    assert!(version.text.ends_with("\n}"), "{}", version.text);
}

/// Server-side tables (GET, LIST) and metadata-only lists are bodies like
/// any other: `kind` first, a trailing newline.
async fn tables_and_partial_metadata_end_with_newline(srv: &TestServer) {
    let created = srv.post(CMS, &serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t"}})).await;
    assert_eq!(created.code, 201, "{}", created.text);
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    for path in [format!("{CMS}/t"), CMS.to_string(), format!("{CMS}?resourceVersion=0")] {
        let got = srv.get_as(&path, table).await;
        assert_eq!(got.code, 200, "{path}: {}", got.text);
        assert!(got.text.starts_with(r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"#), "{path}: {}", got.text);
        assert!(got.text.ends_with("}\n") && !got.text.ends_with("\n\n"), "{path}: {:?}", got.text);
    }
    let partial = srv.get_as(CMS, "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io").await;
    assert!(partial.text.starts_with(r#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","#), "{}", partial.text);
    assert!(partial.text.ends_with("]}\n"), "{:?}", partial.text);
}

macro_rules! both_read_paths {
    ($($name:ident),* $(,)?) => {
        mod watch_cache {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&super::TestServer::embedded().await).await;
                }
            )*
        }
        mod storage_reads {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&super::TestServer::embedded_storage_reads().await).await;
                }
            )*
        }
    };
}

both_read_paths!(
    objects_lists_and_watch_lines_start_with_kind_and_end_with_newline,
    objects_stored_in_client_order_come_out_in_typed_order,
    status_and_discovery_bodies_end_with_newline,
    tables_and_partial_metadata_end_with_newline,
    writes_and_no_op_writes_answer_what_a_get_reads,
    large_objects_kept_decoded_are_what_a_decode_gives,
    large_objects_kept_decoded_are_deleted_as_stored,
);
