//! The watch-cache layer: one read path for every resource of the resource
//! table, cached or not, and cachers for rows added while the server runs.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use futures::StreamExt;
use rkube_api::list_options::ListOptions;
use rkube_api::registry::{self, FieldType, ResourceInfo, SelectableField};
use rkube_cache::{CacheLayer, CacheLayerOptions, ServedFrom, WatchEvent};

fn opts(q: &str) -> ListOptions {
    ListOptions::from_query(q).unwrap()
}

/// No compactor or consistency checker: only the caches.
fn options(enabled: bool) -> CacheLayerOptions {
    CacheLayerOptions {
        enabled,
        compaction_interval: Duration::ZERO,
        detect_cache_inconsistency: false,
        ..CacheLayerOptions::default()
    }
}

fn names(items: &[std::sync::Arc<rkube_cache::CachedObject>]) -> Vec<&str> {
    items.iter().map(|o| o.name.as_str()).collect()
}

async fn next_event(w: &mut rkube_cache::CacheWatch) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(5), w.next()).await.expect("an event within 5 s").expect("stream open")
}

#[tokio::test]
async fn watch_cache_false_gives_every_resource_a_cacher_of_size_0_served_from_storage() {
    let b = embedded();
    create(b.storage.as_ref(), "d", "a", "n1").await;
    create(b.storage.as_ref(), "d", "other", "n2").await;
    let layer = CacheLayer::start(b.storage.clone(), options(false));
    let entries = layer.caches().entries();
    assert!(!entries.is_empty());
    assert!(entries.iter().all(|e| !e.enabled()), "every cacher has size 0");
    assert!(layer.storage_ready(), "nothing to wait for");

    let pods = registry::lookup("", "v1", "pods").unwrap();
    let list = layer.list(pods, None, &opts("fieldSelector=spec.nodeName%3Dn1")).await.unwrap();
    assert_eq!((list.served_from, names(&list.items)), (ServedFrom::Storage, vec!["a"]));
    let page = layer.list(pods, Some("d"), &opts("limit=1")).await.unwrap();
    assert_eq!((names(&page.items), page.remaining_item_count), (vec!["a"], Some(1)));
    assert!(page.continue_token.is_some());
    let got = layer.get(pods, "d", "a", None).await.unwrap().expect("found");
    assert_eq!(got.field("spec.nodeName"), Some("n1"));
    assert!(layer.get(pods, "d", "missing", Some("0")).await.unwrap().is_none());

    // sendInitialEvents=false at resourceVersion "": no initial events, no
    // replay of storage history; the next change is the first event.
    let q = "watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan";
    let mut w = layer.watch(pods, Some("d"), &opts(q)).await.unwrap();
    create(b.storage.as_ref(), "d", "b", "n1").await;
    match next_event(&mut w).await {
        WatchEvent::Added(o) => assert_eq!(o.name, "b"),
        other => panic!("want ADDED b, got {other:?}"),
    }
}

/// A row added to the resource table while the server runs (a CRD's):
/// a leaked `&'static ResourceInfo` with its own selectable field.
fn widgets() -> &'static ResourceInfo {
    let base = registry::lookup("", "v1", "configmaps").unwrap();
    let fields: &'static [SelectableField] =
        Box::leak(Box::new([SelectableField { label: "spec.color", path: "spec.color", field_type: FieldType::Str }]));
    Box::leak(Box::new(ResourceInfo {
        group: "example.com",
        version: "v1",
        resource: "widgets",
        kind: "Widget",
        list_kind: "WidgetList",
        singular: "widget",
        storage_prefix: "example.com/widgets",
        fields,
        ..*base
    }))
}

fn widget(name: &str, color: &str) -> Bytes {
    let v = serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "d"},
        "spec": {"color": color},
    });
    Bytes::from(serde_json::to_vec(&v).unwrap())
}

#[tokio::test]
async fn add_resource_caches_a_row_added_at_run_time_with_its_selectable_fields() {
    let b = embedded();
    let s = b.storage.as_ref();
    s.create("/registry/example.com/widgets/d/w1", widget("w1", "red")).await.unwrap();
    s.create("/registry/example.com/widgets/d/w2", widget("w2", "blue")).await.unwrap();
    let layer = CacheLayer::start(b.storage.clone(), options(true));
    let info = widgets();
    assert!(layer.caches().find(info).is_none(), "not a start-up row");
    let entry = layer.add_resource(info);
    assert!(entry.enabled());
    assert!(std::sync::Arc::ptr_eq(&entry, &layer.add_resource(info)), "one cacher per resource");
    assert!(std::sync::Arc::ptr_eq(&entry, &layer.caches().find(info).unwrap()));
    wait_for(&entry.cacher, 1).await;

    // Served from the cache, filtered on the row's own field.
    let red = layer.list(info, Some("d"), &opts("resourceVersion=0&fieldSelector=spec.color%3Dred")).await.unwrap();
    assert_eq!((red.served_from, names(&red.items)), (ServedFrom::Cache, vec!["w1"]));
    let got = layer.get(info, "d", "w2", Some("0")).await.unwrap().expect("cached");
    assert_eq!(got.field("spec.color"), Some("blue"));

    // A watch on the field sees a widget that turns red.
    let rv = red.resource_version.to_string();
    let mut w = layer.watch(info, Some("d"), &opts(&format!("watch=true&resourceVersion={rv}&fieldSelector=spec.color%3Dred"))).await.unwrap();
    let kv = s.get("/registry/example.com/widgets/d/w2").await.unwrap().unwrap();
    s.update("/registry/example.com/widgets/d/w2", widget("w2", "red"), kv.mod_revision).await.unwrap();
    match next_event(&mut w).await {
        WatchEvent::Added(o) => assert_eq!((o.name.as_str(), o.field("spec.color")), ("w2", Some("red"))),
        other => panic!("want ADDED w2, got {other:?}"),
    }
}
