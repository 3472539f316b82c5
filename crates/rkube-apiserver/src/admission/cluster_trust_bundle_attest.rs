//! `ClusterTrustBundleAttest` (upstream `plugin/pkg/admission/certificates/ctbattest`): writing a
//! ClusterTrustBundle that names a signer needs the `attest` verb on `signers` of
//! `certificates.k8s.io` for that signer (or `<domain>/*`), so only those trusted by the signer
//! publish its trust anchors; a bundle without a signer needs nothing more than the write. On
//! update the signer may not change (defence in depth: validation refuses it too). Always on,
//! as upstream enables it by default; no check without a user (no filter chain).

use serde_json::Value;

use crate::error::ApiResult;
use crate::handlers::Ctx;

/// Whether the request writes ClusterTrustBundles.
pub fn handles(ctx: &Ctx) -> bool {
    let info = ctx.ri.info;
    info.group == "certificates.k8s.io" && info.resource == "clustertrustbundles" && ctx.ri.subresource.is_none()
}

/// Admits a create (`old` is `None`) or update of `new`.
///
/// # Errors
/// 403 `Forbidden` (`clustertrustbundles.certificates.k8s.io "<name>" is forbidden: ...`) when
/// the signer changes or the user may not attest for it.
pub async fn admit(ctx: &Ctx, new: &Value, old: Option<&Value>) -> ApiResult<()> {
    if !handles(ctx) {
        return Ok(());
    }
    let Some(user) = ctx.user.as_ref() else { return Ok(()) };
    let signer = |o: &Value| o.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("").to_string();
    let name = crate::object::name(new);
    let refuse = |message: &str| super::forbidden("certificates.k8s.io", "clustertrustbundles", name, message);
    let wanted = signer(new);
    if old.is_some_and(|o| signer(o) != wanted) {
        return Err(refuse("changing signerName is forbidden"));
    }
    if wanted.is_empty() || crate::csr::authorized_for_signer(&ctx.st.authorizer, user, "attest", &wanted).await {
        return Ok(());
    }
    Err(refuse(&format!("user not permitted to attest for signerName {}", rkube_api::field_error::go_quote(&wanted))))
}
