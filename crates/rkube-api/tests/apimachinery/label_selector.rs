use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use rkube_api::selector::{LabelOperator, LabelRequirement, LabelSelector};

const QNAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every syntax form parses, and Display gives the canonical form
/// (requirements by key, set values sorted, whitespace normalized).
#[test]
fn parse_accepts_full_syntax_and_display_is_canonical() {
    let cases = [
        ("", ""),
        ("a=b", "a=b"),
        ("a==b", "a==b"),
        ("a!=b", "a!=b"),
        ("a in (y,x)", "a in (x,y)"),
        ("a notin (x)", "a notin (x)"),
        ("a", "a"),
        ("!a", "!a"),
        ("  a = b ,\tc\n", "a=b,c"),
        ("z=1,a=2", "a=2,z=1"),
        ("a=", "a="),
        ("a in ()", "a in ()"),
        (
            "x in (foo,,baz),y,z notin ()",
            "x in (,baz,foo),y,z notin ()",
        ),
        ("a in (x,x,y)", "a in (x,y)"),
        ("a>1", "a>1"),
        ("a<50", "a<50"),
        ("example.com/app=web", "example.com/app=web"),
        ("in in (in,notin)", "in in (in,notin)"),
        ("a=b,a!=c", "a=b,a!=c"),
        ("!a,b", "!a,b"),
        (
            "app=nginx,tier in (frontend, backend)",
            "app=nginx,tier in (backend,frontend)",
        ),
    ];
    for (input, canonical) in cases {
        let sel = LabelSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        assert_eq!(sel.to_string(), canonical, "input {input:?}");
        assert_eq!(
            LabelSelector::parse(canonical).as_ref(),
            Ok(&sel),
            "reparse of {canonical:?}"
        );
    }
}

/// Syntax and validation errors carry upstream's exact text (the message of
/// kube-apiserver's 400 BadRequest).
#[test]
fn parse_rejects_bad_syntax_with_upstream_messages() {
    let long_key = "a".repeat(64);
    let long_key_err =
        format!("unable to parse requirement: <nil>: Invalid value: \"{long_key}\": name part must be no more than 63 characters");
    let cases: Vec<(&str, String)> = vec![
        ("a=b,", "found '', expected: identifier after ','".into()),
        (",a", "found ',', expected: !, identifier, or 'end of string'".into()),
        ("a b", "unable to parse requirement: found 'b', expected: '=', '!=', '==', 'in', notin'".into()),
        ("a in x", "unable to parse requirement: found 'x' expected: '('".into()),
        ("a in (x", "unable to parse requirement: found '', expected: ',' or ')'".into()),
        ("a in (x y)", "unable to parse requirement: found 'y', expected: ',' or ')'".into()),
        ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier".into()),
        ("a=b c", "found 'c', expected: ',' or 'end of string'".into()),
        ("!", "unable to parse requirement: found '', expected: identifier".into()),
        ("a=(b)", "unable to parse requirement: found '(', expected: identifier".into()),
        ("-a=b", format!("unable to parse requirement: <nil>: Invalid value: \"-a\": {QNAME_MSG}")),
        ("app:web", format!("unable to parse requirement: <nil>: Invalid value: \"app:web\": {QNAME_MSG}")),
        ("a=-b", format!("unable to parse requirement: values[0][a]: Invalid value: \"-b\": {VALUE_MSG}")),
        (
            "a>x",
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
        ),
        (&long_key, long_key_err.clone()),
    ];
    for (input, want) in cases {
        assert_eq!(LabelSelector::parse(input), Err(want), "input {input:?}");
    }
}

/// Upstream `Requirement.Matches`: `!=`/`notin` match a missing label,
/// `>`/`<` need an integer label value, all requirements are ANDed.
#[test]
fn matches_follows_upstream_requirement_semantics() {
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, bool);
    let cases: Vec<Case> = vec![
        ("", vec![], true),
        ("app=web", vec![("app", "web")], true),
        ("app=web", vec![("app", "db")], false),
        ("app=web", vec![], false),
        ("app==web", vec![("app", "web")], true),
        ("app!=web", vec![("app", "db")], true),
        ("app!=web", vec![], true),
        ("app!=web", vec![("app", "web")], false),
        ("app in (web,db)", vec![("app", "db")], true),
        ("app in (web,db)", vec![], false),
        ("app notin (web)", vec![], true),
        ("app notin (web)", vec![("app", "web")], false),
        ("app", vec![("app", "")], true),
        ("app", vec![], false),
        ("!app", vec![], true),
        ("!app", vec![("app", "x")], false),
        ("app=", vec![("app", "")], true),
        ("app in ()", vec![("app", "")], true),
        ("n>5", vec![("n", "6")], true),
        ("n>5", vec![("n", "5")], false),
        ("n<5", vec![("n", "-1")], true),
        ("n>5", vec![("n", "x")], false),
        ("n<5", vec![], false),
        (
            "app=web,tier=fe",
            vec![("app", "web"), ("tier", "fe")],
            true,
        ),
        (
            "app=web,tier=fe",
            vec![("app", "web"), ("tier", "be")],
            false,
        ),
    ];
    for (sel, ls, want) in cases {
        let s = LabelSelector::parse(sel).expect(sel);
        let b = labels(&ls);
        assert_eq!(s.matches_btree(&b), want, "{sel:?} on {ls:?}");
        let json: serde_json::Map<String, serde_json::Value> = b
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        assert_eq!(s.matches(&json), want, "{sel:?} on JSON {ls:?}");
    }
}

#[test]
fn matches_treats_non_string_json_label_as_absent() {
    let mut m = serde_json::Map::new();
    m.insert("app".into(), serde_json::json!(5));
    assert!(!LabelSelector::parse("app").unwrap().matches(&m));
    assert!(LabelSelector::parse("!app").unwrap().matches(&m));
}

#[test]
fn empty_selector_is_empty_and_matches_everything() {
    let s = LabelSelector::parse("").unwrap();
    assert!(s.is_empty());
    assert_eq!(s, LabelSelector::everything());
    assert!(s.matches_btree(&labels(&[("a", "b")])));
    assert!(!LabelSelector::parse("a").unwrap().is_empty());
}

#[test]
fn exact_match_reports_single_value_equality_like_requires_exact_match() {
    let s = LabelSelector::parse("a=1,b==2,c in (3),d in (4,5),e!=6").unwrap();
    assert_eq!(s.exact_match("a"), Some("1"));
    assert_eq!(s.exact_match("b"), Some("2"));
    assert_eq!(s.exact_match("c"), Some("3"));
    assert_eq!(s.exact_match("d"), None);
    assert_eq!(s.exact_match("e"), None);
    assert_eq!(s.exact_match("z"), None);
}

#[test]
fn from_map_builds_equality_selector_sorted_by_key() {
    let s = LabelSelector::from_map(&labels(&[("tier", "fe"), ("app", "web")])).unwrap();
    assert_eq!(s.to_string(), "app=web,tier=fe");
    assert!(LabelSelector::from_map(&labels(&[("-bad", "x")])).is_err());
}

#[test]
fn requirement_new_validates_operator_value_counts() {
    let none = BTreeSet::new();
    assert_eq!(
        LabelRequirement::new("a", LabelOperator::In, none.clone()),
        Err("values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty".into())
    );
    let two: BTreeSet<String> = ["x".to_string(), "y".to_string()].into();
    assert_eq!(
        LabelRequirement::new("a", LabelOperator::Equals, two.clone()),
        Err(r#"values: Invalid value: []string{"x", "y"}: exact-match compatibility requires one single value"#.into())
    );
    assert_eq!(
        LabelRequirement::new("a", LabelOperator::Exists, two),
        Err(r#"values: Invalid value: []string{"x", "y"}: values set must be empty for exists and does not exist"#.into())
    );
    let r = LabelRequirement::new("a", LabelOperator::NotIn, ["v".to_string()].into()).unwrap();
    assert_eq!(
        (r.key(), r.operator(), r.values().collect::<Vec<_>>()),
        ("a", LabelOperator::NotIn, vec!["v"])
    );
    assert_eq!(
        LabelRequirement::new("-a", LabelOperator::Exists, none),
        Err(format!("key: Invalid value: \"-a\": {QNAME_MSG}"))
    );
}

// ---- property tests ----

fn key() -> impl Strategy<Value = String> {
    let name = "[a-zA-Z0-9]([a-zA-Z0-9._-]{0,8}[a-zA-Z0-9])?";
    prop_oneof![
        name.prop_map(|n| n),
        ("[a-z0-9]{1,6}(\\.[a-z0-9]{1,4}){0,2}", name).prop_map(|(p, n)| format!("{p}/{n}")),
        Just("in".to_string()),
        Just("notin".to_string()),
    ]
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "([a-zA-Z0-9]([a-zA-Z0-9._-]{0,8}[a-zA-Z0-9])?)?".prop_map(|v| v),
        Just("in".to_string()),
        Just("notin".to_string()),
    ]
}

fn requirement() -> impl Strategy<Value = LabelRequirement> {
    let one =
        |op: LabelOperator| (key(), value()).prop_map(move |(k, v)| (k, op, BTreeSet::from([v])));
    let set = |op: LabelOperator| {
        (key(), proptest::collection::btree_set(value(), 1..4)).prop_map(move |(k, vs)| (k, op, vs))
    };
    let bare = |op: LabelOperator| key().prop_map(move |k| (k, op, BTreeSet::new()));
    let num = |op: LabelOperator| {
        (key(), 0u32..1_000_000).prop_map(move |(k, n)| (k, op, BTreeSet::from([n.to_string()])))
    };
    prop_oneof![
        one(LabelOperator::Equals),
        one(LabelOperator::DoubleEquals),
        one(LabelOperator::NotEquals),
        set(LabelOperator::In),
        set(LabelOperator::NotIn),
        bare(LabelOperator::Exists),
        bare(LabelOperator::DoesNotExist),
        num(LabelOperator::GreaterThan),
        num(LabelOperator::LessThan),
    ]
    .prop_map(|(k, op, vs)| {
        LabelRequirement::new(&k, op, vs).expect("generated requirement is valid")
    })
}

proptest! {
    /// parse(Display(selector)) == selector for every valid selector.
    #[test]
    fn display_then_parse_round_trips(reqs in proptest::collection::vec(requirement(), 0..6)) {
        let sel = LabelSelector::from_requirements(reqs);
        let text = sel.to_string();
        prop_assert_eq!(LabelSelector::parse(&text), Ok(sel), "text {:?}", text);
    }

    /// Arbitrary input never panics, and whatever parses re-parses from its Display.
    #[test]
    fn parse_never_panics_and_is_idempotent(s in "[a-z !=<>(),.in/\\-_0-9]{0,30}") {
        if let Ok(sel) = LabelSelector::parse(&s) {
            prop_assert_eq!(LabelSelector::parse(&sel.to_string()), Ok(sel));
        }
    }
}
