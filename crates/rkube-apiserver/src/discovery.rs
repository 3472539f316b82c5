//! API discovery: legacy documents (`/api`, `/apis`, `/apis/<g>`, group
//! versions' `APIResourceList`) and aggregated discovery
//! (`apidiscovery.k8s.io` v2 and v2beta1 `APIGroupDiscoveryList`), the latter
//! only when the `Accept` header asks for it (upstream
//! `staging/src/k8s.io/apiserver/pkg/endpoints/discovery`).

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rkube_api::registry::{self, ResourceInfo};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::media;

/// The aggregated discovery version the client asked for, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregated {
    /// `apidiscovery.k8s.io/v2`.
    V2,
    /// `apidiscovery.k8s.io/v2beta1` (kubectl ≤ 1.29).
    V2Beta1,
}

impl Aggregated {
    fn version(self) -> &'static str {
        match self {
            Aggregated::V2 => "v2",
            Aggregated::V2Beta1 => "v2beta1",
        }
    }

    /// The exact `Content-Type` of the answer.
    pub fn content_type(self) -> &'static str {
        match self {
            Aggregated::V2 => "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            Aggregated::V2Beta1 => "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        }
    }
}

/// Reads `Accept`: the first media range that is an aggregated discovery
/// request picks the version; plain JSON listed before it wins.
pub fn wants_aggregated(headers: &HeaderMap) -> Option<Aggregated> {
    let accept = headers.get("accept").and_then(|v| v.to_str().ok())?;
    for r in media::parse_media_ranges(accept) {
        if r.essence != "application/json" {
            continue;
        }
        match (r.param("g"), r.param("v"), r.param("as")) {
            (Some("apidiscovery.k8s.io"), Some("v2"), Some("APIGroupDiscoveryList")) => return Some(Aggregated::V2),
            (Some("apidiscovery.k8s.io"), Some("v2beta1"), Some("APIGroupDiscoveryList")) => {
                return Some(Aggregated::V2Beta1)
            }
            (None, None, None) => return None,
            _ => continue,
        }
    }
    None
}

/// Discovery documents are API objects: JSON followed by `\n`, as
/// kube-apiserver's negotiated writer encodes them.
fn json_response(value: &Value, content_type: &'static str) -> Response {
    let body = rkube_api::wire::to_json_body(value).unwrap_or_default();
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert("content-type", HeaderValue::from_static(content_type));
    resp.headers_mut().insert("vary", HeaderValue::from_static("Accept"));
    resp
}

/// `GET /api`.
pub fn api(headers: &HeaderMap, server_address: &str) -> Response {
    if let Some(agg) = wants_aggregated(headers) {
        return aggregated(agg, true);
    }
    json_response(
        &json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        }),
        "application/json",
    )
}

fn group_json(group: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `GET /apis`.
pub fn apis(headers: &HeaderMap) -> Response {
    if let Some(agg) = wants_aggregated(headers) {
        return aggregated(agg, false);
    }
    let groups: Vec<Value> = registry::groups().iter().map(|(g, vs)| group_json(g, vs)).collect();
    json_response(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}), "application/json")
}

/// `GET /apis/<group>`.
pub fn group(name: &str) -> Response {
    match registry::groups().into_iter().find(|(g, _)| *g == name) {
        Some((g, vs)) => {
            let mut v = group_json(g, &vs);
            if let Some(m) = v.as_object_mut() {
                m.insert("kind".into(), json!("APIGroup"));
                m.insert("apiVersion".into(), json!("v1"));
            }
            json_response(&v, "application/json")
        }
        None => ApiError::path_not_found().into_response(),
    }
}

fn legacy_resource(r: &ResourceInfo) -> Value {
    let mut v = json!({
        "name": r.resource,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": r.verbs,
    });
    if let Some(m) = v.as_object_mut() {
        if !r.short_names.is_empty() {
            m.insert("shortNames".into(), json!(r.short_names));
        }
        if !r.categories.is_empty() {
            m.insert("categories".into(), json!(r.categories));
        }
    }
    v
}

/// `GET /api/v1` or `GET /apis/<group>/<version>`: the `APIResourceList`.
pub fn resource_list(group: &str, version: &str) -> Response {
    let mut resources = Vec::new();
    for r in registry::resources_in(group, version) {
        resources.push(legacy_resource(r));
        for s in r.subresources {
            let mut entry = json!({
                "name": format!("{}/{}", r.resource, s.name),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": s.kind,
                "verbs": s.verbs,
            });
            if !s.api_version.is_empty() {
                let (g, v) = registry::split_api_version(s.api_version);
                entry["group"] = json!(g);
                entry["version"] = json!(v);
            }
            resources.push(entry);
        }
    }
    if resources.is_empty() {
        return ApiError::path_not_found().into_response();
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    json_response(
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
        "application/json",
    )
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let subresources: Vec<Value> = r
        .subresources
        .iter()
        .map(|s| {
            let (g, v) = if s.api_version.is_empty() {
                (r.group, r.version)
            } else {
                registry::split_api_version(s.api_version)
            };
            json!({
                "subresource": s.name,
                "responseKind": {"group": g, "version": v, "kind": s.kind},
                "verbs": s.verbs,
            })
        })
        .collect();
    let mut v = json!({
        "resource": r.resource,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if let Some(m) = v.as_object_mut() {
        if !r.short_names.is_empty() {
            m.insert("shortNames".into(), json!(r.short_names));
        }
        if !r.categories.is_empty() {
            m.insert("categories".into(), json!(r.categories));
        }
        if !subresources.is_empty() {
            m.insert("subresources".into(), json!(subresources));
        }
    }
    v
}

fn aggregated_group(group: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = registry::resources_in(group, v).map(aggregated_resource).collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let mut metadata = json!({"creationTimestamp": null});
    if !group.is_empty() {
        metadata["name"] = json!(group);
    }
    json!({"metadata": metadata, "versions": vs})
}

/// The aggregated document of the core group (`legacy`) or the named groups.
pub fn aggregated(agg: Aggregated, legacy: bool) -> Response {
    let items: Vec<Value> = if legacy {
        vec![aggregated_group("", &["v1"])]
    } else {
        registry::groups().iter().map(|(g, vs)| aggregated_group(g, vs)).collect()
    };
    json_response(
        &json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": format!("apidiscovery.k8s.io/{}", agg.version()),
            "metadata": {},
            "items": items,
        }),
        agg.content_type(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_only_when_asked() {
        let mut h = HeaderMap::new();
        assert_eq!(wants_aggregated(&h), None);
        h.insert(
            "accept",
            HeaderValue::from_static(
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
            ),
        );
        assert_eq!(wants_aggregated(&h), Some(Aggregated::V2));
        h.insert(
            "accept",
            HeaderValue::from_static(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
            ),
        );
        assert_eq!(wants_aggregated(&h), Some(Aggregated::V2Beta1));
        h.insert("accept", HeaderValue::from_static("application/json, */*"));
        assert_eq!(wants_aggregated(&h), None);
    }
}
