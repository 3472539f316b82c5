//! The cost limit of CEL evaluation (upstream `k8s.io/apiserver/pkg/apis/cel`
//! `PerCallLimit` and `RuntimeCELCostBudget`, enforced by cel-go's
//! `interpreter.CostTracker`).
//!
//! The `cel` crate does not meter evaluation, so rkube meters it itself:
//! before a program runs, [`instrument`] rewrites its syntax tree so that
//! every iteration of every comprehension (`all`, `exists`, `exists_one`,
//! `map`, `filter`, `sortBy`'s keys) first calls the `@cost` function, which
//! charges the iteration's cost to the meter of the running evaluation
//! ([`Meter`]) and fails with [`LIMIT_EXCEEDED`] once the limit is passed.
//! What is charged:
//!
//! - each iteration: the number of syntax nodes of the loop body it
//!   evaluates (nested comprehensions charge their own iterations), plus
//!   one, plus a tenth of the size of the element bound to the loop
//!   variable (which the `cel` crate copies);
//! - once per evaluation: the nodes outside any loop;
//! - the operands of the `cel` crate's functions whose work grows with
//!   their operands ([`LINEAR`]: `+`, `==`, `in`, `contains`, `matches`,
//!   `split`, `join`, `sort`, ...): a tenth of each operand's size, charged
//!   before the function runs;
//! - `lists.range(n)`: `n`, before its list is built;
//! - Kubernetes' library functions (lists, regex, url, ip, cidr, quantity):
//!   the sizes of their arguments ([`charge`]).
//!
//! A value's size is its length for strings and bytes, and one per element
//! plus the elements' sizes for lists and maps (keys count one). Not
//! metered: functions that take constant time (`size`, indexing, field
//! selection, conversions of scalars), and the work of a function beyond
//! its operands' sizes times a constant.

use std::cell::Cell;

use cel::common::ast::{operators, CallExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{CelBool, CelBytes, CelInt, CelMap, CelString, DYN_TYPE, INT_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// Upstream `PerCallLimit`: the cost one expression may use (roughly 0.1 s).
pub const PER_CALL_LIMIT: u64 = 1_000_000;

/// Upstream `RuntimeCELCostBudget`: the cost all the rules validating one
/// custom resource may use together (roughly 1 s).
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// cel-go's error when an evaluation passes its cost limit.
pub const LIMIT_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";

/// The function every metered iteration calls; `@` keeps CEL sources from
/// naming it.
const TICK: &str = "@cost";
/// Charges its int argument, then gives it back (`lists.range`'s size).
const CHARGE_SIZE: &str = "@costSize";
/// Charges a tenth of its argument's size, then gives it back unchanged.
const SIZED: &str = "@sized";

/// The `cel` crate's functions whose work is linear in their operands'
/// sizes: their operands are charged ([`SIZED`]).
pub const LINEAR: &[&str] = &[
    operators::ADD, operators::EQUALS, operators::NOT_EQUALS, operators::IN, operators::LESS,
    operators::LESS_EQUALS, operators::GREATER, operators::GREATER_EQUALS, "contains", "startsWith",
    "endsWith", "matches", "split", "replace", "join", "lowerAscii", "upperAscii", "trim", "substring",
    "charAt", "indexOf", "lastIndexOf", "reverse", "quote", "string", "bytes", "sort", "distinct",
    "flatten", "slice", "format",
];

/// Names that are namespaces of qualified functions, not values: a call's
/// target naming one is left alone.
const NAMESPACES: &[&str] = &["ip", "lists", "strings", "math", "optional", "cel", "base64"];

thread_local! {
    static METER: Cell<Option<Meter>> = const { Cell::new(None) };
}

/// What one evaluation has used of its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meter {
    /// Cost charged so far.
    pub used: u64,
    /// The cost it may use.
    pub limit: u64,
}

impl Meter {
    /// Whether more than the limit was charged.
    pub fn exceeded(&self) -> bool {
        self.used > self.limit
    }
}

/// Runs `f` (one evaluation, on this thread) with a meter of `limit`, and
/// gives its result and the meter at its end. Evaluations nest: an inner
/// one has its own meter and charges its total to the outer one.
pub fn metered<T>(limit: u64, f: impl FnOnce() -> T) -> (T, Meter) {
    /// Puts the outer meter back, also when `f` panics.
    struct Restore(Option<Meter>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0;
            METER.with(|m| m.set(outer));
        }
    }
    let outer = METER.with(|m| m.replace(Some(Meter { used: 0, limit })));
    let restore = Restore(outer);
    let out = f();
    let meter = METER.with(|m| m.get()).unwrap_or(Meter { used: 0, limit });
    drop(restore);
    if outer.is_some() {
        let _ = charge(meter.used);
    }
    (out, meter)
}

/// Charges `cost` to the running evaluation's meter; fails with
/// [`LIMIT_EXCEEDED`] when that passes its limit. Outside [`metered`]
/// nothing is charged.
pub fn charge(cost: u64) -> Result<(), ExecutionError> {
    METER.with(|m| match m.get() {
        None => Ok(()),
        Some(mut meter) => {
            meter.used = meter.used.saturating_add(cost);
            m.set(Some(meter));
            if meter.exceeded() {
                Err(ExecutionError::function_error("cost", LIMIT_EXCEEDED))
            } else {
                Ok(())
            }
        }
    })
}

/// Registers the metering functions [`instrument`] calls.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(TICK, "rkube_cost_tick", vec![INT_TYPE], tick)?;
    env.add_overload(TICK, "rkube_cost_tick_element", vec![INT_TYPE, DYN_TYPE], tick)?;
    env.add_overload(CHARGE_SIZE, "rkube_cost_size", vec![INT_TYPE], charge_size)?;
    env.add_overload(SIZED, "rkube_cost_sized", vec![DYN_TYPE], sized)
}

/// The size of `v` (module docs); nesting deeper than 64 counts one.
pub fn size_of(v: &dyn Val) -> u64 {
    fn at(v: &dyn Val, depth: usize) -> u64 {
        if depth > 64 {
            return 1;
        }
        if let Some(s) = v.downcast_ref::<CelString>() {
            return s.inner().len() as u64;
        }
        if let Some(b) = v.downcast_ref::<CelBytes>() {
            return b.inner().len() as u64;
        }
        if let Some(m) = v.downcast_ref::<CelMap>() {
            return m.inner().values().map(|x| 1 + at(x.as_ref(), depth + 1)).sum();
        }
        if let Some(iterable) = v.as_iterable() {
            let mut items = iterable.iter();
            let mut total = 0u64;
            while let Some(item) = items.next() {
                total = total.saturating_add(1 + at(item, depth + 1));
            }
            return total;
        }
        1
    }
    at(v, 0)
}

fn int_arg(args: &[CowVal<'_, '_>]) -> i64 {
    args.first().and_then(|a| a.downcast_ref::<CelInt>()).map(|i| *i.inner()).unwrap_or(0)
}

fn tick<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let element = args.get(1).map_or(0, |e| size_of(e.as_ref()) / 10);
    charge(u64::try_from(int_arg(&args)).unwrap_or(0).saturating_add(element))?;
    Ok(CowVal::owned(CelBool::from(true)))
}

fn sized<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [v] = super::library::take(args)?;
    charge(size_of(v.as_ref()) / 10)?;
    Ok(v)
}

fn charge_size<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let n = int_arg(&args);
    charge(u64::try_from(n).unwrap_or(0))?;
    Ok(CowVal::owned(CelInt::from(n)))
}

/// Rewrites `expr` so that its evaluation is metered (module docs), and
/// gives the cost of its nodes outside any loop, which the caller charges
/// once.
pub fn instrument(expr: &mut IdedExpr) -> u64 {
    let base = nodes(expr);
    let mut next_id = max_id(expr) + 1;
    rewrite(expr, &mut next_id);
    base
}

fn max_id(e: &IdedExpr) -> u64 {
    let mut max = e.id;
    for_each_child(e, &mut |c| max = max.max(max_id(c)));
    max
}

fn for_each_child(e: &IdedExpr, f: &mut dyn FnMut(&IdedExpr)) {
    match &e.expr {
        Expr::Call(call) => {
            if let Some(t) = &call.target {
                f(t);
            }
            call.args.iter().for_each(&mut *f);
        }
        Expr::Comprehension(c) => {
            for child in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                f(child);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(&mut *f),
        Expr::Map(map) => {
            for entry in &map.entries {
                if let cel::common::ast::EntryExpr::MapEntry(me) = &entry.expr {
                    f(&me.key);
                    f(&me.value);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                match &entry.expr {
                    cel::common::ast::EntryExpr::MapEntry(me) => {
                        f(&me.key);
                        f(&me.value);
                    }
                    cel::common::ast::EntryExpr::StructField(sf) => f(&sf.value),
                }
            }
        }
        Expr::Select(s) => f(&s.operand),
        _ => {}
    }
}

/// The nodes of `e` evaluated once per evaluation of `e`: a comprehension's
/// loop condition and step are left out (they charge per iteration).
fn nodes(e: &IdedExpr) -> u64 {
    match &e.expr {
        Expr::Comprehension(c) => 1 + nodes(&c.iter_range) + nodes(&c.accu_init) + nodes(&c.result),
        _ => {
            let mut n = 1;
            for_each_child(e, &mut |c| n += nodes(c));
            n
        }
    }
}

fn node(id: &mut u64, expr: Expr) -> IdedExpr {
    *id += 1;
    IdedExpr { id: *id, expr }
}

fn int(id: &mut u64, v: u64) -> IdedExpr {
    node(id, Expr::Literal(LiteralValue::Int(CelInt::from(i64::try_from(v).unwrap_or(i64::MAX)))))
}

/// `@cost(cost, element) ? e : false`: `e`, evaluated after `cost` and the
/// loop variable `element`'s size are charged.
fn guarded(e: IdedExpr, cost: u64, element: &str, id: &mut u64) -> IdedExpr {
    let charged = int(id, cost);
    let element = node(id, Expr::Ident(element.to_string()));
    let tick = node(id, Expr::Call(CallExpr { func_name: TICK.to_string(), target: None, args: vec![charged, element] }));
    let never = node(id, Expr::Literal(LiteralValue::Boolean(CelBool::from(false))));
    node(id, Expr::Call(CallExpr { func_name: operators::CONDITIONAL.to_string(), target: None, args: vec![tick, e, never] }))
}

fn is_ident(e: &IdedExpr, name: &str) -> bool {
    matches!(&e.expr, Expr::Ident(n) if n == name)
}

fn rewrite(e: &mut IdedExpr, id: &mut u64) {
    // Children first: a nested comprehension is instrumented on its own.
    match &mut e.expr {
        Expr::Call(call) => {
            if let Some(t) = call.target.as_deref_mut() {
                rewrite(t, id);
            }
            call.args.iter_mut().for_each(|a| rewrite(a, id));
            // lists.range(n) builds n elements: charge them first.
            let is_range = call.func_name == "range" && call.target.as_deref().is_some_and(|t| is_ident(t, "lists"))
                || call.func_name == "lists.range";
            if is_range {
                if let Some(n) = call.args.first_mut() {
                    let inner = std::mem::take(n);
                    *n = node(id, Expr::Call(CallExpr { func_name: CHARGE_SIZE.to_string(), target: None, args: vec![inner] }));
                }
            }
            // Operands of linear functions are charged their sizes; a
            // comprehension's accumulator step (`@result + [x]`) is left in
            // the shape the `cel` crate builds lists in place for.
            let accumulates = call.args.first().is_some_and(|a| matches!(&a.expr, Expr::Ident(n) if n.starts_with('@')));
            if LINEAR.contains(&call.func_name.as_str()) && !accumulates {
                for a in call.args.iter_mut() {
                    wrap_sized(a, id);
                }
                if let Some(t) = call.target.as_deref_mut() {
                    if !matches!(&t.expr, Expr::Ident(n) if NAMESPACES.contains(&n.as_str())) {
                        wrap_sized(t, id);
                    }
                }
            }
        }
        Expr::Comprehension(c) => {
            // Counted as written, before the metering calls are added.
            let cost = 1 + nodes(&c.loop_cond) + nodes(&c.loop_step);
            for child in [&mut c.iter_range, &mut c.accu_init, &mut c.loop_cond, &mut c.loop_step, &mut c.result] {
                rewrite(child, id);
            }
            let accu = c.accu_var.clone();
            let iter_var = c.iter_var.clone();
            // Where the charge goes keeps the shapes the `cel` crate
            // evaluates specially: `@result && x` / `@result || x` (errors
            // of all()/exists() that a later element may override) and
            // `@result + [x]`, optionally guarded (map/filter built in place).
            let step = &mut c.loop_step;
            match &mut step.expr {
                Expr::Call(call)
                    if (call.func_name == operators::LOGICAL_AND || call.func_name == operators::LOGICAL_OR)
                        && call.target.is_none()
                        && call.args.len() == 2
                        && is_ident(&call.args[0], &accu) =>
                {
                    let x = std::mem::take(&mut call.args[1]);
                    call.args[1] = guarded(x, cost, &iter_var, id);
                }
                Expr::Call(call) if is_append(call, &accu) => {
                    if let Some(Expr::List(list)) = call.args.get_mut(1).map(|a| &mut a.expr) {
                        for el in list.elements.iter_mut() {
                            let x = std::mem::take(el);
                            *el = guarded(x, cost, &iter_var, id);
                        }
                    }
                }
                Expr::Call(call)
                    if call.func_name == operators::CONDITIONAL
                        && call.args.len() == 3
                        && is_ident(&call.args[2], &accu)
                        && matches!(&call.args[1].expr, Expr::Call(inner) if is_append(inner, &accu)) =>
                {
                    let guard = std::mem::take(&mut call.args[0]);
                    call.args[0] = guarded(guard, cost, &iter_var, id);
                }
                _ => {
                    let x = std::mem::take(step);
                    *step = guarded(x, cost, &iter_var, id);
                }
            }
        }
        _ => {
            let mut children: Vec<&mut IdedExpr> = Vec::new();
            match &mut e.expr {
                Expr::List(list) => children.extend(list.elements.iter_mut()),
                Expr::Map(map) => {
                    for entry in map.entries.iter_mut() {
                        if let cel::common::ast::EntryExpr::MapEntry(me) = &mut entry.expr {
                            children.push(&mut me.key);
                            children.push(&mut me.value);
                        }
                    }
                }
                Expr::Struct(s) => {
                    for entry in s.entries.iter_mut() {
                        match &mut entry.expr {
                            cel::common::ast::EntryExpr::MapEntry(me) => {
                                children.push(&mut me.key);
                                children.push(&mut me.value);
                            }
                            cel::common::ast::EntryExpr::StructField(sf) => children.push(&mut sf.value),
                        }
                    }
                }
                Expr::Select(s) => children.push(&mut s.operand),
                _ => {}
            }
            for c in children {
                rewrite(c, id);
            }
        }
    }
}

/// `@sized(e)`, unless `e` is a literal (sized by the node count already).
fn wrap_sized(e: &mut IdedExpr, id: &mut u64) {
    if matches!(e.expr, Expr::Literal(_)) {
        return;
    }
    let inner = std::mem::take(e);
    *e = node(id, Expr::Call(CallExpr { func_name: SIZED.to_string(), target: None, args: vec![inner] }));
}

/// `@result + [x]`.
fn is_append(call: &CallExpr, accu: &str) -> bool {
    call.func_name == operators::ADD
        && call.target.is_none()
        && call.args.len() == 2
        && is_ident(&call.args[0], accu)
        && matches!(call.args[1].expr, Expr::List(_))
}

#[cfg(test)]
#[path = "cost_tests.rs"]
mod tests;
