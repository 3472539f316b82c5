//! Label selectors, following `k8s.io/apimachinery/pkg/labels/selector.go`.
//!
//! Grammar (upstream's):
//!
//! ```text
//! selector    := requirement ( "," requirement )*
//! requirement := [ "!" ] KEY
//!              | KEY ( "=" | "==" | "!=" | ">" | "<" ) VALUE
//!              | KEY ( "in" | "notin" ) "(" VALUE ( "," VALUE )* ")"
//! ```
//!
//! Keys must be qualified names (`example.com/name`), values valid label
//! values; a missing value (`a=`) is the empty string. Requirements are kept
//! sorted by key, and set values sorted and de-duplicated, so that the
//! [`Display`](std::fmt::Display) form is canonical and re-parses to the same
//! selector.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::field_error::go_quote;
use crate::validation::{is_qualified_name, is_valid_label_value};

/// Operator of one label requirement (upstream `selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabelOperator {
    /// `key=value`
    Equals,
    /// `key==value`
    DoubleEquals,
    /// `key!=value` (also matches objects without the label)
    NotEquals,
    /// `key in (v1,v2)`
    In,
    /// `key notin (v1,v2)` (also matches objects without the label)
    NotIn,
    /// `key` (label present)
    Exists,
    /// `!key` (label absent)
    DoesNotExist,
    /// `key>N` (label present and an integer greater than N)
    GreaterThan,
    /// `key<N` (label present and an integer less than N)
    LessThan,
}

/// One requirement of a [`LabelSelector`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelRequirement {
    key: String,
    operator: LabelOperator,
    /// Sorted, de-duplicated. One value for `=`/`==`/`!=`/`>`/`<`, at least one
    /// for `in`/`notin`, none for `Exists`/`DoesNotExist`.
    values: BTreeSet<String>,
}

impl LabelRequirement {
    /// Builds a requirement, validating the key, the values and their count
    /// like upstream `labels.NewRequirement`. The error is upstream's
    /// aggregated field-error text, e.g.
    /// `values[0][app]: Invalid value: "a b": a valid label must be ...`.
    pub fn new(
        key: &str,
        operator: LabelOperator,
        values: BTreeSet<String>,
    ) -> Result<Self, String> {
        let mut errs: Vec<String> = Vec::new();
        let key_errs = is_qualified_name(key);
        if !key_errs.is_empty() {
            errs.push(format!(
                "key: Invalid value: {}: {}",
                go_quote(key),
                key_errs.join("; ")
            ));
        }
        let all = || {
            let q: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
            format!("[]string{{{}}}", q.join(", "))
        };
        match operator {
            LabelOperator::In | LabelOperator::NotIn => {
                if values.is_empty() {
                    errs.push(format!(
                        "values: Invalid value: {}: for 'in', 'notin' operators, values set can't be empty",
                        all()
                    ));
                }
            }
            LabelOperator::Equals | LabelOperator::DoubleEquals | LabelOperator::NotEquals => {
                if values.len() != 1 {
                    errs.push(format!(
                        "values: Invalid value: {}: exact-match compatibility requires one single value",
                        all()
                    ));
                }
            }
            LabelOperator::Exists | LabelOperator::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(format!(
                        "values: Invalid value: {}: values set must be empty for exists and does not exist",
                        all()
                    ));
                }
            }
            LabelOperator::GreaterThan | LabelOperator::LessThan => {
                if values.len() != 1 {
                    errs.push(format!(
                        "values: Invalid value: {}: for 'Gt', 'Lt' operators, exactly one value is required",
                        all()
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(format!(
                            "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                            go_quote(v)
                        ));
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let msgs = is_valid_label_value(v);
            if !msgs.is_empty() {
                errs.push(format!(
                    "values[{i}][{key}]: Invalid value: {}: {}",
                    go_quote(v),
                    msgs.join("; ")
                ));
            }
        }
        if errs.is_empty() {
            Ok(LabelRequirement {
                key: key.to_string(),
                operator,
                values,
            })
        } else {
            Err(aggregate(errs))
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> LabelOperator {
        self.operator
    }

    /// The values, sorted.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(String::as_str)
    }

    /// Whether a label lookup satisfies this requirement.
    fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let v = get(&self.key);
        match self.operator {
            LabelOperator::Equals | LabelOperator::DoubleEquals | LabelOperator::In => {
                v.is_some_and(|v| self.values.contains(v))
            }
            LabelOperator::NotEquals | LabelOperator::NotIn => {
                v.is_none_or(|v| !self.values.contains(v))
            }
            LabelOperator::Exists => v.is_some(),
            LabelOperator::DoesNotExist => v.is_none(),
            LabelOperator::GreaterThan | LabelOperator::LessThan => {
                let Some(have) = v.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let Some(want) = self
                    .values
                    .iter()
                    .next()
                    .and_then(|w| w.parse::<i64>().ok())
                else {
                    return false;
                };
                if self.operator == LabelOperator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for LabelRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.values.iter().next().map(String::as_str).unwrap_or("");
        match self.operator {
            LabelOperator::DoesNotExist => write!(f, "!{}", self.key),
            LabelOperator::Exists => f.write_str(&self.key),
            LabelOperator::Equals => write!(f, "{}={}", self.key, first),
            LabelOperator::DoubleEquals => write!(f, "{}=={}", self.key, first),
            LabelOperator::NotEquals => write!(f, "{}!={}", self.key, first),
            LabelOperator::GreaterThan => write!(f, "{}>{}", self.key, first),
            LabelOperator::LessThan => write!(f, "{}<{}", self.key, first),
            LabelOperator::In | LabelOperator::NotIn => {
                let op = if self.operator == LabelOperator::In {
                    "in"
                } else {
                    "notin"
                };
                let vals: Vec<&str> = self.values.iter().map(String::as_str).collect();
                write!(f, "{} {} ({})", self.key, op, vals.join(","))
            }
        }
    }
}

/// A parsed label selector: the AND of its requirements. Empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    /// Sorted by key (stable: same-key requirements keep their order).
    requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// Parses the Kubernetes label selector syntax (upstream `labels.Parse`).
    ///
    /// Errors are upstream's wording (what kube-apiserver puts in the 400
    /// BadRequest), e.g. `found ',', expected: !, identifier, or 'end of string'`
    /// or `unable to parse requirement: <nil>: Invalid value: "-a": name part must consist of ...`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let tokens = lex(s);
        let mut p = Parser { tokens, pos: 0 };
        let mut requirements = p.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Builds a selector from requirements (sorted by key like `parse` does).
    pub fn from_requirements(mut requirements: Vec<LabelRequirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector { requirements }
    }

    /// The selector `k1=v1,k2=v2,...` (what `matchLabels` means). Fails on an
    /// invalid key or value.
    pub fn from_map(labels: &BTreeMap<String, String>) -> Result<Self, String> {
        let mut reqs = Vec::with_capacity(labels.len());
        for (k, v) in labels {
            reqs.push(LabelRequirement::new(
                k,
                LabelOperator::Equals,
                BTreeSet::from([v.clone()]),
            )?);
        }
        Ok(LabelSelector::from_requirements(reqs))
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }

    /// True when the selector has no requirement (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object's `metadata.labels` JSON object satisfies every
    /// requirement. A label whose value is not a JSON string counts as absent.
    pub fn matches(&self, labels: &serde_json::Map<String, serde_json::Value>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_with(|k| labels.get(k).and_then(|v| v.as_str())))
    }

    /// Whether a label map satisfies every requirement.
    pub fn matches_btree(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_with(|k| labels.get(k).map(String::as_str)))
    }

    /// The value `key` must equal for this selector to match, if the selector
    /// has `key=value`, `key==value` or `key in (value)` (upstream
    /// `RequiresExactMatch`). Lets callers use an index.
    pub fn exact_match(&self, key: &str) -> Option<&str> {
        self.requirements.iter().find_map(|r| {
            let single = matches!(
                r.operator,
                LabelOperator::Equals | LabelOperator::DoubleEquals | LabelOperator::In
            ) && r.values.len() == 1;
            if r.key == key && single {
                r.values.iter().next().map(String::as_str)
            } else {
                None
            }
        })
    }
}

impl fmt::Display for LabelSelector {
    /// Canonical form: requirements by key, joined with `,`; set values sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        LabelSelector::parse(s)
    }
}

// ---- lexer (upstream `Lexer`) ----

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    In,
    NotIn,
    Bang,
    NotEquals,
    OpenPar,
    ClosePar,
    Comma,
    Equals,
    DoubleEquals,
    Gt,
    Lt,
    End,
}

impl Tok {
    /// The literal, as upstream error messages quote it.
    fn literal(&self) -> &str {
        match self {
            Tok::Ident(s) => s,
            Tok::In => "in",
            Tok::NotIn => "notin",
            Tok::Bang => "!",
            Tok::NotEquals => "!=",
            Tok::OpenPar => "(",
            Tok::ClosePar => ")",
            Tok::Comma => ",",
            Tok::Equals => "=",
            Tok::DoubleEquals => "==",
            Tok::Gt => ">",
            Tok::Lt => "<",
            Tok::End => "",
        }
    }

    /// In a values context `in` and `notin` are plain identifiers.
    fn into_value(self) -> Tok {
        match self {
            Tok::In => Tok::Ident("in".to_string()),
            Tok::NotIn => Tok::Ident("notin".to_string()),
            t => t,
        }
    }
}

fn is_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn lex(s: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut chars = s.char_indices().peekable();
    while let Some(&(i, c)) = chars.peek() {
        if is_whitespace(c) {
            chars.next();
            continue;
        }
        if is_special(c) {
            chars.next();
            let next = chars.peek().map(|&(_, n)| n);
            let tok = match (c, next) {
                ('!', Some('=')) => {
                    chars.next();
                    Tok::NotEquals
                }
                ('=', Some('=')) => {
                    chars.next();
                    Tok::DoubleEquals
                }
                ('!', _) => Tok::Bang,
                ('=', _) => Tok::Equals,
                ('(', _) => Tok::OpenPar,
                (')', _) => Tok::ClosePar,
                (',', _) => Tok::Comma,
                ('>', _) => Tok::Gt,
                _ => Tok::Lt,
            };
            out.push(tok);
            continue;
        }
        let start = i;
        let mut end = s.len();
        while let Some(&(j, d)) = chars.peek() {
            if is_whitespace(d) || is_special(d) {
                end = j;
                break;
            }
            chars.next();
        }
        let word = &s[start..end];
        out.push(match word {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            w => Tok::Ident(w.to_string()),
        });
    }
    out.push(Tok::End);
    out
}

// ---- parser (upstream `Parser`) ----

struct Parser {
    tokens: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn lookahead(&self) -> Tok {
        self.tokens.get(self.pos).cloned().unwrap_or(Tok::End)
    }

    fn consume(&mut self) -> Tok {
        let t = self.lookahead();
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn parse(&mut self) -> Result<Vec<LabelRequirement>, String> {
        let mut reqs = Vec::new();
        loop {
            match self.lookahead().into_value() {
                Tok::Ident(_) | Tok::Bang => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    match self.consume().into_value() {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => match self.lookahead().into_value() {
                            Tok::Ident(_) | Tok::Bang => {}
                            t => {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    t.literal()
                                ))
                            }
                        },
                        t => {
                            return Err(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                t.literal()
                            ))
                        }
                    }
                }
                Tok::End => return Ok(reqs),
                t => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        t.literal()
                    ))
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<LabelRequirement, String> {
        let mut tok = self.consume().into_value();
        let mut operator = None;
        if tok == Tok::Bang {
            operator = Some(LabelOperator::DoesNotExist);
            tok = self.consume().into_value();
        }
        let key = match tok {
            Tok::Ident(k) => k,
            t => return Err(format!("found '{}', expected: identifier", t.literal())),
        };
        let key_errs = is_qualified_name(&key);
        if !key_errs.is_empty() {
            // Upstream validates the key with a nil field path, hence `<nil>`.
            return Err(format!(
                "<nil>: Invalid value: {}: {}",
                go_quote(&key),
                key_errs.join("; ")
            ));
        }
        if operator == Some(LabelOperator::DoesNotExist) {
            return LabelRequirement::new(&key, LabelOperator::DoesNotExist, BTreeSet::new());
        }
        if matches!(self.lookahead(), Tok::End | Tok::Comma) {
            return LabelRequirement::new(&key, LabelOperator::Exists, BTreeSet::new());
        }
        let op = match self.consume() {
            Tok::In => LabelOperator::In,
            Tok::NotIn => LabelOperator::NotIn,
            Tok::Equals => LabelOperator::Equals,
            Tok::DoubleEquals => LabelOperator::DoubleEquals,
            Tok::NotEquals => LabelOperator::NotEquals,
            Tok::Gt => LabelOperator::GreaterThan,
            Tok::Lt => LabelOperator::LessThan,
            // (sic: upstream's message lacks the quote before notin)
            t => {
                return Err(format!(
                    "found '{}', expected: '=', '!=', '==', 'in', notin'",
                    t.literal()
                ))
            }
        };
        let values = match op {
            LabelOperator::In | LabelOperator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        LabelRequirement::new(&key, op, values)
    }

    /// `( v1, v2 )`; `()` is the set `{""}`; empty items are `""`.
    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let t = self.consume().into_value();
        if t != Tok::OpenPar {
            return Err(format!("found '{}' expected: '('", t.literal()));
        }
        match self.lookahead().into_value() {
            Tok::Ident(_) | Tok::Comma => {
                let set = self.parse_identifiers_list()?;
                let t = self.consume().into_value();
                if t != Tok::ClosePar {
                    return Err(format!("found '{}', expected: ')'", t.literal()));
                }
                Ok(set)
            }
            Tok::ClosePar => {
                self.consume();
                Ok(BTreeSet::from([String::new()]))
            }
            t => Err(format!(
                "found '{}', expected: ',', ')' or identifier",
                t.literal()
            )),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut set = BTreeSet::new();
        loop {
            match self.consume().into_value() {
                Tok::Ident(v) => {
                    set.insert(v);
                    match self.lookahead().into_value() {
                        Tok::Comma => continue,
                        Tok::ClosePar => return Ok(set),
                        t => return Err(format!("found '{}', expected: ',' or ')'", t.literal())),
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    match self.lookahead().into_value() {
                        Tok::ClosePar => {
                            set.insert(String::new());
                            return Ok(set);
                        }
                        Tok::Comma => {
                            self.consume();
                            set.insert(String::new());
                        }
                        _ => {}
                    }
                }
                t => {
                    return Err(format!(
                        "found '{}', expected: ',', or identifier",
                        t.literal()
                    ))
                }
            }
        }
    }

    /// One value after `=`, `==`, `!=`, `>`, `<`; nothing (end or `,`) is `""`.
    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        if matches!(self.lookahead(), Tok::End | Tok::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        match self.consume().into_value() {
            Tok::Ident(v) => Ok(BTreeSet::from([v])),
            t => Err(format!("found '{}', expected: identifier", t.literal())),
        }
    }
}

/// Upstream `ErrorList.ToAggregate().Error()`: one message as is, several
/// (de-duplicated) as `[a, b]`.
fn aggregate(mut errs: Vec<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errs.drain(..) {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen.remove(0)
    } else {
        format!("[{}]", seen.join(", "))
    }
}
