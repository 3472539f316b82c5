use serde_json::json;

use super::*;

fn messages(obj: Value, schema: Value) -> Vec<String> {
    validate(&obj, &schema).iter().map(ToString::to_string).collect()
}

fn spec(props: Value) -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}})
}

#[test]
fn wrong_types_name_the_expected_and_the_actual_type() {
    let errs = validate(&json!({"spec": {"replicas": "three"}}), &spec(json!({"replicas": {"type": "integer"}})));
    assert_eq!(errs[0].to_string(), "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"");
    assert_eq!(errs[0].error_type, FieldErrorType::TypeInvalid);
}

#[test]
fn required_fields_must_be_present() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["size"], "properties": {"size": {"type": "string"}}}}});
    assert_eq!(messages(json!({"spec": {}}), schema), ["spec.size: Required value"]);
}

#[test]
fn enums_list_the_supported_values() {
    let errs = messages(json!({"spec": {"color": "purple"}}), spec(json!({"color": {"type": "string", "enum": ["red", "green"]}})));
    assert_eq!(errs, ["spec.color: Unsupported value: \"purple\": supported values: \"red\", \"green\""]);
}

#[test]
fn patterns_must_match() {
    let errs = messages(json!({"spec": {"name": "ABC"}}), spec(json!({"name": {"type": "string", "pattern": "^[a-z]+$"}})));
    assert_eq!(errs, ["spec.name: Invalid value: \"ABC\": spec.name in body should match '^[a-z]+$'"]);
}

#[test]
fn minimum_and_maximum_bound_numbers() {
    let s = spec(json!({"n": {"type": "integer", "minimum": 1, "maximum": 10}}));
    assert_eq!(messages(json!({"spec": {"n": 0}}), s.clone()), ["spec.n: Invalid value: 0: spec.n in body should be greater than or equal to 1"]);
    assert_eq!(messages(json!({"spec": {"n": 11}}), s), ["spec.n: Invalid value: 11: spec.n in body should be less than or equal to 10"]);
}

#[test]
fn exclusive_bounds_exclude_the_bound() {
    let s = spec(json!({"n": {"type": "number", "minimum": 1, "exclusiveMinimum": true, "maximum": 2, "exclusiveMaximum": true}}));
    assert_eq!(messages(json!({"spec": {"n": 1}}), s.clone()), ["spec.n: Invalid value: 1: spec.n in body should be greater than 1"]);
    assert_eq!(messages(json!({"spec": {"n": 2}}), s.clone()), ["spec.n: Invalid value: 2: spec.n in body should be less than 2"]);
    assert!(messages(json!({"spec": {"n": 1.5}}), s).is_empty());
}

#[test]
fn string_lengths_are_bounded() {
    let s = spec(json!({"s": {"type": "string", "minLength": 2, "maxLength": 3}}));
    assert_eq!(messages(json!({"spec": {"s": "a"}}), s.clone()), ["spec.s: Invalid value: \"a\": spec.s in body should be at least 2 chars long"]);
    assert_eq!(messages(json!({"spec": {"s": "abcd"}}), s), ["spec.s: Too long: may not be more than 3 bytes"]);
}

#[test]
fn item_counts_are_bounded() {
    let s = spec(json!({"l": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}}}));
    assert_eq!(messages(json!({"spec": {"l": []}}), s.clone()), ["spec.l: Invalid value: []: spec.l in body should have at least 1 items"]);
    assert_eq!(messages(json!({"spec": {"l": ["a", "b", "c"]}}), s), ["spec.l: Too many: 3: must have at most 2 items"]);
}

#[test]
fn property_counts_are_bounded() {
    let s = spec(json!({"m": {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": {"type": "string"}}}));
    assert_eq!(messages(json!({"spec": {"m": {}}}), s.clone()), ["spec.m: Invalid value: {}: spec.m in body should have at least 1 properties"]);
    assert_eq!(messages(json!({"spec": {"m": {"a": "1", "b": "2"}}}), s), ["spec.m: Too many: 2: must have at most 1 items"]);
}

#[test]
fn formats_are_checked() {
    let s = spec(json!({"t": {"type": "string", "format": "date-time"}, "i": {"type": "integer", "format": "int32"}}));
    assert_eq!(
        messages(json!({"spec": {"t": "yesterday"}}), s.clone()),
        ["spec.t: Invalid value: \"yesterday\": spec.t in body must be of type date-time: \"yesterday\""]
    );
    assert!(messages(json!({"spec": {"t": "2024-01-02T03:04:05Z", "i": 5}}), s.clone()).is_empty());
    assert_eq!(
        messages(json!({"spec": {"i": 3000000000i64}}), s),
        ["spec.i: Invalid value: 3000000000: spec.i in body must be of type int32: 3000000000"]
    );
}

#[test]
fn null_is_accepted_only_when_nullable() {
    let s = spec(json!({"a": {"type": "string", "nullable": true}, "b": {"type": "string"}}));
    assert_eq!(messages(json!({"spec": {"a": null, "b": null}}), s), ["spec.b: Invalid value: \"null\": spec.b in body must be of type string: \"null\""]);
}

#[test]
fn int_or_string_accepts_both_and_nothing_else() {
    let s = spec(json!({"port": {"x-kubernetes-int-or-string": true}}));
    assert!(messages(json!({"spec": {"port": 80}}), s.clone()).is_empty());
    assert!(messages(json!({"spec": {"port": "http"}}), s.clone()).is_empty());
    assert_eq!(
        messages(json!({"spec": {"port": true}}), s),
        ["spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""]
    );
}

#[test]
fn embedded_resources_need_api_version_and_kind() {
    let s = spec(json!({"template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}));
    assert_eq!(
        messages(json!({"spec": {"template": {"kind": "Pod"}}}), s.clone()),
        ["spec.template.apiVersion: Required value: must not be empty"]
    );
    let mut obj = json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "extra": 1}}});
    assert!(prune(&mut obj, &s).is_empty());
}

#[test]
fn unknown_fields_are_pruned_and_reported() {
    let s = spec(json!({"a": {"type": "string"}}));
    let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {"a": "1", "b": 2}, "other": true});
    assert_eq!(prune(&mut obj, &s), ["spec.b", "other"]);
    assert_eq!(obj, json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {"a": "1"}}));
}

#[test]
fn preserve_unknown_fields_keeps_them() {
    let s = spec(json!({"free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}));
    let mut obj = json!({"spec": {"free": {"anything": {"deep": 1}}}});
    assert!(prune(&mut obj, &s).is_empty());
    assert_eq!(obj["spec"]["free"]["anything"]["deep"], 1);
}

#[test]
fn defaults_fill_absent_fields_only() {
    let s = spec(json!({"replicas": {"type": "integer", "default": 1}, "mode": {"type": "string", "default": "fast"},
                        "nested": {"type": "object", "default": {}, "properties": {"x": {"type": "string", "default": "y"}}}}));
    let mut obj = json!({"spec": {"mode": "slow"}});
    apply_defaults(&mut obj, &s);
    assert_eq!(obj, json!({"spec": {"mode": "slow", "replicas": 1, "nested": {"x": "y"}}}));
}

#[test]
fn schemas_must_be_structural() {
    let errs: Vec<String> = structural_errors(
        &json!({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}, "b": {"x-kubernetes-int-or-string": true}}}}}),
        "spec.versions[0].schema.openAPIV3Schema",
    )
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(errs, ["spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"]);
    let root: Vec<String> = structural_errors(&json!({"type": "string"}), "s").iter().map(ToString::to_string).collect();
    assert_eq!(root, ["s.type: Unsupported value: \"string\": supported values: \"object\""]);
}
