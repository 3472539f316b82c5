//! Kubernetes' CEL libraries on the `cel` crate's [`Env`] (upstream
//! `k8s.io/apiserver/pkg/cel/library`), and what their overloads share.

use cel::common::types::CelString;
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// Registers the lists, regex, url, ip, cidr, quantity, semver, authz and
/// format libraries on `env`, and the metering functions of [`super::cost`].
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    super::cost::register(env)?;
    super::lists::register(env)?;
    super::regexes::register(env)?;
    super::urls::register(env)?;
    super::net::register(env)?;
    super::quantities::register(env)?;
    super::semvers::register(env)?;
    super::authz::register(env)?;
    super::formats::register(env)
}

/// `args` as the `N` arguments an overload was declared with.
pub fn take<'b, 'v, const N: usize>(args: Vec<CowVal<'b, 'v>>) -> Result<[CowVal<'b, 'v>; N], ExecutionError> {
    args.try_into().map_err(|args: Vec<_>| ExecutionError::invalid_argument_count(N, args.len()))
}

/// cel-go's `no such overload` for `function` applied to `values`.
pub fn no_such_overload(function: &str, values: &[&dyn Val]) -> ExecutionError {
    ExecutionError::no_such_overload(function, values.iter().map(|v| v.get_type().name().to_string()).collect())
}

/// The string `value` holds (overloads declared with a `string` parameter).
pub fn string_arg<'b, 'v>(function: &str, value: &'b (dyn Val + 'v)) -> Result<&'b str, ExecutionError> {
    value.downcast_ref::<CelString>().map(|s| s.inner()).ok_or_else(|| no_such_overload(function, &[value]))
}

/// The message of `e` as upstream (cel-go) words it: a library function's
/// own error without the `cel` crate's `Error executing function` prefix,
/// `no such key: <key>`; others as the `cel` crate words them.
pub fn error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::FunctionError { message, .. } => message.clone(),
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[path = "library_tests.rs"]
mod tests;
