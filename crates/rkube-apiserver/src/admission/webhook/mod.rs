//! Admission webhooks: MutatingWebhookConfiguration and
//! ValidatingWebhookConfiguration (admissionregistration.k8s.io/v1) called
//! on writes, as upstream's `MutatingAdmissionWebhook` and
//! `ValidatingAdmissionWebhook` plugins
//! (`staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/{generic,mutating,validating}`).
//!
//! - Configurations are read from the watch cache at resourceVersion 0 on
//!   every admission, so a new or changed configuration applies as soon as
//!   its watch event reached the cache (milliseconds).
//! - Mutating webhooks run after the built-in mutating plugins
//!   (ServiceAccount) and before object validation, sorted by configuration
//!   name and then in their order; their JSON Patch (`patchType: JSONPatch`)
//!   is applied to the object. A webhook with `reinvocationPolicy: IfNeeded`
//!   is called once more when a later webhook changed the object.
//! - Validating webhooks run after validation, all at once; the first
//!   denial or failure (in configuration order) is the answer.
//! - A denial is upstream's `ToStatusErr`: the webhook's `status` (code at
//!   least 400, 400 by default) with message `admission webhook "<name>"
//!   denied the request: <message>` (or `... without explanation`).
//! - A webhook that cannot be called, times out (`timeoutSeconds`, default
//!   10) or answers badly is skipped with `failurePolicy: Ignore`; with
//!   `Fail` (the default) the request fails with 500 `Internal error
//!   occurred: failed calling webhook "<name>": <why>`.
//! - A dry-run request reaching a webhook whose `sideEffects` is neither
//!   `None` nor `NoneOnDryRun` is refused: 400 `admission webhook "<name>"
//!   does not support dry run`.
//! - `response.warnings` are returned to the client as `Warning` headers.
//!
//! - Audit annotations as upstream: the webhooks' `auditAnnotations` as
//!   `<webhook>/<key>`, `mutation.webhook.admission.k8s.io/round_<r>_index_<i>`
//!   and `failed-open.{mutation,validating}.webhook.admission.k8s.io/...`.
//!
//! - DELETE (and each object of a DELETE collection) goes to the validating
//!   webhooks with the stored object as `oldObject`, after the
//!   preconditions, as upstream's `deleteValidation`.
//!
//! - `matchConditions`: CEL over `object`, `oldObject` and `request`
//!   ([`rkube_api::apiextensions::cel::evaluate_bool`]).
//!
//! Not done: `matchPolicy: Equivalent` across versions (rules match the
//! request's own group/version), the Request-level
//! `patch.webhook.admission.k8s.io/...` annotation, mutating webhooks on
//! DELETE, warnings of DELETE admission, and CONNECT.

pub mod call;
pub mod matching;

use rkube_api::registry;
use rkube_api::status::{Status, StatusDetails};
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::filters::authn::UserInfo;
use crate::handlers::Ctx;
use crate::state::ApiState;

/// What one admission request is about (upstream `admission.Attributes`).
#[derive(Debug, Clone)]
pub struct Attributes {
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'static str,
    /// The resource's API group (`""` for core).
    pub group: String,
    /// The resource's version.
    pub version: String,
    /// The object's kind.
    pub kind: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource, or `""`.
    pub subresource: String,
    /// True for namespaced resources.
    pub namespaced: bool,
    /// The object's name (may be empty before `generateName` runs).
    pub name: String,
    /// The request's namespace, or `""`.
    pub namespace: String,
    /// The new object (CREATE, UPDATE).
    pub object: Option<Value>,
    /// The current object (UPDATE, DELETE), shared with the handler rather
    /// than copied: a large object costs no copy unless a webhook or policy
    /// reads it.
    pub old_object: Option<std::sync::Arc<Value>>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The request's options object (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
    pub options: Value,
    /// Who sent the request.
    pub user: Option<UserInfo>,
}

impl Attributes {
    /// The attributes of a write through `ctx` of `object` (over `old`).
    /// `object` itself is not copied in: [`mutate`] sets it for the webhooks
    /// it calls, and the caller sets it before [`validate`], once the object
    /// is final (a large object is not copied for nothing).
    pub fn for_write(
        ctx: &Ctx,
        operation: &'static str,
        object: &Value,
        old: Option<std::sync::Arc<Value>>,
    ) -> ApiResult<Self> {
        let info = ctx.ri.info;
        let dry_run = ctx.dry_run()?;
        let options_kind = match (operation, ctx.ri.verb) {
            ("CREATE", _) => "CreateOptions",
            ("DELETE", _) => "DeleteOptions",
            (_, crate::request::Verb::Patch) => "PatchOptions",
            _ => "UpdateOptions",
        };
        let mut options = json!({"kind": options_kind, "apiVersion": "meta.k8s.io/v1"});
        if let Some(m) = options.as_object_mut() {
            if dry_run {
                m.insert("dryRun".into(), json!(["All"]));
            }
            if let Some(fm) = ctx.q("fieldManager").filter(|f| !f.is_empty()) {
                m.insert("fieldManager".into(), json!(fm));
            }
        }
        Ok(Attributes {
            operation,
            group: info.group.to_string(),
            version: info.version.to_string(),
            kind: info.kind.to_string(),
            resource: info.resource.to_string(),
            subresource: ctx.ri.subresource.clone().unwrap_or_default(),
            namespaced: info.namespaced,
            name: crate::object::name(object).to_string(),
            namespace: ctx.namespace().to_string(),
            object: None,
            old_object: old,
            dry_run,
            options,
            user: ctx.user.clone(),
        })
    }
}

impl Attributes {
    /// The attributes of deleting `old` (`name` in `namespace`) through `ctx`:
    /// no object, the stored one as `oldObject` (shared, not copied).
    pub fn for_delete(ctx: &Ctx, namespace: &str, name: &str, old: &std::sync::Arc<Value>) -> ApiResult<Self> {
        let mut a = Attributes::for_write(ctx, "DELETE", old, Some(old.clone()))?;
        a.name = name.to_string();
        a.namespace = namespace.to_string();
        Ok(a)
    }
}

/// One webhook of a configuration.
struct Hook {
    webhook: Value,
    name: String,
    configuration: String,
}

/// The webhooks of every configuration of `resource`
/// (`mutatingwebhookconfigurations` or `validatingwebhookconfigurations`),
/// sorted by configuration name, then in order; read from the watch cache.
async fn hooks(st: &ApiState, resource: &str) -> ApiResult<Vec<Hook>> {
    let mut out = Vec::new();
    for (configuration, config) in configurations(st, resource).await? {
        for w in config.get("webhooks").and_then(Value::as_array).cloned().unwrap_or_default() {
            let name = w.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            out.push(Hook { webhook: w, name, configuration: configuration.clone() });
        }
    }
    Ok(out)
}

/// Every object of an admissionregistration.k8s.io/v1 `resource` (webhook
/// configurations, policies, bindings) from the watch cache, as `(name,
/// object)` sorted by name: the order upstream applies them in.
pub(crate) async fn configurations(st: &ApiState, resource: &str) -> ApiResult<Vec<(String, Value)>> {
    crate::admission::cached_objects(st, "admissionregistration.k8s.io", "v1", resource).await
}

/// The labels `namespaceSelector` is matched against: the request
/// namespace's, the Namespace object's own for namespaces, `None` for other
/// cluster-scoped resources. A namespace that cannot be read has no labels.
async fn namespace_labels(st: &ApiState, a: &Attributes) -> Option<Map<String, Value>> {
    namespace_of(st, a).await.1
}

/// The request's Namespace object (`null` for cluster-scoped requests and
/// requests on namespaces themselves: policies' `namespaceObject`) and the
/// labels `namespaceSelector`s see (see [`namespace_labels`]).
pub(crate) async fn namespace_of(st: &ApiState, a: &Attributes) -> (Value, Option<Map<String, Value>>) {
    let labels = |o: Option<&Value>| o.and_then(|o| o.pointer("/metadata/labels")).and_then(Value::as_object).cloned();
    if a.group.is_empty() && a.resource == "namespaces" {
        return (Value::Null, Some(labels(a.object.as_ref()).or_else(|| labels(a.old_object.as_deref())).unwrap_or_default()));
    }
    if !a.namespaced {
        return (Value::Null, None);
    }
    let Some(info) = registry::lookup("", "v1", "namespaces") else { return (Value::Null, Some(Map::new())) };
    let found = st.cache.get(info, "", &a.namespace, Some("0")).await.ok().flatten();
    let ns = found.and_then(|f| serde_json::from_slice::<Value>(&f.json).ok()).unwrap_or(Value::Null);
    let ns_labels = labels(Some(&ns)).unwrap_or_default();
    (ns, Some(ns_labels))
}

/// Upstream's `ToStatusErr`: the denial of webhook `name` with its `status`.
pub fn denied(name: &str, status: Option<&Value>) -> ApiError {
    let by = format!("admission webhook {name:?} denied the request");
    let s = status.cloned().unwrap_or(Value::Null);
    let text = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (message, reason) = (text("message"), text("reason"));
    let code = s.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()).filter(|c| *c >= 400).unwrap_or(400);
    let full = if !message.is_empty() {
        format!("{by}: {message}")
    } else if !reason.is_empty() {
        format!("{by}: {reason}")
    } else {
        format!("{by} without explanation")
    };
    let mut st = Status::new(code, reason, full);
    if let Some(d) = s.get("details").and_then(|d| serde_json::from_value::<StatusDetails>(d.clone()).ok()) {
        st = st.with_details(d);
    }
    st.into()
}

/// 500 for a webhook that could not be called (upstream `ErrCallingWebhook`
/// through `NewInternalError`).
fn call_failed(name: &str, why: &call::CallError) -> ApiError {
    ApiError::internal(format!("failed calling webhook {name:?}: {}", why.0))
}

/// Whether webhook `w` (named `name`) applies to `a`, refusing dry runs it cannot take.
/// Warnings about conditions that could not be evaluated go to `warnings`.
fn applies(
    w: &Value,
    name: &str,
    a: &Attributes,
    ns_labels: Option<&Map<String, Value>>,
    warnings: &mut Vec<String>,
) -> ApiResult<bool> {
    if !matching::rules_match(w, a)
        || !matching::namespace_selector_matches(w, ns_labels)
        || !matching::object_selector_matches(w, a)
        || !match_conditions_hold(w, name, a, warnings)?
    {
        return Ok(false);
    }
    let side_effects = w.get("sideEffects").and_then(Value::as_str).unwrap_or("");
    if a.dry_run && side_effects != "None" && side_effects != "NoneOnDryRun" {
        return Err(ApiError::bad_request(format!("admission webhook {name:?} does not support dry run")));
    }
    Ok(true)
}

/// The webhook's `matchConditions` (CEL over `object`, `oldObject` and
/// `request`, upstream's `matchconditions.Matcher`): all must hold for it to
/// be called. One giving `false` skips the webhook; one that fails to
/// evaluate applies the `failurePolicy` (Fail: 500 naming the condition;
/// Ignore: skipped). A condition this CEL environment cannot evaluate
/// (`authorizer`, `format`, `semver`) counts as holding, and the
/// client is told so with a warning.
fn match_conditions_hold(w: &Value, name: &str, a: &Attributes, warnings: &mut Vec<String>) -> ApiResult<bool> {
    use rkube_api::apiextensions::cel::{evaluate_bool, Outcome};
    let Some(conditions) = w.get("matchConditions").and_then(Value::as_array).filter(|c| !c.is_empty()) else {
        return Ok(true);
    };
    let review = call::review(a, "");
    let request = review.get("request").cloned().unwrap_or(Value::Null);
    let object = a.object.clone().unwrap_or(Value::Null);
    let old_object = a.old_object.as_deref().cloned().unwrap_or(Value::Null);
    let vars = [("request", &request), ("object", &object), ("oldObject", &old_object)];
    for c in conditions {
        let cname = c.get("name").and_then(Value::as_str).unwrap_or("");
        let expr = c.get("expression").and_then(Value::as_str).unwrap_or("");
        match evaluate_bool(expr, &vars) {
            Outcome::Bool(true) => {}
            Outcome::Bool(false) => return Ok(false),
            Outcome::Unsupported => {
                warnings.push(format!(
                    "webhook {name} matchCondition {cname:?} uses CEL rkube cannot evaluate; it was treated as matching"
                ));
            }
            Outcome::Error(e) if fails_open(w) => {
                tracing::warn!(webhook = %name, condition = %cname, error = %e, "matchCondition failed, failing open");
                return Ok(false);
            }
            Outcome::Error(e) => {
                return Err(call_failed(name, &call::CallError(format!("failed to evaluate matchCondition {cname:?}: {e}"))))
            }
        }
    }
    Ok(true)
}

fn fails_open(w: &Value) -> bool {
    w.get("failurePolicy").and_then(Value::as_str) == Some("Ignore")
}

/// Where one call sits: the webhook's index among all webhooks of its kind,
/// the round (1: reinvocation), and whether it is a mutating webhook.
#[derive(Clone, Copy)]
struct Slot {
    index: usize,
    round: u8,
    mutating: bool,
}

/// Calls one webhook; `Ok(None)`: skipped after a failure under `Ignore`
/// (recorded as upstream's `failed-open.*` audit annotation). The webhook's
/// `auditAnnotations` are logged as `<webhook name>/<key>`.
async fn invoke(st: &ApiState, h: &Hook, a: &Attributes, slot: Slot) -> ApiResult<Option<call::Answer>> {
    let uid = uuid::Uuid::new_v4().to_string();
    let body = call::review(a, &uid);
    match call::call(st, &h.webhook, &body, &uid, slot.mutating).await {
        Ok(answer) => {
            for (k, v) in &answer.audit_annotations {
                crate::filters::audit::annotate(&format!("{}/{k}", h.name), v);
            }
            if answer.allowed {
                Ok(Some(answer))
            } else {
                Err(denied(&h.name, answer.status.as_ref()))
            }
        }
        Err(e) if fails_open(&h.webhook) => {
            tracing::warn!(webhook = %h.name, error = %e.0, "failed calling webhook, failing open");
            fail_open_annotation(h, slot);
            Ok(None)
        }
        Err(e) => Err(call_failed(&h.name, &e)),
    }
}

/// Upstream's `failed-open.{mutation,validating}.webhook.admission.k8s.io/round_<r>_index_<i>`.
fn fail_open_annotation(h: &Hook, slot: Slot) {
    let kind = if slot.mutating { "mutation" } else { "validating" };
    let key = format!("failed-open.{kind}.webhook.admission.k8s.io/round_{}_index_{}", slot.round, slot.index);
    crate::filters::audit::annotate(&key, &h.name);
}

/// Whether any mutating webhook is configured; when none is, [`mutate`]
/// changes nothing. Reads the configurations without copying their hooks.
pub async fn any_mutating(st: &ApiState) -> ApiResult<bool> {
    any_webhook(st, "mutatingwebhookconfigurations").await
}

/// Whether [`validate`] may read the object at all: a validating webhook
/// or a ValidatingAdmissionPolicy binding is configured.
pub async fn any_validating(st: &ApiState) -> ApiResult<bool> {
    Ok(any_webhook(st, "validatingwebhookconfigurations").await?
        || !configurations(st, "validatingadmissionpolicybindings").await?.is_empty())
}

/// Whether a configuration of `resource` holds a webhook.
async fn any_webhook(st: &ApiState, resource: &str) -> ApiResult<bool> {
    let configurations = configurations(st, resource).await?;
    Ok(configurations.iter().any(|(_, c)| c.get("webhooks").and_then(Value::as_array).is_some_and(|w| !w.is_empty())))
}

/// Runs the mutating webhooks on `obj` (the object `a` describes); returns
/// their warnings. `redefault` is applied after each change (upstream
/// decodes the patched object again, which defaults it).
pub async fn mutate(st: &ApiState, a: &mut Attributes, obj: &mut Value, redefault: &(dyn Fn(&mut Value) + Sync)) -> ApiResult<Vec<String>> {
    let all = hooks(st, "mutatingwebhookconfigurations").await?;
    if all.is_empty() {
        return Ok(Vec::new());
    }
    a.object = Some(obj.clone());
    let ns_labels = namespace_labels(st, a).await;
    let mut warnings = Vec::new();
    // Which webhooks ran in the first round, and where the object last changed.
    let mut ran = vec![false; all.len()];
    let mut last_change: Option<usize> = None;
    for (i, h) in all.iter().enumerate() {
        a.object = Some(obj.clone());
        if !applies(&h.webhook, &h.name, a, ns_labels.as_ref(), &mut warnings)? {
            continue;
        }
        ran[i] = true;
        if apply_answer(st, h, a, obj, redefault, &mut warnings, Slot { index: i, round: 0, mutating: true }).await? {
            last_change = Some(i);
        }
    }
    // reinvocationPolicy IfNeeded: once more when the object changed after the webhook ran.
    let Some(changed_at) = last_change else { return Ok(warnings) };
    let mut round_two_changed = false;
    for (i, h) in all.iter().enumerate() {
        let if_needed = h.webhook.get("reinvocationPolicy").and_then(Value::as_str) == Some("IfNeeded");
        if !ran[i] || !if_needed || (changed_at <= i && !round_two_changed) {
            continue;
        }
        a.object = Some(obj.clone());
        if apply_answer(st, h, a, obj, redefault, &mut warnings, Slot { index: i, round: 1, mutating: true }).await? {
            round_two_changed = true;
        }
    }
    a.object = Some(obj.clone());
    Ok(warnings)
}

/// Calls `h` and applies its patch to `obj`; true when the object changed.
/// Logs upstream's `mutation.webhook.admission.k8s.io/round_<r>_index_<i>`
/// audit annotation (`{"configuration","webhook","mutated"}`) for the call.
async fn apply_answer(
    st: &ApiState,
    h: &Hook,
    a: &Attributes,
    obj: &mut Value,
    redefault: &(dyn Fn(&mut Value) + Sync),
    warnings: &mut Vec<String>,
    slot: Slot,
) -> ApiResult<bool> {
    let changed = patch_from(st, h, a, obj, redefault, warnings, slot).await;
    let mutated = matches!(changed, Ok(true));
    let value = json!({"configuration": h.configuration, "webhook": h.name, "mutated": mutated});
    let key = format!("mutation.webhook.admission.k8s.io/round_{}_index_{}", slot.round, slot.index);
    crate::filters::audit::annotate(&key, &value.to_string());
    changed
}

async fn patch_from(
    st: &ApiState,
    h: &Hook,
    a: &Attributes,
    obj: &mut Value,
    redefault: &(dyn Fn(&mut Value) + Sync),
    warnings: &mut Vec<String>,
    slot: Slot,
) -> ApiResult<bool> {
    let Some(answer) = invoke(st, h, a, slot).await? else { return Ok(false) };
    warnings.extend(answer.warnings);
    let Some((patch_type, raw)) = answer.patch else { return Ok(false) };
    // Upstream: a bad patch type or an undecodable patch is a failed call
    // (failurePolicy applies); a patch that does not apply is a 500.
    let decoded = if patch_type != "JSONPatch" {
        Err(call::CallError(format!("unsupported patch type {patch_type:?}")))
    } else {
        serde_json::from_slice::<json_patch::Patch>(&raw)
            .map_err(|e| call::CallError(format!("received undecodable patch in webhook response: {e}")))
    };
    let patch = match decoded {
        Ok(p) => p,
        Err(_) if fails_open(&h.webhook) => {
            fail_open_annotation(h, slot);
            return Ok(false);
        }
        Err(e) => return Err(call_failed(&h.name, &e)),
    };
    let mut patched = obj.clone();
    json_patch::patch(&mut patched, &patch).map_err(ApiError::internal)?;
    redefault(&mut patched);
    if patched == *obj {
        return Ok(false);
    }
    *obj = patched;
    Ok(true)
}

/// Runs the validating webhooks on `a`, all at once; the first denial or
/// failure in configuration order is the error. Returns their warnings.
///
/// ValidatingAdmissionPolicies ([`crate::admission::policy`]) run first, as
/// upstream's plugin order has them before the validating webhooks.
pub async fn validate(st: &ApiState, a: &Attributes) -> ApiResult<Vec<String>> {
    let mut policy_warnings = crate::admission::policy::validate(st, a).await?;
    let all = hooks(st, "validatingwebhookconfigurations").await?;
    if all.is_empty() {
        return Ok(policy_warnings);
    }
    let ns_labels = namespace_labels(st, a).await;
    let mut chosen = Vec::new();
    let mut warnings = Vec::new();
    for (index, h) in all.iter().enumerate() {
        if applies(&h.webhook, &h.name, a, ns_labels.as_ref(), &mut warnings)? {
            chosen.push((h, Slot { index, round: 0, mutating: false }));
        }
    }
    let results = futures::future::join_all(chosen.iter().map(|(h, slot)| invoke(st, h, a, *slot))).await;
    for r in results {
        if let Some(answer) = r? {
            warnings.extend(answer.warnings);
        }
    }
    policy_warnings.extend(warnings);
    Ok(policy_warnings)
}
