//! Kubernetes' CEL url library (upstream
//! `k8s.io/apiserver/pkg/cel/library/urls.go`): `url(s)` parses `s` as Go's
//! `net/url` `ParseRequestURI` accepts it (an absolute URI, or an absolute
//! path such as `/a/b`; the fragment is kept apart as `url.Parse` does),
//! `isURL(s)` says whether it would; `getScheme`, `getHost` (with the
//! port), `getHostname` (without it, IPv6 brackets removed), `getPort`,
//! `getEscapedPath` and `getQuery` (a map from each key to its values,
//! `+` and `%XX` decoded) read the parts, `''` or `{}` when absent.
//!
//! Written for Go's semantics rather than with the `url` crate, which
//! follows the WHATWG standard: it lowercases and IDNA-encodes hosts, adds
//! a `/` path to `https://example.com` (Go gives `''`), and rejects the
//! absolute paths upstream accepts. Errors keep Go's words:
//! `URL parse error during conversion from string: parse "foo": invalid URI for request`.
//! Each call charges the URL's length over ten.

use std::collections::HashMap;

use cel::common::types::{CelBool, CelList, CelMap, CelMapKey, CelString, Type, STRING_TYPE};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::cost::charge;
use super::library::{no_such_overload, string_arg, take};

static URL_TYPE: Type = Type::new_unspecified_type("kubernetes.URL");

/// A URL as Go's `net/url` splits it; `path` and `raw_query` as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Url {
    /// `https`; empty for an absolute path.
    pub scheme: String,
    /// The authority's host and port (`example.com:80`, `[::1]:80`).
    pub host: String,
    /// The path as written (still escaped).
    pub path: String,
    /// What follows `?`, as written.
    pub raw_query: String,
}

impl Val for Url {
    fn get_type(&self) -> &Type {
        &URL_TYPE
    }
    fn cel_type() -> &'static Type {
        &URL_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Url>().is_some_and(|o| o == self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for Url {}

/// Registers the functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("url", "string_to_url", vec![STRING_TYPE], to_url)?;
    env.add_overload("isURL", "is_url_string", vec![STRING_TYPE], is_url)?;
    let getters: [(&str, Function); 6] = [
        ("getScheme", get_scheme),
        ("getHost", get_host),
        ("getHostname", get_hostname),
        ("getPort", get_port),
        ("getEscapedPath", get_escaped_path),
        ("getQuery", get_query),
    ];
    for (name, f) in getters {
        env.add_member_overload(name, &format!("url_{name}"), URL_TYPE.to_owned(), vec![], f)?;
    }
    Ok(())
}

type Function = cel::common::functions::Function;

/// Go's `%q` of `s` (enough for URLs: quotes and backslashes escaped).
fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// Parses `s` as `url.ParseRequestURI` accepts it, keeping the fragment
/// out as `url.Parse` does. The error is Go's, without the `parse "s": `.
pub fn parse(s: &str) -> Result<Url, String> {
    if s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    if s.is_empty() {
        return Err("empty url".into());
    }
    // ParseRequestURI keeps a '#' in the path or query; Parse (which
    // upstream reads the parts with) cuts the fragment off first.
    let without_fragment = s.split_once('#').map_or(s, |(before, _)| before);
    if s == "*" {
        return Ok(Url { path: "*".into(), ..Url::default() });
    }
    let (scheme, rest) = split_scheme(without_fragment)?;
    let (rest, raw_query) = match rest.split_once('?') {
        Some((r, q)) => (r, q.to_string()),
        None => (rest, String::new()),
    };
    if !rest.starts_with('/') {
        if !scheme.is_empty() {
            // An opaque URI (`mailto:a@b`): no host, no path.
            return Ok(Url { scheme, raw_query, ..Url::default() });
        }
        return Err("invalid URI for request".into());
    }
    let (host, path) = if !scheme.is_empty() && rest.starts_with("//") {
        let authority_and_path = &rest[2..];
        let end = authority_and_path.find('/').unwrap_or(authority_and_path.len());
        let (authority, path) = authority_and_path.split_at(end);
        (parse_authority(authority)?, path)
    } else {
        (String::new(), rest)
    };
    check_escapes(path)?;
    Ok(Url { scheme, host, path: path.to_string(), raw_query })
}

/// `scheme:` off `s`; no scheme unless it starts with a letter and runs of
/// letters, digits, `+`, `-`, `.` up to a `:`.
fn split_scheme(s: &str) -> Result<(String, &str), String> {
    for (i, c) in s.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return Err("missing protocol scheme".into()),
            ':' => return Ok((s[..i].to_ascii_lowercase(), &s[i + 1..])),
            _ => return Ok((String::new(), s)),
        }
    }
    Ok((String::new(), s))
}

/// The host (and port) of `authority`, after any `userinfo@`.
fn parse_authority(authority: &str) -> Result<String, String> {
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(rest) = host.strip_prefix('[') {
        let Some(close) = rest.find(']') else { return Err("missing ']' in host".into()) };
        let after = &rest[close + 1..];
        if !after.is_empty() && !valid_port(after) {
            return Err(format!("invalid port {} after host", quoted(after)));
        }
        return Ok(host.to_string());
    }
    if let Some(i) = host.rfind(':') {
        let port = &host[i..];
        if !valid_port(port) {
            return Err(format!("invalid port {} after host", quoted(port)));
        }
    }
    if let Some(bad) = host.chars().find(|c| !host_char(*c)) {
        return Err(format!("invalid character {} in host name", quoted(&bad.to_string())));
    }
    Ok(host.to_string())
}

/// `:` followed by digits only (or nothing).
fn valid_port(p: &str) -> bool {
    p.strip_prefix(':').is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()))
}

/// Characters Go's `shouldEscape(c, encodeHost)` lets a host keep.
fn host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:[]<>\"%".contains(c) || !c.is_ascii()
}

/// Every `%` starts a `%XX` escape, as Go's `unescape` demands.
fn check_escapes(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let ok = i + 2 < b.len() && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit();
            if !ok {
                let end = (i + 3).min(s.len());
                let escape = s.get(i..end).unwrap_or(&s[i..]);
                return Err(format!("invalid URL escape {}", quoted(escape)));
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    Ok(())
}

/// Bytes a path keeps unescaped (Go's `shouldEscape(c, encodePath)` is false).
fn path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.~$&+,/:;=@".contains(&b)
}

/// Go's `URL.EscapedPath`: the path as written when that is a valid
/// escaping of it, else the decoded path escaped anew.
pub fn escaped_path(path: &str) -> String {
    // Go's validEncoded also lets these through as written.
    let valid = path.bytes().all(|b| path_byte(b) || b"!'()*[]%".contains(&b));
    if valid {
        return path.to_string();
    }
    let decoded = crate::list_options::percent_decode(path, false).unwrap_or_else(|| path.as_bytes().to_vec());
    let mut out = String::new();
    for b in decoded {
        if path_byte(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Go's `url.ParseQuery`, errors skipped as `URL.Query` does: `&`-separated
/// `key=value` pairs; pairs with a `;` or a bad escape are dropped.
pub fn query(raw: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for pair in raw.split('&') {
        if pair.is_empty() || pair.contains(';') {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (Some(k), Some(v)) = (crate::list_options::percent_decode(k, true), crate::list_options::percent_decode(v, true)) else { continue };
        let (k, v) = (String::from_utf8_lossy(&k).into_owned(), String::from_utf8_lossy(&v).into_owned());
        match out.iter_mut().find(|(key, _)| *key == k) {
            Some((_, values)) => values.push(v),
            None => out.push((k, vec![v])),
        }
    }
    out
}

/// Go's `URL.Hostname`: the host without its port, IPv6 brackets removed.
pub fn hostname(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.find(']').map_or(rest, |i| &rest[..i]);
    }
    host.rfind(':').map_or(host, |i| &host[..i])
}

/// Go's `URL.Port`: the digits after the host's last `:`, `''` without.
pub fn port(host: &str) -> &str {
    let after_brackets = host.rfind(']').map_or(host, |i| &host[i + 1..]);
    match after_brackets.rfind(':') {
        Some(i) if valid_port(&after_brackets[i..]) => &after_brackets[i + 1..],
        _ => "",
    }
}

fn to_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = string_arg("url", s.as_ref())?;
    charge(1 + s.len() as u64 / 10)?;
    match parse(s) {
        Ok(u) => Ok(CowVal::owned(u)),
        Err(e) => Err(ExecutionError::function_error(
            "url",
            format!("URL parse error during conversion from string: parse {}: {e}", quoted(s)),
        )),
    }
}

fn is_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = string_arg("isURL", s.as_ref())?;
    charge(1 + s.len() as u64 / 10)?;
    Ok(CowVal::owned(CelBool::from(parse(s).is_ok())))
}

/// The URL an overload of `function` was called on.
fn url_arg<'b, 'v>(function: &str, args: &'b [CowVal<'_, 'v>]) -> Result<&'b Url, ExecutionError> {
    let first = args.first().ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))?;
    first.downcast_ref::<Url>().ok_or_else(|| no_such_overload(function, &[first.as_ref()]))
}

fn string(s: &str) -> CowVal<'static, 'static> {
    CowVal::owned(CelString::from(s.to_string()))
}

fn get_scheme<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(string(&url_arg("getScheme", &args)?.scheme))
}

fn get_host<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(string(&url_arg("getHost", &args)?.host))
}

fn get_hostname<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(string(hostname(&url_arg("getHostname", &args)?.host)))
}

fn get_port<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(string(port(&url_arg("getPort", &args)?.host)))
}

fn get_escaped_path<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(string(&escaped_path(&url_arg("getEscapedPath", &args)?.path)))
}

fn get_query<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let u = url_arg("getQuery", &args)?;
    charge(1 + u.raw_query.len() as u64 / 10)?;
    let mut map: HashMap<CelMapKey<'static>, Box<dyn Val>> = HashMap::new();
    for (k, values) in query(&u.raw_query) {
        let list: Vec<Box<dyn Val>> = values.into_iter().map(|v| Box::new(CelString::from(v)) as Box<dyn Val>).collect();
        map.insert(CelMapKey::from(k), Box::new(CelList::from(list)));
    }
    Ok(CowVal::owned(CelMap::from(map)))
}
