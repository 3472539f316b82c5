//! Kubernetes' CEL libraries: values and error messages, as upstream's
//! `library` tests give them.

use serde_json::{json, Value};

use super::super::evaluate;
use super::error_text;

/// What `expr` gives, as JSON, or its error as upstream words it.
fn eval(expr: &str) -> Result<Value, String> {
    let data = json!({"l": [3, 1, 2], "s": ["b", "a"], "f": [1.5, 2.5], "e": []});
    match evaluate(expr, &[("self", &data)]) {
        None => Err("does not parse".into()),
        Some(Ok(v)) => super::super::to_json(&v).ok_or_else(|| format!("not JSON: {v:?}")),
        Some(Err(e)) => Err(error_text(&e)),
    }
}

fn ok(expr: &str) -> Value {
    eval(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

fn err(expr: &str) -> String {
    match eval(expr) {
        Ok(v) => panic!("{expr} gave {v}, not an error"),
        Err(e) => e,
    }
}

#[test]
fn list_functions_give_upstreams_values() {
    assert_eq!(ok("[1, 2, 2, 3].isSorted()"), json!(true));
    assert_eq!(ok("self.l.isSorted()"), json!(false));
    assert_eq!(ok("['a', 'b'].isSorted() && !self.s.isSorted() && [].isSorted()"), json!(true));
    assert_eq!(ok("self.l.sum()"), json!(6));
    assert_eq!(ok("self.f.sum()"), json!(4.0));
    assert_eq!(ok("self.e.sum()"), json!(0));
    assert_eq!(ok("self.l.min()"), json!(1));
    assert_eq!(ok("self.l.max()"), json!(3));
    assert_eq!(ok("self.s.min()"), json!("a"));
    assert_eq!(ok("[1, 2, 1].indexOf(1)"), json!(0));
    assert_eq!(ok("[1, 2, 1].lastIndexOf(1)"), json!(2));
    assert_eq!(ok("self.l.indexOf(9)"), json!(-1));
    // The strings extension's indexOf on strings is still there.
    assert_eq!(ok("'abcb'.indexOf('b')"), json!(1));
}

#[test]
fn min_and_max_of_an_empty_list_fail_as_upstream() {
    assert_eq!(err("self.e.min()"), "min called on empty list");
    assert_eq!(err("self.e.max()"), "max called on empty list");
}

#[test]
fn regex_find_gives_the_first_match_and_find_all_every_or_n() {
    assert_eq!(ok("'abc 123'.find('[0-9]+')"), json!("123"));
    assert_eq!(ok("'abc'.find('[0-9]+')"), json!(""));
    assert_eq!(ok("'123 abc 456'.findAll('[0-9]+')"), json!(["123", "456"]));
    assert_eq!(ok("'123 abc 456'.findAll('[0-9]+', 1)"), json!(["123"]));
    assert_eq!(ok("'123 abc 456'.findAll('[0-9]+', 0)"), json!([]));
    assert_eq!(ok("'123 abc 456'.findAll('[0-9]+', -1)"), json!(["123", "456"]));
}

#[test]
fn an_illegal_regex_fails_with_upstreams_prefix() {
    let e = err("'abc'.find('(')");
    assert!(e.starts_with("Illegal regex: error parsing regexp: "), "{e}");
    assert!(e.ends_with(": `(`"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn urls_parse_and_give_their_parts_as_go_net_url() {
    assert_eq!(ok("isURL('https://user:pass@example.com:80/path?query=val#fragment')"), json!(true));
    assert_eq!(ok("isURL('/absolute-path')"), json!(true));
    assert_eq!(ok("isURL('https://a:b:c/')"), json!(false));
    assert_eq!(ok("isURL('../relative-path')"), json!(false));
    assert_eq!(ok("isURL('')"), json!(false));
    assert_eq!(ok("url('https://example.com:80/').getScheme()"), json!("https"));
    assert_eq!(ok("url('/path').getScheme()"), json!(""));
    assert_eq!(ok("url('https://example.com:80/').getHost()"), json!("example.com:80"));
    assert_eq!(ok("url('https://[::1]:80/').getHost()"), json!("[::1]:80"));
    assert_eq!(ok("url('https://example.com:80/').getHostname()"), json!("example.com"));
    assert_eq!(ok("url('https://[::1]:80/').getHostname()"), json!("::1"));
    assert_eq!(ok("url('/path').getHostname()"), json!(""));
    assert_eq!(ok("url('https://example.com:80/').getPort()"), json!("80"));
    assert_eq!(ok("url('https://[::1]/').getPort()"), json!(""));
    assert_eq!(ok("url('https://example.com/').getPort()"), json!(""));
    assert_eq!(ok("url('https://example.com/path').getEscapedPath()"), json!("/path"));
    assert_eq!(ok("url('https://example.com/path with spaces/').getEscapedPath()"), json!("/path%20with%20spaces/"));
    assert_eq!(ok("url('https://example.com').getEscapedPath()"), json!(""));
    assert_eq!(ok("url('https://example.com/path?k1=a&k2=b&k2=c').getQuery()"), json!({"k1": ["a"], "k2": ["b", "c"]}));
    assert_eq!(ok("url('https://example.com/path?key with spaces=value with spaces').getQuery()"), json!({"key with spaces": ["value with spaces"]}));
    assert_eq!(ok("url('https://example.com/path?a=1+2%2B').getQuery()"), json!({"a": ["1 2+"]}));
    assert_eq!(ok("url('https://example.com/path?').getQuery()"), json!({}));
    assert_eq!(ok("url('https://example.com/path#frag').getEscapedPath()"), json!("/path"));
    assert_eq!(ok("url('https://example.com') == url('https://example.com')"), json!(true));
}

#[test]
fn a_bad_url_fails_with_gos_parse_error() {
    assert_eq!(
        err("url('../relative-path')"),
        "URL parse error during conversion from string: parse \"../relative-path\": invalid URI for request"
    );
    assert_eq!(err("url('')"), "URL parse error during conversion from string: parse \"\": empty url");
    assert_eq!(
        err("url('https://a:b:c/')"),
        "URL parse error during conversion from string: parse \"https://a:b:c/\": invalid port \":c\" after host"
    );
    assert_eq!(
        err("url('https://exa mple.com/')"),
        "URL parse error during conversion from string: parse \"https://exa mple.com/\": invalid character \" \" in host name"
    );
}

#[test]
fn quantities_parse_compare_and_add_as_upstream() {
    assert_eq!(ok("isQuantity('1.3G') && isQuantity('1.3Gi') && isQuantity('12e6') && !isQuantity('1.3Gi.4') && !isQuantity(' 1')"), json!(true));
    assert_eq!(ok("quantity('50k').isGreaterThan(quantity('100'))"), json!(true));
    assert_eq!(ok("quantity('50k').isLessThan(quantity('100'))"), json!(false));
    assert_eq!(ok("quantity('200M').compareTo(quantity('0.2G'))"), json!(0));
    assert_eq!(ok("quantity('50M').compareTo(quantity('50Mi'))"), json!(-1));
    assert_eq!(ok("quantity('50Mi').compareTo(quantity('50M'))"), json!(1));
    assert_eq!(ok("quantity('1') == quantity('1000m')"), json!(true));
    assert_eq!(ok("quantity('50k').sign()"), json!(1));
    assert_eq!(ok("sign(quantity('-50k'))"), json!(-1));
    assert_eq!(ok("quantity('0').sign()"), json!(0));
    assert_eq!(ok("quantity('50k').isInteger()"), json!(true));
    assert_eq!(ok("quantity('10000000000000000000').isInteger()"), json!(false));
    assert_eq!(ok("quantity('50m').isInteger()"), json!(false));
    assert_eq!(ok("quantity('50k').asInteger()"), json!(50000));
    assert_eq!(ok("quantity('1.5Gi').asApproximateFloat()"), json!(1610612736.0));
    assert_eq!(ok("quantity('50k').add(quantity('20k')) == quantity('70k')"), json!(true));
    assert_eq!(ok("quantity('50k').add(20) == quantity('50020')"), json!(true));
    assert_eq!(ok("quantity('50k').sub(quantity('20k')) == quantity('30k')"), json!(true));
    assert_eq!(ok("quantity('50k').sub(20000) == quantity('30k')"), json!(true));
}

#[test]
fn quantity_errors_are_upstreams() {
    assert_eq!(err("quantity('1.3Gi.4')"), super::super::quantities::FORMAT_WRONG);
    assert_eq!(err("quantity('50m').asInteger()"), "cannot convert value to integer");
}

#[test]
fn ip_functions_follow_go_netip() {
    assert_eq!(ok("isIP('127.0.0.1') && isIP('::1') && !isIP('127.0.0.256') && !isIP(':::1')"), json!(true));
    assert_eq!(ok("!isIP('::ffff:1.2.3.4') && !isIP('fe80::1%eth0') && !isIP('127.0.0.01')"), json!(true));
    assert_eq!(ok("ip('127.0.0.1').family() == 4 && ip('::1').family() == 6"), json!(true));
    assert_eq!(ok("ip.isCanonical('2001:db8::abcd')"), json!(true));
    assert_eq!(ok("ip.isCanonical('2001:DB8::ABCD') || ip.isCanonical('2001:db8::0:0:0:abcd')"), json!(false));
    assert_eq!(ok("ip('0.0.0.0').isUnspecified() && ip('::').isUnspecified() && !ip('::1').isUnspecified()"), json!(true));
    assert_eq!(ok("ip('127.0.0.1').isLoopback() && ip('::1').isLoopback() && !ip('192.168.0.1').isLoopback()"), json!(true));
    assert_eq!(ok("ip('224.0.0.1').isLinkLocalMulticast() && ip('ff02::1').isLinkLocalMulticast()"), json!(true));
    assert_eq!(ok("ip('224.0.1.1').isLinkLocalMulticast() || ip('fd00::1').isLinkLocalMulticast()"), json!(false));
    assert_eq!(ok("ip('169.254.169.254').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast()"), json!(true));
    assert_eq!(ok("ip('192.168.0.1').isLinkLocalUnicast() || ip('fd80::1').isLinkLocalUnicast()"), json!(false));
    assert_eq!(ok("ip('192.168.0.1').isGlobalUnicast() && ip('2001:db8::abcd').isGlobalUnicast()"), json!(true));
    assert_eq!(ok("ip('255.255.255.255').isGlobalUnicast() || ip('ff00::1').isGlobalUnicast()"), json!(false));
    assert_eq!(ok("string(ip('2001:db8:0:0::1'))"), json!("2001:db8::1"));
    assert_eq!(ok("ip('10.0.0.1') == ip('10.0.0.1')"), json!(true));
}

#[test]
fn ip_errors_are_upstreams() {
    assert_eq!(
        err("ip('127.0.0.256')"),
        "IP Address \"127.0.0.256\" parse error during conversion from string: ParseAddr(\"127.0.0.256\"): unable to parse IP"
    );
    assert_eq!(err("ip('::ffff:1.2.3.4')"), "IPv4-mapped IPv6 address \"::ffff:1.2.3.4\" is not allowed");
    assert_eq!(err("ip('fe80::1%eth0')"), "IP address \"fe80::1%eth0\" with zone value is not allowed");
}

#[test]
fn cidr_functions_follow_go_netip() {
    assert_eq!(ok("isCIDR('192.168.0.0/24') && isCIDR('::1/128') && !isCIDR('192.168.0.0') && !isCIDR('1.2.3.4/33')"), json!(true));
    assert_eq!(ok("cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))"), json!(true));
    assert_eq!(ok("cidr('192.168.0.0/24').containsIP('192.168.1.1')"), json!(false));
    assert_eq!(ok("cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24'))"), json!(true));
    assert_eq!(ok("cidr('192.168.1.0/24').containsCIDR('192.168.2.0/24')"), json!(false));
    assert_eq!(ok("cidr('192.168.0.0/24').containsCIDR('192.168.0.0/16')"), json!(false));
    assert_eq!(ok("cidr('192.168.0.1/24').ip() == ip('192.168.0.1')"), json!(true));
    assert_eq!(ok("cidr('::1/128').ip().family()"), json!(6));
    assert_eq!(ok("string(cidr('192.168.0.1/24').masked())"), json!("192.168.0.0/24"));
    assert_eq!(ok("cidr('192.168.0.0/24') == cidr('192.168.0.0/24').masked()"), json!(true));
    assert_eq!(ok("cidr('192.168.0.1/24') == cidr('192.168.0.1/24').masked()"), json!(false));
    assert_eq!(ok("cidr('192.168.0.0/16').prefixLength()"), json!(16));
}

#[test]
fn cidr_errors_are_upstreams() {
    assert_eq!(
        err("cidr('192.168.0.0')"),
        "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"192.168.0.0\"): no '/'"
    );
    assert_eq!(
        err("cidr('1.2.3.4/33')"),
        "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"1.2.3.4/33\"): prefix length out of range"
    );
}

#[test]
fn semvers_parse_and_compare_as_blang_semver() {
    assert_eq!(ok("isSemver('1.2.3') && isSemver('0.1.0-alpha.1+build.5')"), json!(true));
    assert_eq!(ok("isSemver('v1.0') || isSemver('1.0') || isSemver('01.1.1') || isSemver('1.2.3-01')"), json!(false));
    assert_eq!(ok("isSemver('v1.0', true) && isSemver('01.01.01', true) && isSemver('1', true)"), json!(true));
    assert_eq!(ok("isSemver('1.0-rc', true)"), json!(false));
    assert_eq!(ok("[semver('1.2.3').major(), semver('1.2.3').minor(), semver('1.2.3').patch()]"), json!([1, 2, 3]));
    assert_eq!(ok("semver('v01.2', true) == semver('1.2.0')"), json!(true));
    assert_eq!(ok("semver('1.2.3').compareTo(semver('1.2.3'))"), json!(0));
    assert_eq!(ok("semver('1.2.3').compareTo(semver('2.0.0'))"), json!(-1));
    assert_eq!(ok("semver('1.2.3').compareTo(semver('0.1.2'))"), json!(1));
    // Pre-releases sort below their release, numerically then by ASCII; build metadata is ignored.
    assert_eq!(ok("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))"), json!(true));
    assert_eq!(ok("semver('1.0.0-alpha.2').isLessThan(semver('1.0.0-alpha.10'))"), json!(true));
    assert_eq!(ok("semver('1.0.0-alpha.1').isLessThan(semver('1.0.0-alpha.beta'))"), json!(true));
    assert_eq!(ok("semver('1.0.0-rc.1').isGreaterThan(semver('1.0.0-rc'))"), json!(true));
    assert_eq!(ok("semver('1.0.0+a') == semver('1.0.0+b')"), json!(true));
    // The quantity methods of the same names still apply to quantities.
    assert_eq!(ok("quantity('2').isGreaterThan(quantity('1')) && semver('2.0.0').isGreaterThan(semver('1.0.0'))"), json!(true));
}

#[test]
fn semver_errors_are_blang_semvers() {
    assert_eq!(err("semver('200K')"), "No Major.Minor.Patch elements found");
    assert_eq!(err("semver('')"), "Version string empty");
    assert_eq!(err("semver('1.x.3')"), "Invalid character(s) found in minor number \"x\"");
    assert_eq!(err("semver('01.2.3')"), "Major number must not contain leading zeroes \"01\"");
    assert_eq!(err("semver('1.2.3-')"), "Prerelease is empty");
    assert_eq!(err("semver('1.2.3-a_b')"), "Invalid character(s) found in prerelease \"a_b\"");
    assert_eq!(err("semver('1.2.3+')"), "Build meta data is empty");
    assert_eq!(err("semver('1.0-rc', true)"), "short version cannot contain PreRelease/Build meta data");
}

#[test]
fn named_formats_validate_as_upstream() {
    assert_eq!(ok("format.dns1123Label().validate('my-name') == optional.none()"), json!(true));
    assert_eq!(ok("format.dns1123Label().validate('my-name').hasValue()"), json!(false));
    assert_eq!(
        ok("format.dns1123Label().validate('My_Name').value()"),
        json!(["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"])
    );
    assert_eq!(ok("format.named('dns1123Subdomain').value().validate('apiextensions.k8s.io').hasValue()"), json!(false));
    assert_eq!(ok("format.named('nope').hasValue()"), json!(false));
    assert_eq!(ok("format.named('uuid') == optional.of(format.uuid())"), json!(true));
    // Prefixes may end in a dash; full names may not.
    assert_eq!(ok("format.dns1123LabelPrefix().validate('my-prefix-').hasValue()"), json!(false));
    assert_eq!(ok("format.dns1123Label().validate('my-prefix-').hasValue()"), json!(true));
    assert_eq!(ok("format.dns1035Label().validate('1abc').hasValue() && !format.qualifiedName().validate('k8s.io/name').hasValue()"), json!(true));
    assert_eq!(ok("format.labelValue().validate('').hasValue()"), json!(false));
    assert_eq!(ok("format.uri().validate('foo').value()"), json!(["parse \"foo\": invalid URI for request"]));
    assert_eq!(ok("format.uri().validate('https://example.com/x').hasValue()"), json!(false));
    assert_eq!(ok("format.uuid().validate('123e4567-e89b-12d3-a456-426614174000').hasValue()"), json!(false));
    assert_eq!(ok("format.uuid().validate('x').value()"), json!(["does not match the UUID format"]));
    assert_eq!(ok("format.byte().validate('aGVsbG8=').hasValue() || format.date().validate('2021-01-01').hasValue()"), json!(false));
    assert_eq!(ok("format.byte().validate('!').value() + format.date().validate('2021-13-01').value()"), json!(["invalid base64", "invalid date"]));
    assert_eq!(ok("format.datetime().validate('2021-01-01T00:00:00Z').hasValue()"), json!(false));
    assert_eq!(ok("format.datetime().validate('yesterday').value()"), json!(["invalid datetime"]));
}

#[test]
fn format_validation_is_charged_by_string_length_and_pattern_size() {
    use super::super::cost::{instrument, metered, PER_CALL_LIMIT};
    let cost_of = |len: usize| {
        let mut expr = super::super::parse(&format!("format.dns1123Subdomain().validate('{}')", "a".repeat(len))).expect("parses");
        let base = instrument(&mut expr);
        let ctx = cel::Context::with_env(super::super::env());
        metered(PER_CALL_LIMIT, || {
            super::super::cost::charge(base)?;
            cel::Value::resolve(&expr, &ctx)
        })
        .1
        .used
    };
    // ceil((1 + len) / 10) * ceil(60 / 4): 15 per ten characters.
    assert_eq!(cost_of(99) - cost_of(9), 9 * 15);
}

#[test]
fn authorizer_checks_are_asked_then_answered() {
    use super::super::authz::{with_authorizer, Answer, Check, Checks, PENDING};
    use super::super::{evaluate_bool, Outcome};
    let request = Check { group: "apps".into(), resource: "deployments".into(), namespace: "ns".into(), name: "d".into(), ..Check::default() };
    let checks = Checks::new(request.clone());
    let expr = "authorizer.group('').resource('pods').namespace('ns').check('create').allowed() \
                && !authorizer.serviceAccount('ns', 'sa').path('/healthz').check('get').errored()";
    // Unanswered: the checks fail the evaluation, and are recorded (both
    // sides of `&&` are evaluated, as cel-go's error absorption wants).
    assert_eq!(with_authorizer(&checks, || evaluate_bool(expr, &[])), Outcome::Error(PENDING.into()));
    let pods = Check { verb: "create".into(), resource: "pods".into(), namespace: "ns".into(), ..Check::default() };
    let healthz = Check { service_account: Some(("ns".into(), "sa".into())), verb: "get".into(), path: Some("/healthz".into()), ..Check::default() };
    assert_eq!(checks.take_unanswered(), [pods.clone(), healthz.clone()]);
    checks.answer(pods, Answer { allowed: true, ..Answer::default() });
    checks.answer(healthz, Answer { allowed: false, reason: String::new(), error: "webhook down".into() });
    assert_eq!(with_authorizer(&checks, || evaluate_bool(expr, &[])), Outcome::Bool(false));
    assert!(checks.take_unanswered().is_empty());
    // authorizer.requestResource is the request's resource check.
    let expr = "authorizer.requestResource.subresource('scale').check('update').reason() == 'ok'";
    assert_eq!(with_authorizer(&checks, || evaluate_bool(expr, &[])), Outcome::Error(PENDING.into()));
    let scale = Check { verb: "update".into(), subresource: "scale".into(), ..request };
    assert_eq!(checks.take_unanswered(), std::slice::from_ref(&scale));
    checks.answer(scale, Answer { allowed: true, reason: "ok".into(), ..Answer::default() });
    assert_eq!(with_authorizer(&checks, || evaluate_bool(expr, &[])), Outcome::Bool(true));
    // Without with_authorizer, `authorizer` is not declared.
    assert_eq!(evaluate_bool("authorizer.path('/').check('get').allowed()", &[]), Outcome::Unsupported);
}

#[test]
fn an_authorization_check_costs_upstreams_350000() {
    use super::super::authz::{with_authorizer, Answer, Check, Checks};
    use super::super::{evaluate_bool, Outcome};
    let checks = Checks::new(Check::default());
    let asked = Check { verb: "get".into(), path: Some("/".into()), ..Check::default() };
    checks.answer(asked, Answer { allowed: true, ..Answer::default() });
    let one = "authorizer.path('/').check('get').allowed()";
    assert_eq!(with_authorizer(&checks, || evaluate_bool(&format!("{one} && {one}"), &[])), Outcome::Bool(true));
    // Three checks pass the per-call limit of 1000000.
    let Outcome::Error(e) = with_authorizer(&checks, || evaluate_bool(&format!("{one} && {one} && {one}"), &[])) else {
        panic!("three checks should pass the limit")
    };
    assert!(e.contains("actual cost limit exceeded"), "{e}");
}
