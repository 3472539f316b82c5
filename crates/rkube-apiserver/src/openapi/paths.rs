//! The `paths` of the published documents: one entry per collection, item,
//! all-namespaces list and subresource of every resource in
//! `rkube_api::registry`, with operations, query parameters and the
//! `x-kubernetes-group-version-kind` / `x-kubernetes-action` extensions.
//!
//! kubectl reads this to decide whether the server validates fields itself:
//! its `QueryParamVerifier` (cli-runtime `query_param_verifier*.go`) looks
//! for a PATCH operation whose `x-kubernetes-group-version-kind` is the
//! object's GVK and whose parameters include `fieldValidation`. When found,
//! kubectl sends `fieldValidation=Strict` and leaves validation to the
//! server; otherwise it validates client-side against the schemas. rkube
//! advertises `fieldValidation` on POST, PUT and PATCH of every resource.
//!
//! Paths are built once in a neutral form ([`PathItem`]) and rendered in the
//! Swagger 2.0 or OpenAPI 3.0 shape by [`render`].

use rkube_api::registry::{self, ResourceInfo};
use serde_json::{json, Map, Value};

use super::kinds;

/// Which document shape to render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// Swagger 2.0 (`/openapi/v2`): `#/definitions/`, `in: body` parameters.
    V2,
    /// OpenAPI 3.0 (`/openapi/v3/...`): `#/components/schemas/`, `requestBody`.
    V3,
}

impl Flavor {
    fn reference(self, definition: &str) -> Value {
        match self {
            Flavor::V2 => json!({"$ref": format!("#/definitions/{definition}")}),
            Flavor::V3 => json!({"$ref": format!("#/components/schemas/{definition}")}),
        }
    }
}

/// A query or path parameter.
#[derive(Debug, Clone, Copy)]
struct Param {
    name: &'static str,
    location: &'static str,
    ty: &'static str,
    description: &'static str,
}

const fn query(name: &'static str, ty: &'static str, description: &'static str) -> Param {
    Param { name, location: "query", ty, description }
}

const PRETTY: Param = query("pretty", "string", "If 'true', the output is pretty printed.");
const NAMESPACE: Param =
    Param { name: "namespace", location: "path", ty: "string", description: "object name and auth scope, such as for teams and projects" };
const NAME: Param = Param { name: "name", location: "path", ty: "string", description: "name of the object" };

const LIST_PARAMS: &[Param] = &[
    query("allowWatchBookmarks", "boolean", "Ask for BOOKMARK watch events; the server may send them."),
    query("continue", "string", "Continue token from a previous paged list."),
    query("fieldSelector", "string", "Restrict the returned objects by their fields."),
    query("labelSelector", "string", "Restrict the returned objects by their labels."),
    query("limit", "integer", "Maximum number of objects to return in one page."),
    query("resourceVersion", "string", "Resource version the list or watch starts from; see the API concepts docs."),
    query("resourceVersionMatch", "string", "How resourceVersion is applied to a list: Exact or NotOlderThan."),
    query("sendInitialEvents", "boolean", "With watch=true, start the watch with synthetic events for the current state."),
    query("timeoutSeconds", "integer", "Timeout for the list or watch call, in seconds."),
    query("watch", "boolean", "Watch for changes and return them as a stream of add, update and remove notifications."),
];

const DRY_RUN: Param = query("dryRun", "string", "When present (All), modifications are not persisted.");
const FIELD_MANAGER: Param = query("fieldManager", "string", "Name of the actor making the change, recorded in managedFields.");
const FIELD_VALIDATION: Param = query(
    "fieldValidation",
    "string",
    "How the server handles unknown or duplicate fields in the request body: Ignore, Warn or Strict.",
);
const FORCE: Param = query("force", "boolean", "Force an apply request to take ownership of conflicting fields.");

const WRITE_PARAMS: &[Param] = &[DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
const PATCH_PARAMS: &[Param] = &[DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION, FORCE];
const DELETE_PARAMS: &[Param] = &[
    DRY_RUN,
    query("gracePeriodSeconds", "integer", "Seconds before the object should be deleted; 0 deletes immediately."),
    query("orphanDependents", "boolean", "Deprecated: use propagationPolicy."),
    query("propagationPolicy", "string", "Whether and how garbage collection is performed: Orphan, Background or Foreground."),
];

/// Media types a PATCH accepts.
const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];
/// Media types rkube answers with.
const PRODUCES: &[&str] = &["application/json", "application/yaml"];

/// One operation of a path.
#[derive(Debug, Clone)]
struct Op {
    method: &'static str,
    operation_id: String,
    description: String,
    action: &'static str,
    gvk: (&'static str, &'static str, &'static str),
    params: Vec<Param>,
    body: Option<(String, bool)>,
    consumes: &'static [&'static str],
    responses: Vec<(&'static str, &'static str, Option<String>)>,
    tag: String,
}

/// One path with its path-level parameters and operations.
#[derive(Debug, Clone)]
pub(crate) struct PathItem {
    /// The URL path, e.g. `/api/v1/namespaces/{namespace}/pods`.
    pub path: String,
    /// `(group, version)` the path belongs to.
    pub group_version: (&'static str, &'static str),
    params: Vec<Param>,
    ops: Vec<Op>,
}

const OK: &str = "OK";

fn camel_group(group: &str) -> String {
    if group.is_empty() {
        return "Core".to_string();
    }
    let first = group.split('.').next().unwrap_or(group);
    let mut out = String::new();
    for part in first.split('-') {
        let mut chars = part.chars();
        if let Some(c) = chars.next() {
            out.extend(c.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

fn camel_version(version: &str) -> String {
    let mut chars = version.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn tag(group: &str, version: &str) -> String {
    let g = if group.is_empty() { "core" } else { group.split('.').next().unwrap_or(group) };
    format!("{}_{version}", g.replace('-', "_"))
}

/// Builds every path item for the resources of the registry that have a schema.
pub(crate) fn build() -> Vec<PathItem> {
    let mut items = Vec::new();
    for (group, version) in kinds::group_versions() {
        let prefix = format!("/{}", kinds::group_version_path(group, version));
        items.push(PathItem {
            path: format!("{prefix}/"),
            group_version: (group, version),
            params: Vec::new(),
            ops: vec![Op {
                method: "get",
                operation_id: format!("get{}{}APIResources", camel_group(group), camel_version(version)),
                description: "get available resources".to_string(),
                action: "",
                gvk: ("", "", ""),
                params: Vec::new(),
                body: None,
                consumes: &[],
                responses: vec![("200", OK, Some("io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList".into()))],
                tag: tag(group, version),
            }],
        });
        for r in registry::all().iter().filter(|r| r.group == group && r.version == version) {
            resource_paths(r, &prefix, &mut items);
        }
    }
    items
}

fn resource_paths(r: &'static ResourceInfo, prefix: &str, items: &mut Vec<PathItem>) {
    let Some(kind) = kinds::lookup(r.group, r.kind) else { return };
    // Create-only rows (the review APIs) have no list kind and no list paths.
    let list_def = kinds::list_definition(kind);
    resource_paths_with(r, prefix, kind.definition.to_string(), list_def, items);
}

/// The path items of row `r` under `prefix` (`/apis/<group>/<version>`),
/// whose kind is the definition `def` and list kind `list_def`; also used
/// for custom resources, whose definitions come from their CRD.
pub(crate) fn resource_paths_with(
    r: &'static ResourceInfo,
    prefix: &str,
    def: String,
    list_def: Option<String>,
    items: &mut Vec<PathItem>,
) {
    let gv = (r.group, r.version);
    let gvk = (r.group, r.version, r.kind);
    let id_mid = format!("{}{}", camel_group(r.group), camel_version(r.version));
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let t = tag(r.group, r.version);
    let has = |verb: &str| r.verbs.contains(&verb);
    let op = |method: &'static str, verb: &str, action: &'static str, description: String| Op {
        method,
        operation_id: format!("{verb}{id_mid}{scope}{}", r.kind),
        description,
        action,
        gvk,
        params: Vec::new(),
        body: None,
        consumes: &[],
        responses: Vec::new(),
        tag: t.clone(),
    };

    let (collection, item) = if r.namespaced {
        (format!("{prefix}/namespaces/{{namespace}}/{}", r.resource), format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.resource))
    } else {
        (format!("{prefix}/{}", r.resource), format!("{prefix}/{}/{{name}}", r.resource))
    };
    let scope_params: Vec<Param> = if r.namespaced { vec![NAMESPACE, PRETTY] } else { vec![PRETTY] };

    // Collection: list, create, deletecollection.
    let mut ops = Vec::new();
    if let (true, Some(list_def)) = (has("list"), &list_def) {
        let mut o = op("get", "list", "list", format!("list or watch {} objects", r.kind));
        o.params = LIST_PARAMS.to_vec();
        o.responses = vec![("200", OK, Some(list_def.clone()))];
        ops.push(o);
    }
    if has("create") {
        let mut o = op("post", "create", "post", format!("create a {}", r.kind));
        o.params = WRITE_PARAMS.to_vec();
        o.body = Some((def.clone(), true));
        o.consumes = &["*/*"];
        o.responses = vec![("200", OK, Some(def.clone())), ("201", "Created", Some(def.clone())), ("202", "Accepted", Some(def.clone()))];
        ops.push(o);
    }
    if has("deletecollection") {
        let mut o = op("delete", "delete", "deletecollection", format!("delete a collection of {} objects", r.kind));
        o.operation_id = format!("delete{id_mid}Collection{scope}{}", r.kind);
        o.params = LIST_PARAMS.iter().chain(DELETE_PARAMS).copied().collect();
        o.body = Some(("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions".into(), false));
        o.consumes = &["*/*"];
        o.responses = vec![("200", OK, Some("io.k8s.apimachinery.pkg.apis.meta.v1.Status".into()))];
        ops.push(o);
    }
    if !ops.is_empty() {
        items.push(PathItem { path: collection, group_version: gv, params: scope_params.clone(), ops });
    }

    // Item: read, replace, patch, delete.
    let mut item_params = vec![NAME];
    item_params.extend(scope_params.iter().copied());
    let mut ops = Vec::new();
    if has("get") {
        let mut o = op("get", "read", "get", format!("read the specified {}", r.kind));
        o.responses = vec![("200", OK, Some(def.clone()))];
        ops.push(o);
    }
    if has("update") {
        let mut o = op("put", "replace", "put", format!("replace the specified {}", r.kind));
        o.params = WRITE_PARAMS.to_vec();
        o.body = Some((def.clone(), true));
        o.consumes = &["*/*"];
        o.responses = vec![("200", OK, Some(def.clone())), ("201", "Created", Some(def.clone()))];
        ops.push(o);
    }
    if has("patch") {
        let mut o = op("patch", "patch", "patch", format!("partially update the specified {}", r.kind));
        o.params = PATCH_PARAMS.to_vec();
        o.body = Some(("io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(), true));
        o.consumes = PATCH_TYPES;
        o.responses = vec![("200", OK, Some(def.clone())), ("201", "Created", Some(def.clone()))];
        ops.push(o);
    }
    if has("delete") {
        let mut o = op("delete", "delete", "delete", format!("delete a {}", r.kind));
        o.params = DELETE_PARAMS.to_vec();
        o.body = Some(("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions".into(), false));
        o.consumes = &["*/*"];
        o.responses = vec![("200", OK, Some(def.clone())), ("202", "Accepted", Some(def.clone()))];
        ops.push(o);
    }
    if !ops.is_empty() {
        items.push(PathItem { path: item.clone(), group_version: gv, params: item_params.clone(), ops });
    }

    // All namespaces list.
    if let (true, Some(list_def)) = (r.namespaced && has("list"), &list_def) {
        let mut o = op("get", "list", "list", format!("list or watch {} objects in all namespaces", r.kind));
        o.operation_id = format!("list{id_mid}{}ForAllNamespaces", r.kind);
        o.params = LIST_PARAMS.to_vec();
        o.responses = vec![("200", OK, Some(list_def.clone()))];
        items.push(PathItem { path: format!("{prefix}/{}", r.resource), group_version: gv, params: vec![PRETTY], ops: vec![o] });
    }

    // Subresources.
    for sub in r.subresources {
        let (sub_def, sub_gvk) = if r.custom.is_some() && sub.kind == r.kind {
            (def.clone(), gvk)
        } else {
            let Some(sub_kind) = kinds::lookup(r.group, sub.kind).or_else(|| kinds::lookup("", sub.kind)) else { continue };
            (sub_kind.definition.to_string(), (sub_kind.group, sub_kind.version, sub_kind.kind))
        };
        let suffix = camel_version(sub.name);
        let mut ops = Vec::new();
        for verb in sub.verbs {
            let mut o = match *verb {
                "get" => {
                    let mut o = op("get", "read", "get", format!("read {} of the specified {}", sub.name, r.kind));
                    o.responses = vec![("200", OK, Some(sub_def.clone()))];
                    o
                }
                "update" => {
                    let mut o = op("put", "replace", "put", format!("replace {} of the specified {}", sub.name, r.kind));
                    o.params = WRITE_PARAMS.to_vec();
                    o.body = Some((sub_def.clone(), true));
                    o.consumes = &["*/*"];
                    o.responses = vec![("200", OK, Some(sub_def.clone())), ("201", "Created", Some(sub_def.clone()))];
                    o
                }
                "patch" => {
                    let mut o = op("patch", "patch", "patch", format!("partially update {} of the specified {}", sub.name, r.kind));
                    o.params = PATCH_PARAMS.to_vec();
                    o.body = Some(("io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(), true));
                    o.consumes = PATCH_TYPES;
                    o.responses = vec![("200", OK, Some(sub_def.clone())), ("201", "Created", Some(sub_def.clone()))];
                    o
                }
                "create" => {
                    let mut o = op("post", "create", "post", format!("create {} of a {}", sub.name, r.kind));
                    o.params = WRITE_PARAMS.to_vec();
                    o.body = Some((sub_def.clone(), true));
                    o.consumes = &["*/*"];
                    o.responses = vec![
                        ("200", OK, Some(sub_def.clone())),
                        ("201", "Created", Some(sub_def.clone())),
                        ("202", "Accepted", Some(sub_def.clone())),
                    ];
                    o
                }
                _ => continue,
            };
            o.operation_id.push_str(&suffix);
            o.gvk = sub_gvk;
            ops.push(o);
        }
        if !ops.is_empty() {
            items.push(PathItem { path: format!("{item}/{}", sub.name), group_version: gv, params: item_params.clone(), ops });
        }
    }
}

fn render_param(p: &Param, flavor: Flavor) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), p.name.into());
    m.insert("in".into(), p.location.into());
    m.insert("description".into(), p.description.into());
    if p.location == "path" {
        m.insert("required".into(), true.into());
    }
    match flavor {
        Flavor::V2 => {
            m.insert("type".into(), p.ty.into());
        }
        Flavor::V3 => {
            m.insert("schema".into(), json!({"type": p.ty}));
        }
    }
    m.insert("uniqueItems".into(), true.into());
    Value::Object(m)
}

fn render_op(o: &Op, flavor: Flavor) -> Value {
    let mut m = Map::new();
    m.insert("description".into(), o.description.clone().into());
    if flavor == Flavor::V2 {
        if !o.consumes.is_empty() {
            m.insert("consumes".into(), json!(o.consumes));
        }
        m.insert("produces".into(), json!(PRODUCES));
        m.insert("schemes".into(), json!(["https"]));
    }
    m.insert("tags".into(), json!([o.tag]));
    m.insert("operationId".into(), o.operation_id.clone().into());
    let mut params: Vec<Value> = Vec::new();
    if let (Flavor::V2, Some((def, required))) = (flavor, &o.body) {
        params.push(json!({"name": "body", "in": "body", "required": required, "schema": flavor.reference(def)}));
    }
    params.extend(o.params.iter().map(|p| render_param(p, flavor)));
    if !params.is_empty() {
        m.insert("parameters".into(), Value::Array(params));
    }
    if let (Flavor::V3, Some((def, required))) = (flavor, &o.body) {
        let types: &[&str] = if o.consumes.is_empty() || o.consumes == ["*/*"] { &["*/*"] } else { o.consumes };
        let content: Map<String, Value> =
            types.iter().map(|t| ((*t).to_string(), json!({"schema": flavor.reference(def)}))).collect();
        m.insert("requestBody".into(), json!({"content": content, "required": required}));
    }
    let mut responses = Map::new();
    for (code, description, schema) in &o.responses {
        let mut r = Map::new();
        r.insert("description".into(), (*description).into());
        if let Some(def) = schema {
            match flavor {
                Flavor::V2 => {
                    r.insert("schema".into(), flavor.reference(def));
                }
                Flavor::V3 => {
                    let content: Map<String, Value> =
                        PRODUCES.iter().map(|t| ((*t).to_string(), json!({"schema": flavor.reference(def)}))).collect();
                    r.insert("content".into(), Value::Object(content));
                }
            }
        }
        responses.insert((*code).to_string(), Value::Object(r));
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    m.insert("responses".into(), Value::Object(responses));
    if !o.action.is_empty() {
        m.insert("x-kubernetes-action".into(), o.action.into());
        let (g, v, k) = o.gvk;
        m.insert("x-kubernetes-group-version-kind".into(), json!({"group": g, "kind": k, "version": v}));
    }
    Value::Object(m)
}

/// Renders path items into a `paths` object of the given flavour.
pub(crate) fn render<'a>(items: impl IntoIterator<Item = &'a PathItem>, flavor: Flavor) -> Map<String, Value> {
    let mut paths = Map::new();
    for item in items {
        let mut m = Map::new();
        for o in &item.ops {
            m.insert(o.method.into(), render_op(o, flavor));
        }
        if !item.params.is_empty() {
            m.insert("parameters".into(), Value::Array(item.params.iter().map(|p| render_param(p, flavor)).collect()));
        }
        paths.insert(item.path.clone(), Value::Object(m));
    }
    paths
}
