//! Property-based fuzzing of `resourceVersion` parsing (upstream
//! `APIObjectVersioner.ParseResourceVersion`) and of the whole LIST/WATCH
//! query decoding (`ListOptions::from_query`), which every GET of a
//! collection runs on client input.
//!
//! Properties:
//! - `parse_resource_version` never panics; it accepts exactly `""` and
//!   base-10 digit strings that fit in an `i64`, and round-trips numbers;
//!   every rejection is 400 `BadRequest`;
//! - `ListOptions::from_query` never panics on any query string, nor on
//!   queries made of its real parameters with hostile values; every error is
//!   400 `BadRequest`, or 422 `Invalid` on `ListOptions.meta.k8s.io` with at
//!   least one cause (upstream `ValidateListOptions`).
//!
//! Case count: `PROPTEST_CASES` (default small, for CI). Run long with
//! `PROPTEST_CASES=200000 cargo test -p rkube-api --release --test integration fuzz_resource_version::`.

use crate::fuzz_support;

use fuzz_support::cases;
use proptest::prelude::*;
use rkube_api::{parse_resource_version, ListOptions, Status};

fn check_query_error(status: &Status) -> Result<(), TestCaseError> {
    match status.code {
        400 => prop_assert_eq!(status.reason.as_str(), "BadRequest"),
        422 => {
            prop_assert_eq!(status.reason.as_str(), "Invalid");
            let details = status.details.as_ref().ok_or_else(|| TestCaseError::fail("422 without details"))?;
            prop_assert_eq!(details.kind.as_str(), "ListOptions");
            prop_assert_eq!(details.group.as_str(), "meta.k8s.io");
            prop_assert!(!details.causes.is_empty());
        }
        other => prop_assert!(false, "unexpected code {} ({})", other, status.message),
    }
    prop_assert!(!status.message.is_empty());
    Ok(())
}

fn param_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("0".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        Just("Exact".to_string()),
        Just("NotOlderThan".to_string()),
        Just("9223372036854775808".to_string()),
        Just("-1".to_string()),
        Just("%zz".to_string()),
        Just("a%3Db".to_string()),
        "[0-9]{1,21}",
        "-?[0-9]{1,5}",
        "[A-Za-z0-9=!,()<>%+ ]{0,16}",
    ]
}

fn param_name() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("labelSelector"),
        Just("fieldSelector"),
        Just("resourceVersion"),
        Just("resourceVersionMatch"),
        Just("limit"),
        Just("continue"),
        Just("watch"),
        Just("allowWatchBookmarks"),
        Just("timeoutSeconds"),
        Just("sendInitialEvents"),
        Just("timeout"),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), ..ProptestConfig::default() })]

    /// Any string: no panic; accepted exactly when it is a decimal i64 (or empty).
    #[test]
    fn resource_version_parse_accepts_exactly_unsigned_decimal_i64(s in prop_oneof!["\\PC{0,24}", "[0-9]{1,22}", "[+-]?[0-9 ]{1,6}"]) {
        let expect = if s.is_empty() {
            Some(0)
        } else if s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse::<i64>().ok()
        } else {
            None
        };
        match parse_resource_version(&s) {
            Ok(n) => prop_assert_eq!(Some(n), expect, "{:?}", s),
            Err(status) => {
                prop_assert_eq!(expect, None, "{:?} rejected: {}", s, status.message);
                prop_assert_eq!(status.code, 400);
                prop_assert_eq!(status.reason.as_str(), "BadRequest");
                prop_assert!(status.message.starts_with("invalid resource version: "));
            }
        }
    }

    /// Numbers round-trip.
    #[test]
    fn resource_version_numbers_round_trip(n in 0i64..=i64::MAX) {
        prop_assert_eq!(parse_resource_version(&n.to_string()), Ok(n));
    }

    /// Any query string: no panic, errors are 400 or 422 with causes.
    #[test]
    fn list_options_from_any_query_never_panics(q in "\\PC{0,96}") {
        if let Err(status) = ListOptions::from_query(&q) {
            check_query_error(&status)?;
        }
    }

    /// Queries made of the real parameters with hostile values.
    #[test]
    fn list_options_from_hostile_parameters_errors_are_400_or_422(
        params in prop::collection::vec((param_name(), param_value()), 0..8)
    ) {
        let q: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let q = q.join("&");
        match ListOptions::from_query(&q) {
            Ok(opts) => {
                if let Some(rv) = &opts.resource_version {
                    if opts.continue_token.is_none() || opts.watch {
                        prop_assert!(parse_resource_version(rv).is_ok(), "accepted bad rv {:?} in {:?}", rv, q);
                    }
                }
            }
            Err(status) => check_query_error(&status)?,
        }
    }
}
