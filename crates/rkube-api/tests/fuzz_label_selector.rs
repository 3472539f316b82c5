//! Property-based fuzzing of label selector parsing (upstream
//! `k8s.io/apimachinery/pkg/labels/selector.go`), the parser every
//! `?labelSelector=` goes through.
//!
//! Properties:
//! - `LabelSelector::parse` never panics, on any string and on strings made
//!   of the grammar's own tokens (where parser bugs hide);
//! - a rejected selector reaches the client as 400 `BadRequest` (through
//!   `ListOptions::from_query`, the path the API server uses);
//! - rendering is canonical: `parse(render(sel)) == sel` for every selector
//!   built from valid requirements, and `parse(render(parse(s))) == parse(s)`.
//!
//! Case count: `PROPTEST_CASES` (default small, for CI). Run long with
//! `PROPTEST_CASES=200000 cargo test -p rkube-api --release --test integration fuzz_label_selector::`.

use crate::fuzz_support;

use std::collections::BTreeSet;

use fuzz_support::{cases, check_selector_string};
use proptest::prelude::*;
use rkube_api::selector::label::{LabelOperator, LabelRequirement};
use rkube_api::LabelSelector;

/// Strings made of selector tokens, identifiers (valid and not) and spaces.
fn token_soup() -> impl Strategy<Value = String> {
    let tok = prop_oneof![
        Just("=".to_string()),
        Just("==".to_string()),
        Just("!=".to_string()),
        Just("!".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just(",".to_string()),
        Just(">".to_string()),
        Just("<".to_string()),
        Just(" in ".to_string()),
        Just(" notin ".to_string()),
        Just(" ".to_string()),
        "[a-z0-9]{1,8}",
        "[a-z0-9.-]{1,10}/[a-z0-9_.-]{0,10}",
        "-?[0-9]{1,20}",
        "\\PC{1,6}",
    ];
    prop::collection::vec(tok, 0..24).prop_map(|v| v.concat())
}

fn dns_label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?"
}

/// A qualified-name key: `[prefix/]name`.
fn key() -> impl Strategy<Value = String> {
    let name = "[A-Za-z0-9]([A-Za-z0-9_.-]{0,20}[A-Za-z0-9])?";
    let prefix = prop::collection::vec(dns_label(), 1..3).prop_map(|v| v.join("."));
    (prop::option::of(prefix), name).prop_map(|(p, n)| match p {
        Some(p) => format!("{p}/{n}"),
        None => n,
    })
}

/// A valid label value (possibly empty).
fn value() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[A-Za-z0-9]([A-Za-z0-9_.-]{0,20}[A-Za-z0-9])?", "[0-9]{1,12}"]
}

fn requirement() -> impl Strategy<Value = LabelRequirement> {
    let op = prop_oneof![
        Just(LabelOperator::Equals),
        Just(LabelOperator::DoubleEquals),
        Just(LabelOperator::NotEquals),
        Just(LabelOperator::In),
        Just(LabelOperator::NotIn),
        Just(LabelOperator::Exists),
        Just(LabelOperator::DoesNotExist),
        Just(LabelOperator::GreaterThan),
        Just(LabelOperator::LessThan),
    ];
    // Label values start with an alphanumeric, so `>`/`<` bounds are non-negative.
    (key(), op, prop::collection::btree_set(value(), 1..4), 0i64..1_000_000).prop_filter_map(
        "requirement must be valid",
        |(k, op, vals, n)| {
            let values: BTreeSet<String> = match op {
                LabelOperator::Exists | LabelOperator::DoesNotExist => BTreeSet::new(),
                LabelOperator::In | LabelOperator::NotIn => vals,
                LabelOperator::GreaterThan | LabelOperator::LessThan => BTreeSet::from([n.to_string()]),
                _ => vals.into_iter().take(1).collect(),
            };
            LabelRequirement::new(&k, op, values).ok()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), ..ProptestConfig::default() })]

    /// Any string: no panic; an error is a 400 BadRequest at the API.
    #[test]
    fn label_selector_parse_never_panics_and_errors_are_bad_requests(s in "\\PC{0,64}") {
        check_string(&s)?;
    }

    /// Grammar-shaped strings: same properties, plus canonical re-rendering.
    #[test]
    fn label_selector_token_soup_never_panics_and_rerenders_canonically(s in token_soup()) {
        check_string(&s)?;
    }

    /// A selector built from valid requirements survives render + parse unchanged.
    #[test]
    fn label_selector_round_trips_through_its_rendering(reqs in prop::collection::vec(requirement(), 0..6)) {
        let sel = LabelSelector::from_requirements(reqs);
        let rendered = sel.to_string();
        let parsed = LabelSelector::parse(&rendered);
        prop_assert_eq!(parsed.as_ref(), Ok(&sel), "rendered: {:?}", rendered);
    }
}

fn check_string(s: &str) -> Result<(), TestCaseError> {
    check_selector_string(s, "labelSelector", LabelSelector::parse, |o| &o.label_selector)
}
