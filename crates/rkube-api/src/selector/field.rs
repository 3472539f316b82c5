//! Field selectors, following `k8s.io/apimachinery/pkg/fields/selector.go`.
//!
//! A selector is a comma-separated list of terms `field=value`, `field==value`
//! or `field!=value`. In values, `\,`, `\=` and `\\` stand for `,`, `=` and
//! `\`; any other backslash sequence, and an unescaped `,` or `=` inside a
//! value, is an error. Field names are taken verbatim (no trimming, no
//! unescaping) as upstream does. Which fields a resource supports is the
//! API server's business (`field label not supported` is its error).

use std::fmt;

/// Operator of a field requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FieldOperator {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

/// One term of a [`FieldSelector`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldRequirement {
    /// Field path, e.g. `metadata.name`, `spec.nodeName`.
    pub field: String,
    /// `=` / `==` (Equals) or `!=` (NotEquals).
    pub op: FieldOperator,
    /// The unescaped value.
    pub value: String,
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        };
        write!(f, "{}{}{}", self.field, op, escape_value(&self.value))
    }
}

/// A parsed field selector: the AND of its terms. Empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    /// Sorted by (field, op, value) and de-duplicated, so equal selectors compare equal.
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        FieldSelector::default()
    }

    /// Parses `a=b,c!=d` (upstream `fields.ParseSelector`). Empty terms are
    /// skipped. Errors use upstream's wording:
    /// `invalid selector: 'x'; can't understand 'x'`,
    /// `invalid field selector: invalid escape sequence: \x`,
    /// `invalid field selector: unescaped character in value: 61` (upstream
    /// prints the code point of the offending `=` or `,`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in split_terms(s) {
            if part.is_empty() {
                continue;
            }
            let Some((field, op, rhs)) = split_term(part) else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let value = unescape_value(rhs)?;
            requirements.push(FieldRequirement {
                field: field.to_string(),
                op,
                value,
            });
        }
        Ok(FieldSelector::from_requirements(requirements))
    }

    /// Builds a selector from terms.
    pub fn from_requirements(mut requirements: Vec<FieldRequirement>) -> Self {
        requirements.sort();
        requirements.dedup();
        FieldSelector { requirements }
    }

    /// The selector `field=value`.
    pub fn one_term(field: &str, value: &str) -> Self {
        FieldSelector::from_requirements(vec![FieldRequirement {
            field: field.to_string(),
            op: FieldOperator::Equals,
            value: value.to_string(),
        }])
    }

    /// The terms, sorted.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// True when the selector has no term.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The field names used by the selector (to check they are supported).
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|r| r.field.as_str())
    }

    /// The value `field` must have, when the selector contains `field=value`
    /// (upstream `RequiresExactMatch`): lets the caller use an index
    /// (`spec.nodeName`) or a single-object read (`metadata.name`).
    pub fn exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.op == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }

    /// Whether an object satisfies every term. `get` returns the object's value
    /// for a field, or `None` when the field is unknown: an unknown field
    /// never matches `=` and always matches `!=`.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let have = get(&r.field);
            match r.op {
                FieldOperator::Equals => have.as_deref() == Some(r.value.as_str()),
                FieldOperator::NotEquals => have.as_deref() != Some(r.value.as_str()),
            }
        })
    }
}

impl fmt::Display for FieldSelector {
    /// Canonical form: terms sorted, joined with `,`, `=` for equality, values escaped.
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

impl std::str::FromStr for FieldSelector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FieldSelector::parse(s)
    }
}

/// Escapes `\`, `,` and `=` in a value (upstream `fields.EscapeValue`).
pub fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Reverses [`escape_value`] (upstream `fields.UnescapeValue`).
pub fn unescape_value(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{c}"
                    ))
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Upstream formats the rune with %v, i.e. as its code point number.
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                ))
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(out)
}

/// Splits on commas not preceded by an escaping backslash; escapes stay in place.
fn split_terms(s: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// Finds the first operator (`!=`, `==`, `=`, tried in that order at each
/// position) like upstream `splitTerm`.
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        if let Some(r) = rest.strip_prefix("!=") {
            return Some((&term[..i], FieldOperator::NotEquals, r));
        }
        if let Some(r) = rest.strip_prefix("==") {
            return Some((&term[..i], FieldOperator::Equals, r));
        }
        if let Some(r) = rest.strip_prefix('=') {
            return Some((&term[..i], FieldOperator::Equals, r));
        }
    }
    None
}
