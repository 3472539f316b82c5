use super::*;
use serde_json::json;

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.replicas <= self.maxReplicas", "message": "replicas may not exceed maxReplicas"},
                {"rule": "!has(self.mode) || self.mode in ['a', 'b']", "fieldPath": ".mode", "reason": "FieldValueForbidden"},
                {"rule": "self.ratio < 2.5"},
                {"rule": "self.maxReplicas >= oldSelf.maxReplicas", "messageExpression": "'maxReplicas may not shrink below ' + string(oldSelf.maxReplicas)"}
            ],
            "properties": {
                "replicas": {"type": "integer"}, "maxReplicas": {"type": "integer"}, "mode": {"type": "string"},
                "ratio": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self.startsWith('t-')"}]}},
                "limits": {"type": "object", "additionalProperties": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= 0", "message": "must not be negative"}]}}
            }}
    }})
}

fn rendered(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(|e| e.to_string()).collect()
}

#[test]
fn rules_that_hold_give_no_errors_and_numbers_are_doubles_where_the_schema_says() {
    let obj = json!({"spec": {"replicas": 1, "maxReplicas": 3, "ratio": 2, "mode": "a", "tags": ["t-1"], "limits": {"cpu": 1}}});
    assert!(validate(&obj, None, &schema()).is_empty(), "{:?}", rendered(&validate(&obj, None, &schema())));
}

#[test]
fn failed_rules_are_field_errors_with_upstreams_messages() {
    let obj = json!({"spec": {"replicas": 5, "maxReplicas": 3, "ratio": 3.5, "mode": "c", "tags": ["x"], "limits": {"cpu": -1}}});
    assert_eq!(
        rendered(&validate(&obj, None, &schema())),
        [
            "spec: Invalid value: \"object\": replicas may not exceed maxReplicas",
            "spec.mode: Forbidden: failed rule: !has(self.mode) || self.mode in ['a', 'b']",
            "spec: Invalid value: \"object\": failed rule: self.ratio < 2.5",
            "spec.tags[0]: Invalid value: \"string\": failed rule: self.startsWith('t-')",
            "spec.limits[cpu]: Invalid value: \"integer\": must not be negative",
        ]
    );
}

#[test]
fn transition_rules_run_on_updates_with_old_self() {
    let old = json!({"spec": {"replicas": 1, "maxReplicas": 5, "ratio": 1}});
    let new = json!({"spec": {"replicas": 1, "maxReplicas": 3, "ratio": 1}});
    assert!(validate(&new, None, &schema()).is_empty(), "no oldSelf on create");
    assert_eq!(
        rendered(&validate(&new, Some(&old), &schema())),
        ["spec: Invalid value: \"object\": maxReplicas may not shrink below 5"]
    );
}

#[test]
fn reading_an_absent_field_is_an_error_and_unknown_functions_are_skipped() {
    let s = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [{"rule": "self.missing == 1"}, {"rule": "cel.bind(u, self.u, u == 'y')"}, {"rule": "self.u +"}],
        "properties": {"u": {"type": "string"}}}}});
    let errs = rendered(&validate(&json!({"spec": {"u": "x"}}), None, &s));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].starts_with("spec: Invalid value: \"object\": "), "{errs:?}");
    assert!(errs[0].to_lowercase().contains("missing"), "{errs:?}");
}

#[test]
fn match_conditions_evaluate_over_request_variables() {
    let request = json!({"operation": "CREATE", "userInfo": {"username": "alice", "groups": ["dev"]}});
    let object = json!({"metadata": {"name": "x", "labels": {"team": "a"}}});
    let vars = [("request", &request), ("object", &object), ("oldObject", &Value::Null)];
    assert_eq!(evaluate_bool("request.userInfo.username == 'alice'", &vars), Outcome::Bool(true));
    assert_eq!(evaluate_bool("'team' in object.metadata.labels && oldObject == null", &vars), Outcome::Bool(true));
    assert_eq!(evaluate_bool("!('system:masters' in request.userInfo.groups)", &vars), Outcome::Bool(true));
    assert!(matches!(evaluate_bool("object.spec.x == 1", &vars), Outcome::Error(_)));
    assert_eq!(evaluate_bool("authorizer.group('').resource('pods').check('get').allowed()", &vars), Outcome::Unsupported);
    assert_eq!(evaluate_bool("1 +", &vars), Outcome::Unsupported);
}

#[test]
fn rules_rkube_cannot_enforce_are_named() {
    let s = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [{"rule": "self.size() > 0"}, {"rule": "cel.bind(u, self.u, u == 'y')"}, {"rule": "self.u +"}],
        "properties": {"tags": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self.startsWith('t')"}]}}}}}});
    let found = unevaluable_rules(&s, "openAPIV3Schema");
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0], "openAPIV3Schema.properties[spec].x-kubernetes-validations[1]: rule \"cel.bind(u, self.u, u == 'y')\" calls bind which rkube's CEL lacks; it is not enforced");
    assert!(found[1].starts_with("openAPIV3Schema.properties[spec].x-kubernetes-validations[2]: rule \"self.u +\" does not parse in rkube's CEL"), "{found:?}");
}

#[test]
fn rules_calling_kubernetes_libraries_are_not_named_as_unenforced() {
    let rules: Vec<Value> = [
        "ip.isCanonical(self.u) && ip(self.u).isLoopback() && isIP(self.u)",
        "cidr(self.u).masked().containsIP(self.u) && isCIDR(self.u)",
        "url(self.u).getHost() == '' && isURL(self.u) && url(self.u).getQuery().size() == 0",
        "quantity(self.u).isInteger() && isQuantity(self.u) && quantity(self.u).add(1).sign() == 1",
        "self.u.find('a') == '' && self.u.findAll('a', 1).size() == 0",
        "[1, 2].sum() == 3 && [1].isSorted() && [1].min() == [1].max() && [1].indexOf(1) == [1].lastIndexOf(1)",
        "isSemver(self.u) && semver(self.u, true).major() == 1 && semver(self.u).compareTo(semver('1.0.0')) == 0",
        "!format.dns1123Label().validate(self.u).hasValue() && format.named('uri').value().validate(self.u).hasValue()",
    ]
    .iter()
    .map(|r| json!({"rule": r}))
    .collect();
    let s = json!({"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": rules,
        "properties": {"u": {"type": "string"}}}}});
    assert_eq!(unevaluable_rules(&s, "openAPIV3Schema"), Vec::<String>::new());
}
