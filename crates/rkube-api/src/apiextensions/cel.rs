//! CRD validation rules (`x-kubernetes-validations`, upstream
//! `apiextensions-apiserver/pkg/apiserver/schema/cel`), evaluated with the
//! `cel` crate on every create and update of a custom resource:
//!
//! - at each schema node carrying rules, `self` is the value there, typed
//!   by the schema (`number` as double, `integer` as int); rules naming
//!   `oldSelf` (transition rules) run on updates only, where the old object
//!   has a value at the same place (`oldSelf` of list items is not
//!   correlated, so such rules under `items` do not run);
//! - a rule giving `false` is a field error at the node's path (plus the
//!   rule's `fieldPath`): `message`, else `messageExpression`'s string, else
//!   `failed rule: <rule>`, typed by `reason` (`FieldValueInvalid`, the
//!   default, shows the node's type as its value: `Invalid value: "object":
//!   too big`; `FieldValueForbidden`, `FieldValueRequired`,
//!   `FieldValueDuplicate`);
//! - a rule that does not give a boolean is an Invalid error saying so;
//! - a rule that fails is an Invalid error in upstream's words: `<error>
//!   evaluating rule: <rule>` (e.g. `no such key: x` when it reads an absent
//!   field without `has()`), or `'<error>': call arguments did not match a
//!   supported operator, function or macro signature for rule: <rule>`.
//!
//! The environment is the `cel` crate's standard library with the strings
//! and lists extensions (both cel-go extensions Kubernetes enables), plus
//! Kubernetes' own libraries ([`library`]): the list functions (`isSorted`,
//! `sum`, `min`, `max`, `indexOf`, `lastIndexOf`), regex `find`/`findAll`,
//! `url`/`isURL` and the URL getters, `ip`/`isIP`/`ip.isCanonical` and
//! `cidr`/`isCIDR` with their methods ([`net`]), `quantity`/`isQuantity`
//! with the quantity methods, `semver`/`isSemver` with the semver methods
//! ([`semvers`]), and the named formats `format.named(n)`/`format.<n>()`
//! with `validate` ([`formats`]). Still absent: `authorizer`, the quantity
//! `mul`/`div` methods, `optionalOldSelf` and
//! the `cel.bind` macro; a rule that calls what is
//! absent, or does not parse here, is skipped rather than failing objects a
//! real cluster accepts, and writing the CRD answers a warning naming each
//! such rule ([`unevaluable_rules`]).
//!
//! Cost ([`cost`]): each rule may use [`cost::PER_CALL_LIMIT`], and all the
//! rules of one object together [`cost::RUNTIME_COST_BUDGET`], as upstream.
//! A rule passing its limit stops with `'operation cancelled: actual cost
//! limit exceeded': no further validation rules will be run due to call
//! cost exceeds limit for rule: <rule>`; running out of the object's budget
//! gives `validation failed due to running out of cost budget, no further
//! validation rules will be run`; no rule runs after either. Expressions of
//! webhooks' `matchConditions` and admission policies ([`evaluate_bool`]
//! and friends) have the per-call limit. When the CRD is written, a rule
//! whose estimated worst case exceeds upstream's static limit is refused
//! ([`estimate`]).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::objects::{Key, Map as CelMap};
use cel::parser::Expression;
use cel::{Context, Env, ExecutionError, Value as Cel};
use serde_json::Value;

use crate::field_error::FieldError;

pub mod authz;
pub mod compile;
pub mod cost;
pub mod estimate;
pub mod formats;
pub mod library;
pub mod lists;
pub mod net;
pub mod quantities;
pub mod regexes;
pub mod semvers;
pub mod urls;

use cost::{Meter, LIMIT_EXCEEDED, PER_CALL_LIMIT, RUNTIME_COST_BUDGET};
use library::error_text;

fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Both are cel-go's extensions Kubernetes also enables.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        let _ = env.add_extension(library::register);
        Arc::new(env)
    })
    .clone()
}

/// `source` parsed with this environment's macros; `None` when it does not parse.
fn parse(source: &str) -> Option<Expression> {
    env().parser().parse(source).ok()
}

/// Evaluates `expr` in `ctx` metered with `limit` ([`cost`]): a program
/// that passes its limit gives [`LIMIT_EXCEEDED`] whatever it evaluated to.
fn run(expr: &Expression, ctx: &Context, limit: u64) -> (Result<Cel, ExecutionError>, Meter) {
    let mut expr = expr.clone();
    let base = cost::instrument(&mut expr);
    let (result, meter) = cost::metered(limit, || {
        cost::charge(base)?;
        Cel::resolve(&expr, ctx)
    });
    if meter.exceeded() {
        return (Err(ExecutionError::function_error("cost", LIMIT_EXCEEDED)), meter);
    }
    (result, meter)
}

/// The field errors the rules of `schema` find in `obj` (`old`: the stored
/// object on updates), within upstream's per-rule cost limit and per-object
/// budget.
pub fn validate(obj: &Value, old: Option<&Value>, schema: &Value) -> Vec<FieldError> {
    let mut walk = Walk { errs: Vec::new(), remaining: RUNTIME_COST_BUDGET, stopped: false };
    validate_at(obj, old, schema, "", &mut walk, 0);
    walk.errs
}

/// The errors found so far, and the cost budget left for the object.
struct Walk {
    errs: Vec<FieldError>,
    remaining: u64,
    /// A rule ran out of cost: no further rule runs.
    stopped: bool,
}

/// Upstream's message when the object's budget is spent.
const OUT_OF_BUDGET: &str = "validation failed due to running out of cost budget, no further validation rules will be run";

/// Deeper than JSON can nest anyway; keeps the walk bounded.
const MAX_DEPTH: usize = 128;

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn validate_at(v: &Value, old: Option<&Value>, schema: &Value, path: &str, walk: &mut Walk, depth: usize) {
    if depth > MAX_DEPTH || v.is_null() || walk.stopped {
        return;
    }
    if let Some(rules) = schema.get("x-kubernetes-validations").and_then(Value::as_array).filter(|r| !r.is_empty()) {
        if walk.remaining == 0 {
            walk.errs.push(FieldError::invalid(path, schema_type(schema), OUT_OF_BUDGET));
            walk.stopped = true;
            return;
        }
        for rule in rules {
            if walk.stopped {
                return;
            }
            check_rule(rule, v, old, schema, path, walk);
        }
    }
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in map {
                let Some(s) = props.and_then(|p| p.get(k)).or(extra) else { continue };
                let child_old = old.and_then(|o| o.get(k));
                // Keys of maps (additionalProperties) are shown as [key], properties as .key.
                let child_path = if props.is_some_and(|p| p.contains_key(k)) { join(path, k) } else { format!("{path}[{k}]") };
                validate_at(child, child_old, s, &child_path, walk, depth + 1);
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    validate_at(item, None, s, &format!("{path}[{i}]"), walk, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// The OpenAPI type upstream shows as the bad value of a failed rule.
fn schema_type(schema: &Value) -> &str {
    if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool).unwrap_or(false) {
        return "integer-or-string";
    }
    schema.get("type").and_then(Value::as_str).unwrap_or("object")
}

/// How upstream names a rule in its errors: its message, else its source.
fn rule_error_string(rule: &Value, source: &str) -> String {
    match rule.get("message").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty()) {
        Some(m) => m.to_string(),
        None => source.trim().to_string(),
    }
}

fn check_rule(rule: &Value, v: &Value, old: Option<&Value>, schema: &Value, path: &str, walk: &mut Walk) {
    let Some(source) = rule.get("rule").and_then(Value::as_str) else { return };
    let Some(expr) = parse(source) else { return };
    let transition = expr.references().has_variable("oldSelf");
    if transition && old.is_none() {
        return;
    }
    let env = env();
    let mut ctx = Context::with_env(env);
    ctx.add_variable_from_value("self", to_cel(v, schema));
    if let Some(o) = old {
        ctx.add_variable_from_value("oldSelf", to_cel(o, schema));
    }
    let field = match rule.get("fieldPath").and_then(Value::as_str).filter(|f| !f.is_empty()) {
        Some(f) => format!("{path}{f}"),
        None => path.to_string(),
    };
    let shown_type = schema_type(schema);
    let limit = PER_CALL_LIMIT.min(walk.remaining);
    let (result, meter) = run(&expr, &ctx, limit);
    walk.remaining = walk.remaining.saturating_sub(meter.used);
    if meter.exceeded() {
        walk.stopped = true;
        let message = if limit < PER_CALL_LIMIT {
            OUT_OF_BUDGET.to_string()
        } else {
            format!(
                "'{LIMIT_EXCEEDED}': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                rule_error_string(rule, source)
            )
        };
        walk.errs.push(FieldError::invalid(path, shown_type, message));
        return;
    }
    match result {
        Ok(Cel::Bool(true)) => {}
        Ok(Cel::Bool(false)) => {
            let message = match rule_message(rule, source, &ctx, walk) {
                Ok(m) => m,
                Err(stop) => {
                    walk.errs.push(FieldError::invalid(&field, shown_type, stop));
                    walk.stopped = true;
                    return;
                }
            };
            let reason = rule.get("reason").and_then(Value::as_str).unwrap_or("FieldValueInvalid");
            walk.errs.push(match reason {
                "FieldValueForbidden" => FieldError::forbidden(&field, message),
                "FieldValueRequired" => FieldError::required(&field, message),
                "FieldValueDuplicate" => FieldError::duplicate(&field, shown_type),
                _ => FieldError::invalid(&field, shown_type, message),
            });
        }
        Ok(other) => walk.errs.push(FieldError::invalid(
            path,
            shown_type,
            format!("rule result must be a boolean, got {other:?} for rule: {}", source.trim()),
        )),
        // A function or variable this CEL environment lacks: not evaluated.
        Err(ExecutionError::UndeclaredReference(_)) => {}
        Err(e @ ExecutionError::NoSuchOverload(_)) => walk.errs.push(FieldError::invalid(
            path,
            shown_type,
            format!(
                "'{}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                error_text(&e),
                rule_error_string(rule, source)
            ),
        )),
        Err(e) => walk.errs.push(FieldError::invalid(
            path,
            shown_type,
            format!("{} evaluating rule: {}", error_text(&e), rule_error_string(rule, source)),
        )),
    }
}

/// Messages naming each `x-kubernetes-validations` rule of `schema` that
/// [`validate`] will not enforce: rules that do not parse here, and rules
/// calling a function this environment lacks (Kubernetes' own CEL
/// libraries). `path` prefixes the schema paths shown.
pub fn unevaluable_rules(schema: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    unevaluable_at(schema, path, &mut out, 0);
    out
}

fn unevaluable_at(schema: &Value, path: &str, out: &mut Vec<String>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    for (i, rule) in schema.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let Some(source) = rule.get("rule").and_then(Value::as_str) else { continue };
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        match env().compile(source) {
            Err(e) => out.push(format!("{at}: rule {source:?} does not parse in rkube's CEL ({e}); it is not enforced")),
            Ok(program) => {
                let refs = program.references();
                let mut missing: Vec<&str> = refs.functions().into_iter().filter(|f| !declared(f)).collect();
                missing.sort_unstable();
                if !missing.is_empty() {
                    out.push(format!(
                        "{at}: rule {source:?} calls {} which rkube's CEL lacks; it is not enforced",
                        missing.join(", ")
                    ));
                }
            }
        }
    }
    let mut children: Vec<(String, &Value)> = Vec::new();
    for (k, v) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
        children.push((format!("{path}.properties[{k}]"), v));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = schema.get(key).filter(|v| v.is_object()) {
            children.push((format!("{path}.{key}"), v));
        }
    }
    for (p, v) in children {
        unevaluable_at(v, &p, out, depth + 1);
    }
}

/// Whether this environment knows function `name`: called with no argument,
/// as a function, as a method of a string, list, map or int, or in one of
/// the namespaces `ip`, `lists`, `strings`, `format`, it fails for
/// another reason than an undeclared reference. Operators and macros
/// (`_+_`, `@in`, `has`) are always known.
fn declared(name: &str) -> bool {
    if !name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        || matches!(name, "has" | "all" | "exists" | "exists_one" | "map" | "filter")
    {
        return true;
    }
    let fails_otherwise = |call: String, namespace: bool| {
        let Ok(program) = env().compile(&call) else { return false };
        match program.execute(&Context::with_env(env())) {
            // In a namespace lacking `name`, the namespace itself is what is undeclared.
            Err(ExecutionError::UndeclaredReference(r)) => !namespace && r.as_str() != name,
            _ => true,
        }
    };
    ["", "''.", "[].", "{}.", "0."].iter().any(|target| fails_otherwise(format!("{target}{name}()"), false))
        // Qualified functions (`ip.isCanonical`, `lists.range`) are
        // referenced by their last name: their namespaces are probed too.
        || ["ip", "lists", "strings", "format"].iter().any(|ns| fails_otherwise(format!("{ns}.{name}()"), true))
}

/// What a boolean CEL expression gave (webhook `matchConditions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It gave this boolean.
    Bool(bool),
    /// It failed, or gave something else (the message says which).
    Error(String),
    /// It does not parse here, or calls what this environment lacks.
    Unsupported,
}

/// Evaluates `expr` with `vars` bound (JSON values, without a schema:
/// numbers are ints when integral), as upstream's `matchconditions`
/// matcher does with `object`, `oldObject` and `request`.
pub fn evaluate_bool(expr: &str, vars: &[(&str, &Value)]) -> Outcome {
    let Some(result) = evaluate(expr, vars) else { return Outcome::Unsupported };
    match result {
        Ok(Cel::Bool(b)) => Outcome::Bool(b),
        Ok(other) => Outcome::Error(format!("expression must evaluate to a bool, got {other:?}")),
        Err(ExecutionError::UndeclaredReference(_)) => Outcome::Unsupported,
        Err(e) => Outcome::Error(error_text(&e)),
    }
}

/// Evaluates `expr` to a string (`messageExpression`s); `None` otherwise.
pub fn evaluate_string(expr: &str, vars: &[(&str, &Value)]) -> Option<String> {
    match evaluate(expr, vars)? {
        Ok(Cel::String(s)) => Some(s.to_string()),
        _ => None,
    }
}

/// Evaluates `expr` and gives its value as JSON (policy `variables`);
/// `None` when it fails or gives what JSON cannot hold.
pub fn evaluate_json(expr: &str, vars: &[(&str, &Value)]) -> Option<Value> {
    to_json(&evaluate(expr, vars)?.ok()?)
}

/// What an expression whose value is used as is gave (policy
/// `auditAnnotations[].valueExpression`).
#[derive(Debug, Clone, PartialEq)]
pub enum Evaluated {
    /// Its value as JSON (`Null` for CEL `null`).
    Value(Value),
    /// It failed at run time (the message says why), or gave what JSON cannot hold.
    Error(String),
    /// It does not parse here, or calls what this environment lacks.
    Unsupported,
}

/// Evaluates `expr` with `vars` bound (as [`evaluate_bool`] does) and gives
/// its value ([`Evaluated`]).
pub fn evaluate_value(expr: &str, vars: &[(&str, &Value)]) -> Evaluated {
    let Some(result) = evaluate(expr, vars) else { return Evaluated::Unsupported };
    match result {
        Ok(v) => match to_json(&v) {
            Some(json) => Evaluated::Value(json),
            None => Evaluated::Error(format!("expression gave a value JSON cannot hold: {v:?}")),
        },
        Err(ExecutionError::UndeclaredReference(_)) => Evaluated::Unsupported,
        Err(e) => Evaluated::Error(error_text(&e)),
    }
}

/// Evaluates `expr` within [`PER_CALL_LIMIT`]; `None` when it does not parse.
fn evaluate(expr: &str, vars: &[(&str, &Value)]) -> Option<Result<Cel, ExecutionError>> {
    let expr = parse(expr)?;
    let mut ctx = Context::with_env(env());
    for (name, v) in vars {
        ctx.add_variable_from_value(*name, to_cel(v, &Value::Null));
    }
    if let Some(checks) = authz::current() {
        ctx.add_variable_as_val("authorizer", Box::new(authz::AuthzVal::authorizer(checks.clone())));
        ctx.add_variable_as_val("authorizer.requestResource", Box::new(authz::AuthzVal::request_resource(checks)));
    }
    Some(run(&expr, &ctx, PER_CALL_LIMIT).0)
}

/// A CEL value as JSON (lists, maps with string keys, scalars).
fn to_json(v: &Cel) -> Option<Value> {
    Some(match v {
        Cel::Null => Value::Null,
        Cel::Bool(b) => Value::Bool(*b),
        Cel::Int(i) => Value::from(*i),
        Cel::UInt(u) => Value::from(*u),
        Cel::Float(f) => serde_json::Number::from_f64(*f).map(Value::Number)?,
        Cel::String(s) => Value::String(s.to_string()),
        Cel::List(items) => Value::Array(items.iter().map(to_json).collect::<Option<Vec<_>>>()?),
        Cel::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m.map.iter() {
                let Key::String(k) = k else { return None };
                out.insert(k.to_string(), to_json(v)?);
            }
            Value::Object(out)
        }
        _ => return None,
    })
}

/// `message`, else `messageExpression`'s string value, else `failed rule:
/// <rule>`. A `messageExpression` passing its cost limit gives upstream's
/// error instead (`Err`), after which no rule runs.
fn rule_message(rule: &Value, source: &str, ctx: &Context, walk: &mut Walk) -> Result<String, String> {
    if let Some(m) = rule.get("message").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty()) {
        return Ok(m.to_string());
    }
    if let Some(source_expr) = rule.get("messageExpression").and_then(Value::as_str) {
        if let Some(expr) = parse(source_expr) {
            let limit = PER_CALL_LIMIT.min(walk.remaining);
            let (result, meter) = run(&expr, ctx, limit);
            walk.remaining = walk.remaining.saturating_sub(meter.used);
            if meter.exceeded() {
                return Err(if limit < PER_CALL_LIMIT {
                    "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run"
                        .to_string()
                } else {
                    format!("no further validation rules will be run due to call cost exceeds limit for messageExpression: {source_expr:?}")
                });
            }
            if let Ok(Cel::String(s)) = result {
                if !s.trim().is_empty() {
                    return Ok(s.trim().to_string());
                }
            }
        }
    }
    Ok(format!("failed rule: {}", source.trim()))
}

/// `v` as a CEL value, typed by `schema` as upstream's `UnstructuredToVal`:
/// `number` nodes are doubles even when written without a fraction.
pub fn to_cel(v: &Value, schema: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => {
            let float = schema.get("type").and_then(Value::as_str) == Some("number");
            match (float, n.as_i64()) {
                (false, Some(i)) => Cel::Int(i),
                _ => Cel::Float(n.as_f64().unwrap_or(0.0)),
            }
        }
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => {
            let item_schema = schema.get("items").unwrap_or(&Value::Null);
            Cel::List(Arc::new(items.iter().map(|i| to_cel(i, item_schema)).collect()))
        }
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|a| a.is_object()).unwrap_or(&Value::Null);
            let entries: HashMap<Key, Cel> = map
                .iter()
                .map(|(k, child)| {
                    let s = props.and_then(|p| p.get(k)).unwrap_or(extra);
                    (Key::String(Arc::new(k.clone())), to_cel(child, s))
                })
                .collect();
            Cel::Map(CelMap { map: Arc::new(entries) })
        }
    }
}

#[cfg(test)]
#[path = "cel_tests.rs"]
mod tests;
