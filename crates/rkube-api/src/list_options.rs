//! LIST / WATCH query parameters (`metav1.ListOptions`), decoded and
//! validated exactly as kube-apiserver does before it reads anything.
//!
//! [`ListOptions::from_query`] runs three upstream stages in order and stops
//! at the first that fails:
//!
//! 1. **Decoding** (`runtime.Convert_Slice_string_To_*`, `labels.Parse`,
//!    `fields.ParseSelector`) → 400 `BadRequest`. Booleans follow upstream:
//!    absent, `0` and `false` (any case) are false, every other value,
//!    including an empty one (`?watch`), is true. Integers must be base-10.
//!    A repeated parameter uses its first value.
//! 2. **`ValidateListOptions`** (`apimachinery/pkg/apis/meta/internalversion/validation`)
//!    → 422 `Invalid` on kind `ListOptions.meta.k8s.io` with one
//!    `FieldValue*` cause per problem, e.g. `resourceVersionMatch: Forbidden:
//!    resourceVersionMatch is forbidden unless resourceVersion is provided`.
//!    The WatchList feature gate is taken as on (rkube's default).
//! 3. **Storage checks** (`apiserver/pkg/storage.ValidateListOptions`) → 400
//!    `BadRequest`: `invalid resource version: ...`, `invalid continue token:
//!    ...`, `specifying resource version is not allowed when using continue`.
//!
//! Upstream's `SetListOptionsDefaults` (which turns a watch at
//! resourceVersion ""/"0" into `sendInitialEvents=true` +
//! `resourceVersionMatch=NotOlderThan`) is not applied by `from_query`, so
//! the fields say what the client sent; call
//! [`ListOptions::apply_watch_list_defaults`] for upstream's normalized view.

use std::fmt;

use crate::continue_token::ContinueToken;
use crate::field_error::{go_quote, FieldError};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{Status, StatusCause};

/// `resourceVersionMatch`: how `resourceVersion` constrains a LIST.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceVersionMatch {
    /// `Exact`: the list at exactly `resourceVersion`.
    Exact,
    /// `NotOlderThan`: any state at least as new as `resourceVersion`.
    NotOlderThan,
}

impl ResourceVersionMatch {
    /// The query/JSON spelling (`Exact`, `NotOlderThan`).
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceVersionMatch::Exact => "Exact",
            ResourceVersionMatch::NotOlderThan => "NotOlderThan",
        }
    }
}

impl fmt::Display for ResourceVersionMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decoded and validated LIST/WATCH options.
///
/// Empty string parameters (`resourceVersion=`, `continue=`,
/// `resourceVersionMatch=`) mean the same as absent ones upstream and are
/// stored as `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `labelSelector` (empty: everything).
    pub label_selector: LabelSelector,
    /// `fieldSelector` (empty: everything). Which fields a resource supports
    /// is checked by the API server, not here.
    pub field_selector: FieldSelector,
    /// `resourceVersion`: `None` (consistent read), `"0"` (any state), or a
    /// decimal revision. Validated to parse with [`parse_resource_version`].
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// `limit`: page size; ≤ 0 means no limit.
    pub limit: i64,
    /// `continue`: the raw token; validated to decode (see [`ListOptions::decoded_continue`]).
    pub continue_token: Option<String>,
    /// `watch`.
    pub watch: bool,
    /// `allowWatchBookmarks`.
    pub allow_watch_bookmarks: bool,
    /// `timeoutSeconds` for a watch (`Some(0)` means the server default, as upstream).
    pub timeout_seconds: Option<u64>,
    /// `sendInitialEvents` (WatchList, KEP-3157).
    pub send_initial_events: Option<bool>,
}

impl ListOptions {
    /// Decodes a raw query string (without the leading `?`) and validates it;
    /// see the module docs for the stages and their errors. Unknown
    /// parameters (`timeout`, `pretty`, ...) are ignored.
    pub fn from_query(query: &str) -> Result<Self, Status> {
        let params = parse_query(query);
        let first = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };

        let mut opts = ListOptions::default();
        if let Some(s) = first("labelSelector") {
            opts.label_selector = LabelSelector::parse(s).map_err(Status::bad_request)?;
        }
        if let Some(s) = first("fieldSelector") {
            opts.field_selector = FieldSelector::parse(s).map_err(Status::bad_request)?;
        }
        opts.resource_version = first("resourceVersion")
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let raw_match = first("resourceVersionMatch").unwrap_or("");
        opts.limit = match first("limit") {
            Some(s) => go_parse_int(s).map_err(Status::bad_request)?,
            None => 0,
        };
        opts.continue_token = first("continue")
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        opts.watch = first("watch").is_some_and(go_bool);
        opts.allow_watch_bookmarks = first("allowWatchBookmarks").is_some_and(go_bool);
        opts.send_initial_events = first("sendInitialEvents").map(go_bool);
        opts.timeout_seconds = match first("timeoutSeconds") {
            Some(s) => {
                let n = go_parse_int(s).map_err(Status::bad_request)?;
                let n = u64::try_from(n).map_err(|_| {
                    Status::bad_request(format!(
                        "timeoutSeconds: must be a non-negative integer, got {n}"
                    ))
                })?;
                Some(n)
            }
            None => None,
        };

        let causes = validate(&opts, raw_match);
        if !causes.is_empty() {
            return Err(Status::invalid("meta.k8s.io", "ListOptions", "", causes));
        }
        opts.resource_version_match = match raw_match {
            "Exact" => Some(ResourceVersionMatch::Exact),
            "NotOlderThan" => Some(ResourceVersionMatch::NotOlderThan),
            _ => None,
        };

        opts.check_storage_rules()?;
        Ok(opts)
    }

    /// Stage 3: the checks kube-apiserver's storage layer makes.
    fn check_storage_rules(&self) -> Result<(), Status> {
        if !self.watch {
            if let Some(token) = &self.continue_token {
                ContinueToken::decode(token)?;
                if let Some(rv) = &self.resource_version {
                    if rv != "0" {
                        return Err(Status::bad_request(
                            "specifying resource version is not allowed when using continue",
                        ));
                    }
                }
                return Ok(());
            }
        }
        if let Some(rv) = &self.resource_version {
            parse_resource_version(rv)?;
        }
        Ok(())
    }

    /// The decoded `continue` token, if any (already validated by `from_query`).
    pub fn decoded_continue(&self) -> Option<ContinueToken> {
        self.continue_token
            .as_deref()
            .and_then(|t| ContinueToken::decode(t).ok())
    }

    /// `resourceVersion` as a number: 0 when absent, `""` or `"0"`.
    pub fn resource_version_number(&self) -> i64 {
        self.resource_version
            .as_deref()
            .and_then(|s| parse_resource_version(s).ok())
            .unwrap_or(0)
    }

    /// True when `resourceVersion` is absent: a consistent (quorum) read.
    pub fn is_consistent_read(&self) -> bool {
        self.resource_version.is_none()
    }

    /// True when a label or field selector restricts the list.
    pub fn has_selectors(&self) -> bool {
        !self.label_selector.is_empty() || !self.field_selector.is_empty()
    }

    /// Upstream `SetListOptionsDefaults` with WatchList on: a watch that sets
    /// neither `sendInitialEvents` nor `resourceVersionMatch`, at
    /// resourceVersion absent or `"0"`, becomes `sendInitialEvents=true`,
    /// `resourceVersionMatch=NotOlderThan` (initial ADDED events; the
    /// `initial-events-end` bookmark is still only sent with `allowWatchBookmarks`).
    pub fn apply_watch_list_defaults(&mut self) {
        if self.send_initial_events.is_some() || self.resource_version_match.is_some() {
            return;
        }
        let legacy = matches!(self.resource_version.as_deref(), None | Some("0"));
        if self.watch && legacy {
            self.send_initial_events = Some(true);
            self.resource_version_match = Some(ResourceVersionMatch::NotOlderThan);
        }
    }
}

/// Stage 2: upstream `ValidateListOptions` / `validateWatchOptions`.
fn validate(o: &ListOptions, m: &str) -> Vec<StatusCause> {
    const RVM: &str = "resourceVersionMatch";
    let mut errs: Vec<FieldError> = Vec::new();
    if o.watch {
        if o.send_initial_events.is_some() && m != "NotOlderThan" {
            errs.push(FieldError::forbidden(
                RVM,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !m.is_empty() {
            if o.send_initial_events.is_none() {
                errs.push(FieldError::forbidden(
                    RVM,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != "NotOlderThan" {
                errs.push(FieldError::not_supported(RVM, m, &["NotOlderThan"]));
            }
            if o.continue_token.is_some() {
                errs.push(FieldError::forbidden(
                    RVM,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
    } else {
        if !m.is_empty() {
            if o.resource_version.is_none() {
                errs.push(FieldError::forbidden(
                    RVM,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if o.continue_token.is_some() {
                errs.push(FieldError::forbidden(
                    RVM,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != "Exact" && m != "NotOlderThan" {
                errs.push(FieldError::not_supported(
                    RVM,
                    m,
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if m == "Exact" && o.resource_version.as_deref() == Some("0") {
                errs.push(FieldError::forbidden(
                    RVM,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if o.send_initial_events.is_some() {
            errs.push(FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
    }
    errs.into_iter().map(StatusCause::from).collect()
}

/// Parses a resourceVersion like upstream `APIObjectVersioner.ParseResourceVersion`:
/// `""` and `"0"` are 0; otherwise an unsigned base-10 integer (no sign, no
/// spaces) that fits in an `i64`.
///
/// Error: 400 `BadRequest` `invalid resource version: resourceVersion: Invalid
/// value: "abc": strconv.ParseUint: parsing "abc": invalid syntax`.
pub fn parse_resource_version(s: &str) -> Result<i64, Status> {
    if s.is_empty() || s == "0" {
        return Ok(0);
    }
    let why = if !s.bytes().all(|b| b.is_ascii_digit()) {
        "invalid syntax"
    } else {
        match s.parse::<i64>() {
            Ok(n) => return Ok(n),
            Err(_) => "value out of range",
        }
    };
    Err(Status::bad_request(format!(
        "invalid resource version: resourceVersion: Invalid value: {q}: strconv.ParseUint: parsing {q}: {why}",
        q = go_quote(s)
    )))
}

/// Go's `strconv.ParseInt(s, 10, 64)`, with its error text.
fn go_parse_int(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.ParseInt: parsing {}: invalid syntax",
            go_quote(s)
        ));
    }
    s.parse::<i64>().map_err(|_| {
        format!(
            "strconv.ParseInt: parsing {}: value out of range",
            go_quote(s)
        )
    })
}

/// Upstream `Convert_Slice_string_To_bool`: `0` and `false` (any case) are
/// false, anything else (including `""`) is true.
fn go_bool(s: &str) -> bool {
    !(s == "0" || s.eq_ignore_ascii_case("false"))
}

/// Go's `url.ParseQuery` as used by `req.URL.Query()`: pairs split on `&`,
/// `+` is a space, `%XX` escapes decoded; a pair with a `;` in its key or a
/// bad escape is dropped, as Go does.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for pair in query.split('&') {
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k.contains(';') {
            continue;
        }
        let (Some(k), Some(v)) = (query_unescape(k), query_unescape(v)) else {
            continue;
        };
        out.push((k, v));
    }
    out
}

/// Go's `url.QueryUnescape`; `None` on a malformed `%` escape.
fn query_unescape(s: &str) -> Option<String> {
    percent_decode(s, true).map(|out| String::from_utf8_lossy(&out).into_owned())
}

/// Go's `net/url` unescaping: `%XX` (two hex digits) decoded, and `+` as a
/// space when `plus_is_space` (queries); `None` on a malformed `%` escape.
pub(crate) fn percent_decode(s: &str, plus_is_space: bool) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = b.get(i + 1).and_then(|c| (*c as char).to_digit(16))?;
                let lo = b.get(i + 2).and_then(|c| (*c as char).to_digit(16))?;
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(out)
}
