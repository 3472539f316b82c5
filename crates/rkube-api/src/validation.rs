//! Name, label, annotation, finalizer and ownerReference validation, following
//! `k8s.io/apimachinery/pkg/util/validation/validation.go` (the `Is*`
//! functions, which return upstream's messages) and
//! `k8s.io/apimachinery/pkg/api/validation/objectmeta.go` (which turns them
//! into field errors on `metadata.*`).
//!
//! The `Is*` functions return a list of messages, empty when valid. The
//! `validate_*` functions return [`StatusCause`]s ready for
//! [`Status::invalid`](crate::status::Status::invalid).

use crate::field_error::{go_quote, FieldError};
use crate::status::StatusCause;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// Maximum length of a DNS-1123 label (`DNS1123LabelMaxLength`).
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Maximum length of a DNS-1123 subdomain (`DNS1123SubdomainMaxLength`).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Maximum length of the name part of a qualified name.
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// Maximum length of a label value (`LabelValueMaxLength`).
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Maximum total size in bytes of all annotation keys and values (`TotalAnnotationSizeLimitB`, 256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT_B: usize = 256 * 1024;

/// Upstream `RegexError`: `<msg> (e.g. 'a',  or 'b', regex used for validation is '<fmt>')`.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    // Upstream writes each example as `'x', ` and joins them with ` or `,
    // which gives the familiar double space: `'MyName',  or 'my.name', `.
    let quoted: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        quoted.join(" or ")
    )
}

/// Upstream `MaxLenError`.
pub fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// Upstream `EmptyError`.
pub fn empty_error() -> String {
    "must be non-empty".to_string()
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Matches `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn matches_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            is_lower_alnum(f)
                && is_lower_alnum(l)
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

fn matches_dns_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns_label)
}

/// Matches `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn matches_qualified_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Upstream `IsDNS1123Label`: names of namespaces, services, ... (≤ 63 chars,
/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`).
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns_label(value) {
        if matches_dns_subdomain(value) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Upstream `IsDNS1035Label`: names of CRD plurals, singulars, short names
/// and versions (≤ 63 chars, `[a-z]([-a-z0-9]*[a-z0-9])?`).
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !(matches_dns_label(value) && value.as_bytes().first().is_some_and(u8::is_ascii_lowercase)) {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// Upstream `IsDNS1123Subdomain`: most object names (≤ 253 chars, dot-separated DNS-1123 labels).
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Upstream `IsQualifiedName`: label and annotation keys, `[prefix/]name` with
/// a DNS-1123 subdomain prefix and a ≤ 63 character name.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                for m in is_dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {m}"));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Upstream `IsValidLabelValue`: empty, or ≤ 63 characters matching the qualified-name pattern.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Upstream `IsValidPathSegmentName`: a name used in a URL path may not be
/// `.` or `..` and may not contain `/` or `%`.
pub fn is_valid_path_segment_name(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    let mut errs = Vec::new();
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    errs
}

/// Validates `metadata.name` of an object being created: DNS-1123 label when
/// `dns_label` (namespaces, services), else DNS-1123 subdomain. An empty name
/// gives `Required value: name or generateName is required` (the caller
/// fills in a generated name before calling this when `generateName` is set).
pub fn validate_object_meta_name(name: &str, dns_label: bool) -> Vec<StatusCause> {
    if name.is_empty() {
        return vec![
            FieldError::required("metadata.name", "name or generateName is required").into(),
        ];
    }
    let msgs = if dns_label {
        is_dns1123_label(name)
    } else {
        is_dns1123_subdomain(name)
    };
    msgs.into_iter()
        .map(|m| FieldError::invalid("metadata.name", name, m).into())
        .collect()
}

/// Validates `metadata.labels` (upstream `ValidateLabels`): keys are qualified
/// names, values valid label values; every error has field `metadata.labels`.
/// A non-string value is reported as invalid.
pub fn validate_labels(labels: &serde_json::Map<String, serde_json::Value>) -> Vec<StatusCause> {
    const FIELD: &str = "metadata.labels";
    let mut causes = Vec::new();
    for (k, v) in labels {
        for m in is_qualified_name(k) {
            causes.push(FieldError::invalid(FIELD, k, m).into());
        }
        match v.as_str() {
            Some(s) => {
                for m in is_valid_label_value(s) {
                    causes.push(FieldError::invalid(FIELD, s, m).into());
                }
            }
            None => causes.push(FieldError::invalid_json(FIELD, v, "must be a string").into()),
        }
    }
    causes
}

/// Validates `metadata.annotations` (upstream `ValidateAnnotations`): keys
/// are qualified names (case-insensitive), values strings, and the total size
/// of keys and values at most [`TOTAL_ANNOTATION_SIZE_LIMIT_B`] bytes.
pub fn validate_annotations(
    annotations: &serde_json::Map<String, serde_json::Value>,
) -> Vec<StatusCause> {
    const FIELD: &str = "metadata.annotations";
    let mut causes = Vec::new();
    let mut total = 0usize;
    for (k, v) in annotations {
        for m in is_qualified_name(&k.to_lowercase()) {
            causes.push(FieldError::invalid(FIELD, k, m).into());
        }
        total += k.len();
        match v.as_str() {
            Some(s) => total += s.len(),
            None => causes.push(FieldError::invalid_json(FIELD, v, "must be a string").into()),
        }
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B {
        causes.push(FieldError::too_long(FIELD, TOTAL_ANNOTATION_SIZE_LIMIT_B).into());
    }
    causes
}

/// Finalizer that orphans dependents (`metav1.FinalizerOrphanDependents`).
pub const FINALIZER_ORPHAN_DEPENDENTS: &str = "orphan";
/// Finalizer that deletes dependents first (`metav1.FinalizerDeleteDependents`).
pub const FINALIZER_DELETE_DEPENDENTS: &str = "foregroundDeletion";

/// Go's `%#v` of a `[]string`: `[]string{"a", "b"}`.
fn go_string_slice(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Validates `metadata.finalizers` (upstream `ValidateFinalizers` in
/// `apimachinery/pkg/api/validation/objectmeta.go`): every name is a
/// qualified name, and `orphan` and `foregroundDeletion` are not both set.
/// Non-string entries are refused by typed decoding before this runs and
/// are skipped here.
pub fn validate_finalizers(finalizers: &[serde_json::Value]) -> Vec<StatusCause> {
    const FIELD: &str = "metadata.finalizers";
    let names: Vec<&str> = finalizers.iter().filter_map(serde_json::Value::as_str).collect();
    let mut causes: Vec<StatusCause> = Vec::new();
    for name in &names {
        for m in is_qualified_name(name) {
            causes.push(FieldError::invalid(FIELD, name, m).into());
        }
    }
    if names.contains(&FINALIZER_ORPHAN_DEPENDENTS) && names.contains(&FINALIZER_DELETE_DEPENDENTS) {
        let detail = format!(
            "finalizer {FINALIZER_ORPHAN_DEPENDENTS} and {FINALIZER_DELETE_DEPENDENTS} cannot be both set"
        );
        causes.push(FieldError::invalid_rendered(FIELD, go_string_slice(&names), detail).into());
    }
    causes
}

/// Kinds that may not own objects (upstream `BannedOwners`): core `v1` `Event`.
const BANNED_OWNERS: &[(&str, &str, &str)] = &[("", "v1", "Event")];

/// Group and version of an `apiVersion` as upstream's
/// `schema.FromAPIVersionAndKind` reads it (`("", "")` when it does not parse).
fn group_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        None => ("", api_version),
        Some((g, v)) if !v.contains('/') => (g, v),
        Some(_) => ("", ""),
    }
}

/// Go's `%#v` of one `metav1.OwnerReference`. Go prints a set pointer as
/// its address, which differs on every request; rkube prints a fixed one.
fn go_owner_reference(r: &serde_json::Value) -> String {
    let s = |k: &str| go_quote(r.get(k).and_then(serde_json::Value::as_str).unwrap_or(""));
    let ptr = |k: &str| match r.get(k).and_then(serde_json::Value::as_bool) {
        Some(_) => "(*bool)(0xc000000000)".to_string(),
        None => "(*bool)(nil)".to_string(),
    };
    format!(
        "v1.OwnerReference{{APIVersion:{}, Kind:{}, Name:{}, UID:{}, Controller:{}, BlockOwnerDeletion:{}}}",
        s("apiVersion"),
        s("kind"),
        s("name"),
        s("uid"),
        ptr("controller"),
        ptr("blockOwnerDeletion")
    )
}

/// Validates `metadata.ownerReferences` (upstream `ValidateOwnerReferences`
/// in `apimachinery/pkg/api/validation/objectmeta.go`, with its messages and
/// its field paths, which carry no index): `apiVersion` with a version,
/// `kind`, `name` and `uid` set, no banned owner kind, and at most one
/// reference with `controller: true`.
pub fn validate_owner_references(refs: &[serde_json::Value]) -> Vec<StatusCause> {
    const FIELD: &str = "metadata.ownerReferences";
    let text = |r: &serde_json::Value, k: &str| r.get(k).and_then(serde_json::Value::as_str).unwrap_or("").to_string();
    let mut causes: Vec<StatusCause> = Vec::new();
    let mut first_controller: Option<String> = None;
    for r in refs {
        let (api_version, kind, name, uid) = (text(r, "apiVersion"), text(r, "kind"), text(r, "name"), text(r, "uid"));
        let (group, version) = group_version(&api_version);
        if version.is_empty() {
            causes.push(FieldError::invalid(&format!("{FIELD}.apiVersion"), &api_version, "version must not be empty").into());
        }
        if kind.is_empty() {
            causes.push(FieldError::invalid(&format!("{FIELD}.kind"), &kind, "must not be empty").into());
        }
        if name.is_empty() {
            causes.push(FieldError::invalid(&format!("{FIELD}.name"), &name, "must not be empty").into());
        }
        if uid.is_empty() {
            causes.push(FieldError::invalid(&format!("{FIELD}.uid"), &uid, "must not be empty").into());
        }
        if BANNED_OWNERS.contains(&(group, version, kind.as_str())) {
            let detail = format!("{group}/{version}, Kind={kind} is disallowed from being an owner");
            causes.push(FieldError::invalid_rendered(FIELD, go_owner_reference(r), detail).into());
        }
        if r.get("controller").and_then(serde_json::Value::as_bool) == Some(true) {
            let current = format!("{kind}/{name}");
            match &first_controller {
                Some(first) => {
                    let all: Vec<String> = refs.iter().map(go_owner_reference).collect();
                    let rendered = format!("[]v1.OwnerReference{{{}}}", all.join(", "));
                    let detail = format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    );
                    causes.push(FieldError::invalid_rendered(FIELD, rendered, detail).into());
                }
                None => first_controller = Some(current),
            }
        }
    }
    causes
}
