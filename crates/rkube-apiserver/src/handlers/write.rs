//! Pieces shared by the write handlers: type-meta and namespace checks,
//! namespace existence, encoding for storage, and ClusterIP assignment.

use rkube_api::registry::{self, ResourceInfo};
use rkube_api::status::{Status, StatusDetails};
use rkube_storage::RangeRequest;
use serde_json::{json, Value};

use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::ipalloc::{AllocError, ClusterIpAllocator};
use crate::object;
use crate::source::decode_stored;
use crate::state::ApiState;

/// Checks (and fills when missing) `apiVersion` and `kind` of a body sent to
/// a resource whose kind is `kind` in `info`'s group version (400 on a
/// mismatch). A body in another version of the same resource is converted
/// (through the CRD's conversion webhook for a `Webhook` CRD,
/// [`crate::crd_conversion`]; its failures are 500s).
pub async fn check_type_meta(st: &ApiState, info: &ResourceInfo, kind: &str, obj: &mut Value) -> ApiResult<()> {
    let expected_av = info.api_version();
    let map = obj.as_object_mut().ok_or_else(|| ApiError::bad_request("the request body must be a JSON object"))?;
    let av = map.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
    let k = map.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    if !av.is_empty() && av != expected_av {
        let (group, _) = registry::split_api_version(&av);
        let sent_as = registry::lookup_kind(&av, &k).filter(|r| group == info.group && r.resource == info.resource);
        let Some(sent_as) = sent_as else {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({expected_av})"
            )));
        };
        // Another version of the same resource (autoscaling/v2 sent to
        // autoscaling/v1): converted through the stored version, as
        // upstream's decoder converts to the endpoint's version.
        if crate::crd_conversion::by_webhook(info) {
            let converted = crate::crd_conversion::convert(st, info, vec![std::mem::take(obj)], &expected_av, false).await?;
            *obj = converted.into_iter().next().ok_or_else(|| ApiError::internal("conversion returned no object"))?;
        } else if sent_as.conversion.is_some() || info.conversion.is_some() {
            *obj = info.to_served(sent_as.to_stored(std::mem::take(obj)));
        }
    }
    let map = obj.as_object_mut().ok_or_else(|| ApiError::bad_request("the request body must be a JSON object"))?;
    if !k.is_empty() && k != kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({kind})"
        )));
    }
    map.insert("apiVersion".into(), Value::String(expected_av));
    map.insert("kind".into(), Value::String(kind.to_string()));
    Ok(())
}

/// Reconciles the body's `metadata.namespace` with the path's: namespaced
/// objects take the path namespace (400 when the body names another one);
/// cluster-scoped objects have none.
pub fn check_namespace(ctx: &Ctx, obj: &mut Value) -> ApiResult<()> {
    let body_ns = object::namespace(obj).to_string();
    if ctx.ri.info.namespaced {
        let path_ns = ctx.namespace();
        if !body_ns.is_empty() && body_ns != path_ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        object::set_meta(obj, "namespace", json!(path_ns));
    } else {
        object::remove_meta(obj, "namespace");
    }
    Ok(())
}

/// For namespaced creates: the namespace must exist (404) and not be
/// terminating (403), as upstream's `NamespaceLifecycle` admission.
pub async fn check_namespace_usable(ctx: &Ctx, name: &str) -> ApiResult<()> {
    let info = ctx.ri.info;
    if !info.namespaced {
        return Ok(());
    }
    let ns = ctx.namespace();
    let ns_info =
        registry::lookup("", "v1", "namespaces").ok_or_else(|| ApiError::internal("no namespaces resource"))?;
    let key = ns_info.object_key(ctx.st.prefix(), "", ns);
    let kv = ctx.st.storage.get(&key).await.map_err(|e| ApiError::from_storage(e, ns_info, ns))?;
    let Some(kv) = kv else {
        return Err(ApiError::not_found(ns_info, ns));
    };
    let obj = decode_stored(&kv.key, &kv.value, kv.mod_revision).map_err(|e| ApiError::from_storage(e, ns_info, ns))?;
    if object::is_terminating(&obj) {
        let qualified = crate::error::qualified(info);
        let msg = format!(
            "{qualified} {name:?} is forbidden: unable to create new content in namespace {ns} because it is being terminated"
        );
        let details = StatusDetails {
            name: name.to_string(),
            group: info.group.to_string(),
            kind: info.resource.to_string(),
            causes: vec![rkube_api::status::StatusCause::new(
                "NamespaceTerminating",
                format!("namespace {ns} is being terminated"),
                "metadata.namespace",
            )],
            ..StatusDetails::default()
        };
        return Err(Status::new(403, "Forbidden", msg).with_details(details).into());
    }
    Ok(())
}

/// The bytes stored for `obj`: its JSON without `metadata.resourceVersion`
/// (the revision is the resourceVersion; upstream stores it empty too), keys
/// in typed order as kube-apiserver stores them ([`rkube_api::wire`]).
/// Errors: an encoding error as 500.
pub fn encode_for_storage(obj: &Value) -> ApiResult<bytes::Bytes> {
    encode_for_storage_nested(obj).map(|(bytes, _)| bytes)
}

/// [`encode_for_storage`], and how deeply the bytes nest
/// ([`rkube_api::wire::to_typed_json_nested`]), for [`stored_nesting`].
pub fn encode_for_storage_nested(obj: &Value) -> ApiResult<(bytes::Bytes, usize)> {
    let (bytes, nesting) = rkube_api::wire::to_typed_json_nested(obj, true).map_err(ApiError::internal)?;
    Ok((bytes::Bytes::from(bytes), nesting))
}

/// The deepest a client's object may nest as stored, with its
/// managedFields: three levels less than a body may nest
/// ([`crate::patch::MAX_NESTING_DEPTH`], serde_json's recursion limit,
/// which every decoder of stored objects here has), so that the answers
/// that hold it deeper stay readable by clients that decode with
/// serde_json too (kube-rs): a Table row holds the object's metadata three
/// levels down, a LIST its items two, a watch event one.
pub const STORED_MAX_NESTING: usize = crate::patch::MAX_NESTING_DEPTH - 3;

/// Refuses a create or update whose object would be stored `nesting`
/// levels deep when that is deeper than [`STORED_MAX_NESTING`] and than
/// `old`, the object it replaces, already nests (an object stored before
/// this limit keeps the depth it has): such an object would be written but
/// not read again (a Table, a watch event, a LIST or the next update of it
/// would fail). A body is held to its own limit when it is decoded, but
/// the object's managedFields nest its fields deeper again: `metadata`,
/// the list, the entry and `fieldsV1` are four levels, and a field set
/// nests one level more than the maps it follows (a scalar leaf is `{}`).
/// 400 `BadRequest`; upstream's decoder stops at 10,000 levels.
pub fn stored_nesting(nesting: usize, old: Option<&Value>) -> ApiResult<()> {
    let max = STORED_MAX_NESTING;
    if nesting <= max || old.is_some_and(|old| nesting <= crate::patch::json::nesting_depth(old)) {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "the object cannot be stored: with its managedFields it nests {nesting} levels deep, \
         deeper than the {max} levels stored objects may nest"
    )))
}

/// [`encode_for_storage_nested`] of `obj`, an object of `info`, in the
/// stored version's form ([`ResourceInfo::to_stored`]: events.k8s.io/v1
/// events are stored as core/v1 events; a `Webhook` CRD's custom resources
/// are converted by its webhook, [`crate::crd_conversion::stored`]).
pub async fn encode_stored(st: &ApiState, info: &ResourceInfo, obj: &Value) -> ApiResult<(bytes::Bytes, usize)> {
    if info.conversion.is_none() {
        return encode_for_storage_nested(obj);
    }
    encode_for_storage_nested(&crate::crd_conversion::stored(st, info, obj.clone()).await?)
}

/// Assigns `spec.clusterIP`/`clusterIPs` to a Service being created (or
/// keeps `old`'s on update). Headless (`None`) and `ExternalName` services get none.
pub async fn assign_cluster_ip(ctx: &Ctx, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    let spec_ty = obj.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP").to_string();
    let requested = obj.pointer("/spec/clusterIP").and_then(Value::as_str).unwrap_or("").to_string();
    if let Some(old) = old {
        let old_ip = old.pointer("/spec/clusterIP").and_then(Value::as_str).unwrap_or("").to_string();
        if !old_ip.is_empty() && spec_ty != "ExternalName" {
            if requested.is_empty() {
                if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.insert("clusterIP".into(), json!(old_ip));
                    let ips = old.pointer("/spec/clusterIPs").cloned().unwrap_or_else(|| json!([old_ip]));
                    spec.insert("clusterIPs".into(), ips);
                }
            } else if requested != old_ip {
                let causes = vec![rkube_api::field_error::FieldError::invalid(
                    "spec.clusterIPs[0]",
                    &requested,
                    "may not change once set",
                )
                .into()];
                return Err(ApiError::invalid(ctx.ri.info, object::name(obj), causes));
            }
            return Ok(());
        }
    }
    if spec_ty == "ExternalName" || requested == "None" {
        return Ok(());
    }
    let prefix = ctx.ri.info.list_prefix(ctx.st.prefix(), None);
    let resp = ctx
        .st
        .storage
        .range(RangeRequest::prefix(&prefix))
        .await
        .map_err(|e| ApiError::from_storage(e, ctx.ri.info, object::name(obj)))?;
    let services: Vec<Value> = resp.kvs.iter().filter_map(|kv| serde_json::from_slice(&kv.value).ok()).collect();
    let live = ClusterIpAllocator::live_ips(services.iter());
    let want = (!requested.is_empty()).then_some(requested.as_str());
    let ip = ctx.st.cluster_ips.allocate(want, &live).map_err(|e| {
        let name = object::name(obj).to_string();
        match e {
            AllocError::Full => ApiError::internal("failed to allocate a serviceIP: range is full"),
            other => {
                let msg = other.to_string();
                ApiError::invalid(
                    ctx.ri.info,
                    &name,
                    vec![rkube_api::field_error::FieldError::invalid("spec.clusterIPs", &requested, msg).into()],
                )
            }
        }
    })?;
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("clusterIP".into(), json!(ip.to_string()));
        spec.insert("clusterIPs".into(), json!([ip.to_string()]));
    }
    Ok(())
}

/// Upstream's default `--service-node-port-range`.
pub const NODE_PORT_RANGE: (i64, i64) = (30000, 32767);

/// Assigns `nodePort`s to the ports of a `NodePort`/`LoadBalancer` Service
/// that lack one (keeping `old`'s on update), and checks requested ones
/// against the range and the ports other Services hold (422 otherwise).
pub async fn assign_node_ports(ctx: &Ctx, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    let ty = obj.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP");
    if ty != "NodePort" && ty != "LoadBalancer" {
        return Ok(());
    }
    let name = object::name(obj).to_string();
    let namespace = object::namespace(obj).to_string();
    let prefix = ctx.ri.info.list_prefix(ctx.st.prefix(), None);
    let resp = ctx
        .st
        .storage
        .range(RangeRequest::prefix(&prefix))
        .await
        .map_err(|e| ApiError::from_storage(e, ctx.ri.info, &name))?;
    let mut used: std::collections::HashSet<i64> = std::collections::HashSet::new();
    for kv in &resp.kvs {
        let Ok(svc) = serde_json::from_slice::<Value>(&kv.value) else { continue };
        if object::name(&svc) == name && object::namespace(&svc) == namespace {
            continue;
        }
        for p in svc.pointer("/spec/ports").and_then(Value::as_array).into_iter().flatten() {
            if let Some(n) = p.get("nodePort").and_then(Value::as_i64) {
                used.insert(n);
            }
        }
    }
    let old_ports: Vec<Value> =
        old.and_then(|o| o.pointer("/spec/ports")).and_then(Value::as_array).cloned().unwrap_or_default();
    let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) else { return Ok(()) };
    let (lo, hi) = NODE_PORT_RANGE;
    let span = (hi - lo + 1) as u64;
    let mut causes = Vec::new();
    for (i, p) in ports.iter_mut().enumerate() {
        let Some(pm) = p.as_object_mut() else { continue };
        let requested = pm.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
        if requested != 0 {
            let field = format!("spec.ports[{i}].nodePort");
            if !(lo..=hi).contains(&requested) {
                let msg = format!("provided port is not in the valid range. The range of valid ports is {lo}-{hi}");
                causes.push(rkube_api::field_error::FieldError::invalid_json(&field, &json!(requested), msg).into());
            } else if !used.insert(requested) {
                let msg = "provided port is already allocated";
                causes.push(rkube_api::field_error::FieldError::invalid_json(&field, &json!(requested), msg).into());
            }
            continue;
        }
        let same = |o: &&Value| o.get("port") == pm.get("port") && o.get("protocol") == pm.get("protocol");
        if let Some(n) = old_ports.iter().find(same).and_then(|o| o.get("nodePort")).and_then(Value::as_i64) {
            used.insert(n);
            pm.insert("nodePort".into(), json!(n));
            continue;
        }
        let start = u64::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().unwrap_or([0; 8])) % span;
        let free = (0..span).map(|k| lo + ((start + k) % span) as i64).find(|n| !used.contains(n));
        match free {
            Some(n) => {
                used.insert(n);
                pm.insert("nodePort".into(), json!(n));
            }
            None => return Err(ApiError::internal("failed to allocate a nodePort: range is full")),
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(ctx.ri.info, &name, causes));
    }
    Ok(())
}
