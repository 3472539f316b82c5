//! Kubernetes' CEL regex library (upstream
//! `k8s.io/apiserver/pkg/cel/library/regex.go`), with the `regex` crate
//! (RE2 syntax, as Go's `regexp`): `s.find(re)` gives the first match of `re`
//! in `s` (`''` when none), `s.findAll(re)` every non-overlapping match and
//! `s.findAll(re, n)` at most `n` of them (all when `n < 0`). A pattern that
//! does not compile fails with `Illegal regex: error parsing regexp: ...`.
//! Each call charges the product of the string's and the pattern's lengths
//! over ten (the regex crate runs in time linear in both).

use cel::common::types::{CelInt, CelList, CelString, INT_TYPE, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use regex::{Regex, RegexBuilder};

use super::cost::charge;
use super::library::{string_arg, take};

/// The most memory one compiled pattern may take (bytes).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Registers the functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("find", "string_find_string", STRING_TYPE, vec![STRING_TYPE], find)?;
    env.add_member_overload("findAll", "string_find_all_string", STRING_TYPE, vec![STRING_TYPE], find_all)?;
    env.add_member_overload("findAll", "string_find_all_string_int", STRING_TYPE, vec![STRING_TYPE, INT_TYPE], find_all_n)
}

/// `pattern` compiled, after charging the search of `haystack` with it.
fn compile(function: &str, haystack: &str, pattern: &str) -> Result<Regex, ExecutionError> {
    charge(1 + (haystack.len() as u64 + 1).saturating_mul(pattern.len() as u64 + 1) / 10)?;
    RegexBuilder::new(pattern).size_limit(REGEX_SIZE_LIMIT).build().map_err(|e| {
        ExecutionError::function_error(function, format!("Illegal regex: error parsing regexp: {}", regex_error(&e, pattern)))
    })
}

/// The regex crate's (multi-line) error as one line, shaped as Go's
/// `<problem>: `<pattern>``.
fn regex_error(e: &regex::Error, pattern: &str) -> String {
    let text = e.to_string();
    let problem = text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map(str::to_string)
        .unwrap_or_else(|| text.lines().last().unwrap_or_default().trim().to_string());
    format!("{problem}: `{pattern}`")
}

fn find<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s, re] = take(args)?;
    let (s, re) = (string_arg("find", s.as_ref())?, string_arg("find", re.as_ref())?);
    let found = compile("find", s, re)?.find(s).map(|m| m.as_str().to_string()).unwrap_or_default();
    Ok(CowVal::owned(CelString::from(found)))
}

fn matches_of(s: &str, re: &Regex, limit: i64) -> CowVal<'static, 'static> {
    let take_n = usize::try_from(limit).unwrap_or(usize::MAX);
    let items: Vec<Box<dyn Val>> =
        re.find_iter(s).take(take_n).map(|m| Box::new(CelString::from(m.as_str().to_string())) as Box<dyn Val>).collect();
    CowVal::owned(CelList::from(items))
}

fn find_all<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s, re] = take(args)?;
    let (s, re) = (string_arg("findAll", s.as_ref())?, string_arg("findAll", re.as_ref())?);
    let compiled = compile("findAll", s, re)?;
    Ok(matches_of(s, &compiled, -1))
}

fn find_all_n<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s, re, n] = take(args)?;
    let (s, re) = (string_arg("findAll", s.as_ref())?, string_arg("findAll", re.as_ref())?);
    let n = n.downcast_ref::<CelInt>().map_or(-1, |n| *n.inner());
    let compiled = compile("findAll", s, re)?;
    Ok(matches_of(s, &compiled, n))
}
