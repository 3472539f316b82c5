//! Kubernetes' CEL list library (upstream
//! `k8s.io/apiserver/pkg/cel/library/lists.go`): `isSorted`, `sum`, `min`,
//! `max`, `indexOf` and `lastIndexOf` on lists. Each charges the list's size
//! to the cost meter.
//!
//! Not as upstream: `sum()` of an empty list is the int `0` whatever the
//! list's element type (upstream's type checker picks `0u`, `0.0` or a zero
//! duration from the declared type; CEL compares `0 == 0.0` equal anyway).

use std::cmp::Ordering;

use cel::common::types::{CelBool, CelInt, DYN_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::cost::charge;
use super::library::{no_such_overload, take};

/// Registers the functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload("indexOf", "list_a_index_of_int", LIST_TYPE, vec![DYN_TYPE], index_of)?;
    env.add_member_overload("lastIndexOf", "list_a_last_index_of_int", LIST_TYPE, vec![DYN_TYPE], last_index_of)
}

/// The elements of `list`, after charging their number.
fn elements<'b, 'v>(function: &str, list: &'b (dyn Val + 'v)) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
    let iterable = list.as_iterable().ok_or_else(|| no_such_overload(function, &[list]))?;
    let mut items = iterable.iter();
    let mut out = Vec::new();
    while let Some(item) = items.next() {
        out.push(item);
    }
    charge(out.len() as u64 + 1)?;
    Ok(out)
}

fn compare(function: &str, a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    a.as_comparer().ok_or_else(|| no_such_overload(function, &[a, b]))?.compare(b)
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements("isSorted", list.as_ref())?;
    for pair in items.windows(2) {
        if compare("isSorted", pair[0], pair[1])? == Ordering::Greater {
            return Ok(CowVal::owned(CelBool::from(false)));
        }
    }
    Ok(CowVal::owned(CelBool::from(true)))
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements("sum", list.as_ref())?;
    let Some((first, rest)) = items.split_first() else {
        return Ok(CowVal::owned(CelInt::from(0)));
    };
    let mut acc: Box<dyn Val + 'v> = first.clone_as_boxed();
    for item in rest {
        let next = {
            let adder = acc.as_adder().ok_or_else(|| no_such_overload("sum", &[acc.as_ref(), *item]))?;
            adder.add(*item)?.into_owned()
        };
        acc = next;
    }
    Ok(CowVal::Owned(acc))
}

/// The element `prefer` orders before all others (`Less`: the minimum).
fn extreme<'b, 'v>(function: &str, args: Vec<CowVal<'b, 'v>>, prefer: Ordering) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements(function, list.as_ref())?;
    let mut best: Option<&(dyn Val + 'v)> = None;
    for item in items {
        best = Some(match best {
            Some(b) if compare(function, item, b)? != prefer => b,
            _ => item,
        });
    }
    match best {
        Some(b) => Ok(CowVal::Owned(b.clone_as_boxed())),
        None => Err(ExecutionError::function_error(function, format!("{function} called on empty list"))),
    }
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme("min", args, Ordering::Less)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme("max", args, Ordering::Greater)
}

fn position<'b, 'v>(function: &str, args: Vec<CowVal<'b, 'v>>, last: bool) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list, wanted] = take(args)?;
    let items = elements(function, list.as_ref())?;
    let found = if last {
        items.iter().rposition(|i| i.equals(wanted.as_ref()))
    } else {
        items.iter().position(|i| i.equals(wanted.as_ref()))
    };
    let index = found.map_or(-1, |i| i64::try_from(i).unwrap_or(i64::MAX));
    Ok(CowVal::owned(CelInt::from(index)))
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position("indexOf", args, false)
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position("lastIndexOf", args, true)
}
