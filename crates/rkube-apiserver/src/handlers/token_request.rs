//! `serviceaccounts/<name>/token` (authentication.k8s.io/v1 `TokenRequest`):
//! issues a bound ServiceAccount token, as upstream's `TokenREST`
//! (`pkg/registry/core/serviceaccount/storage/token.go`) with the
//! validation of `pkg/apis/authentication/validation`.
//!
//! - `spec.audiences` defaults to the API audiences (`--api-audiences`);
//! - `spec.expirationSeconds` defaults to 3600, must be at least 600 and at
//!   most 2^32 (422 `Invalid` otherwise), and is shortened to
//!   `--service-account-max-token-expiration` when that is lower;
//! - `spec.boundObjectRef` may name a `Pod`, `Secret` or `Node` (`v1`): it must
//!   exist (404) with the given UID (409), a Pod must run as this
//!   ServiceAccount (400), and a Pod's node goes into the token too;
//! - the ServiceAccount must exist (404).
//!
//! Nothing is stored: the answer is the request with `status.token` and
//! `status.expirationTimestamp`, 201 `Created`.

use axum::response::Response;
use rkube_api::field_error::FieldError;
use rkube_api::registry;
use rkube_api::status::Status;
use serde_json::{json, Value};

use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::media;
use crate::object;
use crate::serviceaccount::claims::{ObjectRef, TokenSpec, MAX_EXPIRATION_SECONDS, MIN_EXPIRATION_SECONDS};

/// Lifetime of a token whose request gives none, seconds (upstream default).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

fn invalid(name: &str, causes: Vec<FieldError>) -> ApiError {
    Status::invalid("authentication.k8s.io", "TokenRequest", name, causes.into_iter().map(Into::into).collect()).into()
}

/// POST `serviceaccounts/<name>/token`.
pub async fn create(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let Some(config) = ctx.st.service_account_tokens.clone().filter(|c| c.signer.is_some()) else {
        return Err(Status::new(
            404,
            "NotFound",
            "the token subresource of serviceaccounts is not enabled: start the API server with --service-account-issuer and --service-account-signing-key-file",
        )
        .into());
    };
    let ns = ctx.namespace().to_string();
    let name = ctx.name().to_string();
    let mut req = media::decode_object(&media::content_type(&ctx.headers), body)?;
    match req.get("kind").and_then(Value::as_str) {
        Some("TokenRequest") | None => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind (TokenRequest)"
            )))
        }
    }
    let given = object::name(&req);
    if !given.is_empty() && given != name {
        return Err(ApiError::bad_request(format!("name in URL does not match name in TokenRequest object: {name} != {given}")));
    }
    let spec = req.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences = config.api_audiences.clone();
    }
    let mut expiration = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            invalid(&name, vec![FieldError::invalid_json("spec.expirationSeconds", v, "must be an integer")])
        })?,
    };
    if expiration < MIN_EXPIRATION_SECONDS {
        return Err(invalid(
            &name,
            vec![FieldError::invalid_json("spec.expirationSeconds", &json!(expiration), "may not specify a duration less than 10 minutes")],
        ));
    }
    if expiration > MAX_EXPIRATION_SECONDS {
        return Err(invalid(
            &name,
            vec![FieldError::invalid_json("spec.expirationSeconds", &json!(expiration), "may not specify a duration larger than 2^32 seconds")],
        ));
    }
    if let Some(max) = config.max_expiration_seconds {
        expiration = expiration.min(max);
    }

    let sa_info = ctx.ri.info;
    let sa = load(ctx, sa_info, &ns, &name).await?.ok_or_else(|| ApiError::not_found(sa_info, &name))?;
    let service_account = ObjectRef { name: name.clone(), uid: uid_of(&sa).to_string() };
    let mut token = TokenSpec { namespace: ns.clone(), service_account, audiences, expiration_seconds: expiration, ..TokenSpec::default() };

    let bound = spec.get("boundObjectRef").filter(|v| !v.is_null()).cloned();
    if let Some(r) = &bound {
        let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
        let api_version = r.get("apiVersion").and_then(Value::as_str).unwrap_or("v1");
        let bound_name = r.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        let want_uid = r.get("uid").and_then(Value::as_str).unwrap_or("");
        let resource = match (api_version, kind) {
            ("v1", "Pod") => "pods",
            ("v1", "Secret") => "secrets",
            ("v1", "Node") => "nodes",
            _ => {
                return Err(invalid(
                    &name,
                    vec![FieldError::not_supported("spec.boundObjectRef.kind", kind, &["Pod", "Secret", "Node"])],
                ))
            }
        };
        let info = registry::lookup("", "v1", resource).ok_or_else(|| ApiError::internal(format!("{resource} are not served")))?;
        let obj_ns = if info.namespaced { ns.as_str() } else { "" };
        let obj = load(ctx, info, obj_ns, &bound_name).await?.ok_or_else(|| ApiError::not_found(info, &bound_name))?;
        let uid = uid_of(&obj).to_string();
        if !want_uid.is_empty() && want_uid != uid {
            return Err(ApiError::conflict(
                info,
                &bound_name,
                &format!(
                    "the UID in the bound object reference ({want_uid}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        let reference = ObjectRef { name: bound_name.clone(), uid };
        match resource {
            "pods" => {
                let pod_sa = obj.pointer("/spec/serviceAccountName").and_then(Value::as_str).unwrap_or("");
                if pod_sa != name {
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name."
                    )));
                }
                if let Some(node) = obj.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
                    let nodes = registry::lookup("", "v1", "nodes").ok_or_else(|| ApiError::internal("nodes are not served"))?;
                    let uid = load(ctx, nodes, "", node).await?.map(|n| uid_of(&n).to_string()).unwrap_or_default();
                    token.node = Some(ObjectRef { name: node.to_string(), uid });
                }
                token.pod = Some(reference);
            }
            "secrets" => token.secret = Some(reference),
            _ => token.node = Some(reference),
        }
    }

    let (jwt, exp) = config.issue(&token).map_err(ApiError::internal)?;
    let expires = chrono::DateTime::from_timestamp(exp, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default();
    let mut spec_out = json!({ "audiences": token.audiences, "expirationSeconds": expiration });
    spec_out["boundObjectRef"] = bound.unwrap_or(Value::Null);
    req = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": { "name": name, "namespace": ns, "creationTimestamp": null },
        "spec": spec_out,
        "status": { "token": jwt, "expirationTimestamp": expires },
    });
    Ok(media::respond(201, ctx.render.output, &req))
}

fn uid_of(obj: &Value) -> &str {
    obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("")
}

/// The stored object `name` of `info` (latest committed value).
async fn load(ctx: &Ctx, info: &'static registry::ResourceInfo, ns: &str, name: &str) -> ApiResult<Option<Value>> {
    let key = info.object_key(ctx.st.prefix(), ns, name);
    let kv = ctx.st.storage.get(&key).await.map_err(|e| ApiError::from_storage(e, info, name))?;
    match kv {
        None => Ok(None),
        Some(kv) => crate::source::decode_stored(&kv.key, &kv.value, kv.mod_revision)
            .map(Some)
            .map_err(|e| ApiError::from_storage(e, info, name)),
    }
}
