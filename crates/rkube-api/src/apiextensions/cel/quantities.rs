//! Kubernetes' CEL quantity library (upstream
//! `k8s.io/apiserver/pkg/cel/library/quantity.go`) over rkube's
//! [`Quantity`]: `quantity(s)`, `isQuantity(s)`, `sign(q)` (or `q.sign()`), and the
//! methods `isInteger`, `asInteger`, `asApproximateFloat`, `add` and `sub`
//! (of a quantity or an int), `isGreaterThan`, `isLessThan` and
//! `compareTo`. Two quantities are `==` when their values are.
//!
//! Not as upstream: [`Quantity`] holds thousandths, so precision below
//! `1m` rounds up as it parses (`1n` compares as `1m`); the `mul`, `div`
//! and `divInt` methods newer releases add are absent.

use std::cmp::Ordering;

use cel::common::types::{CelBool, CelDouble, CelInt, Type, INT_TYPE, STRING_TYPE};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::cost::charge;
use super::library::{no_such_overload, string_arg, take};
use crate::quota::quantity::{Format, Quantity};

static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

/// Upstream's `resource.ErrFormatWrong`, the error of a string that is not a quantity.
pub const FORMAT_WRONG: &str = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// A [`Quantity`] as a CEL value (`kubernetes.Quantity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CelQuantity(pub Quantity);

impl Val for CelQuantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }
    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<CelQuantity>().is_some_and(|o| o.0.milli == self.0.milli)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for CelQuantity {}

type Function = cel::common::functions::Function;

/// Registers the functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let q = || QUANTITY_TYPE.to_owned();
    env.add_overload("quantity", "string_to_quantity", vec![STRING_TYPE], to_quantity)?;
    env.add_overload("isQuantity", "is_quantity_string", vec![STRING_TYPE], is_quantity)?;
    // Upstream declares sign() as a global overload; its docs call it as a
    // method too, so both forms are registered.
    env.add_overload("sign", "quantity_sign", vec![q()], sign)?;
    env.add_member_overload("sign", "quantity_sign_member", q(), vec![], sign)?;
    let unary: [(&str, Function); 3] =
        [("isInteger", is_integer), ("asInteger", as_integer), ("asApproximateFloat", as_approximate_float)];
    for (name, f) in unary {
        env.add_member_overload(name, &format!("quantity_{name}"), q(), vec![], f)?;
    }
    let binary: [(&str, Function); 5] = [
        ("add", add),
        ("sub", sub),
        ("isGreaterThan", is_greater_than),
        ("isLessThan", is_less_than),
        ("compareTo", compare_to),
    ];
    for (name, f) in binary {
        env.add_member_overload(name, &format!("quantity_{name}"), q(), vec![q()], f)?;
    }
    env.add_member_overload("add", "quantity_add_int", q(), vec![INT_TYPE], add)?;
    env.add_member_overload("sub", "quantity_sub_int", q(), vec![INT_TYPE], sub)
}

fn to_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = string_arg("quantity", s.as_ref())?;
    charge(1 + s.len() as u64 / 10)?;
    match parse(s) {
        Some(q) => Ok(CowVal::owned(CelQuantity(q))),
        None => Err(ExecutionError::function_error("quantity", FORMAT_WRONG)),
    }
}

/// `s` as upstream's `ParseQuantity` takes it: no surrounding spaces.
fn parse(s: &str) -> Option<Quantity> {
    if s.trim() != s {
        return None;
    }
    Quantity::parse(s)
}

fn is_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = string_arg("isQuantity", s.as_ref())?;
    charge(1 + s.len() as u64 / 10)?;
    Ok(CowVal::owned(CelBool::from(parse(s).is_some())))
}

fn quantity_arg<'b>(function: &str, value: &'b (dyn Val + '_)) -> Result<Quantity, ExecutionError> {
    value.downcast_ref::<CelQuantity>().map(|q| q.0).ok_or_else(|| no_such_overload(function, &[value]))
}

/// The second operand: a quantity, or an int taken as a whole number in
/// decimal exponent notation (upstream's `NewQuantity(i, DecimalExponent)`).
fn operand(function: &str, value: &dyn Val) -> Result<Quantity, ExecutionError> {
    if let Some(i) = value.downcast_ref::<CelInt>() {
        return Ok(Quantity { milli: i128::from(*i.inner()) * 1000, format: Format::DecimalExponent });
    }
    quantity_arg(function, value)
}

fn sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [q] = take(args)?;
    let q = quantity_arg("sign", q.as_ref())?;
    Ok(CowVal::owned(CelInt::from(q.milli.signum() as i64)))
}

/// The whole value of `q` when it has one that fits an int.
fn as_i64(q: Quantity) -> Option<i64> {
    if q.milli % 1000 != 0 {
        return None;
    }
    i64::try_from(q.milli / 1000).ok()
}

fn is_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [q] = take(args)?;
    let q = quantity_arg("isInteger", q.as_ref())?;
    Ok(CowVal::owned(CelBool::from(as_i64(q).is_some())))
}

fn as_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [q] = take(args)?;
    let q = quantity_arg("asInteger", q.as_ref())?;
    match as_i64(q) {
        Some(i) => Ok(CowVal::owned(CelInt::from(i))),
        None => Err(ExecutionError::function_error("asInteger", "cannot convert value to integer")),
    }
}

fn as_approximate_float<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [q] = take(args)?;
    let q = quantity_arg("asApproximateFloat", q.as_ref())?;
    Ok(CowVal::owned(CelDouble::from(q.milli as f64 / 1000.0)))
}

fn add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [a, b] = take(args)?;
    let (a, b) = (quantity_arg("add", a.as_ref())?, operand("add", b.as_ref())?);
    Ok(CowVal::owned(CelQuantity(a.plus(b))))
}

fn sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [a, b] = take(args)?;
    let (a, b) = (quantity_arg("sub", a.as_ref())?, operand("sub", b.as_ref())?);
    Ok(CowVal::owned(CelQuantity(a.plus(Quantity { milli: -b.milli, format: b.format }))))
}

fn ordering(function: &str, args: Vec<CowVal<'_, '_>>) -> Result<Ordering, ExecutionError> {
    let [a, b] = take(args)?;
    Ok(quantity_arg(function, a.as_ref())?.milli.cmp(&quantity_arg(function, b.as_ref())?.milli))
}

fn is_greater_than<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelBool::from(ordering("isGreaterThan", args)? == Ordering::Greater)))
}

fn is_less_than<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelBool::from(ordering("isLessThan", args)? == Ordering::Less)))
}

fn compare_to<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let o = ordering("compareTo", args)?;
    Ok(CowVal::owned(CelInt::from(o as i64)))
}
