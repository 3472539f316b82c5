//! Validation of incoming objects.
//!
//! 1. Typed decoding: a built-in kind must decode into its `k8s-openapi` type
//!    (what upstream's codec does); a type error is 400 `BadRequest`
//!    `<Kind> in version "<v>" cannot be handled as a <Kind>: <error>`.
//! 2. Unknown fields (fields the typed decoder does not know) are dropped, and
//!    (with repeated keys of a JSON body, [`crate::strict`]) reported per `fieldValidation` (`Strict` → 400 `<Kind> in version "v1"
//!    cannot be handled as a <Kind>: strict decoding error: unknown field "spec.foo"`, `Warn` (default) → a `Warning` header,
//!    `Ignore` → nothing), as upstream's `fieldValidation` does.
//! 3. Field validation (422 `Invalid` with causes): `metadata.name` (DNS-1123
//!    label for namespaces and services, subdomain otherwise), labels,
//!    annotations, ownerReferences, finalizers, the ConfigMap / Secret
//!    payload size ([`crate::config_data`]), and the essential required fields of pods, services and
//!    deployments (`pkg/apis/core/validation`, `pkg/apis/apps/validation`).

use rkube_api::registry::ResourceInfo;
use rkube_api::status::StatusCause;
use rkube_api::validation;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// `?fieldValidation=` (upstream `Ignore`, `Warn`, `Strict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop them and warn (the default).
    Warn,
    /// Reject the request.
    Strict,
}

impl FieldValidation {
    /// Parses the query value (empty → `Warn`). 400 on other values.
    pub fn parse(v: Option<&str>) -> ApiResult<Self> {
        match v {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}. Supported values are: Ignore, Warn, Strict"
            ))),
        }
    }
}

/// Removes from `input` the fields that `typed` (the same object decoded as
/// its kind and encoded again) lacks, recording their paths below `path` in
/// `unknown` in document order (an unknown field set to null goes silently).
/// A path is only built for an unknown field or a nested object or list, so
/// a large map of strings costs no allocation per key.
fn prune_unknown(input: &mut Value, typed: &Value, path: &str, unknown: &mut Vec<String>) {
    let nested = |v: &Value| matches!(v, Value::Object(_) | Value::Array(_));
    match (input, typed) {
        (Value::Object(m), Value::Object(t)) => m.retain(|k, v| {
            let child_path = || if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            match t.get(k) {
                Some(tv) => {
                    if nested(v) {
                        prune_unknown(v, tv, &child_path(), unknown);
                    }
                    true
                }
                None => {
                    if !v.is_null() {
                        unknown.push(child_path());
                    }
                    false
                }
            }
        }),
        (Value::Array(items), Value::Array(titems)) => {
            for (i, (v, tv)) in items.iter_mut().zip(titems.iter()).enumerate() {
                if nested(v) {
                    prune_unknown(v, tv, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// Maps with at least this many entries, all strings, skip the typed
/// round trip ([`take_string_maps`]).
const PROBED_MAP_ENTRIES: usize = 64;

/// The probe entry that stands in for a large map of strings: no struct
/// field has this name, and a value type that reads a string's content
/// (base64 bytes) refuses this value.
const PROBE: (&str, &str) = ("\u{1}rkube-probe", "!");

/// One step of a path into a JSON value.
#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// A value taken out of an object before the typed round trip, and what
/// stands in for it there.
struct Taken {
    path: Vec<Step>,
    value: Value,
    stand_in: Value,
}

/// Replaces every map of at least [`PROBED_MAP_ENTRIES`] string values in
/// `v` (but in lists whose first item is a scalar) by a one-entry map
/// holding [`PROBE`], collecting the paths and the
/// maps taken. The typed round trip then decodes the probe instead of the
/// map: when the probe comes out of it ([`stand_ins_kept`]), the field is a
/// map whose values may be any string, so every entry of the real map would
/// have passed too, and decoding, encoding and comparing a large
/// `data`, `labels` or `annotations` map entry by entry is saved.
fn take_string_maps(v: &mut Value, path: &mut Vec<Step>, out: &mut Vec<Taken>) {
    let nested = |v: &Value| matches!(v, Value::Object(_) | Value::Array(_));
    match v {
        Value::Object(m) if m.len() >= PROBED_MAP_ENTRIES && m.values().all(Value::is_string) => {
            let probe = Value::Object(serde_json::Map::from_iter([(PROBE.0.to_string(), Value::String(PROBE.1.to_string()))]));
            let taken = std::mem::replace(v, probe.clone());
            out.push(Taken { path: path.clone(), value: taken, stand_in: probe });
        }
        Value::Object(m) => {
            for (k, child) in m.iter_mut().filter(|(_, c)| nested(c)) {
                path.push(Step::Key(k.clone()));
                take_string_maps(child, path, out);
                path.pop();
            }
        }
        // A list whose first item is a scalar is taken as a list of scalars
        // and not scanned: scanning a list of 1.5 million numbers (a 3 MiB
        // body) took 7.9 % of the CPU of refusing it in a `perf` profile
        // (refusing it takes 0.86 of its former CPU without). A string map in
        // a later item of a list that mixes both (only free-form JSON can) is
        // then round-tripped in full, as a smaller map is: same result.
        Value::Array(items) if items.first().is_some_and(|first| !nested(first)) => {}
        Value::Array(items) => {
            for (i, child) in items.iter_mut().enumerate().filter(|(_, c)| nested(c)) {
                path.push(Step::Index(i));
                take_string_maps(child, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Replaces the `fieldsV1` of every `metadata.managedFields` entry that is a
/// non-empty object by an empty one, collecting what was taken. `FieldsV1`
/// holds any JSON value as it is, so when the empty object comes out of the
/// round trip where it went in ([`stand_ins_kept`]) the real one would have
/// too; the managedFields of a large map (an entry per key) are then neither
/// decoded, encoded nor compared.
fn take_fields_v1(v: &mut Value, out: &mut Vec<Taken>) {
    let Some(Value::Array(entries)) = v.pointer_mut("/metadata/managedFields") else { return };
    for (i, entry) in entries.iter_mut().enumerate() {
        let Some(fields) = entry.get_mut("fieldsV1") else { continue };
        if fields.as_object().is_some_and(|m| !m.is_empty()) {
            let stand_in = Value::Object(serde_json::Map::new());
            let path = ["metadata", "managedFields"].map(|k| Step::Key(k.to_string())).into_iter();
            let path = path.chain([Step::Index(i), Step::Key("fieldsV1".to_string())]).collect();
            out.push(Taken { path, value: std::mem::replace(fields, stand_in.clone()), stand_in });
        }
    }
}

/// The value at `path` in `v`.
fn value_at_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, step| match step {
        Step::Key(k) => v.get_mut(k.as_str()),
        Step::Index(i) => v.get_mut(*i),
    })
}

/// Whether the typed round trip kept every stand-in as it went in: a probe
/// was decoded into a map of strings (a struct drops the probe's unknown
/// name; a type that reads the string's content fails the round trip
/// instead), an empty `fieldsV1` into `FieldsV1`.
fn stand_ins_kept(typed: &Value, taken: &[Taken]) -> bool {
    taken.iter().all(|t| {
        let at = t.path.iter().try_fold(typed, |v, step| match step {
            Step::Key(k) => v.get(k.as_str()),
            Step::Index(i) => v.get(*i),
        });
        at == Some(&t.stand_in)
    })
}

/// Puts the values taken back where their stand-ins are.
fn put_back(v: &mut Value, taken: Vec<Taken>) {
    for t in taken {
        if let Some(slot) = value_at_mut(v, &t.path) {
            *slot = t.value;
        }
    }
}

/// Decodes `obj` as its built-in kind, drops unknown fields and applies
/// `mode`. Returns the warnings to send (`Warn` mode).
pub fn check_typed(info: &ResourceInfo, obj: &mut Value, mode: FieldValidation) -> ApiResult<Vec<String>> {
    check_typed_body(info, obj, mode, None)
}

/// [`check_typed`] for an object decoded from a JSON body whose keys were
/// scanned ([`crate::strict::KeyScan`]): repeated keys are reported with the
/// unknown fields, in document order, as upstream's strict decoder does.
pub fn check_typed_body(
    info: &ResourceInfo,
    obj: &mut Value,
    mode: FieldValidation,
    keys: Option<&crate::strict::KeyScan>,
) -> ApiResult<Vec<String>> {
    let kind = info.kind;
    let mut unknown = Vec::new();
    if let Some(typed_kind) = info.typed {
        let type_error =
            |e: String| ApiError::bad_request(format!("{kind} in version \"{}\" cannot be handled as a {kind}: {e}", info.version));
        let mut taken = Vec::new();
        take_fields_v1(obj, &mut taken);
        take_string_maps(obj, &mut Vec::new(), &mut taken);
        let probed = match taken.is_empty() {
            true => None,
            false => (typed_kind.roundtrip)(obj).ok().filter(|typed| stand_ins_kept(typed, &taken)),
        };
        let typed = match probed {
            Some(typed) => typed,
            None => {
                put_back(obj, std::mem::take(&mut taken));
                (typed_kind.roundtrip)(obj).map_err(type_error)?
            }
        };
        prune_unknown(obj, &typed, "", &mut unknown);
        put_back(obj, taken);
    }
    if let Some(schema) = info.custom.and_then(|c| c.schema.as_ref()) {
        // Custom resources: pruning, then defaulting, on decode (upstream's
        // `schemaCoercingDecoder` and `pruning`/`defaulting`); their
        // `metadata` is an ObjectMeta like any object's.
        unknown = rkube_api::apiextensions::schema::prune(obj, schema);
        rkube_api::apiextensions::schema::apply_defaults(obj, schema);
        if let Some(meta) = obj.get_mut("metadata") {
            type ObjectMeta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
            let typed = serde_json::from_value::<ObjectMeta>(meta.clone())
                .and_then(serde_json::to_value)
                .map_err(|e| ApiError::bad_request(format!("{kind} in version \"{}\" cannot be handled as a {kind}: {e}", info.version)))?;
            let mut in_meta = Vec::new();
            prune_unknown(meta, &typed, "metadata", &mut in_meta);
            unknown.splice(0..0, in_meta);
        }
    }
    let msgs: Vec<String> = match keys {
        Some(keys) if keys.has_duplicates() => keys.strict_errors(&unknown),
        _ => unknown.iter().map(|p| format!("unknown field \"{p}\"")).collect(),
    };
    if msgs.is_empty() {
        return Ok(Vec::new());
    }
    match mode {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {}",
            info.version,
            msgs.join(", ")
        ))),
        FieldValidation::Warn => Ok(msgs),
        FieldValidation::Ignore => Ok(Vec::new()),
    }
}

/// Field validation of `obj` (`old` on update). Returns the 422 causes.
pub fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<StatusCause> {
    validate_with(info, None, obj, old)
}

/// [`validate`], with `strategy_validate` (a subresource's
/// [`rkube_api::registry::SubresourceInfo::validate_update`]) in place of the
/// row's strategy validation when given; the ObjectMeta checks stay.
pub fn validate_with(
    info: &ResourceInfo,
    strategy_validate: Option<rkube_api::registry::ValidateFn>,
    obj: &Value,
    old: Option<&Value>,
) -> Vec<StatusCause> {
    let mut causes: Vec<StatusCause> = Vec::new();
    let name = crate::object::name(obj);
    if old.is_none() {
        match info.strategy.validate_name.filter(|_| !name.is_empty()) {
            Some(rule) => causes.extend(
                rule(name, obj).into_iter().map(|m| rkube_api::field_error::FieldError::invalid("metadata.name", name, m).into()),
            ),
            None => causes.extend(validation::validate_object_meta_name(name, info.strategy.name_is_label)),
        }
    }
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        causes.extend(validation::validate_labels(labels));
    }
    if let Some(ann) = obj.pointer("/metadata/annotations").and_then(Value::as_object) {
        causes.extend(validation::validate_annotations(ann));
    }
    if let Some(refs) = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array) {
        causes.extend(validation::validate_owner_references(refs));
    }
    if let Some(finalizers) = obj.pointer("/metadata/finalizers").and_then(Value::as_array) {
        causes.extend(validation::validate_finalizers(finalizers));
    }
    let mut errs = match strategy_validate {
        Some(f) => {
            let mut errs = Vec::new();
            f(obj, old, &mut errs);
            errs
        }
        None => info.strategy.validate_object(obj, old),
    };
    if let Some(schema) = info.custom.and_then(|c| c.schema.as_ref()) {
        errs.extend(rkube_api::apiextensions::schema::validate(obj, schema));
        errs.extend(rkube_api::apiextensions::cel::validate(obj, old, schema));
    }
    errs.extend(crate::config_data::validate_size(info.kind, obj));
    causes.extend(errs.into_iter().map(StatusCause::from));
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_api::registry;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_pruned_and_reported() {
        let info = registry::lookup("", "v1", "configmaps").unwrap();
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "bogus": 1}, "data": {"k": "v"}, "extra": true});
        let warnings = check_typed(info, &mut cm, FieldValidation::Warn).unwrap();
        assert_eq!(warnings, vec!["unknown field \"metadata.bogus\"", "unknown field \"extra\""]);
        assert!(cm.get("extra").is_none());
        let mut cm2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "spec": 1});
        let err = check_typed(info, &mut cm2, FieldValidation::Strict).unwrap_err();
        assert_eq!(err.0.message, "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"spec\"");
    }

    /// A map of `n` string entries `k<i>: <value>`.
    fn string_map(n: usize, value: &str) -> Value {
        Value::Object((0..n).map(|i| (format!("k{i}"), json!(value))).collect())
    }

    #[test]
    fn string_maps_are_taken_from_lists_of_objects_only() {
        let map = string_map(PROBED_MAP_ENTRIES, "v");
        let taken_count = |mut v: Value| {
            let mut taken = Vec::new();
            take_string_maps(&mut v, &mut Vec::new(), &mut taken);
            taken.len()
        };
        assert_eq!(taken_count(json!({"items": [map.clone(), 0]})), 1);
        assert_eq!(taken_count(json!({"items": [[map.clone()]]})), 1);
        // A list that starts with a scalar is not scanned.
        assert_eq!(taken_count(json!({"items": [0, map.clone()]})), 0);
        assert_eq!(taken_count(json!({"items": ["a", [map]]})), 0);
    }

    #[test]
    fn a_list_of_numbers_where_strings_go_is_a_type_error() {
        let info = registry::lookup("", "v1", "configmaps").unwrap();
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"a": vec![0; 1000]}});
        let err = check_typed(info, &mut cm, FieldValidation::Strict).unwrap_err();
        assert_eq!(err.0.code, 400);
        assert!(err.0.message.starts_with("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: invalid type: sequence"), "{}", err.0.message);
    }

    #[test]
    fn large_string_maps_skip_the_round_trip_and_come_back_whole_and_in_order() {
        let info = registry::lookup("", "v1", "configmaps").unwrap();
        let data = string_map(PROBED_MAP_ENTRIES * 2, "v");
        let labels = string_map(PROBED_MAP_ENTRIES, "x");
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": labels, "bogus": 1},
            "data": data, "extra": true});
        let warnings = check_typed(info, &mut cm, FieldValidation::Warn).unwrap();
        assert_eq!(warnings, vec!["unknown field \"metadata.bogus\"", "unknown field \"extra\""]);
        assert_eq!(cm["data"], data);
        assert_eq!(cm["metadata"]["labels"], labels);
        let keys: Vec<&String> = cm.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["apiVersion", "kind", "metadata", "data"]);
    }

    #[test]
    fn a_large_map_of_strings_that_is_a_struct_still_has_its_unknown_fields_reported() {
        let info = registry::lookup("apps", "v1", "deployments").unwrap();
        let mut spec = string_map(PROBED_MAP_ENTRIES, "x");
        spec["minReadySeconds"] = json!("5");
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}, "spec": spec});
        let err = check_typed(info, &mut d, FieldValidation::Strict).unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(err.0.message.contains("invalid type: string \"5\""), "{}", err.0.message);
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}, "spec": string_map(PROBED_MAP_ENTRIES, "x")});
        let warnings = check_typed(info, &mut d, FieldValidation::Warn).unwrap();
        assert_eq!(warnings.len(), PROBED_MAP_ENTRIES);
        assert_eq!(warnings[0], "unknown field \"spec.k0\"");
        assert_eq!(d["spec"], json!({}));
    }

    #[test]
    fn a_large_map_whose_values_are_read_is_still_checked_entry_by_entry() {
        // Secret data values are base64: the probe fails the round trip, so
        // the whole map is decoded and its bad entry reported.
        let info = registry::lookup("", "v1", "secrets").unwrap();
        let mut data = string_map(PROBED_MAP_ENTRIES, "aGk=");
        data["bad"] = json!("not base64!");
        let mut secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}, "data": data});
        let err = check_typed(info, &mut secret, FieldValidation::Warn).unwrap_err();
        assert_eq!(err.code(), 400);
        let mut ok = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}, "data": string_map(PROBED_MAP_ENTRIES, "aGk=")});
        assert_eq!(check_typed(info, &mut ok, FieldValidation::Warn).unwrap(), Vec::<String>::new());
        assert_eq!(ok["data"], string_map(PROBED_MAP_ENTRIES, "aGk="));
    }

    #[test]
    fn managed_fields_skip_the_round_trip_and_come_back_whole() {
        let info = registry::lookup("", "v1", "configmaps").unwrap();
        let fields = json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {".": {}, "f:x": {}}}});
        let entry = json!({"manager": "m", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
            "fieldsV1": fields, "bogus": 1});
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "1"},
            "managedFields": [entry, {"manager": "n", "fieldsV1": {}}, {"manager": "o", "fieldsV1": null}]}, "data": {"a": "1", "b": "2"}});
        let warnings = check_typed(info, &mut cm, FieldValidation::Warn).unwrap();
        assert_eq!(warnings, vec!["unknown field \"metadata.managedFields[0].bogus\""]);
        assert_eq!(cm["metadata"]["managedFields"][0]["fieldsV1"], fields);
        assert_eq!(cm["metadata"]["managedFields"][1], json!({"manager": "n", "fieldsV1": {}}));
        assert_eq!(cm["metadata"]["managedFields"][2], json!({"manager": "o"}));
        // An entry the typed decoder refuses is refused as before.
        let mut bad = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a",
            "managedFields": [{"manager": 5, "fieldsV1": fields}]}});
        let err = check_typed(info, &mut bad, FieldValidation::Warn).unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(err.0.message.contains("invalid type: integer `5`, expected a string"), "{}", err.0.message);
    }

    #[test]
    fn type_errors_are_bad_requests() {
        let info = registry::lookup("", "v1", "pods").unwrap();
        let mut pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": "no"}});
        let err = check_typed(info, &mut pod, FieldValidation::Warn).unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(err.0.message.starts_with("Pod in version \"v1\" cannot be handled as a Pod:"), "{}", err.0.message);
    }

    #[test]
    fn pods_need_containers_with_images() {
        let info = registry::lookup("", "v1", "pods").unwrap();
        let pod = json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}});
        let causes = validate(info, &pod, None);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.containers[0].image");
        assert_eq!(causes[0].reason, "FieldValueRequired");
    }
}
