//! Scaffolding shared by the fuzz tests `fuzz_body` and `fuzz_patch`: case
//! counts from `PROPTEST_CASES`, the in-process API server (router over the
//! embedded store) their handler properties send requests to, and the JSON
//! nesting depth they bound.

use std::sync::{Arc, OnceLock};

use rkube_apiserver::ApiState;
use serde_json::Value;

/// `PROPTEST_CASES` when set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Cases of the properties that go through the handler and the store (each
/// case is several requests and writes): a tenth of `PROPTEST_CASES`.
pub fn handler_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse::<u32>().ok()).map_or(default, |n| (n / 10).max(1))
}

/// One bootstrapped API state over an embedded store in a temp dir, with the
/// runtime that drives it; shared by every case of a test binary.
pub struct Server {
    /// Runs the handler futures (`rt.block_on`).
    pub rt: tokio::runtime::Runtime,
    /// The server state requests go to (`rkube_apiserver::router(st.clone())`).
    pub st: ApiState,
    _dir: tempfile::TempDir,
}

/// The binary's [`Server`], started on first use.
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        let dir = tempfile::tempdir().expect("temp dir");
        let st = rt.block_on(async {
            let storage: Arc<dyn rkube_storage::Storage> =
                Arc::new(rkube_storage::embedded::EmbeddedStorage::open(dir.path()).expect("embedded store"));
            let st = rkube_apiserver::server::default_state(storage);
            rkube_apiserver::bootstrap(&st).await.expect("bootstrap");
            st
        });
        Server { rt, st, _dir: dir }
    })
}

/// Nesting depth of a JSON value (a scalar is 0, `[]` and `{}` are 1).
pub fn depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                max = max.max(d + 1);
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(m) => {
                max = max.max(d + 1);
                stack.extend(m.values().map(|c| (c, d + 1)));
            }
            _ => max = max.max(d),
        }
    }
    max
}
