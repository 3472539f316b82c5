//! The static cost estimate of `x-kubernetes-validations` rules when a CRD
//! is written (upstream `apiextensions-apiserver` validation's
//! `StaticEstimatedCostLimit` and `getCostErrorMessage`, over cel-go's
//! `checker.Cost`): a rule whose worst case over the sizes its schema
//! allows exceeds [`STATIC_ESTIMATED_COST_LIMIT`] is refused with
//! upstream's `Forbidden: estimated rule cost exceeds budget by factor of
//! ...`.
//!
//! The estimate: an identifier, field selection or function call costs 1,
//! literals and the logical operators nothing but their operands; a
//! comprehension costs its range and, per element, its loop condition and
//! step. Sizes come from the schema: `maxItems`/`maxProperties`, else the
//! most elements a 3 MiB request can hold (upstream's
//! `MaxRequestSizeBytes` over each element's smallest JSON form); list
//! literals, `map`/`filter` results and `lists.range(<literal>)` keep
//! their size. Not as upstream: what this does not model (sizes of strings
//! and of other functions' results, the per-schema total
//! `StaticEstimatedCRDCostLimit`) counts as cheap, so the estimate is at
//! most upstream's for the rules it refuses: it refuses fewer CRDs than
//! upstream, never more; the limit at run time ([`super::cost`]) bounds the
//! rest.

use cel::common::ast::{operators, EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::Value;

use crate::field_error::FieldError;

/// Upstream's `StaticEstimatedCostLimit`: the estimated cost one rule may have.
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;

/// Upstream's `MaxRequestSizeBytes` (3 MiB), which bounds unbounded lists and maps.
const MAX_REQUEST_SIZE_BYTES: f64 = 3.0 * 1024.0 * 1024.0;

/// Deeper than schemas nest in practice; keeps the walk bounded.
const MAX_DEPTH: usize = 64;

/// The Forbidden errors of the rules of `schema` (at `path`) whose
/// estimated cost exceeds [`STATIC_ESTIMATED_COST_LIMIT`].
pub fn cost_errors(schema: &Value, path: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    walk(schema, path, &mut out, 0);
    out
}

fn walk(schema: &Value, path: &str, out: &mut Vec<FieldError>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    for (i, rule) in schema.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let Some(expr) = rule.get("rule").and_then(Value::as_str).and_then(super::parse) else { continue };
        let cost = estimate(&expr, schema);
        if cost > STATIC_ESTIMATED_COST_LIMIT as f64 {
            out.push(FieldError::forbidden(
                &format!("{path}.x-kubernetes-validations[{i}].rule"),
                cost_error_message("estimated rule cost", cost, STATIC_ESTIMATED_COST_LIMIT),
            ));
        }
    }
    for (k, v) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
        walk(v, &format!("{path}.properties[{k}]"), out, depth + 1);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = schema.get(key).filter(|v| v.is_object()) {
            walk(v, &format!("{path}.{key}"), out, depth + 1);
        }
    }
}

/// Upstream's `getCostErrorMessage`.
pub fn cost_error_message(name: &str, cost: f64, limit: u64) -> String {
    let factor = cost / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{name} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// The worst-case cost of `expr` with `self` (and `oldSelf`) of `schema`.
pub fn estimate(expr: &IdedExpr, schema: &Value) -> f64 {
    let node = Shape { schema: Some(schema), len: None };
    let mut scope = vec![("self".to_string(), node), ("oldSelf".to_string(), node)];
    est(expr, &mut scope).0
}

/// What the estimate knows of a value: its schema, and its most elements.
#[derive(Clone, Copy, Default)]
struct Shape<'a> {
    schema: Option<&'a Value>,
    len: Option<f64>,
}

impl<'a> Shape<'a> {
    fn of(schema: Option<&'a Value>) -> Shape<'a> {
        Shape { schema, len: None }
    }

    /// The most elements of a list or map value.
    fn max_len(&self) -> Option<f64> {
        if self.len.is_some() {
            return self.len;
        }
        let s = self.schema?;
        match s.get("type").and_then(Value::as_str) {
            Some("array") => Some(match s.get("maxItems").and_then(Value::as_f64) {
                Some(m) => m,
                None => ((MAX_REQUEST_SIZE_BYTES - 2.0) / (min_size(s.get("items")) + 1.0)).floor(),
            }),
            Some("object") => {
                if let Some(extra) = s.get("additionalProperties").filter(|a| a.is_object()) {
                    Some(match s.get("maxProperties").and_then(Value::as_f64) {
                        Some(m) => m,
                        None => ((MAX_REQUEST_SIZE_BYTES - 2.0) / (min_size(Some(extra)) + 4.0)).floor(),
                    })
                } else {
                    s.get("properties").and_then(Value::as_object).map(|p| p.len() as f64)
                }
            }
            _ => None,
        }
    }

    /// An element of a list (its items' schema) or a map's value.
    fn element(&self) -> Shape<'a> {
        let s = self.schema;
        Shape::of(s.and_then(|s| s.get("items")).or_else(|| s.and_then(|s| s.get("additionalProperties"))).filter(|v| v.is_object()))
    }

    /// The field `name` of an object.
    fn field(&self, name: &str) -> Shape<'a> {
        let s = self.schema;
        let prop = s.and_then(|s| s.get("properties")).and_then(|p| p.get(name));
        Shape::of(prop.or_else(|| s.and_then(|s| s.get("additionalProperties"))).filter(|v| v.is_object()))
    }
}

/// The smallest JSON a value of `schema` serializes to, in bytes.
fn min_size(schema: Option<&Value>) -> f64 {
    match schema.and_then(|s| s.get("type")).and_then(Value::as_str) {
        Some("string") | Some("array") | Some("object") => 2.0,
        Some("boolean") => 4.0,
        _ => 1.0,
    }
}

fn lookup<'a>(scope: &[(String, Shape<'a>)], name: &str) -> Shape<'a> {
    scope.iter().rev().find(|(n, _)| n == name).map(|(_, s)| *s).unwrap_or_default()
}

fn est<'a>(e: &IdedExpr, scope: &mut Vec<(String, Shape<'a>)>) -> (f64, Shape<'a>) {
    match &e.expr {
        Expr::Literal(_) | Expr::Unspecified => (0.0, Shape::default()),
        // The accumulators macros add cost nothing of their own.
        Expr::Ident(name) if name.starts_with('@') => (0.0, Shape::default()),
        Expr::Ident(name) => (1.0, lookup(scope, name)),
        Expr::Select(s) => {
            let (c, operand) = est(&s.operand, scope);
            (c + 1.0, operand.field(&s.field))
        }
        Expr::List(list) => {
            let c = list.elements.iter().map(|el| est(el, scope).0).sum();
            (c, Shape { schema: None, len: Some(list.elements.len() as f64) })
        }
        Expr::Map(map) => {
            let mut c = 0.0;
            for entry in &map.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    c += est(&me.key, scope).0 + est(&me.value, scope).0;
                }
            }
            (c, Shape { schema: None, len: Some(map.entries.len() as f64) })
        }
        Expr::Struct(s) => {
            let mut c = 1.0;
            for entry in &s.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(me) => c += est(&me.key, scope).0 + est(&me.value, scope).0,
                    EntryExpr::StructField(f) => c += est(&f.value, scope).0,
                }
            }
            (c, Shape::default())
        }
        Expr::Call(call) => {
            let mut args: Vec<(f64, Shape<'a>)> = Vec::new();
            if let Some(t) = &call.target {
                args.push(est(t, scope));
            }
            for a in &call.args {
                args.push(est(a, scope));
            }
            let sum: f64 = args.iter().map(|(c, _)| c).sum();
            match call.func_name.as_str() {
                operators::LOGICAL_AND | operators::LOGICAL_OR | operators::LOGICAL_NOT | operators::NOT_STRICTLY_FALSE => {
                    (sum, Shape::default())
                }
                operators::CONDITIONAL if args.len() == 3 => {
                    let (a, b) = (args[1], args[2]);
                    let len = match (a.1.max_len(), b.1.max_len()) {
                        (Some(x), Some(y)) => Some(x.max(y)),
                        _ => None,
                    };
                    (args[0].0 + a.0.max(b.0), Shape { schema: None, len })
                }
                operators::INDEX if args.len() == 2 => (sum + 1.0, args[0].1.element()),
                operators::ADD if args.len() == 2 => {
                    let len = match (args[0].1.max_len(), args[1].1.max_len()) {
                        (Some(x), Some(y)) => Some(x + y),
                        _ => None,
                    };
                    (sum + 1.0, Shape { schema: None, len })
                }
                "range" if call.target.as_deref().is_some_and(|t| matches!(&t.expr, Expr::Ident(n) if n == "lists")) => {
                    let len = match call.args.first().map(|a| &a.expr) {
                        Some(Expr::Literal(LiteralValue::Int(n))) => Some((*n.inner()).max(0) as f64),
                        _ => None,
                    };
                    // `lists` is a namespace, not a variable: its ident costs nothing.
                    (sum, Shape { schema: None, len })
                }
                _ => (sum + 1.0, Shape::default()),
            }
        }
        Expr::Comprehension(c) => {
            let (range_cost, range) = est(&c.iter_range, scope);
            let (init_cost, _) = est(&c.accu_init, scope);
            // Unknown sizes count as one element: the estimate stays a lower bound.
            let n = range.max_len().unwrap_or(1.0);
            let element = if range.schema.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("object") {
                Shape::default()
            } else {
                range.element()
            };
            scope.push((c.iter_var.clone(), element));
            let per = est(&c.loop_cond, scope).0 + est(&c.loop_step, scope).0;
            let result_cost = est(&c.result, scope).0;
            scope.pop();
            let builds_list = matches!(&c.accu_init.expr, Expr::List(l) if l.elements.is_empty());
            let shape = Shape { schema: None, len: builds_list.then_some(n) };
            (range_cost + init_cost + n * per + result_cost, shape)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(schema: Value) -> Vec<String> {
        cost_errors(&schema, "openAPIV3Schema").iter().map(|e| e.to_string()).collect()
    }

    fn spec_with(rule: &str, l: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": rule}], "properties": {"l": l}}}})
    }

    const CUBIC: &str = "self.l.all(x, self.l.all(y, self.l.all(z, x == y)))";

    #[test]
    fn a_cubic_rule_over_an_unbounded_list_is_forbidden_with_upstreams_message() {
        assert_eq!(
            errors(spec_with(CUBIC, json!({"type": "array", "items": {"type": "integer"}}))),
            ["openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"]
        );
    }

    #[test]
    fn max_items_bounds_the_estimate() {
        let bounded = json!({"type": "array", "maxItems": 100, "items": {"type": "integer"}});
        assert!(errors(spec_with(CUBIC, bounded)).is_empty());
        // 150^3 elements, 3 per innermost step (the call and two identifiers).
        let larger = json!({"type": "array", "maxItems": 150, "items": {"type": "integer"}});
        let errs = errors(spec_with(CUBIC, larger));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("exceeds budget by factor of 1.0"), "{errs:?}");
    }

    #[test]
    fn linear_rules_over_unbounded_lists_pass() {
        let unbounded = json!({"type": "array", "items": {"type": "integer"}});
        assert!(errors(spec_with("self.l.all(x, x > 0)", unbounded.clone())).is_empty());
        assert!(errors(spec_with("self.l.size() < 10 && self.l.map(x, x * 2).exists(y, y == 4)", unbounded)).is_empty());
    }

    #[test]
    fn the_factor_is_worded_as_upstream() {
        assert!(cost_error_message("estimated rule cost", 12_345_678.0, 10_000_000).contains("factor of 1.234568x"));
        assert!(cost_error_message("estimated rule cost", 25_000_000.0, 10_000_000).contains("factor of 2.5x"));
    }
}
