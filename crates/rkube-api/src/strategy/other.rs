//! Strategies of the other groups' kinds: autoscaling, networking, policy,
//! scheduling, node, storage, admissionregistration, flowcontrol and
//! certificates (each group's `pkg/apis/<group>/v1/defaults.go`,
//! `validation/validation.go` and `pkg/registry/<group>/*/strategy.go`).

use serde_json::{json, Value};

use super::{child, default_field, each, immutable, int_at, required_str, reset_status, Object, Strategy};
use crate::field_error::FieldError;

// ---- autoscaling/v2 ----

fn hpa_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "minReplicas", json!(1));
    let no_metrics = spec.get("metrics").and_then(Value::as_array).is_none_or(|m| m.is_empty());
    if no_metrics {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
    if let Some(behavior) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
        let up = child(behavior, "scaleUp");
        default_field(up, "stabilizationWindowSeconds", json!(0));
        default_field(up, "selectPolicy", json!("Max"));
        default_field(
            up,
            "policies",
            json!([{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]),
        );
        let down = child(behavior, "scaleDown");
        default_field(down, "selectPolicy", json!("Max"));
        default_field(down, "policies", json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]));
    }
}

fn hpa_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    required_str(obj, "/spec/scaleTargetRef/kind", "spec.scaleTargetRef.kind", errs);
    required_str(obj, "/spec/scaleTargetRef/name", "spec.scaleTargetRef.name", errs);
    let min = int_at(obj, "/spec/minReplicas").unwrap_or(1);
    let max = int_at(obj, "/spec/maxReplicas").unwrap_or(0);
    if min < 1 {
        errs.push(FieldError::invalid_json("spec.minReplicas", &Value::from(min), "must be greater than or equal to 1"));
    }
    if max < 1 {
        errs.push(FieldError::invalid_json("spec.maxReplicas", &Value::from(max), "must be greater than 0"));
    } else if max < min {
        errs.push(FieldError::invalid_json(
            "spec.maxReplicas",
            &Value::from(max),
            "must be greater than or equal to `minReplicas`",
        ));
    }
}

/// HorizontalPodAutoscalers (autoscaling/v2): minReplicas 1, the 80 % CPU
/// metric, behavior policies; target and replica bounds.
pub(crate) const HORIZONTAL_POD_AUTOSCALER: Strategy =
    Strategy { defaults: hpa_defaults, prepare_for_create: reset_status, validate: hpa_validate, ..Strategy::NONE };

/// autoscaling/v1 defaults (upstream `pkg/apis/autoscaling/v1/defaults.go`):
/// minReplicas 1; the 80 % CPU target upstream adds in conversion when no
/// metric is named (neither `targetCPUUtilizationPercentage` nor the
/// metrics annotation), shown here so the created object is what reads return.
fn hpa_v1_defaults(map: &mut Object) {
    let annotated = crate::registry::hpa_conversion::has_annotated_metrics(&Value::Object(map.clone()));
    let spec = child(map, "spec");
    default_field(spec, "minReplicas", json!(1));
    if !annotated {
        default_field(
            spec,
            "targetCPUUtilizationPercentage",
            json!(crate::registry::hpa_conversion::DEFAULT_CPU_UTILIZATION),
        );
    }
}

/// HorizontalPodAutoscalers served as autoscaling/v1: v1 defaults, the same
/// target and replica bounds as v2.
pub(crate) const HORIZONTAL_POD_AUTOSCALER_V1: Strategy =
    Strategy { defaults: hpa_v1_defaults, prepare_for_create: reset_status, validate: hpa_validate, ..Strategy::NONE };

// ---- networking ----

fn ingress_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let rules = obj.pointer("/spec/rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let has_default = obj.pointer("/spec/defaultBackend").is_some_and(|v| !v.is_null());
    if rules.is_empty() && !has_default {
        errs.push(FieldError::invalid_json(
            "spec.rules",
            &json!([]),
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    for (i, rule) in rules.iter().enumerate() {
        let paths = rule.pointer("/http/paths").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        for (j, path) in paths.iter().enumerate() {
            let field = format!("spec.rules[{i}].http.paths[{j}]");
            match path.get("pathType").and_then(Value::as_str) {
                None | Some("") => errs.push(FieldError::required(&format!("{field}.pathType"), "pathType must be specified")),
                Some(t) if !matches!(t, "Exact" | "Prefix" | "ImplementationSpecific") => errs.push(
                    FieldError::not_supported(&format!("{field}.pathType"), t, &["Exact", "ImplementationSpecific", "Prefix"]),
                ),
                _ => {}
            }
            if path.get("backend").is_none_or(Value::is_null) {
                errs.push(FieldError::required(&format!("{field}.backend"), ""));
            }
        }
    }
}

/// Ingresses: rules or a default backend; each path has a `pathType` and a backend.
pub(crate) const INGRESS: Strategy =
    Strategy { prepare_for_create: reset_status, validate: ingress_validate, ..Strategy::NONE };

fn network_policy_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    for key in ["ingress", "egress"] {
        each(spec, key, |rule| each(rule, "ports", |p| default_field(p, "protocol", json!("TCP"))));
    }
    if spec.get("policyTypes").and_then(Value::as_array).is_none_or(|a| a.is_empty()) {
        let mut types = vec![json!("Ingress")];
        if spec.get("egress").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            types.push(json!("Egress"));
        }
        spec.insert("policyTypes".into(), Value::Array(types));
    }
}

/// NetworkPolicies: port protocols and policy types (upstream `SetDefaults_NetworkPolicy`).
pub(crate) const NETWORK_POLICY: Strategy = Strategy { defaults: network_policy_defaults, ..Strategy::NONE };

// ---- policy ----

fn pdb_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let min = obj.pointer("/spec/minAvailable").is_some_and(|v| !v.is_null());
    let max = obj.pointer("/spec/maxUnavailable").is_some_and(|v| !v.is_null());
    if min && max {
        errs.push(FieldError::invalid_json(
            "spec",
            obj.get("spec").unwrap_or(&Value::Null),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
}

/// PodDisruptionBudgets: at most one of minAvailable and maxUnavailable.
pub(crate) const POD_DISRUPTION_BUDGET: Strategy =
    Strategy { prepare_for_create: pdb_prepare, validate: pdb_validate, ..Strategy::NONE };

fn pdb_prepare(obj: &mut Object) {
    obj.insert(
        "status".into(),
        json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}),
    );
}

// ---- scheduling, node ----

/// The highest priority a user-defined PriorityClass may have (upstream `HighestUserDefinablePriority`).
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;

fn priority_class_defaults(map: &mut Object) {
    default_field(map, "preemptionPolicy", json!("PreemptLowerPriority"));
}

fn priority_class_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let value = int_at(obj, "/value").unwrap_or(0);
    if !name.starts_with("system-") && value > HIGHEST_USER_DEFINABLE_PRIORITY {
        errs.push(FieldError::forbidden(
            "value",
            format!("maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"),
        ));
    }
    immutable(obj, old, "/value", "value", errs);
    immutable(obj, old, "/preemptionPolicy", "preemptionPolicy", errs);
}

/// PriorityClasses: `PreemptLowerPriority`; bounded, immutable value.
pub(crate) const PRIORITY_CLASS: Strategy =
    Strategy { defaults: priority_class_defaults, validate: priority_class_validate, ..Strategy::NONE };

fn runtime_class_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    required_str(obj, "/handler", "handler", errs);
    immutable(obj, old, "/handler", "handler", errs);
}

/// RuntimeClasses: a required, immutable handler.
pub(crate) const RUNTIME_CLASS: Strategy = Strategy { validate: runtime_class_validate, ..Strategy::NONE };

// ---- storage ----

fn storage_class_defaults(map: &mut Object) {
    default_field(map, "reclaimPolicy", json!("Delete"));
    default_field(map, "volumeBindingMode", json!("Immediate"));
}

fn storage_class_validate(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    required_str(obj, "/provisioner", "provisioner", errs);
    for f in ["provisioner", "parameters", "reclaimPolicy", "volumeBindingMode"] {
        immutable(obj, old, &format!("/{f}"), f, errs);
    }
}

/// StorageClasses: reclaim `Delete`, binding `Immediate`; provisioner
/// required; provisioner, parameters and policies immutable.
pub(crate) const STORAGE_CLASS: Strategy =
    Strategy { defaults: storage_class_defaults, validate: storage_class_validate, ..Strategy::NONE };

fn csi_driver_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "attachRequired", json!(true));
    default_field(spec, "podInfoOnMount", json!(false));
    default_field(spec, "storageCapacity", json!(false));
    default_field(spec, "requiresRepublish", json!(false));
    default_field(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
    default_field(spec, "volumeLifecycleModes", json!(["Persistent"]));
    default_field(spec, "seLinuxMount", json!(false));
}

/// CSIDrivers: upstream `SetDefaults_CSIDriver`.
pub(crate) const CSI_DRIVER: Strategy = Strategy { defaults: csi_driver_defaults, ..Strategy::NONE };

// ---- admissionregistration ----

fn rule_defaults(rule: &mut Object) {
    default_field(rule, "scope", json!("*"));
}

fn webhook_defaults(w: &mut Object, mutating: bool) {
    default_field(w, "failurePolicy", json!("Fail"));
    default_field(w, "matchPolicy", json!("Equivalent"));
    default_field(w, "namespaceSelector", json!({}));
    default_field(w, "objectSelector", json!({}));
    default_field(w, "timeoutSeconds", json!(10));
    if mutating {
        default_field(w, "reinvocationPolicy", json!("Never"));
    }
    each(w, "rules", rule_defaults);
    if let Some(svc) = w.get_mut("clientConfig").and_then(|c| c.get_mut("service")).and_then(Value::as_object_mut) {
        default_field(svc, "port", json!(443));
    }
}

fn mutating_webhook_defaults(map: &mut Object) {
    each(map, "webhooks", |w| webhook_defaults(w, true));
}

fn validating_webhook_defaults(map: &mut Object) {
    each(map, "webhooks", |w| webhook_defaults(w, false));
}

/// The checks of one webhook upstream makes besides names, sideEffects,
/// admissionReviewVersions and timeouts (`ValidateValidatingWebhookConfiguration`
/// in `pkg/apis/admissionregistration/validation` and `ValidateWebhookURL` /
/// `ValidateWebhookService` in `apiserver/pkg/util/webhook`): the name has
/// three segments, policies take their enum values, rules name known
/// operations and scopes, a `url` is `https://host[/path]` without user,
/// query or fragment, a service path starts with `/` and its port is 1-65535.
fn webhook_fields_validate(w: &Value, field: &str, errs: &mut Vec<FieldError>) {
    let name = w.get("name").and_then(Value::as_str).unwrap_or("");
    if !name.is_empty() {
        let dns = crate::validation::is_dns1123_subdomain(name);
        if !dns.is_empty() {
            errs.push(FieldError::invalid(&format!("{field}.name"), name, dns.join(",")));
        } else if name.split('.').count() < 3 {
            errs.push(FieldError::invalid(&format!("{field}.name"), name, "should be a domain with at least three segments separated by dots"));
        }
    }
    let one_of = |key: &str, allowed: &[&str], errs: &mut Vec<FieldError>| {
        if let Some(v) = w.get(key).and_then(Value::as_str) {
            if !allowed.contains(&v) {
                errs.push(FieldError::not_supported(&format!("{field}.{key}"), v, allowed));
            }
        }
    };
    one_of("failurePolicy", &["Fail", "Ignore"], errs);
    one_of("matchPolicy", &["Equivalent", "Exact"], errs);
    one_of("reinvocationPolicy", &["IfNeeded", "Never"], errs);
    for (r, rule) in w.get("rules").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]).iter().enumerate() {
        let rf = format!("{field}.rules[{r}]");
        for (o, op) in rule.get("operations").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]).iter().enumerate() {
            let op = op.as_str().unwrap_or("");
            let ops = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
            if !ops.contains(&op) {
                errs.push(FieldError::not_supported(&format!("{rf}.operations[{o}]"), op, &ops));
            }
        }
        if let Some(scope) = rule.get("scope").and_then(Value::as_str) {
            let scopes = ["*", "Cluster", "Namespaced"];
            if !scopes.contains(&scope) {
                errs.push(FieldError::not_supported(&format!("{rf}.scope"), scope, &scopes));
            }
        }
    }
    let cc = w.get("clientConfig");
    if let Some(url) = cc.and_then(|c| c.get("url")).and_then(Value::as_str) {
        let uf = format!("{field}.clientConfig.url");
        const FORM: &str = "; desired format: https://host[/path]";
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        if scheme != "https" {
            errs.push(FieldError::invalid(&uf, scheme, format!("'https' is the only allowed URL scheme{FORM}")));
        }
        let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let authority = rest.split('/').next().unwrap_or("");
        let (user, host) = authority.rsplit_once('@').map_or(("", authority), |(u, h)| (u, h));
        if host.is_empty() {
            errs.push(FieldError::invalid(&uf, host, format!("host must be specified{FORM}")));
        }
        if !user.is_empty() {
            errs.push(FieldError::invalid(&uf, user, "user information is not permitted in the URL"));
        }
        if !fragment.is_empty() {
            errs.push(FieldError::invalid(&uf, fragment, "fragments are not permitted in the URL"));
        }
        if !query.is_empty() {
            errs.push(FieldError::invalid(&uf, query, "query parameters are not permitted in the URL"));
        }
    }
    if let Some(svc) = cc.and_then(|c| c.get("service")).filter(|s| s.is_object()) {
        let sf = format!("{field}.clientConfig.service");
        if let Some(path) = svc.get("path").and_then(Value::as_str) {
            if !path.is_empty() && !path.starts_with('/') {
                errs.push(FieldError::invalid(&format!("{sf}.path"), path, "must start with a '/'"));
            }
        }
        if let Some(port) = svc.get("port").and_then(Value::as_i64) {
            if !(1..=65535).contains(&port) {
                errs.push(FieldError::invalid_json(&format!("{sf}.port"), &Value::from(port), "port is not valid: must be between 1 and 65535, inclusive"));
            }
        }
    }
}

fn webhooks_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let hooks = obj.get("webhooks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let mut seen: Vec<&str> = Vec::new();
    for (i, w) in hooks.iter().enumerate() {
        let name = w.get("name").and_then(Value::as_str).unwrap_or("");
        let field = format!("webhooks[{i}]");
        if name.is_empty() {
            errs.push(FieldError::required(&format!("{field}.name"), ""));
        } else if seen.contains(&name) {
            errs.push(FieldError::duplicate(&format!("{field}.name"), name));
        }
        seen.push(name);
        webhook_fields_validate(w, &field, errs);
        match w.get("sideEffects").and_then(Value::as_str) {
            None => errs.push(FieldError::required(&format!("{field}.sideEffects"), "must specify one of None, NoneOnDryRun")),
            Some(s) if !matches!(s, "None" | "NoneOnDryRun") => {
                errs.push(FieldError::not_supported(&format!("{field}.sideEffects"), s, &["None", "NoneOnDryRun"]))
            }
            _ => {}
        }
        if w.get("admissionReviewVersions").and_then(Value::as_array).is_none_or(|a| a.is_empty()) {
            errs.push(FieldError::required(
                &format!("{field}.admissionReviewVersions"),
                "must specify one of v1, v1beta1",
            ));
        }
        let cfg = w.get("clientConfig");
        let url = cfg.and_then(|c| c.get("url")).is_some_and(|v| !v.is_null());
        let svc = cfg.and_then(|c| c.get("service")).is_some_and(|v| !v.is_null());
        if url == svc {
            errs.push(FieldError::required(&format!("{field}.clientConfig"), "exactly one of url or service is required"));
        }
        if let Some(t) = w.get("timeoutSeconds").and_then(Value::as_i64) {
            if !(1..=30).contains(&t) {
                errs.push(FieldError::invalid_json(
                    &format!("{field}.timeoutSeconds"),
                    &Value::from(t),
                    "the timeout value must be between 1 and 30 seconds",
                ));
            }
        }
    }
}

/// MutatingWebhookConfigurations: upstream `SetDefaults_MutatingWebhook`; names,
/// side effects, review versions, client config and timeouts validated.
pub(crate) const MUTATING_WEBHOOK_CONFIGURATION: Strategy =
    Strategy { defaults: mutating_webhook_defaults, validate: webhooks_validate, ..Strategy::NONE };

/// ValidatingWebhookConfigurations: as the mutating ones, without reinvocation.
pub(crate) const VALIDATING_WEBHOOK_CONFIGURATION: Strategy =
    Strategy { defaults: validating_webhook_defaults, validate: webhooks_validate, ..Strategy::NONE };

fn match_resources_defaults(m: &mut Object) {
    default_field(m, "matchPolicy", json!("Equivalent"));
    default_field(m, "namespaceSelector", json!({}));
    default_field(m, "objectSelector", json!({}));
    each(m, "resourceRules", rule_defaults);
    each(m, "excludeResourceRules", rule_defaults);
}

fn vap_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "failurePolicy", json!("Fail"));
    if let Some(m) = spec.get_mut("matchConstraints").and_then(Value::as_object_mut) {
        match_resources_defaults(m);
    }
}

fn vap_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    if obj.pointer("/spec/matchConstraints/resourceRules").and_then(Value::as_array).is_none_or(|a| a.is_empty()) {
        errs.push(FieldError::required("spec.matchConstraints.resourceRules", ""));
    }
    let validations = obj.pointer("/spec/validations").and_then(Value::as_array).filter(|a| !a.is_empty());
    let annotations = obj.pointer("/spec/auditAnnotations").and_then(Value::as_array).filter(|a| !a.is_empty());
    if validations.is_none() && annotations.is_none() {
        errs.push(FieldError::required("spec.validations", "validations or auditAnnotations must contain at least one item"));
    }
    vap_expressions_validate(obj, errs);
}

/// Upstream's `isCELIdentifier`: `[_a-zA-Z][_a-zA-Z0-9]*`, not a reserved word.
fn is_cel_identifier(name: &str) -> bool {
    const RESERVED: &[&str] = &[
        "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function", "if", "import", "let",
        "loop", "package", "namespace", "return", "var", "void", "while",
    ];
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !RESERVED.contains(&name)
}

/// Upstream's `maxAuditAnnotationValueExpressionLength` (bytes).
const MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH: usize = 5 * 1024;

/// The policy's CEL expressions compiled as upstream's
/// `validateValidatingAdmissionPolicySpec` does
/// ([`crate::apiextensions::cel::compile`]): `matchConditions`, `variables`
/// (each seeing the variables before it), `validations` (expression and
/// messageExpression) and `auditAnnotations`, with `params` declared when
/// the policy has a `paramKind`, `authorizer` but in messageExpressions,
/// and `variables` when the policy has variables. An expression that does
/// not compile is Invalid at its field; an empty one Required.
fn vap_expressions_validate(obj: &Value, errs: &mut Vec<FieldError>) {
    use crate::apiextensions::cel::compile::{compile_error, Declarations, Returns};
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let list = |key: &str| spec.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let has_params = spec.get("paramKind").is_some_and(Value::is_object);
    let mut with_authorizer = vec!["object", "oldObject", "request", "namespaceObject", "authorizer"];
    let mut without_authorizer = vec!["object", "oldObject", "request", "namespaceObject"];
    if has_params {
        with_authorizer.push("params");
        without_authorizer.push("params");
    }
    let compiled = |field: String, shown: &str, source: &str, vars: &[&str], composition: Option<&[&str]>, returns: Returns, errs: &mut Vec<FieldError>| {
        if let Some(detail) = compile_error(source, &Declarations { variables: vars, composition }, returns) {
            errs.push(FieldError::invalid(&field, shown, detail));
        }
    };
    for (i, c) in list("matchConditions").iter().enumerate() {
        let expr = text(c, "expression");
        let expr = expr.trim();
        let field = format!("spec.matchConditions[{i}].expression");
        if expr.is_empty() {
            errs.push(FieldError::required(&field, ""));
        } else {
            compiled(field, expr, expr, &with_authorizer, None, Returns::Bool, errs);
        }
    }
    let variables = list("variables");
    let names: Vec<String> = variables.iter().map(|v| text(v, "name")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let composition = |upto: usize| (!variables.is_empty()).then(|| &names[..upto]);
    for (i, v) in variables.iter().enumerate() {
        let (name, expr) = (names[i], text(v, "expression"));
        if name.trim().is_empty() {
            errs.push(FieldError::required(&format!("spec.variables[{i}].name"), "name is not specified"));
        } else if !is_cel_identifier(name) {
            errs.push(FieldError::invalid(&format!("spec.variables[{i}].name"), name, "name is not a valid CEL identifier"));
        }
        let field = format!("spec.variables[{i}].expression");
        if expr.trim().is_empty() {
            errs.push(FieldError::required(&field, "expression is not specified"));
        } else {
            compiled(field, &expr, &expr, &with_authorizer, composition(i), Returns::Any, errs);
        }
    }
    let all = composition(variables.len());
    for (i, v) in list("validations").iter().enumerate() {
        let expr = text(v, "expression");
        let field = format!("spec.validations[{i}].expression");
        if expr.trim().is_empty() {
            errs.push(FieldError::required(&field, "expression is not specified"));
        } else {
            compiled(field, &expr, &expr, &with_authorizer, all, Returns::Bool, errs);
        }
        let message_expr = text(v, "messageExpression");
        let field = format!("spec.validations[{i}].messageExpression");
        if !message_expr.is_empty() && message_expr.trim().is_empty() {
            errs.push(FieldError::invalid(&field, &message_expr, "must be non-empty if specified"));
        } else if !message_expr.is_empty() {
            compiled(field, &message_expr, &message_expr, &without_authorizer, all, Returns::String, errs);
        }
    }
    for (i, a) in list("auditAnnotations").iter().enumerate() {
        let expr = text(a, "valueExpression");
        let trimmed = expr.trim();
        let field = format!("spec.auditAnnotations[{i}].valueExpression");
        if trimmed.is_empty() {
            errs.push(FieldError::required(&field, "valueExpression is not specified"));
        } else if trimmed.len() > MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH {
            errs.push(FieldError::required(
                &field,
                format!("must not exceed {MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH} bytes in length"),
            ));
        } else {
            compiled(field, &expr, trimmed, &with_authorizer, all, Returns::StringOrNull, errs);
        }
    }
}

/// ValidatingAdmissionPolicies: failure policy `Fail` and match defaults.
pub(crate) const VALIDATING_ADMISSION_POLICY: Strategy =
    Strategy { defaults: vap_defaults, prepare_for_create: reset_status, validate: vap_validate, ..Strategy::NONE };

fn vap_binding_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    if let Some(m) = spec.get_mut("matchResources").and_then(Value::as_object_mut) {
        match_resources_defaults(m);
    }
}

fn vap_binding_validate(obj: &Value, _old: Option<&Value>, errs: &mut Vec<FieldError>) {
    required_str(obj, "/spec/policyName", "spec.policyName", errs);
    if let Some(actions) = obj.pointer("/spec/validationActions").and_then(Value::as_array) {
        for (i, a) in actions.iter().enumerate() {
            let a = a.as_str().unwrap_or("");
            if !matches!(a, "Deny" | "Warn" | "Audit") {
                errs.push(FieldError::not_supported(&format!("spec.validationActions[{i}]"), a, &["Audit", "Deny", "Warn"]));
            }
        }
    } else {
        errs.push(FieldError::required("spec.validationActions", "at least one validation action is required"));
    }
}

/// ValidatingAdmissionPolicyBindings.
pub(crate) const VALIDATING_ADMISSION_POLICY_BINDING: Strategy =
    Strategy { defaults: vap_binding_defaults, validate: vap_binding_validate, ..Strategy::NONE };

// ---- flowcontrol ----

fn flow_schema_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    default_field(spec, "matchingPrecedence", json!(1000));
}

/// FlowSchemas: matchingPrecedence 1000 (upstream `SetDefaults_FlowSchemaSpec`).
pub(crate) const FLOW_SCHEMA: Strategy =
    Strategy { defaults: flow_schema_defaults, prepare_for_create: reset_status, ..Strategy::NONE };

fn plc_defaults(map: &mut Object) {
    let spec = child(map, "spec");
    if let Some(limited) = spec.get_mut("limited").and_then(Value::as_object_mut) {
        default_field(limited, "nominalConcurrencyShares", json!(30));
        default_field(limited, "lendablePercent", json!(0));
        let response = child(limited, "limitResponse");
        default_field(response, "type", json!("Reject"));
        if response.get("type").and_then(Value::as_str) == Some("Queue") {
            let q = child(response, "queuing");
            default_field(q, "queues", json!(64));
            default_field(q, "handSize", json!(8));
            default_field(q, "queueLengthLimit", json!(50));
        }
    }
    if let Some(exempt) = spec.get_mut("exempt").and_then(Value::as_object_mut) {
        default_field(exempt, "nominalConcurrencyShares", json!(0));
        default_field(exempt, "lendablePercent", json!(0));
    }
}

/// PriorityLevelConfigurations: upstream `SetDefaults_PriorityLevelConfiguration`.
pub(crate) const PRIORITY_LEVEL_CONFIGURATION: Strategy =
    Strategy { defaults: plc_defaults, prepare_for_create: reset_status, ..Strategy::NONE };

