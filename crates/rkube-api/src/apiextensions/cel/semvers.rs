//! Kubernetes' CEL semver library (upstream
//! `k8s.io/apiserver/pkg/cel/library/semverlib.go`, over
//! `github.com/blang/semver/v4`): `semver(s)` and `isSemver(s)`, each also
//! with a `normalize` bool (`semver('v1.0', true)`: a leading `v` dropped,
//! missing minor and patch filled with `0`, leading zeroes dropped), and
//! the methods `major()`, `minor()`, `patch()`, `isGreaterThan(v)`,
//! `isLessThan(v)` and `compareTo(v)` (semver precedence: build metadata
//! ignored, a pre-release below its release). Two semvers are `==` when
//! they compare equal. A string that is not a version fails `semver()`
//! with blang/semver's message (`No Major.Minor.Patch elements found`).
//! Parsing charges a tenth of the string's length, as upstream's cost of
//! `semver`/`isSemver`.

use std::cmp::Ordering;

use cel::common::types::{CelBool, CelInt, Type, BOOL_TYPE, STRING_TYPE};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::cost::charge;
use super::library::{no_such_overload, string_arg, take};

static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");

/// One pre-release identifier: numeric ones sort below alphanumeric ones.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pre {
    Num(u64),
    Str(String),
}

/// A semantic version (build metadata kept but never compared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Semver {
    /// The major number.
    pub major: u64,
    /// The minor number.
    pub minor: u64,
    /// The patch number.
    pub patch: u64,
    pre: Vec<Pre>,
    build: Vec<String>,
}

impl Semver {
    /// `s` parsed as blang/semver's `Parse`; the error is its message.
    pub fn parse(s: &str) -> Result<Semver, String> {
        if s.is_empty() {
            return Err("Version string empty".into());
        }
        let parts: Vec<&str> = s.splitn(3, '.').collect();
        let [major, minor, rest] = parts[..] else {
            return Err("No Major.Minor.Patch elements found".into());
        };
        let major = number(major, "major")?;
        let minor = number(minor, "minor")?;
        let (rest, build) = match rest.split_once('+') {
            Some((r, b)) => (r, Some(b)),
            None => (rest, None),
        };
        let (patch, pre) = match rest.split_once('-') {
            Some((p, pre)) => (p, Some(pre)),
            None => (rest, None),
        };
        let patch = number(patch, "patch")?;
        let mut v = Semver {
            major,
            minor,
            patch,
            pre: Vec::new(),
            build: Vec::new(),
        };
        for id in pre.map(|p| p.split('.').collect::<Vec<_>>()).unwrap_or_default() {
            v.pre.push(pre_release(id)?);
        }
        for id in build.map(|b| b.split('.').collect::<Vec<_>>()).unwrap_or_default() {
            if id.is_empty() {
                return Err("Build meta data is empty".into());
            }
            if !id.chars().all(is_alphanum) {
                return Err(format!(
                    "Invalid character(s) found in build meta data {}",
                    crate::field_error::go_quote(id)
                ));
            }
            v.build.push(id.to_string());
        }
        Ok(v)
    }

    /// upstream's `normalizeAndParse`: a leading `v` dropped, leading
    /// zeroes of each of the first three parts dropped, a missing minor or
    /// patch added as `0` (a short version may not carry a pre-release or
    /// build), then [`Semver::parse`].
    pub fn parse_normalized(s: &str) -> Result<Semver, String> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts: Vec<String> = s.splitn(3, '.').map(str::to_string).collect();
        for p in parts.iter_mut() {
            if p.len() > 1 {
                let trimmed = p.trim_start_matches('0');
                *p = if trimmed.starts_with(|c: char| c.is_ascii_digit()) {
                    trimmed.to_string()
                } else {
                    format!("0{trimmed}")
                };
            }
        }
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
                return Err("short version cannot contain PreRelease/Build meta data".into());
            }
            parts.resize(3, "0".to_string());
        }
        Semver::parse(&parts.join("."))
    }

    /// Semver precedence (blang/semver's `Compare`).
    pub fn compare(&self, other: &Semver) -> Ordering {
        let core = (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        if core != Ordering::Equal {
            return core;
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            _ => {}
        }
        for (a, b) in self.pre.iter().zip(&other.pre) {
            let o = match (a, b) {
                (Pre::Num(x), Pre::Num(y)) => x.cmp(y),
                (Pre::Num(_), Pre::Str(_)) => Ordering::Less,
                (Pre::Str(_), Pre::Num(_)) => Ordering::Greater,
                (Pre::Str(x), Pre::Str(y)) => x.as_bytes().cmp(y.as_bytes()),
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        self.pre.len().cmp(&other.pre.len())
    }
}

fn is_alphanum(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// A major, minor or patch number: digits, no leading zero.
fn number(s: &str, which: &str) -> Result<u64, String> {
    let quoted = crate::field_error::go_quote(s);
    if !s.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("Invalid character(s) found in {which} number {quoted}"));
    }
    if s.len() > 1 && s.starts_with('0') {
        let which = format!("{}{}", which[..1].to_uppercase(), &which[1..]);
        return Err(format!("{which} number must not contain leading zeroes {quoted}"));
    }
    parse_u64(s)
}

/// Go's `strconv.ParseUint(s, 10, 64)` and its errors.
fn parse_u64(s: &str) -> Result<u64, String> {
    if s.is_empty() {
        return Err(format!(
            "strconv.ParseUint: parsing {}: invalid syntax",
            crate::field_error::go_quote(s)
        ));
    }
    s.parse::<u64>().map_err(|_| {
        format!(
            "strconv.ParseUint: parsing {}: value out of range",
            crate::field_error::go_quote(s)
        )
    })
}

fn pre_release(s: &str) -> Result<Pre, String> {
    if s.is_empty() {
        return Err("Prerelease is empty".into());
    }
    if s.chars().all(|c| c.is_ascii_digit()) {
        if s.len() > 1 && s.starts_with('0') {
            return Err(format!(
                "Numeric PreRelease version must not contain leading zeroes {}",
                crate::field_error::go_quote(s)
            ));
        }
        return parse_u64(s).map(Pre::Num);
    }
    if s.chars().all(is_alphanum) {
        return Ok(Pre::Str(s.to_string()));
    }
    Err(format!(
        "Invalid character(s) found in prerelease {}",
        crate::field_error::go_quote(s)
    ))
}

/// A [`Semver`] as a CEL value (`kubernetes.Semver`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelSemver(pub Semver);

impl Val for CelSemver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }
    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<CelSemver>()
            .is_some_and(|o| o.0.compare(&self.0) == Ordering::Equal)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for CelSemver {}

type Function = cel::common::functions::Function;

/// Registers the functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let v = || SEMVER_TYPE.to_owned();
    env.add_overload("semver", "string_to_semver", vec![STRING_TYPE], to_semver)?;
    env.add_overload(
        "semver",
        "string_bool_to_semver",
        vec![STRING_TYPE, BOOL_TYPE],
        to_semver,
    )?;
    env.add_overload("isSemver", "is_semver_string", vec![STRING_TYPE], is_semver)?;
    env.add_overload(
        "isSemver",
        "is_semver_string_bool",
        vec![STRING_TYPE, BOOL_TYPE],
        is_semver,
    )?;
    let parts: [(&str, Function); 3] = [("major", major), ("minor", minor), ("patch", patch)];
    for (name, f) in parts {
        env.add_member_overload(name, &format!("semver_{name}"), v(), vec![], f)?;
    }
    let comparisons: [(&str, Function); 3] = [
        ("isGreaterThan", is_greater_than),
        ("isLessThan", is_less_than),
        ("compareTo", compare_to),
    ];
    for (name, f) in comparisons {
        env.add_member_overload(name, &format!("semver_{name}"), v(), vec![v()], f)?;
    }
    Ok(())
}

/// The string (and normalize flag) of `semver`/`isSemver`, parsed after charging its length.
fn parse_args(function: &str, args: Vec<CowVal<'_, '_>>) -> Result<Result<Semver, String>, ExecutionError> {
    let normalize = match args.get(1) {
        Some(flag) => *flag
            .downcast_ref::<CelBool>()
            .ok_or_else(|| no_such_overload(function, &[flag.as_ref()]))?
            .inner(),
        None => false,
    };
    let s = args
        .first()
        .ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))?;
    let s = string_arg(function, s.as_ref())?;
    charge(1 + s.len() as u64 / 10)?;
    Ok(if normalize {
        Semver::parse_normalized(s)
    } else {
        Semver::parse(s)
    })
}

fn to_semver<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    match parse_args("semver", args)? {
        Ok(v) => Ok(CowVal::owned(CelSemver(v))),
        Err(e) => Err(ExecutionError::function_error("semver", e)),
    }
}

fn is_semver<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelBool::from(parse_args("isSemver", args)?.is_ok())))
}

fn semver_arg<'b>(function: &str, value: &'b (dyn Val + '_)) -> Result<&'b Semver, ExecutionError> {
    value
        .downcast_ref::<CelSemver>()
        .map(|v| &v.0)
        .ok_or_else(|| no_such_overload(function, &[value]))
}

fn part(
    function: &str,
    args: Vec<CowVal<'_, '_>>,
    get: fn(&Semver) -> u64,
) -> Result<CowVal<'static, 'static>, ExecutionError> {
    let [v] = take(args)?;
    // As Go's int64(uint64): versions past i64::MAX wrap.
    Ok(CowVal::owned(CelInt::from(
        get(semver_arg(function, v.as_ref())?) as i64
    )))
}

fn major<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    part("major", args, |v| v.major)
}

fn minor<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    part("minor", args, |v| v.minor)
}

fn patch<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    part("patch", args, |v| v.patch)
}

fn ordering(function: &str, args: Vec<CowVal<'_, '_>>) -> Result<Ordering, ExecutionError> {
    let [a, b] = take(args)?;
    Ok(semver_arg(function, a.as_ref())?.compare(semver_arg(function, b.as_ref())?))
}

fn is_greater_than<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelBool::from(
        ordering("isGreaterThan", args)? == Ordering::Greater,
    )))
}

fn is_less_than<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelBool::from(
        ordering("isLessThan", args)? == Ordering::Less,
    )))
}

fn compare_to<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelInt::from(ordering("compareTo", args)? as i64)))
}
