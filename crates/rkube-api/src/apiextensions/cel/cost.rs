//! The cost limit of CEL evaluation (upstream `k8s.io/apiserver/pkg/apis/cel`
//! `PerCallLimit` and `RuntimeCELCostBudget`, enforced by cel-go's
//! `interpreter.CostTracker`).
//!
//! The `cel` crate does not meter evaluation, so rkube meters it itself:
//! before a program runs, [`instrument`] rewrites its syntax tree so that
//! every iteration of every comprehension (`all`, `exists`, `exists_one`,
//! `map`, `filter`, `sortBy`'s keys) first calls the `@cost` function, which
//! charges the iteration's cost to the meter of the running evaluation
//! ([`Meter`]) and fails with [`LIMIT_EXCEEDED`] once the limit is passed;
//! `lists.range(n)` charges `n` before its list is built. The cost of an
//! iteration is the number of syntax nodes of the loop body it evaluates
//! (nested comprehensions charge their own iterations), plus one; the nodes
//! outside any loop are charged once, when evaluation starts. Kubernetes'
//! library functions (lists, regex, url, quantity) charge the sizes of
//! their arguments ([`charge`]).
//!
//! Not metered: the per-element work of the `cel` crate's own operators and
//! functions (`+` of strings and lists, `in`, `contains`, `matches`, the
//! strings and lists extensions), each linear in its operands' sizes, and
//! the copy of each element a comprehension binds to its variable. Their
//! work is bounded by the metered node count times the largest value an
//! evaluation handles.

use std::cell::Cell;

use cel::common::ast::{operators, CallExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{CelBool, CelInt, INT_TYPE};
use cel::common::value::CowVal;
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
    let outer = METER.with(|m| m.replace(Some(Meter { used: 0, limit })));
    let out = f();
    let meter = METER.with(|m| m.replace(outer)).unwrap_or(Meter { used: 0, limit });
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
    env.add_overload(CHARGE_SIZE, "rkube_cost_size", vec![INT_TYPE], charge_size)
}

fn int_arg(args: &[CowVal<'_, '_>]) -> i64 {
    args.first().and_then(|a| a.downcast_ref::<CelInt>()).map(|i| *i.inner()).unwrap_or(0)
}

fn tick<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(u64::try_from(int_arg(&args)).unwrap_or(0))?;
    Ok(CowVal::owned(CelBool::from(true)))
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
    let mut next_id = max_id(expr) + 1;
    rewrite(expr, &mut next_id);
    nodes(expr)
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

/// `@cost(cost) ? e : false`: `e`, evaluated after `cost` is charged.
fn guarded(e: IdedExpr, cost: u64, id: &mut u64) -> IdedExpr {
    let charged = int(id, cost);
    let tick = node(id, Expr::Call(CallExpr { func_name: TICK.to_string(), target: None, args: vec![charged] }));
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
        }
        Expr::Comprehension(c) => {
            for child in [&mut c.iter_range, &mut c.accu_init, &mut c.loop_cond, &mut c.loop_step, &mut c.result] {
                rewrite(child, id);
            }
            let cost = 1 + nodes(&c.loop_cond) + nodes(&c.loop_step);
            let accu = c.accu_var.clone();
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
                    call.args[1] = guarded(x, cost, id);
                }
                Expr::Call(call) if is_append(call, &accu) => {
                    if let Some(Expr::List(list)) = call.args.get_mut(1).map(|a| &mut a.expr) {
                        for el in list.elements.iter_mut() {
                            let x = std::mem::take(el);
                            *el = guarded(x, cost, id);
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
                    call.args[0] = guarded(guard, cost, id);
                }
                _ => {
                    let x = std::mem::take(step);
                    *step = guarded(x, cost, id);
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
