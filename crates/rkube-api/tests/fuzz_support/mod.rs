//! Scaffolding shared by the `fuzz_*` property tests of this crate: the case
//! count (`PROPTEST_CASES`), query-value escaping, and the checks every
//! selector parser must pass on one input string (`fuzz_field_selector`,
//! `fuzz_label_selector`).

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::fmt::{Debug, Display};

use proptest::prelude::*;
use rkube_api::ListOptions;

/// `PROPTEST_CASES` when set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Percent-encodes everything but unreserved characters, for a query value.
pub fn query_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Checks one selector string `s`, parsed directly with `parse` and through
/// `ListOptions::from_query` as `<param>=<s>` (`selected` picks the selector
/// out of the options): a selector that parses renders canonically
/// (`parse(render(parse(s))) == parse(s)`) and the query yields the same
/// selector; one that does not is refused by the query as 400 `BadRequest`
/// with the parser's message.
pub fn check_selector_string<S: PartialEq + Debug + Display>(
    s: &str,
    param: &str,
    parse: impl Fn(&str) -> Result<S, String>,
    selected: impl Fn(&ListOptions) -> &S,
) -> Result<(), TestCaseError> {
    let parsed = parse(s);
    let via_query = ListOptions::from_query(&format!("{param}={}", query_escape(s)));
    match &parsed {
        Ok(sel) => {
            let rendered = sel.to_string();
            let again = parse(&rendered);
            prop_assert_eq!(again.as_ref(), Ok(sel), "{:?} rendered as {:?}", s, rendered);
            let opts = via_query.map_err(|e| TestCaseError::fail(format!("query rejected a valid selector: {e:?}")))?;
            prop_assert_eq!(selected(&opts), sel);
        }
        Err(msg) => {
            prop_assert!(!msg.is_empty());
            let status = via_query.err().ok_or_else(|| TestCaseError::fail("query accepted an invalid selector"))?;
            prop_assert_eq!(status.code, 400);
            prop_assert_eq!(status.reason.as_str(), "BadRequest");
            prop_assert_eq!(&status.message, msg);
        }
    }
    Ok(())
}
