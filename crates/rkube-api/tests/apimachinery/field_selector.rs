use proptest::prelude::*;
use rkube_api::selector::field::{escape_value, unescape_value};
use rkube_api::selector::{FieldOperator, FieldRequirement, FieldSelector};

fn req(field: &str, op: FieldOperator, value: &str) -> FieldRequirement {
    FieldRequirement {
        field: field.into(),
        op,
        value: value.into(),
    }
}

/// `=`, `==` and `!=` terms, escapes unescaped, empty terms skipped;
/// Display is canonical (sorted, `=` for equality, values escaped).
#[test]
fn parse_accepts_upstream_syntax_and_display_is_canonical() {
    let cases = [
        ("", ""),
        ("metadata.name=foo", "metadata.name=foo"),
        ("a==b", "a=b"),
        ("a!=b", "a!=b"),
        ("b=1,a=2", "a=2,b=1"),
        ("a=x\\,y", "a=x\\,y"),
        ("a=x\\=y", "a=x\\=y"),
        ("a=x\\\\y", "a=x\\\\y"),
        ("a=b,,c=d", "a=b,c=d"),
        ("a=", "a="),
        (
            "involvedObject.name=web,involvedObject.namespace=default",
            "involvedObject.name=web,involvedObject.namespace=default",
        ),
    ];
    for (input, canonical) in cases {
        let sel = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        assert_eq!(sel.to_string(), canonical, "input {input:?}");
        assert_eq!(FieldSelector::parse(canonical).as_ref(), Ok(&sel));
    }
    let sel = FieldSelector::parse("a=x\\,y\\=z\\\\").unwrap();
    assert_eq!(
        sel.requirements(),
        &[req("a", FieldOperator::Equals, "x,y=z\\")]
    );
}

#[test]
fn parse_rejects_bad_terms_and_escapes_with_upstream_messages() {
    let cases = [
        ("a", "invalid selector: 'a'; can't understand 'a'"),
        ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
        (
            "a=b\\",
            "invalid field selector: invalid escape sequence: \\",
        ),
        (
            "a=b\\x",
            "invalid field selector: invalid escape sequence: \\x",
        ),
        // Upstream prints the offending rune with %v: its code point.
        (
            "a=b=c",
            "invalid field selector: unescaped character in value: 61",
        ),
    ];
    for (input, want) in cases {
        assert_eq!(
            FieldSelector::parse(input),
            Err(want.to_string()),
            "input {input:?}"
        );
    }
}

/// An unknown field never matches `=`, and always matches `!=`.
#[test]
fn matches_unknown_field_never_equals() {
    let get = |f: &str| match f {
        "metadata.name" => Some("web".to_string()),
        "spec.nodeName" => Some(String::new()),
        _ => None,
    };
    let cases = [
        ("metadata.name=web", true),
        ("metadata.name==web", true),
        ("metadata.name=db", false),
        ("metadata.name!=db", true),
        ("metadata.name!=web", false),
        ("spec.nodeName=", true),
        ("spec.nodeName!=", false),
        ("status.phase=Running", false),
        ("status.phase=", false),
        ("status.phase!=Running", true),
        ("metadata.name=web,spec.nodeName=", true),
        ("metadata.name=web,spec.nodeName=n1", false),
        ("", true),
    ];
    for (sel, want) in cases {
        assert_eq!(
            FieldSelector::parse(sel).unwrap().matches(get),
            want,
            "{sel:?}"
        );
    }
}

#[test]
fn exact_match_fields_and_requirements_expose_terms() {
    let sel = FieldSelector::parse("spec.nodeName=n1,metadata.namespace!=kube-system").unwrap();
    assert_eq!(sel.exact_match("spec.nodeName"), Some("n1"));
    assert_eq!(sel.exact_match("metadata.namespace"), None);
    assert_eq!(sel.exact_match("metadata.name"), None);
    assert_eq!(
        sel.fields().collect::<Vec<_>>(),
        vec!["metadata.namespace", "spec.nodeName"]
    );
    assert_eq!(
        sel.requirements(),
        &[
            req(
                "metadata.namespace",
                FieldOperator::NotEquals,
                "kube-system"
            ),
            req("spec.nodeName", FieldOperator::Equals, "n1"),
        ]
    );
    assert!(!sel.is_empty());
    assert!(FieldSelector::parse("").unwrap().is_empty());
    assert_eq!(
        FieldSelector::one_term("metadata.name", "a,b").to_string(),
        "metadata.name=a\\,b"
    );
}

#[test]
fn escape_and_unescape_are_inverse() {
    assert_eq!(escape_value("a,b=c\\d"), "a\\,b\\=c\\\\d");
    assert_eq!(unescape_value("a\\,b\\=c\\\\d").as_deref(), Ok("a,b=c\\d"));
}

proptest! {
    /// parse(Display(selector)) == selector, whatever the values contain.
    #[test]
    fn display_then_parse_round_trips(
        terms in proptest::collection::vec(
            ("[a-z]{1,5}(\\.[a-zA-Z]{1,6}){0,2}", any::<bool>(), "[a-z0-9,=\\\\ é.!-]{0,8}"),
            0..5,
        )
    ) {
        let reqs = terms
            .into_iter()
            .map(|(f, eq, v)| req(&f, if eq { FieldOperator::Equals } else { FieldOperator::NotEquals }, &v))
            .collect();
        let sel = FieldSelector::from_requirements(reqs);
        let text = sel.to_string();
        prop_assert_eq!(FieldSelector::parse(&text), Ok(sel), "text {:?}", text);
    }

    #[test]
    fn unescape_inverts_escape(v in ".{0,12}") {
        prop_assert_eq!(unescape_value(&escape_value(&v)), Ok(v));
    }

    #[test]
    fn parse_never_panics(s in ".{0,30}") {
        let _ = FieldSelector::parse(&s);
    }
}
