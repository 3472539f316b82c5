//! ValidatingAdmissionPolicies (upstream
//! `staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating`):
//! each ValidatingAdmissionPolicyBinding applies its policy to the
//! requests both the policy's `matchConstraints` and the binding's
//! `matchResources` match (resource rules with `resourceNames`,
//! `excludeResourceRules`, `namespaceSelector`, `objectSelector`), whose
//! `matchConditions` hold. The policy's `variables` and `validations` are
//! CEL ([`rkube_api::apiextensions::cel`]) over `object`, `oldObject`,
//! `request`, `namespaceObject`, `params` and `variables`.
//!
//! A validation giving `false` acts as the binding's `validationActions`
//! say: `Deny` refuses the request, `<resource> "<name>" is forbidden:
//! ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied
//! request: <message>` with the validation's `reason` (`Invalid`, 422, by
//! default); `Warn` returns `Validation failed for ValidatingAdmissionPolicy
//! '<policy>' with binding '<binding>': <message>` as a `Warning`; `Audit`
//! adds the `validation.policy.admission.k8s.io/validation_failure` audit
//! annotation. A validation that fails to evaluate follows the policy's
//! `failurePolicy` (Fail, the default: denied with `expression '<expr>'
//! resulted in error: <error>`).
//!
//! Parameters (upstream `generic.CollectParams`): `paramRef.name`, or every
//! object of the policy's `paramKind` that `paramRef.selector` matches
//! (the policy is applied once per parameter), in `paramRef.namespace` or
//! else the request's namespace for a namespaced `paramKind`. None found:
//! with `parameterNotFoundAction: Deny` (the default) the binding is a
//! configuration error, `failed to configure binding: no params found for
//! policy binding with `Deny` parameterNotFoundAction`, which denies under
//! `failurePolicy: Fail` and is ignored under `Ignore`; with `Allow` the
//! binding does nothing.
//!
//! `auditAnnotations`: each `valueExpression` gives a string (trimmed; an
//! empty one is left out), or `null` (left out); the values of one policy
//! across its bindings and parameters (distinct ones joined with `, `) are
//! added to the request's audit event as `<policy name>/<key>`, the path
//! admission webhooks' audit annotations take
//! ([`crate::filters::audit::annotate`]), also when the request is denied.
//! An evaluation error denies under `failurePolicy: Fail`; another type
//! than string or null always does.
//!
//! Every binding is evaluated; the first denial is the answer.
//!
//! Kubernetes' CEL libraries (lists, regex, url, ip, cidr, quantity,
//! semver, format, authorizer) are evaluated, each expression within
//! upstream's per-call cost limit.
//! A policy's expressions are compiled when it is written (syntax,
//! declared variables and functions; `rkube_api::apiextensions::cel::compile`),
//! so one that does not compile never gets here.
//!
//! The `authorizer` variable (and `authorizer.requestResource`) asks the
//! server's authorizer about the requester or a ServiceAccount: the
//! expressions of a binding are evaluated again until every check they ask
//! is answered ([`apply_authorized`]).
//!
//! Not done: the per-binding cost budget, type checking of
//! policies (`status.typeChecking`).

use rkube_api::apiextensions::cel::authz::{with_authorizer, Answer, Check, Checks};
use rkube_api::apiextensions::cel::{evaluate_bool, evaluate_string, evaluate_value, Evaluated, Outcome};
use rkube_api::registry;
use rkube_api::status::{Status, StatusCause, StatusDetails};
use serde_json::{json, Map, Value};

use rkube_api::selector::object::label_selector_matches;

use super::webhook::{call, configurations, matching, namespace_of, Attributes};
use crate::error::{ApiError, ApiResult};
use crate::filters::authz::ReviewDecision;
use crate::filters::requestinfo::RequestAttributes;
use crate::state::ApiState;

fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
}

/// Whether `constraints` (a `MatchResources`) matches the request.
fn matches(constraints: &Value, a: &Attributes, ns_labels: Option<&Map<String, Value>>) -> bool {
    let named = |rule: &Value| {
        matching::rule_matches(rule, a)
            && rule.get("resourceNames").and_then(Value::as_array).filter(|n| !n.is_empty()).is_none_or(|names| {
                names.iter().any(|n| n.as_str() == Some(a.name.as_str()))
            })
    };
    let rules = constraints.get("resourceRules").and_then(Value::as_array);
    let excluded = constraints.get("excludeResourceRules").and_then(Value::as_array);
    rules.is_some_and(|r| r.iter().any(named))
        && !excluded.is_some_and(|r| r.iter().any(named))
        && matching::namespace_selector_matches(constraints, ns_labels)
        && matching::object_selector_matches(constraints, a)
}

/// The parameters of a binding (upstream `generic.CollectParams`): `[null]`
/// when the policy has no `paramKind` or the binding no `paramRef`; the
/// objects found (none: nothing to apply). Errors are configuration errors
/// (the message after `failed to configure binding: `).
async fn params(st: &ApiState, policy: &Value, binding: &Value, a: &Attributes) -> Result<Vec<Value>, String> {
    let Some(kind) = policy.pointer("/spec/paramKind").filter(|k| k.is_object()) else { return Ok(vec![Value::Null]) };
    let Some(pr) = binding.pointer("/spec/paramRef").filter(|p| p.is_object()) else { return Ok(vec![Value::Null]) };
    let api_version = kind.get("apiVersion").and_then(Value::as_str).unwrap_or("v1");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind_name = kind.get("kind").and_then(Value::as_str).unwrap_or("");
    let Some(info) = registry::all().iter().find(|r| r.group == group && r.version == version && r.kind == kind_name)
    else {
        return Err(format!("paramKind kind `{api_version}, Kind={kind_name}` not known"));
    };
    let ref_ns = pr.get("namespace").and_then(Value::as_str).unwrap_or("");
    let ns = if info.namespaced {
        match (ref_ns, a.namespace.as_str()) {
            ("", "") => return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into()),
            ("", request_ns) => request_ns,
            (ns, _) => ns,
        }
    } else if !ref_ns.is_empty() {
        return Err("paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into());
    } else {
        ""
    };
    let name = pr.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
    let selector = pr.get("selector").filter(|s| !s.is_null());
    let found: Vec<Value> = match (name, selector) {
        (Some(_), Some(_)) => return Err("paramRef.name and paramRef.selector are mutually exclusive".into()),
        (Some(name), None) => {
            let got = st.cache.get(info, ns, name, Some("0")).await.map_err(|e| e.to_string())?;
            got.and_then(|f| serde_json::from_slice::<Value>(&f.json).ok()).into_iter().collect()
        }
        (None, Some(selector)) => {
            let opts = rkube_api::list_options::ListOptions { resource_version: Some("0".into()), ..Default::default() };
            let scope = info.namespaced.then_some(ns);
            let page = st.cache.list(info, scope, &opts).await.map_err(|e| e.to_string())?;
            page.items
                .iter()
                .filter_map(|o| serde_json::from_slice::<Value>(&o.json).ok())
                .filter(|o| {
                    let labels = o.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
                    label_selector_matches(selector, &labels)
                })
                .collect()
        }
        (None, None) => return Err("one of name or selector must be provided".into()),
    };
    let deny = pr.get("parameterNotFoundAction").and_then(Value::as_str) != Some("Allow");
    if found.is_empty() && deny {
        return Err("no params found for policy binding with `Deny` parameterNotFoundAction".into());
    }
    Ok(found)
}

/// The longest audit annotation value (upstream's 10 KiB), bytes.
pub const MAX_AUDIT_ANNOTATION_VALUE_BYTES: usize = 10 * 1024;

/// One policy's audit annotation values, by key in first-seen order,
/// distinct values in order (upstream's `auditAnnotationCollector`).
#[derive(Default, Clone)]
struct AuditAnnotations(Vec<(String, Vec<String>)>);

impl AuditAnnotations {
    fn add(&mut self, key: &str, mut value: String) {
        if value.len() > MAX_AUDIT_ANNOTATION_VALUE_BYTES {
            let mut end = MAX_AUDIT_ANNOTATION_VALUE_BYTES;
            while !value.is_char_boundary(end) {
                end -= 1;
            }
            value.truncate(end);
        }
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, values)) if values.contains(&value) => {}
            Some((_, values)) => values.push(value),
            None => self.0.push((key.to_string(), vec![value])),
        }
    }

    /// Adds `<policy>/<key>` = the values joined with `, ` to the request's audit event.
    fn publish(&self, policy: &str) {
        for (key, values) in &self.0 {
            crate::filters::audit::annotate(&format!("{policy}/{key}"), &values.join(", "));
        }
    }
}

/// The group/resource/name a denial names.
struct Target {
    group: String,
    resource: String,
    name: String,
}

fn code_of(reason: &str) -> u16 {
    match reason {
        "Unauthorized" => 401,
        "Forbidden" => 403,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// Upstream's denial: `admission.NewForbidden`'s message with the
/// validation's reason and its code.
fn deny(t: &Target, policy: &str, binding: &str, message: &str, reason: &str) -> ApiError {
    let why = format!("ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}");
    let what = if t.group.is_empty() { t.resource.clone() } else { format!("{}.{}", t.resource, t.group) };
    let full = format!("{what} {:?} is forbidden: {why}", t.name);
    let details = StatusDetails {
        name: t.name.clone(),
        group: t.group.clone(),
        kind: t.resource.clone(),
        causes: vec![StatusCause { message: why, ..Default::default() }],
        ..Default::default()
    };
    Status::new(code_of(reason), reason, full).with_details(details).into()
}

/// Applies every binding to `a` (each once per parameter); returns the
/// `Warn` warnings (and those about what rkube could not evaluate), or the
/// first denial. Every policy's audit annotations are added to the audit
/// event either way.
pub async fn validate(st: &ApiState, a: &Attributes) -> ApiResult<Vec<String>> {
    let bindings: Vec<Value> = configurations(st, "validatingadmissionpolicybindings").await?.into_iter().map(|(_, b)| b).collect();
    if bindings.is_empty() {
        return Ok(Vec::new());
    }
    let policies: Vec<Value> = configurations(st, "validatingadmissionpolicies").await?.into_iter().map(|(_, p)| p).collect();
    let (namespace_object, ns_labels) = namespace_of(st, a).await;
    let request = call::review(a, "").get("request").cloned().unwrap_or(Value::Null);
    let target = Target { group: a.group.clone(), resource: a.resource.clone(), name: a.name.clone() };
    let mut warnings = Vec::new();
    let mut denial: Option<ApiError> = None;
    let mut annotations: Vec<(String, AuditAnnotations)> = Vec::new();
    for binding in &bindings {
        let policy_name = binding.pointer("/spec/policyName").and_then(Value::as_str).unwrap_or("");
        let Some(policy) = policies.iter().find(|p| name_of(p) == policy_name) else { continue };
        let constraints = policy.pointer("/spec/matchConstraints").cloned().unwrap_or(Value::Null);
        if !matches(&constraints, a, ns_labels.as_ref()) {
            continue;
        }
        if let Some(extra) = binding.pointer("/spec/matchResources").filter(|m| m.get("resourceRules").is_some()) {
            if !matches(extra, a, ns_labels.as_ref()) {
                continue;
            }
        }
        let fail_open = policy.pointer("/spec/failurePolicy").and_then(Value::as_str) == Some("Ignore");
        let params = match params(st, policy, binding, a).await {
            Ok(p) => p,
            Err(_) if fail_open => continue,
            Err(e) => {
                let msg = format!("failed to configure binding: {e}");
                denial.get_or_insert_with(|| deny(&target, policy_name, name_of(binding), &msg, "Invalid"));
                continue;
            }
        };
        let slot = match annotations.iter().position(|(p, _)| p == policy_name) {
            Some(i) => i,
            None => {
                annotations.push((policy_name.to_string(), AuditAnnotations::default()));
                annotations.len() - 1
            }
        };
        let ctx = Evaluation { policy, binding, a, target: &target, request: &request, namespace_object: &namespace_object };
        for p in &params {
            let (result, w, values, failures) = apply_authorized(st, &ctx, p, &annotations[slot].1).await;
            warnings.extend(w);
            annotations[slot].1 = values;
            for entry in failures {
                crate::filters::audit::annotate("validation.policy.admission.k8s.io/validation_failure", &entry);
            }
            if let Err(e) = result {
                denial.get_or_insert(e);
            }
        }
    }
    for (policy, values) in &annotations {
        values.publish(policy);
    }
    match denial {
        Some(e) => Err(e),
        None => Ok(warnings),
    }
}

/// The most times one binding's expressions are evaluated to answer the
/// authorization checks they ask.
const MAX_AUTHZ_PASSES: usize = 8;

/// [`apply`] with the `authorizer` variable: evaluated again as long as its
/// expressions ask authorization checks not answered yet, each answered by
/// the server's authorizer in between ([`rkube_api::apiextensions::cel::authz`]).
/// Gives the final pass's result, warnings, audit annotation values (the
/// policy's, starting from `annotations`) and `Audit` failure entries.
async fn apply_authorized(
    st: &ApiState,
    ctx: &Evaluation<'_>,
    params: &Value,
    annotations: &AuditAnnotations,
) -> (ApiResult<()>, Vec<String>, AuditAnnotations, Vec<String>) {
    let a = ctx.a;
    let request_resource = Check {
        group: a.group.clone(),
        resource: a.resource.clone(),
        subresource: a.subresource.clone(),
        namespace: a.namespace.clone(),
        name: a.name.clone(),
        ..Check::default()
    };
    let checks = Checks::new(request_resource);
    let mut pass = 0;
    loop {
        pass += 1;
        let (mut warnings, mut values, mut failures) = (Vec::new(), annotations.clone(), Vec::new());
        let result = with_authorizer(&checks, || apply(ctx, params, &mut warnings, &mut values, &mut failures));
        let asked = checks.take_unanswered();
        if asked.is_empty() || pass >= MAX_AUTHZ_PASSES {
            return (result, warnings, values, failures);
        }
        for check in asked {
            let answer = answer(st, a, &check).await;
            checks.answer(check, answer);
        }
    }
}

/// The server's authorizer's answer to `check` (upstream's
/// `authorizer.Authorize` with the requester, or the ServiceAccount named,
/// any API version of a resource).
async fn answer(st: &ApiState, a: &Attributes, check: &Check) -> Answer {
    let user = match &check.service_account {
        Some((namespace, name)) => crate::serviceaccount::authenticator::service_account_user(
            namespace,
            &crate::serviceaccount::claims::ObjectRef { name: name.clone(), uid: String::new() },
        ),
        None => a.user.clone().unwrap_or_default(),
    };
    let attributes = match &check.path {
        Some(path) => RequestAttributes { path: path.clone(), verb: check.verb.clone(), ..RequestAttributes::default() },
        None => RequestAttributes {
            is_resource_request: true,
            verb: check.verb.clone(),
            api_group: check.group.clone(),
            api_version: "*".into(),
            namespace: check.namespace.clone(),
            resource: check.resource.clone(),
            subresource: check.subresource.clone(),
            name: check.name.clone(),
            ..RequestAttributes::default()
        },
    };
    let (decision, reason) = st.authorizer.review(&user, &attributes).await;
    Answer { allowed: decision == ReviewDecision::Allow, reason, error: String::new() }
}

/// What one binding is evaluated with (but its parameter).
struct Evaluation<'a> {
    policy: &'a Value,
    binding: &'a Value,
    a: &'a Attributes,
    target: &'a Target,
    request: &'a Value,
    namespace_object: &'a Value,
}

/// A CEL value's type as upstream names it (`int`, `list`, ...).
fn cel_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null_type",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int",
        Value::Number(n) if n.is_u64() => "uint",
        Value::Number(_) => "double",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// The policy's `auditAnnotations` evaluated into `out` (module doc); an
/// error that denies is returned as the denial's message.
fn audit_annotations(policy: &Value, refs: &[(&str, &Value)], fail_open: bool, out: &mut AuditAnnotations) -> Result<(), String> {
    for entry in policy.pointer("/spec/auditAnnotations").and_then(Value::as_array).into_iter().flatten() {
        let key = entry.get("key").and_then(Value::as_str).unwrap_or("");
        let expr = entry.get("valueExpression").and_then(Value::as_str).unwrap_or("");
        match evaluate_value(expr, refs) {
            Evaluated::Value(Value::String(s)) if !s.trim().is_empty() => out.add(key, s.trim().to_string()),
            Evaluated::Value(Value::String(_) | Value::Null) | Evaluated::Unsupported => {}
            Evaluated::Value(other) => {
                return Err(format!(
                    "valueExpression '{expr}' resulted in unsupported return type: {}. Return type must be either string or null.",
                    cel_type(&other)
                ))
            }
            Evaluated::Error(_) if fail_open => {}
            Evaluated::Error(e) => return Err(format!("expression '{expr}' resulted in error: {e}")),
        }
    }
    Ok(())
}

/// One binding with one parameter: `matchConditions`, `auditAnnotations`
/// (into `annotations`), then `validations`; a denial is the error, the
/// `Audit` failure entries go to `audit_failures`.
fn apply(
    ctx: &Evaluation<'_>,
    params: &Value,
    warnings: &mut Vec<String>,
    annotations: &mut AuditAnnotations,
    audit_failures: &mut Vec<String>,
) -> ApiResult<()> {
    let Evaluation { policy, binding, a, target, request, namespace_object } = *ctx;
    let (policy_name, binding_name) = (name_of(policy), name_of(binding));
    let fail_open = policy.pointer("/spec/failurePolicy").and_then(Value::as_str) == Some("Ignore");
    let object = a.object.clone().unwrap_or(Value::Null);
    let old_object = a.old_object.as_deref().cloned().unwrap_or(Value::Null);
    let mut variables = Map::new();
    let vars = |variables: &Map<String, Value>| -> Vec<(&'static str, Value)> {
        vec![
            ("object", object.clone()),
            ("oldObject", old_object.clone()),
            ("request", request.clone()),
            ("namespaceObject", namespace_object.clone()),
            ("params", params.clone()),
            ("variables", Value::Object(variables.clone())),
        ]
    };
    // Variables in order; one that fails is left out (a validation using it then fails).
    for v in policy.pointer("/spec/variables").and_then(Value::as_array).into_iter().flatten() {
        let (Some(name), Some(expr)) = (v.get("name").and_then(Value::as_str), v.get("expression").and_then(Value::as_str)) else {
            continue;
        };
        let bound = vars(&variables);
        let refs: Vec<(&str, &Value)> = bound.iter().map(|(k, v)| (*k, v)).collect();
        if let Some(value) = rkube_api::apiextensions::cel::evaluate_json(expr, &refs) {
            variables.insert(name.to_string(), value);
        }
    }
    let bound = vars(&variables);
    let refs: Vec<(&str, &Value)> = bound.iter().map(|(k, v)| (*k, v)).collect();
    for c in policy.pointer("/spec/matchConditions").and_then(Value::as_array).into_iter().flatten() {
        let expr = c.get("expression").and_then(Value::as_str).unwrap_or("");
        match evaluate_bool(expr, &refs) {
            Outcome::Bool(true) | Outcome::Unsupported => {}
            Outcome::Bool(false) => return Ok(()),
            Outcome::Error(_) if fail_open => return Ok(()),
            Outcome::Error(e) => {
                let msg = format!("failed to evaluate matchCondition {:?}: {e}", c.get("name").and_then(Value::as_str).unwrap_or(""));
                return Err(deny(target, policy_name, binding_name, &msg, "Invalid"));
            }
        }
    }
    audit_annotations(policy, &refs, fail_open, annotations).map_err(|msg| deny(target, policy_name, binding_name, &msg, "Invalid"))?;
    let actions: Vec<&str> = binding
        .pointer("/spec/validationActions")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (index, v) in policy.pointer("/spec/validations").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let expr = v.get("expression").and_then(Value::as_str).unwrap_or("");
        let (message, reason) = match evaluate_bool(expr, &refs) {
            Outcome::Bool(true) => continue,
            Outcome::Unsupported => {
                warnings.push(format!(
                    "ValidatingAdmissionPolicy '{policy_name}' has a validation rkube cannot evaluate: it was skipped: {expr}"
                ));
                continue;
            }
            Outcome::Error(_) if fail_open => continue,
            Outcome::Error(e) => (format!("expression '{expr}' resulted in error: {e}"), "Invalid".to_string()),
            Outcome::Bool(false) => {
                let message = v
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .or_else(|| {
                        let expr = v.get("messageExpression").and_then(Value::as_str)?;
                        evaluate_string(expr, &refs).map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
                    })
                    .unwrap_or_else(|| format!("failed expression: {}", expr.trim()));
                let reason = v.get("reason").and_then(Value::as_str).unwrap_or("Invalid").to_string();
                (message, reason)
            }
        };
        if actions.contains(&"Warn") {
            warnings.push(format!(
                "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {message}"
            ));
        }
        if actions.contains(&"Audit") {
            let entry = json!([{"message": message, "policy": policy_name, "binding": binding_name,
                                "expressionIndex": index, "validationActions": actions}]);
            audit_failures.push(entry.to_string());
        }
        if actions.contains(&"Deny") {
            return Err(deny(target, policy_name, binding_name, &message, &reason));
        }
    }
    Ok(())
}
