//! CertificateSigningRequests in the API server: what each write path may
//! change, the requester recorded on create, and the approval and signing
//! authorization checks.
//!
//! - Create (upstream `csrStrategy.PrepareForCreate`,
//!   `pkg/registry/certificates/certificates/strategy.go`): `spec.username`,
//!   `uid`, `groups` and `extra` are the requesting user's, whatever the body
//!   said; `status` starts empty.
//! - Update of the main resource: only metadata changes; `spec` and `status`
//!   stay as stored.
//! - `/status` (`csrStatusStrategy`): only `status`; existing `Approved` and
//!   `Denied` conditions are kept as stored, adding one is refused (422
//!   `updates may not add a condition of type "Approved"`); setting
//!   `status.certificate` needs verb `sign` on `signers` (upstream's
//!   `CertificateSigning` admission plugin, `plugin/pkg/admission/certificates/signing`).
//! - `/approval` (`csrApprovalStrategy`): only `status.conditions`; needs
//!   verb `approve` on `signers` (upstream's `CertificateApproval` admission
//!   plugin, `plugin/pkg/admission/certificates/approval`).
//!
//! Conditions without `lastUpdateTime` get the current time; without
//! `lastTransitionTime`, the stored one of the same type and status, else now
//! (upstream `populateConditionTimestamps`).
//!
//! The signer lives in [`signer`].

pub mod signer;

use rkube_api::csr::{self as api_csr, APPROVED, DENIED};
use rkube_api::field_error::FieldError;
use rkube_api::registry::ResourceInfo;
use rkube_api::status::{Status, StatusDetails};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::filters::authn::UserInfo;
use crate::filters::authz::Decision;
use crate::filters::requestinfo::RequestAttributes;
use crate::handlers::Ctx;

/// True for the `certificates.k8s.io` `certificatesigningrequests` row.
pub fn is_csr(info: &ResourceInfo) -> bool {
    info.group == "certificates.k8s.io" && info.resource == "certificatesigningrequests"
}

/// Create-time preparation: the requester from `user` (none without the
/// filter chain), an empty status.
pub fn prepare_create(user: Option<&UserInfo>, obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else { return };
    map.insert("status".into(), json!({}));
    let spec = map.entry("spec").or_insert_with(|| json!({}));
    let Some(spec) = spec.as_object_mut() else { return };
    for k in ["username", "uid", "groups", "extra"] {
        spec.remove(k);
    }
    let Some(user) = user else { return };
    spec.insert("username".into(), json!(user.username));
    if !user.uid.is_empty() {
        spec.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        spec.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        spec.insert("extra".into(), json!(user.extra));
    }
}

/// Which write path an update came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePath {
    /// PUT/PATCH of the CSR itself.
    Main,
    /// `/status`.
    Status,
    /// `/approval`.
    Approval,
}

impl WritePath {
    /// The path of `subresource` (`None` for the main resource).
    pub fn of(subresource: Option<&str>) -> Self {
        match subresource {
            Some("status") => WritePath::Status,
            Some("approval") => WritePath::Approval,
            _ => WritePath::Main,
        }
    }
}

fn of_type<'a>(conds: &'a [Value], t: &str) -> Vec<&'a Value> {
    conds.iter().filter(|c| api_csr::condition_type(c) == t).collect()
}

/// Shapes `new` (already holding only what `path` may change, the rest from
/// `old`) the way upstream's strategies do, and refuses what the path may
/// not do (422 causes). `now` is RFC 3339.
pub fn prepare_update(path: WritePath, old: &Value, new: &mut Value, now: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match path {
        WritePath::Main => {
            if let (Some(m), Some(spec)) = (new.as_object_mut(), old.get("spec")) {
                m.insert("spec".into(), spec.clone());
            }
        }
        WritePath::Status => {
            let old_conds = api_csr::conditions(old).to_vec();
            for t in [APPROVED, DENIED] {
                let old_of = of_type(&old_conds, t);
                let new_count = of_type(api_csr::conditions(new), t).len();
                if new_count > old_of.len() {
                    errs.push(FieldError::forbidden(
                        "status.conditions",
                        format!("updates may not add a condition of type {t:?}"),
                    ));
                    continue;
                }
                if new_count != old_of.len() {
                    continue; // a removal, refused by validation
                }
                // Keep the stored instances of Approved/Denied as they were.
                let mut k = 0;
                if let Some(list) = new.pointer_mut("/status/conditions").and_then(Value::as_array_mut) {
                    for c in list.iter_mut().filter(|c| api_csr::condition_type(c) == t) {
                        if let Some(o) = old_of.get(k) {
                            *c = (*o).clone();
                        }
                        k += 1;
                    }
                }
            }
        }
        WritePath::Approval => {}
    }
    populate_condition_timestamps(old, new, now);
    errs
}

fn populate_condition_timestamps(old: &Value, new: &mut Value, now: &str) {
    let old_conds = api_csr::conditions(old).to_vec();
    let Some(list) = new.pointer_mut("/status/conditions").and_then(Value::as_array_mut) else { return };
    for c in list.iter_mut().filter_map(Value::as_object_mut) {
        if c.get("lastUpdateTime").and_then(Value::as_str).is_none_or(str::is_empty) {
            c.insert("lastUpdateTime".into(), json!(now));
        }
        if c.get("lastTransitionTime").and_then(Value::as_str).is_none_or(str::is_empty) {
            let (t, s) = (c.get("type").cloned(), c.get("status").cloned());
            let previous = old_conds
                .iter()
                .find(|o| o.get("type") == t.as_ref() && o.get("status") == s.as_ref())
                .and_then(|o| o.get("lastTransitionTime"))
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty());
            c.insert("lastTransitionTime".into(), json!(previous.unwrap_or(now)));
        }
    }
}

/// True when `user` may `verb` (`approve`, `sign`) requests of `signer`:
/// allowed on resource `signers` of `certificates.k8s.io` with resourceName
/// `signer` or `<domain>/*` (upstream `IsAuthorizedForSignerName`,
/// `pkg/apis/certificates/helpers.go`).
pub async fn authorized_for_signer(
    authorizer: &crate::filters::authz::Authorizer,
    user: &UserInfo,
    verb: &str,
    signer: &str,
) -> bool {
    let mut names = vec![signer.to_string()];
    if let Some((domain, _)) = signer.split_once('/') {
        names.push(format!("{domain}/*"));
    }
    for name in names {
        let attrs = RequestAttributes {
            is_resource_request: true,
            verb: verb.to_string(),
            api_group: "certificates.k8s.io".into(),
            api_version: "*".into(),
            resource: "signers".into(),
            name,
            ..RequestAttributes::default()
        };
        if matches!(authorizer.authorize(user, &attrs).await, Decision::Allow(_)) {
            return true;
        }
    }
    false
}

/// The admission checks of an update through `/approval` or `/status`
/// (see the module docs): 403 `Forbidden` with upstream's message when the
/// requester may not approve (or sign) for the CSR's signer. No check
/// without a user (no filter chain).
pub async fn admit_update(ctx: &Ctx, old: &Value, new: &Value) -> ApiResult<()> {
    let Some(user) = ctx.user.as_ref() else { return Ok(()) };
    let signer = old.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("");
    let verb = match WritePath::of(ctx.ri.subresource.as_deref()) {
        WritePath::Approval => "approve",
        WritePath::Status if old.pointer("/status/certificate") != new.pointer("/status/certificate") => "sign",
        _ => return Ok(()),
    };
    if authorized_for_signer(&ctx.st.authorizer, user, verb, signer).await {
        return Ok(());
    }
    let name = ctx.name();
    let msg = format!(
        "certificatesigningrequests.certificates.k8s.io {name:?} is forbidden: user not permitted to {verb} requests with signerName {signer:?}"
    );
    let details = StatusDetails {
        name: name.to_string(),
        group: "certificates.k8s.io".into(),
        kind: "certificatesigningrequests".into(),
        ..StatusDetails::default()
    };
    Err(Status::new(403, "Forbidden", msg).with_details(details).into())
}

/// Runs [`prepare_update`] for the request's path; 422 on refused changes.
pub fn prepare_for_request(ctx: &Ctx, old: &Value, new: &mut Value) -> ApiResult<()> {
    let now = rkube_api::time::now_rfc3339();
    let errs = prepare_update(WritePath::of(ctx.ri.subresource.as_deref()), old, new, &now);
    if errs.is_empty() {
        return Ok(());
    }
    let causes = errs.into_iter().map(Into::into).collect();
    Err(ApiError::invalid(ctx.ri.info, crate::object::name(new), causes))
}

#[cfg(test)]
mod tests;
