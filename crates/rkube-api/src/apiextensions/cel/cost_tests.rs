//! The cost limit: metered evaluation stops expensive rules with
//! upstream's messages, and leaves what CEL evaluates unchanged.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::super::{evaluate, to_json, validate, Outcome};
use super::*;
use crate::field_error::FieldError;

fn rendered(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(|e| e.to_string()).collect()
}

fn value(expr: &str) -> Value {
    match evaluate(expr, &[]) {
        Some(Ok(v)) => to_json(&v).unwrap_or(Value::Null),
        other => panic!("{expr}: {other:?}"),
    }
}

#[test]
fn metering_keeps_what_comprehensions_evaluate_to() {
    assert_eq!(value("[1, 2, 3].map(x, x * 2)"), json!([2, 4, 6]));
    assert_eq!(value("[1, 2, 3].filter(x, x > 1)"), json!([2, 3]));
    assert_eq!(value("[1, 2, 3].map(x, x > 1, x * 10)"), json!([20, 30]));
    assert_eq!(value("[1, 2, 3].exists_one(x, x > 2)"), json!(true));
    assert_eq!(value("[3, 1, 2].sortBy(x, x)"), json!([1, 2, 3]));
    assert_eq!(value("[1, 2].all(x, [3, 4].exists(y, y > x))"), json!(true));
    // all()/exists() keep cel-go's error absorption: an error is overridden
    // by a later element that decides the result.
    assert_eq!(value("[0, 1].exists(x, 1 / x == 1)"), json!(true));
    assert_eq!(value("[0, 1].all(x, 1 / x == 5)"), json!(false));
    assert!(matches!(evaluate("[0].all(x, 1 / x == 1)", &[]), Some(Err(_))));
    assert_eq!(value("lists.range(3)"), json!([0, 1, 2]));
}

#[test]
fn an_evaluation_is_charged_its_nodes_and_each_iteration() {
    let (_, once) = metered(PER_CALL_LIMIT, || {
        let mut expr = super::super::parse("1 + 2 == 3").expect("parses");
        let base = instrument(&mut expr);
        charge(base)
    });
    assert_eq!(once.used, 5, "a call with two operands, each a call or literal");
    let cost_of = |n: usize| {
        let list = json!((0..n).collect::<Vec<_>>());
        let expr = super::super::parse("self.all(x, x >= 0)").expect("parses");
        let mut ctx = cel::Context::with_env(super::super::env());
        ctx.add_variable_from_value("self", super::super::to_cel(&list, &Value::Null));
        super::super::run(&expr, &ctx, PER_CALL_LIMIT).1.used
    };
    let (ten, twenty) = (cost_of(10), cost_of(20));
    assert!(twenty > ten, "{ten} {twenty}");
    // Per element: 1, the loop condition `@not_strictly_false(@result)` (2
    // nodes) and the step `@result && x >= 0` (5 nodes).
    assert_eq!(twenty - ten, 10 * 8, "{ten} {twenty}");
}

#[test]
fn nested_meters_charge_their_total_to_the_outer_one() {
    let ((), outer) = metered(100, || {
        let ((), inner) = metered(100, || {
            let _ = charge(30);
        });
        assert_eq!(inner.used, 30);
        let _ = charge(5);
    });
    assert_eq!(outer.used, 35);
    assert!(charge(1_000_000_000).is_ok(), "outside an evaluation nothing is charged");
}

#[test]
fn a_cubic_rule_over_a_large_list_is_cancelled_with_upstreams_message_and_does_not_spin() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.l.all(x, self.l.all(y, self.l.all(z, x == y)))"},
            {"rule": "self.l.size() > 5000", "message": "never reached"}
        ],
        "properties": {"l": {"type": "array", "items": {"type": "integer"}}}}}});
    // Equal elements: no element makes an all() false early, so unmetered
    // this is 10^9 iterations.
    let obj = json!({"spec": {"l": vec![7; 1000]}});
    let started = Instant::now();
    let errs = rendered(&validate(&obj, None, &schema));
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    assert_eq!(
        errs,
        ["spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.l.all(x, self.l.all(y, self.l.all(z, x == y)))"]
    );
}

#[test]
fn a_short_circuit_after_the_limit_does_not_hide_it() {
    let data = json!(vec![0; 1000]);
    let outcome = super::super::evaluate_bool("self.all(x, self.all(y, self.all(z, x == y))) || true", &[("self", &data)]);
    assert_eq!(outcome, Outcome::Error(LIMIT_EXCEEDED.to_string()));
}

#[test]
fn lists_range_is_charged_before_its_list_is_built() {
    let started = Instant::now();
    let outcome = super::super::evaluate_bool("lists.range(1000000).all(a, lists.range(1000000).size() > 0)", &[]);
    assert_eq!(outcome, Outcome::Error(LIMIT_EXCEEDED.to_string()));
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
}

#[test]
fn rules_of_one_object_share_upstreams_budget_and_stop_when_it_is_spent() {
    // Each item's rule visits 80 * 80 elements of 1000 bytes, charged about
    // 106 each (the loop body and a tenth of the element): about 690 000,
    // under the per-call limit; the 10 000 000 budget runs out after about
    // 14 of the 20 items.
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "groups": {"type": "array", "items": {"type": "array", "items": {"type": "string"},
            "x-kubernetes-validations": [{"rule": "self.all(x, self.all(y, true))"}]}}}}}});
    let group = vec!["x".repeat(1000); 80];
    let obj = json!({"spec": {"groups": vec![group; 20]}});
    let errs = rendered(&validate(&obj, None, &schema));
    assert_eq!(errs.len(), 1, "{errs:?}");
    let (path, message) = errs[0].split_once(": ").expect("a field error");
    let index: usize = path.trim_start_matches("spec.groups[").trim_end_matches(']').parse().expect("an item path");
    assert!((10..20).contains(&index), "{path}");
    assert_eq!(
        message,
        "Invalid value: \"array\": validation failed due to running out of cost budget, no further validation rules will be run"
    );
}

#[test]
fn operands_of_linear_functions_are_charged_their_size() {
    // 100 000 concatenations of a 100 000-byte string: each charges 20 000,
    // so the limit stops it after about 50.
    let data = json!({"s": "x".repeat(100_000), "l": vec![0; 100_000]});
    let started = Instant::now();
    let outcome = super::super::evaluate_bool("self.l.all(i, size(self.s + self.s) > 0)", &[("self", &data)]);
    assert_eq!(outcome, Outcome::Error(LIMIT_EXCEEDED.to_string()));
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    // The same over a short string stays well within the limit.
    let short = json!({"s": "x", "l": vec![0; 1000]});
    assert_eq!(super::super::evaluate_bool("self.l.all(i, size(self.s + self.s) > 0)", &[("self", &short)]), Outcome::Bool(true));
}

#[test]
fn sizes_count_characters_and_elements() {
    let v = super::super::to_cel(&json!({"a": ["xy", "z"], "b": 1}), &Value::Null);
    let boxed: Box<dyn cel::common::value::Val> = v.try_into().expect("a value");
    // a: 1 + (1 + 2) + (1 + 1); b: 1 + 1.
    assert_eq!(size_of(boxed.as_ref()), 8);
}
