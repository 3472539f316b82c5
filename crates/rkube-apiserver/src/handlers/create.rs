//! POST to a collection (upstream `handlers/create.go` + `Store.Create`).
//!
//! Order: decode (400/415) → type meta (400) → namespace from the path (400
//! on mismatch) → `generateName` → typed decoding and unknown fields (400 /
//! warnings) → defaults → namespace exists (404) / not terminating (403) →
//! managedFields (`Create`; computed after validation when nothing but them
//! changes the object in between, see [`prepare_new`]) → admission (LimitRanger defaults, ServiceAccount, 403; mutating webhooks) → validation (422) → LimitRanger bounds (403) → server-set metadata and status →
//! ClusterIP → validating webhooks → `ResourceQuota` (403; charges the quota) → store (409 `AlreadyExists`; a generated name is retried).

use axum::response::Response;
use serde_json::{json, Value};

use super::write::{assign_cluster_ip, assign_node_ports, check_namespace, check_namespace_usable, check_type_meta, encode_stored};
use super::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::filters::trace::{self, steps};
use crate::media;
use crate::object;
use crate::render;
use crate::source::set_resource_version;
use crate::validate::{self, FieldValidation};

/// How many generated names are tried before giving up (upstream retries once per
/// request; rkube retries a few times so a collision never reaches the client).
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// An object to create, with how its managedFields are handled.
pub struct NewObject {
    /// The decoded body (or the result of an apply patch on nothing).
    pub obj: Value,
    /// How its managedFields are recorded.
    pub managed: NewManaged,
    /// The keys of the JSON body it was decoded from, for repeated-key
    /// reporting ([`crate::strict`]); `None` for other bodies.
    pub keys: Option<crate::strict::KeyScan>,
}

/// How the managedFields of a [`NewObject`] are recorded.
#[derive(Debug)]
pub enum NewManaged {
    /// An `Update` entry of the request's field manager, owning every
    /// field the object sets (a create or an update that creates).
    Update,
    /// What server-side apply computed (nothing left to write when it
    /// wrote them itself).
    Apply(crate::patch::UnwrittenEntries),
}

/// An object [`prepare_new`] made ready to store, with the warnings to
/// send. Its managedFields entries may still be unwritten, so it is
/// stored and answered through [`Prepared::encode`], [`Prepared::answer`]
/// and [`Prepared::dry_run_answer`].
///
/// When no admission reads the object between the entries' computation
/// and the write (no mutating or validating webhook nor
/// ValidatingAdmissionPolicy binding configured when the request checks,
/// not a pod or a claim) and it is stored as served (no conversion), the
/// entries stay apart, and an entry whose fields the create walk wrote as
/// JSON text is stored as that text
/// ([`crate::patch::UnwrittenEntries::encode_stored`]): the map of a large
/// object's fields is never built. In `perf` profiles of accepted creates
/// of a ConfigMap of 1 MiB of data (165,000 keys), building that map was
/// 35 % of the request's CPU.
pub struct Prepared {
    obj: Value,
    entries: crate::patch::UnwrittenEntries,
    warnings: Vec<String>,
}

impl Prepared {
    /// Writes the entries still apart into the object.
    fn write_entries(&mut self) {
        std::mem::take(&mut self.entries).write_into(&mut self.obj);
    }

    /// The object but its managedFields, which may be unwritten: for the
    /// fields an entry does not change (its name).
    pub fn object_but_managed_fields(&mut self) -> &mut Value {
        &mut self.obj
    }

    /// The object's storage bytes: [`encode_stored`] of the object with
    /// its entries written, without writing an entry still held as text.
    /// Errors: [`encode_stored`]'s (a conversion webhook's failure; an
    /// encoding error as 500).
    pub async fn encode(&mut self, ctx: &Ctx) -> ApiResult<bytes::Bytes> {
        // Entries are kept apart only for objects stored as served.
        if let Some(encoded) = self.entries.encode_stored(&self.obj) {
            let (bytes, nesting) = encoded.map_err(ApiError::internal)?;
            super::write::stored_nesting(nesting, None)?;
            return Ok(bytes::Bytes::from(bytes));
        }
        self.write_entries();
        let (bytes, nesting) = encode_stored(&ctx.st, ctx.ri.info, &self.obj).await?;
        super::write::stored_nesting(nesting, None)?;
        Ok(bytes)
    }

    /// The answer (`code`) to the create that stored `bytes`
    /// ([`Prepared::encode`]) at `revision`: the stored bytes with the
    /// resourceVersion spliced in when [`render::stored_answer`] gives
    /// them, else the object, its entries then written. The object is then
    /// kept decoded for the next write of `key` ([`Ctx::remember_written`]),
    /// an entry still apart written only if that write comes
    /// ([`Ctx::remember_written_apart`]).
    pub fn answer(mut self, ctx: &Ctx, key: &str, code: u16, bytes: bytes::Bytes, revision: i64) -> Response {
        let info = ctx.ri.info;
        set_resource_version(&mut self.obj, revision);
        trace::step(steps::ABOUT_TO_WRITE);
        let stored = render::Stored::Written(&bytes);
        let resp = match render::stored_answer(info, ctx.render, code, stored, revision, &self.warnings) {
            Some(resp) => resp,
            None => {
                self.write_entries();
                render::object(info, ctx.render, code, &self.obj, &self.warnings)
            }
        };
        match self.entries.is_empty() {
            true => ctx.remember_written(key, self.obj, bytes, revision),
            false => ctx.remember_written_apart(key, self.obj, self.entries, bytes, revision),
        }
        resp
    }

    /// The answer (`code`) to a dry run: the object, its entries written.
    /// Errors: the 400 of an object too deep to store, as the write would
    /// refuse it ([`super::write::stored_nesting`]).
    pub fn dry_run_answer(mut self, ctx: &Ctx, code: u16) -> ApiResult<Response> {
        self.write_entries();
        super::write::stored_nesting(crate::patch::json::nesting_depth(&self.obj), None)?;
        trace::step(steps::STORED);
        trace::step(steps::ABOUT_TO_WRITE);
        Ok(render::object(ctx.ri.info, ctx.render, code, &self.obj, &self.warnings))
    }
}

/// Turns a client's object into the object to store (every step of the
/// module docs but the write), its managedFields entries perhaps still
/// apart ([`Prepared`]). Errors: each step's Status (400, 403, 404, 409,
/// 422, a webhook's, 500 for a storage failure).
pub async fn prepare_new(ctx: &Ctx, new: NewObject) -> ApiResult<Prepared> {
    let info = ctx.ri.info;
    let mut obj = new.obj;
    check_type_meta(&ctx.st, info, info.kind, &mut obj).await?;
    check_namespace(ctx, &mut obj)?;
    let generate_base = object::meta_str(&obj, "generateName").to_string();
    if object::name(&obj).is_empty() && !generate_base.is_empty() {
        object::set_meta(&mut obj, "name", json!(object::generate_name(&generate_base)));
    }
    let mode = FieldValidation::parse(ctx.q("fieldValidation"))?;
    let warnings = validate::check_typed_body(info, &mut obj, mode, new.keys.as_ref())?;
    crate::config_data::merge_string_data(info.kind, &mut obj);
    let manager = ctx.field_manager()?;

    info.strategy.apply_defaults(&mut obj);
    if crate::csr::is_csr(info) {
        crate::csr::prepare_create(ctx.user.as_ref(), &mut obj);
    }
    let now = rkube_api::time::now_rfc3339();
    let name = object::name(&obj).to_string();
    check_namespace_usable(ctx, &name).await?;
    crate::controllers::crds::refuse_create_while_terminating(&ctx.st, info).await?;
    // The built-in admission plugins below change pods and claims only.
    let pod = info.group.is_empty() && info.resource == "pods";
    let claim = info.group.is_empty() && info.resource == "persistentvolumeclaims";
    // Validation reads no managedFields: when nothing else may change the
    // object before it is validated (no built-in plugin for it, no mutating
    // webhook), an object that will be refused is refused before its
    // managedFields are computed (for server-side apply, written: see
    // `UnwrittenEntries`), the same 422 sooner (for a 3 MiB ConfigMap over
    // the data limit, about a third of the request's CPU).
    let validated = !pod && !claim && !crate::admission::webhook::any_mutating(&ctx.st).await?;
    if validated {
        let causes = validate::validate(info, &obj, None);
        if !causes.is_empty() {
            return Err(ApiError::invalid(info, &name, causes));
        }
    }
    // Entries left unwritten until the write when nothing reads them in
    // between (see `Prepared`); pods and claims never get here validated.
    // Admission is decided once: a webhook or binding configured after
    // these checks takes effect from the next request (upstream's
    // admission reads its configurations from informers, as late).
    let keep_apart =
        validated && info.conversion.is_none() && !crate::admission::webhook::any_validating(&ctx.st).await?;
    let entries = match new.managed {
        NewManaged::Update => {
            let api_version = info.api_version();
            let rec =
                crate::patch::UpdateRecord { manager: &manager, api_version: &api_version, subresource: "", now: &now };
            match keep_apart.then(|| crate::patch::UnwrittenEntries::created(&rec, &obj)).flatten() {
                Some(entries) => entries,
                None => {
                    crate::patch::record_update(&rec, None, &mut obj);
                    crate::patch::UnwrittenEntries::default()
                }
            }
        }
        NewManaged::Apply(entries) if keep_apart => entries,
        NewManaged::Apply(entries) => {
            entries.write_into(&mut obj);
            crate::patch::UnwrittenEntries::default()
        }
    };

    let limit_ranges = match ctx.st.config.admission.limit_ranger && crate::admission::limit_ranger::handles(info) {
        true => crate::admission::limit_ranger::read(&ctx.st, ctx.namespace()).await?,
        false => Vec::new(),
    };
    if pod && !limit_ranges.is_empty() {
        crate::admission::limit_ranger::default_pod(&limit_ranges, &mut obj);
    }
    if ctx.st.config.admission.service_account && pod {
        crate::admission::service_account::admit_pod(&ctx.st, ctx.namespace(), &mut obj).await?;
    }
    if ctx.st.config.admission.priority && pod {
        crate::admission::priority::admit(&ctx.st, &name, &mut obj).await?;
    }
    if ctx.st.config.admission.default_storage_class && claim {
        crate::admission::default_storage_class::admit(&ctx.st, &mut obj).await?;
    }
    if let Some((not_ready, unreachable)) = ctx.st.config.admission.default_toleration_seconds {
        if pod {
            crate::admission::default_toleration_seconds::admit(&mut obj, not_ready, unreachable);
        }
    }
    let mut attrs = crate::admission::webhook::Attributes::for_write(ctx, "CREATE", &obj, None)?;
    let redefault = |o: &mut Value| info.strategy.apply_defaults(o);
    let mut warnings = warnings;
    if !keep_apart {
        warnings.extend(crate::admission::webhook::mutate(&ctx.st, &mut attrs, &mut obj, &redefault).await?);
    }
    // (Already validated: only managedFields changed since.)
    if !validated {
        let causes = validate::validate(info, &obj, None);
        if !causes.is_empty() {
            return Err(ApiError::invalid(info, &name, causes));
        }
    }
    warnings.extend((info.strategy.warnings)(&obj, None));
    crate::filters::escalation::confirm(info.group, info.kind, &obj, None).await?;
    crate::admission::cluster_trust_bundle_attest::admit(ctx, &obj, None).await?;
    crate::admission::limit_ranger::validate(info, &name, &limit_ranges, &obj)?;

    object::clear_server_fields(&mut obj);
    object::set_meta(&mut obj, "uid", json!(object::new_uid()));
    object::set_meta(&mut obj, "creationTimestamp", json!(now));
    object::set_initial_generation(&mut obj, info.has_spec);
    info.strategy.prepare(&mut obj);
    if info.kind == "Service" {
        assign_cluster_ip(ctx, &mut obj, None).await?;
        assign_node_ports(ctx, &mut obj, None).await?;
    }
    // Kept apart: no validating admission was configured.
    if !keep_apart {
        attrs.object = Some(obj);
        let validated = crate::admission::webhook::validate(&ctx.st, &attrs).await;
        obj = attrs.object.take().unwrap_or_default();
        warnings.extend(validated?);
    }
    if ctx.st.config.admission.resource_quota {
        let dry_run = ctx.dry_run()?;
        crate::admission::resource_quota::admit(&ctx.st, info, ctx.namespace(), &name, &obj, None, dry_run).await?;
    }
    Ok(Prepared { obj, entries, warnings })
}

/// POST a new object.
pub async fn create(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let info = ctx.ri.info;
    trace::step(steps::CONVERT_START);
    let content_type = media::content_type(&ctx.headers);
    let (decoded, keys) = media::decode_body(&content_type, body)?;
    trace::step(steps::CONVERT_DONE);
    let generate_base = object::meta_str(&decoded, "generateName").to_string();
    let generated = object::name(&decoded).is_empty() && !generate_base.is_empty();
    let dry_run = ctx.dry_run()?;
    trace::step(steps::STORE_START);
    let mut prepared = prepare_new(ctx, NewObject { obj: decoded, managed: NewManaged::Update, keys }).await?;
    trace::step(steps::ADMISSION_DONE);
    if dry_run {
        return prepared.dry_run_answer(ctx, 201);
    }
    let mut attempts = 0;
    loop {
        attempts += 1;
        let name = object::name(prepared.object_but_managed_fields()).to_string();
        let key = ctx.key(&name);
        let bytes = prepared.encode(ctx).await?;
        match ctx.st.storage.create(&key, bytes.clone()).await {
            Ok(kv) => {
                trace::step(steps::STORED);
                return Ok(prepared.answer(ctx, &key, 201, bytes, kv.mod_revision));
            }
            Err(rkube_storage::StorageError::AlreadyExists { .. })
                if generated && attempts < GENERATE_NAME_ATTEMPTS =>
            {
                let name = object::generate_name(&generate_base);
                object::set_meta(prepared.object_but_managed_fields(), "name", json!(name));
            }
            Err(e) => return Err(ApiError::from_storage(e, info, &name)),
        }
    }
}
