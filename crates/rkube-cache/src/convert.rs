//! Serving a row that shows another row's objects in another version
//! ([`ResourceInfo::conversion`], e.g. events.k8s.io/v1 `events` over core/v1
//! `events`): the layer keeps one cache per storage prefix (the stored
//! row's) and converts what it hands out, as upstream's cacher holds
//! objects of the storage version and converts them when serving
//! (`pkg/registry/generic/registry/store.go` with a codec per version).
//!
//! - objects: decoded, converted ([`ResourceInfo::to_served`]), key-ordered
//!   and serialized once per read;
//! - field selectors: each label of the served row is renamed to the stored
//!   row's ([`ResourceInfo::stored_field_label`]) before the cache filters.

use std::sync::Arc;

use rkube_api::list_options::ListOptions;
use rkube_api::registry::ResourceInfo;
use rkube_api::selector::FieldSelector;
use serde_json::Value;

use crate::event::WatchEvent;
use crate::store::CachedObject;

/// Whether this layer converts `info`'s objects: rows with a
/// [`rkube_api::registry::Conversion`] that is not done by a webhook (the
/// API server converts those, [`rkube_api::registry::Conversion::by_webhook`]).
pub fn converts(info: &ResourceInfo) -> bool {
    info.conversion.is_some_and(|c| !c.by_webhook)
}

/// `obj` in `info`'s form: itself when this layer does not convert `info`
/// ([`converts`]) or the cached bytes are not JSON (they always are: the
/// cache decoded them).
pub fn served(info: &ResourceInfo, obj: Arc<CachedObject>) -> Arc<CachedObject> {
    if !converts(info) {
        return obj;
    }
    let Ok(v) = serde_json::from_slice::<Value>(&obj.json) else { return obj };
    let mut v = info.to_served(v);
    rkube_api::wire::order_object_keys(&mut v);
    let Ok(json) = serde_json::to_vec(&v) else { return obj };
    let mut out = (*obj).clone();
    out.json = json.into();
    out.encodings = Default::default();
    Arc::new(out)
}

/// A watch event with its object in `info`'s form.
pub fn served_event(info: &ResourceInfo, ev: WatchEvent) -> WatchEvent {
    match ev {
        WatchEvent::Added(o) => WatchEvent::Added(served(info, o)),
        WatchEvent::Modified(o) => WatchEvent::Modified(served(info, o)),
        WatchEvent::Deleted(o) => WatchEvent::Deleted(served(info, o)),
        other => other,
    }
}

/// `opts` with its field selector in the stored row's labels (borrowed
/// unchanged when nothing is renamed).
pub fn stored_options<'a>(info: &ResourceInfo, opts: &'a ListOptions) -> std::borrow::Cow<'a, ListOptions> {
    let renames = opts.field_selector.fields().any(|f| info.stored_field_label(f) != f);
    if !renames {
        return std::borrow::Cow::Borrowed(opts);
    }
    let reqs = opts
        .field_selector
        .requirements()
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.field = info.stored_field_label(&r.field).to_string();
            r
        })
        .collect();
    let mut out = opts.clone();
    out.field_selector = FieldSelector::from_requirements(reqs);
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_v1_selectors_use_core_labels() {
        let v1 = rkube_api::registry::lookup("events.k8s.io", "v1", "events").unwrap();
        let opts = ListOptions::from_query("fieldSelector=regarding.name%3Dp,type%3DNormal").unwrap();
        let stored = stored_options(v1, &opts);
        let fields: Vec<&str> = stored.field_selector.fields().collect();
        assert!(fields.contains(&"involvedObject.name") && fields.contains(&"type"), "{fields:?}");
        let core = rkube_api::registry::lookup("", "v1", "events").unwrap();
        assert!(matches!(stored_options(core, &opts), std::borrow::Cow::Borrowed(_)));
    }
}
