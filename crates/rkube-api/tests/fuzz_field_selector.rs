//! Property-based fuzzing of field selector parsing (upstream
//! `k8s.io/apimachinery/pkg/fields/selector.go`), the parser every
//! `?fieldSelector=` goes through.
//!
//! Properties:
//! - `FieldSelector::parse` never panics, on any string and on strings made
//!   of its special characters (`=`, `!`, `,`, `\`);
//! - a rejected selector reaches the client as 400 `BadRequest` (through
//!   `ListOptions::from_query`);
//! - `parse(render(sel)) == sel` for selectors built from terms (any value:
//!   escaping must be lossless), and `parse(render(parse(s))) == parse(s)`;
//! - `escape_value` / `unescape_value` are inverse on every string.
//!
//! Case count: `PROPTEST_CASES` (default small, for CI). Run long with
//! `PROPTEST_CASES=200000 cargo test -p rkube-api --release --test integration fuzz_field_selector::`.

use crate::fuzz_support;

use fuzz_support::{cases, check_selector_string};
use proptest::prelude::*;
use rkube_api::selector::field::{escape_value, unescape_value};
use rkube_api::selector::{FieldOperator, FieldRequirement};
use rkube_api::FieldSelector;

fn special_soup() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("=".to_string()),
        Just("==".to_string()),
        Just("!=".to_string()),
        Just("!".to_string()),
        Just(",".to_string()),
        Just("\\".to_string()),
        Just("\\,".to_string()),
        Just("\\=".to_string()),
        Just("\\\\".to_string()),
        "[a-z.]{1,12}",
        "\\PC{1,4}",
    ];
    prop::collection::vec(piece, 0..20).prop_map(|v| v.concat())
}

fn term() -> impl Strategy<Value = FieldRequirement> {
    // Field names are taken verbatim (upstream does not escape them), so they
    // cannot hold the operator or separator characters.
    let field = "[A-Za-z0-9._/-]{0,24}";
    let op = prop_oneof![Just(FieldOperator::Equals), Just(FieldOperator::NotEquals)];
    (field, op, "\\PC{0,16}").prop_map(|(field, op, value)| FieldRequirement { field, op, value })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), ..ProptestConfig::default() })]

    /// Any string: no panic; an error is a 400 BadRequest at the API.
    #[test]
    fn field_selector_parse_never_panics_and_errors_are_bad_requests(s in "\\PC{0,64}") {
        check_string(&s)?;
    }

    /// Strings dense in operators and escapes: same properties.
    #[test]
    fn field_selector_special_characters_never_panic_and_rerender_canonically(s in special_soup()) {
        check_string(&s)?;
    }

    /// A selector built from terms survives render + parse unchanged.
    #[test]
    fn field_selector_round_trips_through_its_rendering(terms in prop::collection::vec(term(), 0..6)) {
        let sel = FieldSelector::from_requirements(terms);
        let rendered = sel.to_string();
        let again = FieldSelector::parse(&rendered);
        prop_assert_eq!(again.as_ref(), Ok(&sel), "rendered: {:?}", rendered);
    }

    /// Escaping a value is lossless.
    #[test]
    fn field_selector_value_escaping_is_lossless(v in "\\PC{0,32}") {
        prop_assert_eq!(unescape_value(&escape_value(&v)), Ok(v));
    }
}

fn check_string(s: &str) -> Result<(), TestCaseError> {
    check_selector_string(s, "fieldSelector", FieldSelector::parse, |o| &o.field_selector)
}
