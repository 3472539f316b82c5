//! Kubernetes' CEL format library (upstream
//! `k8s.io/apiserver/pkg/cel/library/format.go`, Kubernetes 1.31): named
//! string formats, each a `kubernetes.NamedFormat` value:
//!
//! - `format.named(name)`: the format of that name as an optional
//!   (`optional.none()` for an unknown name);
//! - `format.<name>()`: the same, for each name: `dns1123Label`,
//!   `dns1123Subdomain`, `dns1035Label`, `qualifiedName`,
//!   `dns1123LabelPrefix`, `dns1123SubdomainPrefix`, `dns1035LabelPrefix`,
//!   `labelValue`, `uri`, `uuid`, `byte`, `date`, `datetime`;
//! - `<format>.validate(s)`: `optional.none()` when `s` is valid, else an
//!   optional of the list of messages ([`crate::validation`]'s, which are
//!   apimachinery's; `uri` gives Go's `url.ParseRequestURI` error; `uuid`,
//!   `byte`, `date` and `datetime` say `does not match the UUID format`,
//!   `invalid base64`, `invalid date`, `invalid datetime`).
//!
//! Cost of `validate`, as upstream's: a tenth of the string's length (plus
//! one, rounded up) times a quarter of the format's pattern size
//! ([`Format::max_regex_size`]).

use cel::common::types::{CelList, CelOptional, CelString, Type, STRING_TYPE};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::cost::charge;
use super::library::{no_such_overload, string_arg, take};
use crate::validation::{
    is_dns1035_label, is_dns1123_label, is_dns1123_subdomain, is_qualified_name, is_valid_label_value,
};

static FORMAT_TYPE: Type = Type::new_unspecified_type("kubernetes.NamedFormat");

/// The named formats, in upstream's order.
pub const NAMES: [&str; 13] = [
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

/// One named format (a `kubernetes.NamedFormat` CEL value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format(pub &'static str);

impl Format {
    /// The format called `name`, if there is one.
    pub fn named(name: &str) -> Option<Format> {
        NAMES.iter().find(|n| **n == name).map(|n| Format(n))
    }

    /// The messages saying why `s` is not of this format (none: it is).
    pub fn validate(&self, s: &str) -> Vec<String> {
        let simple = |ok: bool, message: &str| if ok { Vec::new() } else { vec![message.to_string()] };
        match self.0 {
            "dns1123Label" => is_dns1123_label(s),
            "dns1123Subdomain" => is_dns1123_subdomain(s),
            "dns1035Label" => is_dns1035_label(s),
            "qualifiedName" => is_qualified_name(s),
            "dns1123LabelPrefix" => is_dns1123_label(&mask_trailing_dash(s)),
            "dns1123SubdomainPrefix" => is_dns1123_subdomain(&mask_trailing_dash(s)),
            "dns1035LabelPrefix" => is_dns1035_label(&mask_trailing_dash(s)),
            "labelValue" => is_valid_label_value(s),
            "uri" => match super::urls::parse(s) {
                Ok(_) => Vec::new(),
                Err(e) => vec![format!("parse {}: {e}", crate::field_error::go_quote(s))],
            },
            "uuid" => simple(
                crate::apiextensions::schema::string_format_ok("uuid", s),
                "does not match the UUID format",
            ),
            "byte" => simple(
                crate::apiextensions::schema::string_format_ok("byte", s),
                "invalid base64",
            ),
            "date" => simple(
                crate::apiextensions::schema::string_format_ok("date", s),
                "invalid date",
            ),
            _ => simple(
                crate::apiextensions::schema::string_format_ok("datetime", s),
                "invalid datetime",
            ),
        }
    }

    /// The size of the pattern upstream estimates the format's check with
    /// (its `MaxRegexSize`; for `uri`, `uuid`, `byte`, `date` and
    /// `datetime` the lengths of the govalidator/strfmt patterns, rounded).
    pub fn max_regex_size(&self) -> u64 {
        match self.0 {
            "dns1123Label" | "dns1035Label" | "dns1123LabelPrefix" | "dns1035LabelPrefix" => 30,
            "dns1123Subdomain" | "qualifiedName" | "dns1123SubdomainPrefix" => 60,
            "labelValue" => 40,
            "uri" => 900,
            "uuid" => 90,
            "byte" => 90,
            _ => 140,
        }
    }
}

/// apimachinery's `maskTrailingDash`, which lets a name prefix end in `-`:
/// the last two characters become `a`.
fn mask_trailing_dash(s: &str) -> String {
    if s.len() > 1 && s.ends_with('-') {
        // The dash is one byte; the character before it may not be.
        let mut chars: Vec<char> = s.chars().collect();
        chars.truncate(chars.len().saturating_sub(2));
        let mut out: String = chars.into_iter().collect();
        out.push('a');
        return out;
    }
    s.to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CelFormat(Format);

impl Val for CelFormat {
    fn get_type(&self) -> &Type {
        &FORMAT_TYPE
    }
    fn cel_type() -> &'static Type {
        &FORMAT_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<CelFormat>().is_some_and(|o| o == self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for CelFormat {}

type Function = cel::common::functions::Function;

/// Registers the functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("format.named", "format-named", vec![STRING_TYPE], named)?;
    env.add_member_overload(
        "validate",
        "format-validate",
        FORMAT_TYPE.to_owned(),
        vec![STRING_TYPE],
        validate,
    )?;
    let constants: [Function; 13] = [
        |_| constant(0),
        |_| constant(1),
        |_| constant(2),
        |_| constant(3),
        |_| constant(4),
        |_| constant(5),
        |_| constant(6),
        |_| constant(7),
        |_| constant(8),
        |_| constant(9),
        |_| constant(10),
        |_| constant(11),
        |_| constant(12),
    ];
    for (name, f) in NAMES.iter().zip(constants) {
        let qualified = format!("format.{name}");
        env.add_overload(&qualified, &qualified, vec![], f)?;
    }
    Ok(())
}

fn constant<'b, 'v>(i: usize) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelFormat(Format(NAMES[i]))))
}

fn named<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [name] = take(args)?;
    let name = string_arg("format.named", name.as_ref())?;
    Ok(CowVal::owned(match Format::named(name) {
        Some(f) => CelOptional::of(Box::new(CelFormat(f))),
        None => CelOptional::none(),
    }))
}

fn validate<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [format, s] = take(args)?;
    let f = format
        .downcast_ref::<CelFormat>()
        .map(|f| f.0)
        .ok_or_else(|| no_such_overload("validate", &[format.as_ref()]))?;
    let s = string_arg("validate", s.as_ref())?;
    let string_cost = (1 + s.len() as u64).div_ceil(10);
    charge(string_cost.saturating_mul(f.max_regex_size().div_ceil(4)))?;
    let errors = f.validate(s);
    if errors.is_empty() {
        return Ok(CowVal::owned(CelOptional::none()));
    }
    let items: Vec<Box<dyn Val>> = errors
        .into_iter()
        .map(|e| Box::new(CelString::from(e)) as Box<dyn Val>)
        .collect();
    Ok(CowVal::owned(CelOptional::of(Box::new(CelList::from(items)))))
}
