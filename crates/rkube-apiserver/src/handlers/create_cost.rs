//! What each step of a create costs on a large body (ignored; run by name
//! in a release build):
//!
//! ```text
//! cargo test -p rkube-apiserver --release --lib -- --ignored --nocapture create_cost
//! ```
//!
//! `create_cost` times a JSON create step by step; `create_cost_yaml_and_apply`
//! times decoding the same ConfigMap as block YAML, and server-side apply
//! creating it (the merge and managedFields, then the typed check of the
//! result, as `PATCH` does before the create's other steps).

use std::time::Instant;

/// The bench's body size: just under the 3 MiB body limit.
const BODY_BYTES: usize = 3 * 1024 * 1024 - 8 * 1024;

fn configmap_json(bytes: usize) -> Vec<u8> {
    let mut s = String::from(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"#);
    let mut keys = 0;
    while s.len() < bytes {
        if keys > 0 {
            s.push(',');
        }
        s.push_str(&format!(r#""k{keys}":"v{keys}""#));
        keys += 1;
    }
    s.push_str("}}");
    s.into_bytes()
}

fn configmap_yaml(bytes: usize) -> Vec<u8> {
    let mut s = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n");
    let mut keys = 0;
    while s.len() < bytes {
        s.push_str(&format!("  k{keys}: v{keys}\n"));
        keys += 1;
    }
    s.into_bytes()
}

fn timed<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    eprintln!("{name:>24}: {:>8.2} ms", t.elapsed().as_secs_f64() * 1000.0);
    out
}

#[test]
#[ignore]
fn create_cost() {
    let body = configmap_json(BODY_BYTES);
    let info = rkube_api::registry::lookup("", "v1", "configmaps").expect("configmaps");
    for round in 0..3 {
        eprintln!("round {round}");
        let (mut obj, keys) = timed("decode", || crate::media::decode_body("application/json", &body).expect("decode"));
        timed("typed check", || crate::validate::check_typed_body(info, &mut obj, crate::validate::FieldValidation::Strict, keys.as_ref()).expect("typed"));
        timed("merge stringData", || crate::config_data::merge_string_data(info.kind, &mut obj));
        timed("defaults", || info.strategy.apply_defaults(&mut obj));
        let rec = crate::patch::UpdateRecord { manager: "bench", api_version: "v1", subresource: "", now: "2026-01-01T00:00:00Z" };
        // The create path's way (an entry kept as text, stored as it is),
        // then the map the other write paths build.
        let entries = timed("managedFields as text", || crate::patch::UnwrittenEntries::created(&rec, &obj).expect("walked"));
        let stored = timed("encode with the text", || entries.encode_stored(&obj).expect("as text").expect("encode"));
        timed("managedFields as a map", || crate::patch::record_update(&rec, None, &mut obj));
        let encoded = timed("encode with the map", || rkube_api::wire::to_typed_json(&obj, true).expect("encode"));
        assert_eq!(stored.0, encoded, "the same bytes");
        let copy = timed("clone", || obj.clone());
        let causes = timed("validate", || crate::validate::validate(info, &obj, None));
        assert!(!causes.is_empty(), "a 3 MiB ConfigMap is refused");
        timed("drop", || drop((obj, copy)));
    }
}

#[test]
#[ignore]
fn create_cost_yaml_and_apply() {
    let yaml = configmap_yaml(BODY_BYTES);
    let json = configmap_json(BODY_BYTES);
    let info = rkube_api::registry::lookup("", "v1", "configmaps").expect("configmaps");
    for round in 0..3 {
        eprintln!("round {round}");
        let (obj, _) = timed("decode block YAML", || crate::media::decode_body("application/yaml", &yaml).expect("decode"));
        timed("drop", || drop(obj));
        let mut applied = timed("apply (JSON)", || {
            crate::patch::apply_patch_at(info.kind, Some("v1"), crate::patch::PatchType::Apply, None, &json, "bench", true, "2026-01-01T00:00:00Z")
                .expect("apply")
        });
        timed("apply: typed check", || {
            crate::validate::check_typed_body(info, &mut applied, crate::validate::FieldValidation::Warn, None).expect("typed")
        });
        timed("apply: validate", || crate::validate::validate(info, &applied, None));
        timed("drop", || drop(applied));
    }
}
