//! The review APIs: create-only kinds answered on each POST and never
//! stored ([`rkube_api::registry::ResourceInfo::stored`] is false), as
//! upstream's REST storage in `pkg/registry/authentication/` and
//! `pkg/registry/authorization/`:
//!
//! | resource | answers |
//! |---|---|
//! | `tokenreviews` | who `spec.token` authenticates as (the chain's [`Authenticator`](crate::filters::authn::Authenticator)) |
//! | `selfsubjectreviews` | who sent the request (`kubectl auth whoami`) |
//! | `subjectaccessreviews` | may `spec.user`/`groups` do `spec.resourceAttributes` or `nonResourceAttributes` |
//! | `localsubjectaccessreviews` | the same, in the path namespace |
//! | `selfsubjectaccessreviews` | may the requester do it (`kubectl auth can-i`) |
//! | `selfsubjectrulesreviews` | what the requester may do in `spec.namespace` (`kubectl auth can-i --list`) |
//!
//! Every answer is 201 `Created` with the object and its `status` filled
//! (upstream's create handler), `dryRun=All` changes nothing (nothing is
//! written either way). Bodies are decoded with the kind's `k8s-openapi` type
//! (400 for type errors, `fieldValidation` for unknown fields); validation
//! errors are 422 `Invalid` as upstream's `pkg/apis/authorization/validation`.
//! Access checks ask the filter chain's authorizer ([`crate::state::ApiState::authorizer`]);
//! `spec.resourceAttributes.fieldSelector` and `labelSelector` are accepted
//! and ignored, as RBAC ignores them upstream. Who may create a review is
//! decided by the filter chain like any create (`system:basic-user` lets
//! every authenticated user create the self reviews).

use axum::response::Response;
use k8s_openapi::api::authentication::v1 as authn_v1;
use k8s_openapi::api::authorization::v1 as authz_v1;
use rkube_api::field_error::FieldError;
use rkube_api::status::StatusCause;
use serde_json::{json, Map, Value};

use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::filters::authn::UserInfo;
use crate::filters::authz::{ReviewDecision, UserRules};
use crate::filters::rbac::PolicyRule;
use crate::filters::requestinfo::RequestAttributes;
use crate::media;
use crate::render;
use crate::validate::{self, FieldValidation};

/// POST to a review resource (`ctx.ri.info` is a row with `stored: false`).
pub async fn create(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let info = ctx.ri.info;
    let content_type = media::content_type(&ctx.headers);
    let (mut obj, keys) = media::decode_body(&content_type, body)?;
    ctx.dry_run()?;
    super::write::check_type_meta(&ctx.st, info, info.kind, &mut obj).await?;
    super::write::check_namespace(ctx, &mut obj)?;
    let mode = FieldValidation::parse(ctx.q("fieldValidation"))?;
    let warnings = validate::check_typed_body(info, &mut obj, mode, keys.as_ref())?;
    let out = match info.resource {
        "tokenreviews" => token_review(ctx, obj).await?,
        "selfsubjectreviews" => self_subject_review(requester(ctx)?),
        "subjectaccessreviews" | "localsubjectaccessreviews" => subject_access_review(ctx, obj).await?,
        "selfsubjectaccessreviews" => self_subject_access_review(ctx, obj).await?,
        "selfsubjectrulesreviews" => self_subject_rules_review(ctx, obj).await?,
        _ => return Err(ApiError::path_not_found()),
    };
    Ok(render::object(info, ctx.render, 201, &out, &warnings))
}

/// The authenticated requester; 400 without one (upstream's `no user present on request`).
fn requester(ctx: &Ctx) -> ApiResult<&UserInfo> {
    ctx.user.as_ref().ok_or_else(|| ApiError::bad_request("no user present on request"))
}

/// Decodes `obj` (already checked against its type) as `T`.
fn typed<T: serde::de::DeserializeOwned>(ctx: &Ctx, obj: &Value) -> ApiResult<T> {
    serde_json::from_value(obj.clone()).map_err(|e| {
        let (kind, version) = (ctx.ri.info.kind, ctx.ri.info.version);
        ApiError::bad_request(format!("{kind} in version \"{version}\" cannot be handled as a {kind}: {e}"))
    })
}

/// `metadata` as Go serializes an `ObjectMeta` without a creation time.
fn metadata_of(obj: &Value) -> Value {
    let mut meta = obj.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
    meta.entry("creationTimestamp").or_insert(Value::Null);
    Value::Object(meta)
}

/// `authentication.k8s.io/v1` `UserInfo` JSON of `user` (empty fields omitted, as upstream).
fn user_info_json(user: &UserInfo) -> Value {
    let mut m = Map::new();
    if !user.username.is_empty() {
        m.insert("username".into(), json!(user.username));
    }
    if !user.uid.is_empty() {
        m.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        m.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        m.insert("extra".into(), json!(user.extra));
    }
    Value::Object(m)
}

/// TokenReview (upstream `pkg/registry/authentication/tokenreview/storage.go`):
/// 400 without `spec.token`; otherwise `status.authenticated`, `user`,
/// `audiences` or `error` (`invalid bearer token`). The spec is echoed.
async fn token_review(ctx: &Ctx, mut obj: Value) -> ApiResult<Value> {
    let review: authn_v1::TokenReview = typed(ctx, &obj)?;
    let token = review.spec.token.unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request("token is required for TokenReview in authentication"));
    }
    // Without audiences, the review targets the API audiences (`--api-audiences`).
    let mut target = review.spec.audiences.unwrap_or_default();
    if target.is_empty() {
        target = ctx.st.service_account_tokens.as_ref().map(|t| t.api_audiences.clone()).unwrap_or_default();
    }
    let outcome = ctx.st.authenticator.authenticate_token(&token, &target).await.ok();
    let status = match outcome {
        Some((user, audiences)) => {
            let mut s = json!({"authenticated": true, "user": user_info_json(&user)});
            if !audiences.is_empty() {
                s["audiences"] = json!(audiences);
            }
            s
        }
        None => json!({"user": {}, "error": "invalid bearer token"}),
    };
    obj["metadata"] = metadata_of(&obj);
    obj["status"] = status;
    Ok(obj)
}

/// SelfSubjectReview (upstream `pkg/registry/authentication/selfsubjectreview/rest.go`):
/// a new object whose `status.userInfo` is the requester, stamped now.
fn self_subject_review(user: &UserInfo) -> Value {
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": rkube_api::time::now_rfc3339()},
        "status": {"userInfo": user_info_json(user)},
    })
}

/// Go's `%#v` of a `NonResourceAttributes` value, as field errors print it.
fn non_resource_rendered(a: &authz_v1::NonResourceAttributes) -> String {
    let q = rkube_api::field_error::go_quote;
    format!(
        "authorization.NonResourceAttributes{{Path:{}, Verb:{}}}",
        q(a.path.as_deref().unwrap_or("")),
        q(a.verb.as_deref().unwrap_or(""))
    )
}

/// Upstream `ValidateSubjectAccessReviewSpec` (with `user_required`) or
/// `ValidateSelfSubjectAccessReviewSpec` (without): exactly one of
/// `resourceAttributes` and `nonResourceAttributes`; a user or a group.
fn validate_spec(
    resource: Option<&authz_v1::ResourceAttributes>,
    non_resource: Option<&authz_v1::NonResourceAttributes>,
    user: Option<(&str, usize)>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match (resource, non_resource) {
        (Some(_), Some(n)) => errs.push(FieldError::invalid_rendered(
            "spec.nonResourceAttributes",
            non_resource_rendered(n),
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => errs.push(FieldError::invalid_json(
            "spec.resourceAttributes",
            &Value::Null,
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    if let Some((name, groups)) = user {
        if name.is_empty() && groups == 0 {
            errs.push(FieldError::invalid("spec.user", name, "at least one of user or group must be specified"));
        }
    }
    errs
}

/// `metadata` must be empty (LocalSubjectAccessReview: except for the
/// namespace), as upstream's validation.
fn validate_metadata(obj: &Value, namespaced: bool) -> Option<FieldError> {
    let meta = obj.get("metadata").and_then(Value::as_object)?;
    let is_empty = |v: &Value| match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    let extra = meta.iter().any(|(k, v)| !(k == "managedFields" || (namespaced && k == "namespace") || is_empty(v)));
    extra.then(|| {
        let detail = if namespaced { "must be empty except for namespace" } else { "must be empty" };
        FieldError::invalid_rendered("metadata", Value::Object(meta.clone()).to_string(), detail)
    })
}

/// The attributes a SubjectAccessReview checks for `user` (upstream
/// `ResourceAttributesFrom` / `NonResourceAttributesFrom`): an empty
/// version means every version (`*`); selectors are not carried.
pub fn review_attributes(
    resource: Option<&authz_v1::ResourceAttributes>,
    non_resource: Option<&authz_v1::NonResourceAttributes>,
) -> RequestAttributes {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    match (resource, non_resource) {
        (Some(r), _) => RequestAttributes {
            is_resource_request: true,
            verb: s(&r.verb),
            api_group: s(&r.group),
            api_version: r.version.clone().filter(|v| !v.is_empty()).unwrap_or_else(|| "*".into()),
            namespace: s(&r.namespace),
            resource: s(&r.resource),
            subresource: s(&r.subresource),
            name: s(&r.name),
            ..Default::default()
        },
        (None, Some(n)) => {
            RequestAttributes { is_resource_request: false, verb: s(&n.verb), path: s(&n.path), ..Default::default() }
        }
        (None, None) => RequestAttributes::default(),
    }
}

/// `status` of an access review from the authorizer's answer (upstream:
/// `allowed`, `denied` only for an explicit denial, `reason` when given).
async fn access_status(ctx: &Ctx, user: &UserInfo, attrs: &RequestAttributes) -> Value {
    let (decision, reason) = ctx.st.authorizer.review(user, attrs).await;
    let mut status = json!({"allowed": decision == ReviewDecision::Allow});
    if decision == ReviewDecision::Deny {
        status["denied"] = json!(true);
    }
    if !reason.is_empty() {
        status["reason"] = json!(reason);
    }
    status
}

fn invalid(ctx: &Ctx, errs: Vec<FieldError>) -> ApiError {
    ApiError::invalid(ctx.ri.info, "", errs.into_iter().map(StatusCause::from).collect())
}

/// SubjectAccessReview and LocalSubjectAccessReview (upstream
/// `subjectaccessreview/rest.go`, `localsubjectaccessreview/rest.go`): the
/// user to check is `spec.user`, `groups`, `uid` and `extra` as given (no
/// `system:authenticated` is added).
async fn subject_access_review(ctx: &Ctx, mut obj: Value) -> ApiResult<Value> {
    // Both kinds share the spec type (the body's kind was checked already).
    let spec: authz_v1::SubjectAccessReviewSpec = typed(ctx, obj.get("spec").unwrap_or(&json!({})))?;
    let local = ctx.ri.info.namespaced;
    let user = UserInfo {
        username: spec.user.clone().unwrap_or_default(),
        uid: spec.uid.clone().unwrap_or_default(),
        groups: spec.groups.clone().unwrap_or_default(),
        extra: spec.extra.clone().unwrap_or_default().into_iter().collect(),
    };
    let (ra, nra) = (spec.resource_attributes.as_ref(), spec.non_resource_attributes.as_ref());
    let mut errs = validate_spec(ra, nra, Some((&user.username, user.groups.len())));
    errs.extend(validate_metadata(&obj, local));
    if local {
        let ns = ctx.namespace();
        if let Some(r) = ra.filter(|r| r.namespace.as_deref().unwrap_or("") != ns) {
            let got = r.namespace.as_deref().unwrap_or("");
            errs.push(FieldError::invalid("spec.resourceAttributes.namespace", got, "must match metadata.namespace"));
        }
        if let Some(n) = nra {
            let rendered = non_resource_rendered(n);
            errs.push(FieldError::invalid_rendered("spec.nonResourceAttributes", rendered, "disallowed on this kind of request"));
        }
    }
    if !errs.is_empty() {
        return Err(invalid(ctx, errs));
    }
    obj["metadata"] = metadata_of(&obj);
    obj["status"] = access_status(ctx, &user, &review_attributes(ra, nra)).await;
    Ok(obj)
}

/// SelfSubjectAccessReview (upstream `selfsubjectaccessreview/rest.go`): the
/// requester (after impersonation) is checked.
async fn self_subject_access_review(ctx: &Ctx, mut obj: Value) -> ApiResult<Value> {
    let review: authz_v1::SelfSubjectAccessReview = typed(ctx, &obj)?;
    let (ra, nra) = (review.spec.resource_attributes.as_ref(), review.spec.non_resource_attributes.as_ref());
    let mut errs = validate_spec(ra, nra, None);
    errs.extend(validate_metadata(&obj, false));
    if !errs.is_empty() {
        return Err(invalid(ctx, errs));
    }
    let user = requester(ctx)?;
    obj["metadata"] = metadata_of(&obj);
    obj["status"] = access_status(ctx, user, &review_attributes(ra, nra)).await;
    Ok(obj)
}

/// Upstream `utilerrors.NewAggregate(errs).Error()`: one message as is,
/// several (duplicates dropped) as `[a, b]`, none as `""`.
fn aggregate(errors: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen[0].to_string(),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// One `ResourceRule` / `NonResourceRule` as upstream serializes it (`verbs`
/// always, the other lists only when set).
fn rule_json(rule: &PolicyRule) -> Value {
    let mut m = Map::new();
    m.insert("verbs".into(), json!(rule.verbs));
    for (key, list) in [
        ("apiGroups", &rule.api_groups),
        ("resources", &rule.resources),
        ("resourceNames", &rule.resource_names),
        ("nonResourceURLs", &rule.non_resource_urls),
    ] {
        if !list.is_empty() {
            m.insert(key.into(), json!(list));
        }
    }
    Value::Object(m)
}

/// The `status` of a SelfSubjectRulesReview for `rules`. `incomplete` is
/// false: as upstream, neither RBAC nor `AlwaysAllow`/`AlwaysDeny` mark
/// their rules incomplete; read errors go to `evaluationError`.
pub fn rules_status(rules: &UserRules) -> Value {
    let mut status = json!({
        "resourceRules": rules.resource_rules.iter().map(rule_json).collect::<Vec<_>>(),
        "nonResourceRules": rules.non_resource_rules.iter().map(rule_json).collect::<Vec<_>>(),
        "incomplete": false,
    });
    let err = aggregate(&rules.errors);
    if !err.is_empty() {
        status["evaluationError"] = json!(err);
    }
    status
}

/// SelfSubjectRulesReview (upstream `selfsubjectrulesreview/rest.go`): 400
/// without `spec.namespace`; the answer is a new object with an empty spec.
async fn self_subject_rules_review(ctx: &Ctx, obj: Value) -> ApiResult<Value> {
    let review: authz_v1::SelfSubjectRulesReview = typed(ctx, &obj)?;
    let user = requester(ctx)?;
    let namespace = review.spec.namespace.unwrap_or_default();
    if namespace.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let rules = ctx.st.authorizer.rules_for(user, &namespace).await;
    Ok(json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {},
        "status": rules_status(&rules),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ra(v: Value) -> authz_v1::ResourceAttributes {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn resource_attributes_map_to_request_attributes_with_every_version_by_default() {
        let r = ra(json!({"verb": "list", "group": "apps", "resource": "deployments", "subresource": "scale",
                          "namespace": "dev", "name": "web", "fieldSelector": {"rawSelector": "a=b"}}));
        let a = review_attributes(Some(&r), None);
        assert!(a.is_resource_request);
        assert_eq!(
            (a.verb.as_str(), a.api_group.as_str(), a.api_version.as_str(), a.resource.as_str()),
            ("list", "apps", "*", "deployments")
        );
        assert_eq!((a.subresource.as_str(), a.namespace.as_str(), a.name.as_str()), ("scale", "dev", "web"));
        assert_eq!(a.combined_resource(), "deployments/scale");
        let n: authz_v1::NonResourceAttributes = serde_json::from_value(json!({"path": "/metrics", "verb": "get"})).unwrap();
        let a = review_attributes(None, Some(&n));
        assert!(!a.is_resource_request);
        assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", "/metrics"));
    }

    #[test]
    fn specs_need_exactly_one_kind_of_attributes_and_a_subject() {
        let n: authz_v1::NonResourceAttributes = serde_json::from_value(json!({"path": "/api", "verb": "get"})).unwrap();
        let r = ra(json!({"verb": "get"}));
        let msgs = |errs: Vec<FieldError>| errs.into_iter().map(|e| StatusCause::from(e).to_error_string()).collect::<Vec<_>>();
        assert_eq!(
            msgs(validate_spec(Some(&r), Some(&n), Some(("", 0)))),
            vec![
                "spec.nonResourceAttributes: Invalid value: authorization.NonResourceAttributes{Path:\"/api\", Verb:\"get\"}: cannot be specified in combination with resourceAttributes",
                "spec.user: Invalid value: \"\": at least one of user or group must be specified",
            ]
        );
        assert_eq!(
            msgs(validate_spec(None, None, None)),
            vec!["spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"]
        );
        assert!(validate_spec(Some(&r), None, Some(("", 1))).is_empty());
        assert!(validate_spec(None, Some(&n), None).is_empty());
    }

    #[test]
    fn metadata_must_be_empty_except_a_local_review_s_namespace() {
        assert!(validate_metadata(&json!({"metadata": {"creationTimestamp": null}}), false).is_none());
        assert!(validate_metadata(&json!({"metadata": {"namespace": "dev"}}), true).is_none());
        let e = validate_metadata(&json!({"metadata": {"name": "x"}}), false).unwrap();
        assert_eq!(e.detail, "must be empty");
        let e = validate_metadata(&json!({"metadata": {"namespace": "dev", "labels": {"a": "b"}}}), true).unwrap();
        assert_eq!(e.detail, "must be empty except for namespace");
    }

    #[test]
    fn rules_status_lists_rules_as_upstream_serializes_them() {
        let rule = |v: Value| -> PolicyRule { serde_json::from_value(v).unwrap() };
        let rules = UserRules {
            resource_rules: vec![rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["web"]}))],
            non_resource_rules: vec![rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz"]}))],
            errors: vec!["role.rbac.authorization.k8s.io \"a\" not found".into(), "x".into(), "x".into()],
        };
        assert_eq!(
            rules_status(&rules),
            json!({
                "resourceRules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["web"]}],
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
                "incomplete": false,
                "evaluationError": "[role.rbac.authorization.k8s.io \"a\" not found, x]",
            })
        );
        assert_eq!(rules_status(&UserRules::default()), json!({"resourceRules": [], "nonResourceRules": [], "incomplete": false}));
    }

    #[test]
    fn aggregate_reads_like_upstream_s_error_list() {
        assert_eq!(aggregate(&[]), "");
        assert_eq!(aggregate(&["a".into(), "a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "b".into()]), "[a, b]");
    }
}
