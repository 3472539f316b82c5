//! Compiling CEL expressions when the object holding them is written
//! (upstream `k8s.io/apiserver/pkg/admission/plugin/cel/compile.go`
//! `CompileCELExpression`, whose errors `pkg/apis/admissionregistration/
//! validation` turns into field errors): an expression that does not
//! compile makes the write 422 Invalid, with upstream's detail
//! `compilation failed: ERROR: <input>:<line>:<column>: <message>` followed
//! by the source line and a caret (cel-go's `Issues.String()`).
//!
//! What is checked here, without cel-go's type checker:
//! - syntax (the `cel` crate's parser, whose messages are ANTLR's, as cel-go's);
//! - identifiers: every free identifier must be a declared variable or a
//!   CEL type name, else `undeclared reference to '<name>' (in container
//!   '')`; fields read from `variables` must name a variable declared
//!   before (`undefined field '<name>'`);
//! - functions: a function neither this environment nor upstream's
//!   Kubernetes environment declares is an undeclared reference too;
//! - the result type, when the expression is a literal (`must evaluate to
//!   bool`).
//!
//! Not checked (upstream's checker would): argument types and overloads,
//! result types of other expressions.

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::parser::{ParseError, ParseErrors};

/// What an expression must evaluate to (upstream `ReturnTypes()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    /// `bool` (validations, match conditions).
    Bool,
    /// `string` (messageExpression).
    String,
    /// `string` or `null` (auditAnnotations' valueExpression).
    StringOrNull,
    /// Anything (variables).
    Any,
}

/// The declarations an expression is compiled with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Declarations<'a> {
    /// Top-level variables (`object`, `request`, `params`, ...).
    pub variables: &'a [&'a str],
    /// When set, `variables` is declared with these fields (upstream's
    /// composited compiler: the policy's variables declared so far).
    pub composition: Option<&'a [&'a str]>,
}

/// The names CEL declares as types (usable as identifiers: `type(x) == string`).
const TYPE_NAMES: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
    "dyn",
];

/// Functions (by last name) Kubernetes' CEL environment declares, as of
/// 1.31 (cel-go's standard library, the strings, lists, sets, math and
/// encoders extensions, optionals, two-variable comprehensions, and
/// `k8s.io/apiserver/pkg/cel/library`), including those this environment
/// may lack: calling one of these is never a compile error here.
const UPSTREAM_FUNCTIONS: &[&str] = &[
    // cel-go standard library and macros.
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "duration",
    "timestamp",
    "type",
    "dyn",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getFullYear",
    "getHours",
    "getMilliseconds",
    "getMinutes",
    "getMonth",
    "getSeconds",
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    // Strings, lists, sets, math and encoders extensions.
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "upperAscii",
    "join",
    "format",
    "quote",
    "reverse",
    "slice",
    "flatten",
    "distinct",
    "sort",
    "sortBy",
    "range",
    "first",
    "last",
    "equivalent",
    "intersects",
    "greatest",
    "least",
    "ceil",
    "floor",
    "round",
    "trunc",
    "abs",
    "sign",
    "isInf",
    "isNaN",
    "isFinite",
    "bitAnd",
    "bitOr",
    "bitXor",
    "bitNot",
    "bitShiftLeft",
    "bitShiftRight",
    "sqrt",
    "encode",
    "decode",
    // Optionals, cel.bind, two-variable comprehensions.
    "of",
    "none",
    "ofNonZeroValue",
    "hasValue",
    "value",
    "or",
    "orValue",
    "optMap",
    "optFlatMap",
    "bind",
    "existsOne",
    "transformList",
    "transformMap",
    "transformMapEntry",
    // Kubernetes libraries: lists, regex, url, authz, quantity, ip, cidr, format, semver.
    "isSorted",
    "sum",
    "min",
    "max",
    "find",
    "findAll",
    "url",
    "isURL",
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    "path",
    "group",
    "resource",
    "subresource",
    "namespace",
    "name",
    "check",
    "allowed",
    "reason",
    "errored",
    "error",
    "serviceAccount",
    "fieldSelector",
    "labelSelector",
    "quantity",
    "isQuantity",
    "isGreaterThan",
    "isLessThan",
    "compareTo",
    "add",
    "sub",
    "asInteger",
    "isInteger",
    "asApproximateFloat",
    "ip",
    "isIP",
    "family",
    "isUnspecified",
    "isLoopback",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isGlobalUnicast",
    "isCanonical",
    "cidr",
    "isCIDR",
    "containsIP",
    "containsCIDR",
    "masked",
    "prefixLength",
    "named",
    "validate",
    // format.<name>(): the names are super::formats::NAMES.
    "semver",
    "isSemver",
    "major",
    "minor",
    "patch",
    "escapeKey",
];

/// Namespaces of qualified functions (`optional.none()`, `ip.isCanonical(s)`):
/// as a call's target these are not variables.
const NAMESPACES: &[&str] = &[
    "optional",
    "strings",
    "lists",
    "sets",
    "math",
    "base64",
    "format",
    "ip",
    "cel",
    "jsonpatch",
];

/// The compile error of `source` as upstream's `Error.Detail`, `None` when it compiles.
pub fn compile_error(source: &str, decls: &Declarations<'_>, returns: Returns) -> Option<String> {
    let (expr, info) = match super::env().parser().parse_with_source_info(source) {
        Ok(parsed) => parsed,
        Err(errs) => return Some(format!("compilation failed: {}", parse_errors(source, &errs))),
    };
    let mut issues: Vec<(u32, String)> = Vec::new();
    let mut scope: Vec<&str> = Vec::new();
    check(&expr, decls, &mut scope, &mut |id, msg| {
        let offset = info.offset_for(id).map_or(0, |(start, _)| start);
        issues.push((offset, msg));
    });
    if !issues.is_empty() {
        issues.sort_by_key(|(offset, _)| *offset);
        issues.dedup();
        let shown: Vec<String> = issues
            .iter()
            .map(|(offset, msg)| issue(source, *offset as usize, msg))
            .collect();
        return Some(format!("compilation failed: {}", shown.join("\n")));
    }
    let literal = match &expr.expr {
        Expr::Literal(l) => Some(match l {
            LiteralValue::Boolean(_) => "bool",
            LiteralValue::Bytes(_) => "bytes",
            LiteralValue::Double(_) => "double",
            LiteralValue::Int(_) => "int",
            LiteralValue::Null => "null_type",
            LiteralValue::String(_) => "string",
            LiteralValue::UInt(_) => "uint",
        }),
        Expr::List(_) => Some("list"),
        Expr::Map(_) => Some("map"),
        _ => None,
    };
    match (returns, literal) {
        (Returns::Bool, Some(t)) if t != "bool" => Some("must evaluate to bool".into()),
        (Returns::String, Some(t)) if t != "string" => Some("must evaluate to string".into()),
        (Returns::StringOrNull, Some(t)) if t != "string" && t != "null_type" => {
            Some("must evaluate to one of [string null_type]".into())
        }
        _ => None,
    }
}

/// cel-go's display of one issue at byte `offset` of `source`: `ERROR:
/// <input>:<line>:<column>: <message>`, then ` | <line>` and ` | ...^`.
fn issue(source: &str, offset: usize, msg: &str) -> String {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or(source);
    let line_no = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count();
    display(source, line_no, column, msg)
}

/// `ERROR: <input>:<line>:<column+1>: <msg>` with the source line and a caret
/// under the 0-based `column` (wide characters shown wider, as cel-go).
fn display(source: &str, line_no: usize, column: usize, msg: &str) -> String {
    let mut out = format!("ERROR: <input>:{line_no}:{}: {msg}", column + 1);
    if let Some(line) = source.split('\n').nth(line_no - 1) {
        let line = line.replace('\t', " ");
        let mut marker = String::new();
        let mut chars = line.chars();
        for _ in 0..column {
            match chars.next() {
                Some(c) if c.len_utf8() > 1 => marker.push('\u{ff0e}'),
                Some(_) => marker.push('.'),
                None => break,
            }
        }
        marker.push(if chars.next().is_some_and(|c| c.len_utf8() > 1) {
            '\u{ff3e}'
        } else {
            '^'
        });
        out.push_str(&format!("\n | {line}\n | {marker}"));
    }
    out
}

/// The parser's errors as cel-go shows them (its positions: 1-based line and column).
fn parse_errors(source: &str, errs: &ParseErrors) -> String {
    let shown: Vec<String> = errs
        .errors
        .iter()
        .map(|e: &ParseError| {
            let (line, column) = (e.pos.0.max(1) as usize, (e.pos.1 - 1).max(0) as usize);
            display(source, line, column, &e.msg)
        })
        .collect();
    shown.join("\n")
}

fn undeclared(name: &str) -> String {
    format!("undeclared reference to '{name}' (in container '')")
}

/// Whether function `name` is declared: by this environment, or by upstream's.
fn known_function(name: &str) -> bool {
    !name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        || UPSTREAM_FUNCTIONS.contains(&name)
        || super::formats::NAMES.contains(&name)
        || super::declared(name)
}

fn check<'e>(e: &'e IdedExpr, decls: &Declarations<'_>, scope: &mut Vec<&'e str>, report: &mut dyn FnMut(u64, String)) {
    match &e.expr {
        Expr::Ident(name) => {
            let bound = name.starts_with('@')
                || scope.contains(&name.as_str())
                || decls.variables.contains(&name.as_str())
                || (name == "variables" && decls.composition.is_some())
                || TYPE_NAMES.contains(&name.as_str());
            if !bound {
                report(e.id, undeclared(name));
            }
        }
        Expr::Select(s) => {
            if let (Expr::Ident(name), Some(declared)) = (&s.operand.expr, decls.composition) {
                if name == "variables" && !scope.contains(&"variables") && !declared.contains(&s.field.as_str()) {
                    report(e.id, format!("undefined field '{}'", s.field));
                    return;
                }
            }
            check(&s.operand, decls, scope, report);
        }
        Expr::Call(call) => {
            if !known_function(&call.func_name) {
                report(e.id, undeclared(&call.func_name));
            }
            if let Some(target) = &call.target {
                let namespace = matches!(&target.expr, Expr::Ident(n) if NAMESPACES.contains(&n.as_str()) && !scope.contains(&n.as_str()) && !decls.variables.contains(&n.as_str()));
                if !namespace {
                    check(target, decls, scope, report);
                }
            }
            for a in &call.args {
                check(a, decls, scope, report);
            }
        }
        Expr::Comprehension(c) => {
            check(&c.iter_range, decls, scope, report);
            check(&c.accu_init, decls, scope, report);
            let before = scope.len();
            scope.push(&c.accu_var);
            scope.push(&c.iter_var);
            if let Some(v2) = &c.iter_var2 {
                scope.push(v2);
            }
            check(&c.loop_cond, decls, scope, report);
            check(&c.loop_step, decls, scope, report);
            // The result sees the accumulator only.
            scope.truncate(before + 1);
            check(&c.result, decls, scope, report);
            scope.truncate(before);
        }
        Expr::List(l) => {
            for el in &l.elements {
                check(el, decls, scope, report);
            }
        }
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    check(&me.key, decls, scope, report);
                    check(&me.value, decls, scope, report);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(me) => {
                        check(&me.key, decls, scope, report);
                        check(&me.value, decls, scope, report);
                    }
                    EntryExpr::StructField(f) => check(&f.value, decls, scope, report),
                }
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &[&str] = &["object", "oldObject", "request", "namespaceObject", "authorizer"];

    fn err(source: &str) -> Option<String> {
        compile_error(
            source,
            &Declarations {
                variables: POLICY,
                composition: None,
            },
            Returns::Bool,
        )
    }

    #[test]
    fn well_formed_expressions_compile() {
        for ok in [
            "object.spec.replicas <= 5",
            "has(object.metadata.labels) && object.metadata.labels.all(k, k.startsWith('app'))",
            "object.spec.containers.map(c, c.image).exists(i, i.endsWith(':latest'))",
            "type(object.spec) == map && string(1) == '1'",
            "optional.of(1).hasValue() && ip.isCanonical('1.2.3.4') && isSemver('1.0.0')",
            "lists.range(3).size() == 3 && [1, 2].sum() == 3",
            "authorizer.group('').resource('pods').check('get').allowed()",
        ] {
            assert_eq!(err(ok), None, "{ok}");
        }
    }

    #[test]
    fn a_syntax_error_is_shown_as_cel_go_shows_it() {
        let e = err("object.spec.replicas <").unwrap();
        assert!(
            e.starts_with("compilation failed: ERROR: <input>:1:23: Syntax error: "),
            "{e}"
        );
        assert!(
            e.ends_with("\n | object.spec.replicas <\n | ......................^"),
            "{e}"
        );
    }

    #[test]
    fn undeclared_variables_and_functions_are_named() {
        assert_eq!(
            err("objct.spec.replicas > 1").as_deref(),
            Some("compilation failed: ERROR: <input>:1:1: undeclared reference to 'objct' (in container '')\n | objct.spec.replicas > 1\n | ^")
        );
        assert_eq!(
            err("params.max > 1").as_deref(),
            Some("compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')\n | params.max > 1\n | ^")
        );
        let e = err("object.spec.name.frobnicate() && x").unwrap();
        assert!(
            e.contains("undeclared reference to 'frobnicate' (in container '')"),
            "{e}"
        );
        assert!(
            e.contains("ERROR: <input>:1:34: undeclared reference to 'x' (in container '')"),
            "{e}"
        );
        // A comprehension's variable is bound inside it only.
        assert!(err("object.items.all(i, i > 0) && i > 0")
            .unwrap()
            .contains("undeclared reference to 'i'"));
    }

    #[test]
    fn variables_are_declared_by_composition_in_order() {
        let decls = Declarations {
            variables: POLICY,
            composition: Some(&["replicas"]),
        };
        assert_eq!(compile_error("variables.replicas > 1", &decls, Returns::Bool), None);
        let e = compile_error("variables.image == ''", &decls, Returns::Bool).unwrap();
        assert!(
            e.starts_with("compilation failed: ERROR: <input>:1:10: undefined field 'image'"),
            "{e}"
        );
        let e = err("variables.replicas > 1").unwrap();
        assert!(e.contains("undeclared reference to 'variables'"), "{e}");
    }

    #[test]
    fn literal_results_of_the_wrong_type_are_refused() {
        assert_eq!(err("'yes'").as_deref(), Some("must evaluate to bool"));
        let d = Declarations {
            variables: POLICY,
            composition: None,
        };
        assert_eq!(
            compile_error("1", &d, Returns::String).as_deref(),
            Some("must evaluate to string")
        );
        assert_eq!(compile_error("null", &d, Returns::StringOrNull), None);
        assert_eq!(
            compile_error("[1]", &d, Returns::StringOrNull).as_deref(),
            Some("must evaluate to one of [string null_type]")
        );
        assert_eq!(compile_error("[1]", &d, Returns::Any), None);
    }
}
