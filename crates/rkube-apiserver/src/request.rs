//! Resource request paths → [`RequestInfo`], like upstream's
//! `RequestInfoFactory` (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`).
//!
//! Shapes handled (after `/api/v1` or `/apis/<group>/<version>`):
//!
//! ```text
//! [watch/]<resource>[/<name>[/<subresource>]]                  cluster-scoped or all namespaces
//! [watch/]namespaces/<ns>/<resource>[/<name>[/<subresource>]]  namespaced
//! namespaces/<name>/status|finalize                            namespace subresources
//! ```

use axum::http::Method;
use rkube_api::registry::{self, ResourceInfo};

use crate::error::{ApiError, ApiResult};

/// The Kubernetes verb of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// GET one object.
    Get,
    /// GET a collection.
    List,
    /// GET a collection with `watch=true` or under `/watch/`.
    Watch,
    /// POST to a collection (or to `pods/<name>/binding`).
    Create,
    /// PUT one object.
    Update,
    /// PATCH one object.
    Patch,
    /// DELETE one object.
    Delete,
    /// DELETE a collection.
    DeleteCollection,
}

/// A parsed resource request.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    /// The served resource.
    pub info: &'static ResourceInfo,
    /// The namespace from the path (`None` for cluster-scoped and all-namespaces requests).
    pub namespace: Option<String>,
    /// The object name, for object requests.
    pub name: Option<String>,
    /// The subresource (`status`, `binding`), if any.
    pub subresource: Option<String>,
    /// The verb.
    pub verb: Verb,
}

/// Percent-decodes a request path like Go's `url.URL.Path`, which is what
/// upstream's `RequestInfoFactory` splits on `/` (so `%2F` separates
/// segments there too, and a client that escapes `:` in `system:node`
/// addresses that name). `+` stays a plus. Borrowed when nothing is escaped.
///
/// Errors: 400 `BadRequest` for a malformed escape (`%zz`, a trailing `%`)
/// or bytes that are not UTF-8, where Go's server answers 400 too.
pub fn decode_path(raw: &str) -> ApiResult<std::borrow::Cow<'_, str>> {
    if !raw.contains('%') {
        return Ok(std::borrow::Cow::Borrowed(raw));
    }
    let bad = || ApiError::bad_request(format!("invalid URL escape in path {raw:?}"));
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |b: Option<&u8>| b.and_then(|c| (*c as char).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
                return Err(bad());
            };
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map(std::borrow::Cow::Owned).map_err(|_| bad())
}

/// Upstream `path.IsValidPathSegmentName`: why `name` cannot be an object
/// name in a URL (empty when it can).
fn path_segment_name_errors(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"].iter().filter(|c| name.contains(**c)).map(|c| format!("may not contain '{c}'")).collect()
}

/// Namespace subresources: `namespaces/<name>/<sub>` is the namespace object,
/// not a resource inside namespace `<name>`.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// Parses `segments` (the path after the group-version, split on `/`) of a
/// request with `method` and `watch_param` (`watch=true|1` in the query).
///
/// Errors: 404 `NotFound` for unknown resources or shapes, 405
/// `MethodNotAllowed` for a method the target does not accept, 400
/// `BadRequest` for an object name that cannot be a path segment (`..`,
/// a name with `%`), as upstream's request namer.
pub fn parse(
    group: &str,
    version: &str,
    segments: &[&str],
    method: &Method,
    watch_param: bool,
) -> ApiResult<RequestInfo> {
    let mut parts: Vec<&str> = segments.iter().copied().filter(|s| !s.is_empty()).collect();
    let mut legacy_watch = false;
    if parts.first() == Some(&"watch") {
        legacy_watch = true;
        parts.remove(0);
    }
    if parts.is_empty() {
        return Err(ApiError::path_not_found());
    }
    let mut namespace: Option<String> = None;
    if parts[0] == "namespaces" && parts.len() > 1 {
        let is_namespace_object = parts.len() == 2 || NAMESPACE_SUBRESOURCES.contains(&parts[2]);
        if !is_namespace_object {
            namespace = Some(parts[1].to_string());
            parts.drain(0..2);
        }
    }
    let resource = parts[0];
    let info = registry::lookup(group, version, resource).ok_or_else(|| not_yet_served(group, version, resource))?;
    if info.namespaced != namespace.is_some() && !(info.namespaced && parts.len() == 1) {
        // A namespaced resource needs a namespace for object paths; a
        // cluster-scoped one never takes one.
        return Err(ApiError::path_not_found());
    }
    let name = parts.get(1).map(|s| s.to_string());
    if let Some(n) = &name {
        let errs = path_segment_name_errors(n);
        if !errs.is_empty() {
            return Err(ApiError::bad_request(format!("invalid resource name {n:?}: [{}]", errs.join(", "))));
        }
    }
    let subresource = parts.get(2).map(|s| s.to_string());
    // `nodes/<name>/proxy/<path...>`: the rest is the kubelet's path.
    let proxied = subresource.as_deref() == Some("proxy") && info.group.is_empty() && info.resource == "nodes";
    if parts.len() > 3 && !proxied {
        return Err(ApiError::path_not_found());
    }
    if let Some(sub) = &subresource {
        if info.subresource(sub).is_none() {
            return Err(not_yet_served_subresource(info, sub));
        }
    }
    let collection = name.is_none();
    let verb = if legacy_watch {
        if *method != Method::GET {
            return Err(ApiError::method_not_allowed());
        }
        Verb::Watch
    } else {
        match (method.clone(), collection) {
            (Method::GET, true) if watch_param => Verb::Watch,
            (Method::GET, true) => Verb::List,
            (Method::GET, false) if watch_param => Verb::Watch,
            (Method::GET, false) => Verb::Get,
            (Method::POST, true) => Verb::Create,
            // POST to an object's subresource (binding, eviction, token) creates
            // when the subresource takes `create`.
            (Method::POST, false)
                if subresource.as_deref().and_then(|s| info.subresource(s)).is_some_and(|s| s.verbs.contains(&"create")) =>
            {
                Verb::Create
            }
            (Method::PUT, false) => Verb::Update,
            (Method::PATCH, false) => Verb::Patch,
            (Method::DELETE, false) => Verb::Delete,
            (Method::DELETE, true) => Verb::DeleteCollection,
            _ => return Err(ApiError::method_not_allowed()),
        }
    };
    let verb_name = match verb {
        Verb::Get => "get",
        Verb::List => "list",
        Verb::Watch => "watch",
        Verb::Create => "create",
        Verb::Update => "update",
        Verb::Patch => "patch",
        Verb::Delete => "delete",
        Verb::DeleteCollection => "deletecollection",
    };
    // Each subresource accepts the verbs its row lists (status: get/update/patch;
    // binding: create; finalize: update).
    if let Some(sub) = subresource.as_deref().and_then(|s| info.subresource(s)) {
        if !sub.verbs.contains(&verb_name) {
            return Err(ApiError::method_not_allowed());
        }
    }
    if subresource.is_none() && !info.verbs.contains(&verb_name) {
        return Err(ApiError::method_not_allowed());
    }
    Ok(RequestInfo { info, namespace, name, subresource, verb })
}

/// Group versions Kubernetes 1.33 serves by default that rkube does not serve yet.
const NOT_YET_SERVED_GROUP_VERSIONS: &[(&str, &str)] = &[];

/// Subresources Kubernetes 1.33 serves that rkube does not serve yet, by resource.
const NOT_YET_SERVED_SUBRESOURCES: &[(&str, &str, &[&str])] = &[
    ("", "pods", &["proxy", "resize"]),
    ("", "services", &["proxy"]),
];

/// 404 for a resource that is not served: upstream's `NotFound` for
/// unknown paths, with a message saying so plainly when Kubernetes serves
/// the group version and rkube does not yet.
fn not_yet_served(group: &str, version: &str, resource: &str) -> ApiError {
    if NOT_YET_SERVED_GROUP_VERSIONS.contains(&(group, version)) {
        let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
        let what = format!("{gv} ({resource}) is served by Kubernetes 1.33 but not implemented in rkube yet");
        return rkube_api::status::Status::new(404, "NotFound", what).into();
    }
    ApiError::path_not_found()
}

/// 404 for a subresource the row does not serve; the message says so when
/// Kubernetes serves it and rkube does not yet.
fn not_yet_served_subresource(info: &ResourceInfo, sub: &str) -> ApiError {
    let known = NOT_YET_SERVED_SUBRESOURCES
        .iter()
        .any(|(g, r, subs)| *g == info.group && *r == info.resource && subs.contains(&sub));
    if known {
        let what = format!("the {sub} subresource of {} is not implemented in rkube yet", crate::error::qualified(info));
        return rkube_api::status::Status::new(404, "NotFound", what).into();
    }
    ApiError::path_not_found()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(path: &str, method: Method, watch: bool) -> ApiResult<RequestInfo> {
        let segs: Vec<&str> = path.split('/').collect();
        parse("", "v1", &segs, &method, watch)
    }

    #[test]
    fn namespaced_paths_parse() {
        let r = p("namespaces/default/pods/web/status", Method::PUT, false).unwrap();
        assert_eq!(r.info.resource, "pods");
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(r.name.as_deref(), Some("web"));
        assert_eq!(r.subresource.as_deref(), Some("status"));
        assert_eq!(r.verb, Verb::Update);
        let r = p("pods", Method::GET, true).unwrap();
        assert_eq!(r.verb, Verb::Watch);
        assert!(r.namespace.is_none());
        let r = p("watch/namespaces/ns/pods", Method::GET, false).unwrap();
        assert_eq!(r.verb, Verb::Watch);
    }

    #[test]
    fn namespace_object_paths_parse() {
        let r = p("namespaces/kube-system", Method::GET, false).unwrap();
        assert_eq!(r.info.resource, "namespaces");
        assert_eq!(r.name.as_deref(), Some("kube-system"));
        let r = p("namespaces/kube-system/status", Method::GET, false).unwrap();
        assert_eq!(r.subresource.as_deref(), Some("status"));
        assert!(p("namespaces", Method::DELETE, false).is_err_and(|e| e.code() == 405));
    }

    #[test]
    fn paths_are_percent_decoded_like_go() {
        assert_eq!(decode_path("/api/v1/x").unwrap(), "/api/v1/x");
        assert_eq!(decode_path("/a/system%3Anode/%2e%2E/a+b").unwrap(), "/a/system:node/../a+b");
        for bad in ["/a%", "/a%2", "/a%zz", "/a%ff"] {
            assert_eq!(decode_path(bad).unwrap_err().code(), 400, "{bad}");
        }
    }

    #[test]
    fn node_proxy_paths_carry_the_kubelet_path_and_take_the_connect_verbs() {
        let r = p("nodes/n1/proxy/stats/summary", Method::GET, false).unwrap();
        assert_eq!((r.name.as_deref(), r.subresource.as_deref(), r.verb), (Some("n1"), Some("proxy"), Verb::Get));
        assert_eq!(p("nodes/n1/proxy", Method::POST, false).unwrap().verb, Verb::Create);
        assert_eq!(p("nodes/n1/proxy/x", Method::DELETE, false).unwrap().verb, Verb::Delete);
        // Only nodes/proxy takes a path after the subresource.
        assert_eq!(p("nodes/n1/status/x", Method::GET, false).unwrap_err().code(), 404);
        assert_eq!(p("namespaces/ns/pods/p/proxy/x", Method::GET, false).unwrap_err().code(), 404);
    }

    #[test]
    fn names_that_are_not_path_segments_are_bad_requests() {
        for name in ["..", ".", "a%b"] {
            let err = p(&format!("namespaces/ns/pods/{name}"), Method::GET, false).unwrap_err();
            assert_eq!(err.code(), 400, "{name}");
        }
        assert!(p("namespaces/ns/pods/a.b", Method::GET, false).is_ok());
    }

    #[test]
    fn unknown_and_misplaced_paths_are_not_found() {
        assert_eq!(p("widgets", Method::GET, false).unwrap_err().code(), 404);
        assert_eq!(p("nodes/n1/binding", Method::POST, false).unwrap_err().code(), 404);
        assert_eq!(p("pods/web", Method::GET, false).unwrap_err().code(), 404);
        assert_eq!(p("namespaces/ns/pods", Method::PUT, false).unwrap_err().code(), 405);
    }
}
