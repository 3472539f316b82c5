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
//! Parameters: `paramRef.name` (and `namespace`) of the policy's
//! `paramKind`; a binding whose parameter is missing denies unless
//! `parameterNotFoundAction: Allow`. Not done: `paramRef.selector` (such
//! bindings are skipped with a warning), `auditAnnotations` (a warning says
//! they are not evaluated), the
//! `authorizer` variable and Kubernetes' own CEL libraries (validations
//! using them are skipped with a warning), type checking of policies
//! (`status.typeChecking`).

use rkube_api::apiextensions::cel::{evaluate_bool, evaluate_string, Outcome};
use rkube_api::registry;
use rkube_api::status::{Status, StatusCause, StatusDetails};
use serde_json::{json, Map, Value};

use super::webhook::{call, configurations, matching, namespace_of, Attributes};
use crate::error::{ApiError, ApiResult};
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

/// What a binding's parameter lookup found.
enum Params {
    /// The object to bind as `params` (`null` without `paramKind`).
    Found(Value),
    /// The binding does not apply (missing with `Allow`, or unsupported).
    Skip,
    /// Missing, with `parameterNotFoundAction: Deny` (the default).
    Missing,
}

/// The binding's parameter object (`paramRef.name`, `namespace`).
async fn params(st: &ApiState, policy: &Value, binding: &Value, warnings: &mut Vec<String>) -> Params {
    let Some(kind) = policy.pointer("/spec/paramKind").filter(|k| k.is_object()) else { return Params::Found(Value::Null) };
    let pr = binding.pointer("/spec/paramRef").cloned().unwrap_or(Value::Null);
    let allow = pr.get("parameterNotFoundAction").and_then(Value::as_str) == Some("Allow");
    let Some(name) = pr.get("name").and_then(Value::as_str) else {
        warnings.push(format!(
            "ValidatingAdmissionPolicyBinding '{}' selects its parameters by label, which rkube does not support yet: it was not applied",
            name_of(binding)
        ));
        return Params::Skip;
    };
    let api_version = kind.get("apiVersion").and_then(Value::as_str).unwrap_or("v1");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind_name = kind.get("kind").and_then(Value::as_str).unwrap_or("");
    let info = registry::all().iter().find(|r| r.group == group && r.version == version && r.kind == kind_name);
    let ns = pr.get("namespace").and_then(Value::as_str).unwrap_or("");
    let found = match info {
        Some(info) => st.cache.get(info, ns, name, Some("0")).await.ok().flatten(),
        None => None,
    };
    match found.and_then(|f| serde_json::from_slice::<Value>(&f.json).ok()) {
        Some(p) => Params::Found(p),
        None if allow => Params::Skip,
        None => Params::Missing,
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

/// Applies every binding to `a`; returns the `Warn` warnings (and those about
/// what rkube could not evaluate), or the first denial.
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
        let params = match params(st, policy, binding, &mut warnings).await {
            Params::Found(p) => p,
            Params::Skip => continue,
            Params::Missing => {
                let msg = "no params found for policy binding with `Deny` parameterNotFoundAction";
                return Err(deny(&target, policy_name, name_of(binding), msg, "Invalid"));
            }
        };
        apply(policy, binding, a, &target, &request, &namespace_object, &params, &mut warnings)?;
    }
    Ok(warnings)
}

#[allow(clippy::too_many_arguments)]
fn apply(
    policy: &Value,
    binding: &Value,
    a: &Attributes,
    target: &Target,
    request: &Value,
    namespace_object: &Value,
    params: &Value,
    warnings: &mut Vec<String>,
) -> ApiResult<()> {
    let (policy_name, binding_name) = (name_of(policy), name_of(binding));
    let fail_open = policy.pointer("/spec/failurePolicy").and_then(Value::as_str) == Some("Ignore");
    let object = a.object.clone().unwrap_or(Value::Null);
    let old_object = a.old_object.clone().unwrap_or(Value::Null);
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
    if policy.pointer("/spec/auditAnnotations").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
        warnings.push(format!("ValidatingAdmissionPolicy '{policy_name}' has auditAnnotations, which rkube does not evaluate yet"));
    }
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
            crate::filters::audit::annotate("validation.policy.admission.k8s.io/validation_failure", &entry.to_string());
        }
        if actions.contains(&"Deny") {
            return Err(deny(target, policy_name, binding_name, &message, &reason));
        }
    }
    Ok(())
}
