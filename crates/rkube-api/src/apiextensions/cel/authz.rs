//! Kubernetes' CEL authorizer library (upstream
//! `k8s.io/apiserver/pkg/cel/library/authz.go`), for admission policies'
//! `authorizer` variable:
//!
//! - `authorizer.path(p).check(verb)`: a non-resource request;
//! - `authorizer.group(g).resource(r)` with `.subresource(s)`,
//!   `.namespace(ns)`, `.name(n)`, then `.check(verb)`: a resource request
//!   (any API version);
//! - `authorizer.serviceAccount(ns, name)`: the same checks for that
//!   ServiceAccount instead of the requester;
//! - `authorizer.requestResource`: the resource check of the request being
//!   admitted (its group, resource, subresource, namespace and name);
//! - a decision's `allowed()`, `reason()`, `errored()` and `error()`.
//!
//! This library only asks: the server answers ([`Checks`]). Authorizers are
//! asynchronous and CEL evaluation is not, so an expression is evaluated
//! again until it asks nothing new: a check without an answer yet fails
//! the call (with [`PENDING`]) and is recorded, the caller answers the
//! recorded checks and evaluates again. Each check costs 350000, upstream's
//! cost of an authorization check (two fit in one expression's limit).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cel::common::types::{CelBool, CelString, Type, STRING_TYPE};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::cost::charge;
use super::library::{no_such_overload, string_arg, take};

/// Upstream's cost of one `check` call.
pub const CHECK_COST: u64 = 350_000;

/// The error of a check whose answer is not known yet.
pub const PENDING: &str = "authorization check pending";

/// One authorization check an expression asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Check {
    /// The ServiceAccount (namespace, name) asked about; `None`: the requester.
    pub service_account: Option<(String, String)>,
    /// The verb checked.
    pub verb: String,
    /// The non-resource path (`authorizer.path(p)`); `None` for resource checks.
    pub path: Option<String>,
    /// The API group of a resource check.
    pub group: String,
    /// The resource.
    pub resource: String,
    /// The subresource, or `""`.
    pub subresource: String,
    /// The namespace, or `""`.
    pub namespace: String,
    /// The object's name, or `""`.
    pub name: String,
}

/// The answer to a [`Check`] (upstream's decision, reason and error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// The authorizer allowed it.
    pub allowed: bool,
    /// The authorizer's reason.
    pub reason: String,
    /// The authorizer's error, or `""`.
    pub error: String,
}

/// The checks one evaluation asked and the answers known, shared by its
/// authorizer values.
#[derive(Debug, Default)]
pub struct Checks {
    answers: Mutex<HashMap<Check, Answer>>,
    unanswered: Mutex<Vec<Check>>,
    /// The resource check of the request (`authorizer.requestResource`).
    pub request_resource: Check,
}

impl Checks {
    /// The checks of an evaluation whose request is on `request_resource`
    /// (its verb unused).
    pub fn new(request_resource: Check) -> Arc<Checks> {
        Arc::new(Checks {
            request_resource,
            ..Checks::default()
        })
    }

    /// Records `answer` to `check`.
    pub fn answer(&self, check: Check, answer: Answer) {
        if let Ok(mut answers) = self.answers.lock() {
            answers.insert(check, answer);
        }
    }

    /// The checks asked since the last call that have no answer.
    pub fn take_unanswered(&self) -> Vec<Check> {
        self.unanswered
            .lock()
            .map(|mut u| std::mem::take(&mut *u))
            .unwrap_or_default()
    }

    fn ask(&self, check: Check) -> Option<Answer> {
        let known = self.answers.lock().ok().and_then(|a| a.get(&check).cloned());
        if known.is_none() {
            if let Ok(mut u) = self.unanswered.lock() {
                if !u.contains(&check) {
                    u.push(check);
                }
            }
        }
        known
    }
}

thread_local! {
    static CURRENT: std::cell::RefCell<Option<Arc<Checks>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `authorizer` (and `authorizer.requestResource`) declared
/// in the expressions it evaluates ([`super::evaluate_bool`] and friends),
/// answered through `checks`.
pub fn with_authorizer<T>(checks: &Arc<Checks>, f: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|c| c.replace(Some(checks.clone())));
    let out = f();
    CURRENT.with(|c| *c.borrow_mut() = previous);
    out
}

/// The checks of the [`with_authorizer`] call running on this thread.
pub(super) fn current() -> Option<Arc<Checks>> {
    CURRENT.with(|c| c.borrow().clone())
}

static AUTHORIZER_TYPE: Type = Type::new_unspecified_type("kubernetes.authorization.Authorizer");
static PATH_CHECK_TYPE: Type = Type::new_unspecified_type("kubernetes.authorization.PathCheck");
static GROUP_CHECK_TYPE: Type = Type::new_unspecified_type("kubernetes.authorization.GroupCheck");
static RESOURCE_CHECK_TYPE: Type = Type::new_unspecified_type("kubernetes.authorization.ResourceCheck");
static DECISION_TYPE: Type = Type::new_unspecified_type("kubernetes.authorization.Decision");

/// The kinds of value this library makes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Authorizer,
    PathCheck,
    GroupCheck,
    ResourceCheck,
    Decision(Answer),
}

/// A value of this library: the checks it asks into, and the check built so far.
#[derive(Debug, Clone)]
pub struct AuthzVal {
    checks: Arc<Checks>,
    check: Check,
    kind: Kind,
}

impl AuthzVal {
    /// The `authorizer` variable of an evaluation answered through `checks`.
    pub fn authorizer(checks: Arc<Checks>) -> AuthzVal {
        AuthzVal {
            checks,
            check: Check::default(),
            kind: Kind::Authorizer,
        }
    }

    /// The `authorizer.requestResource` variable.
    pub fn request_resource(checks: Arc<Checks>) -> AuthzVal {
        let check = checks.request_resource.clone();
        AuthzVal {
            checks,
            check,
            kind: Kind::ResourceCheck,
        }
    }

    fn with(&self, kind: Kind, edit: impl FnOnce(&mut Check)) -> CowVal<'static, 'static> {
        let mut next = AuthzVal {
            checks: self.checks.clone(),
            check: self.check.clone(),
            kind,
        };
        edit(&mut next.check);
        CowVal::owned(next)
    }
}

impl Val for AuthzVal {
    fn get_type(&self) -> &Type {
        match self.kind {
            Kind::Authorizer => &AUTHORIZER_TYPE,
            Kind::PathCheck => &PATH_CHECK_TYPE,
            Kind::GroupCheck => &GROUP_CHECK_TYPE,
            Kind::ResourceCheck => &RESOURCE_CHECK_TYPE,
            Kind::Decision(_) => &DECISION_TYPE,
        }
    }
    fn cel_type() -> &'static Type {
        &AUTHORIZER_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<AuthzVal>()
            .is_some_and(|o| o.kind == self.kind && o.check == self.check)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for AuthzVal {}

type Function = cel::common::functions::Function;

/// Registers the functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let (a, p, g, r, d) = (
        || AUTHORIZER_TYPE.to_owned(),
        || PATH_CHECK_TYPE.to_owned(),
        || GROUP_CHECK_TYPE.to_owned(),
        || RESOURCE_CHECK_TYPE.to_owned(),
        || DECISION_TYPE.to_owned(),
    );
    env.add_member_overload("path", "authorizer_path", a(), vec![STRING_TYPE], path)?;
    env.add_member_overload("group", "authorizer_group", a(), vec![STRING_TYPE], group)?;
    env.add_member_overload(
        "serviceAccount",
        "authorizer_serviceaccount",
        a(),
        vec![STRING_TYPE, STRING_TYPE],
        service_account,
    )?;
    env.add_member_overload("resource", "groupcheck_resource", g(), vec![STRING_TYPE], resource)?;
    let fields: [(&str, Function); 3] = [("subresource", subresource), ("namespace", namespace), ("name", name)];
    for (field, f) in fields {
        env.add_member_overload(field, &format!("resourcecheck_{field}"), r(), vec![STRING_TYPE], f)?;
    }
    env.add_member_overload("check", "pathcheck_check", p(), vec![STRING_TYPE], check)?;
    env.add_member_overload("check", "resourcecheck_check", r(), vec![STRING_TYPE], check)?;
    let getters: [(&str, Function); 4] = [
        ("allowed", allowed),
        ("reason", reason),
        ("errored", errored),
        ("error", error),
    ];
    for (getter, f) in getters {
        env.add_member_overload(getter, &format!("decision_{getter}"), d(), vec![], f)?;
    }
    Ok(())
}

fn receiver<'b>(function: &str, v: &'b (dyn Val + '_)) -> Result<&'b AuthzVal, ExecutionError> {
    v.downcast_ref::<AuthzVal>()
        .ok_or_else(|| no_such_overload(function, &[v]))
}

/// A builder step: the receiver and its string argument.
fn step<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    kind: Kind,
    edit: fn(&mut Check, String),
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [v, s] = take(args)?;
    let s = string_arg(function, s.as_ref())?.to_string();
    Ok(receiver(function, v.as_ref())?.with(kind, |c| edit(c, s)))
}

fn path<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    step("path", args, Kind::PathCheck, |c, s| c.path = Some(s))
}

fn group<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    step("group", args, Kind::GroupCheck, |c, s| c.group = s)
}

fn resource<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    step("resource", args, Kind::ResourceCheck, |c, s| c.resource = s)
}

fn subresource<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    step("subresource", args, Kind::ResourceCheck, |c, s| c.subresource = s)
}

fn namespace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    step("namespace", args, Kind::ResourceCheck, |c, s| c.namespace = s)
}

fn name<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    step("name", args, Kind::ResourceCheck, |c, s| c.name = s)
}

fn service_account<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [v, ns, sa] = take(args)?;
    let ns = string_arg("serviceAccount", ns.as_ref())?.to_string();
    let sa = string_arg("serviceAccount", sa.as_ref())?.to_string();
    Ok(receiver("serviceAccount", v.as_ref())?.with(Kind::Authorizer, |c| c.service_account = Some((ns, sa))))
}

fn check<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [v, verb] = take(args)?;
    let verb = string_arg("check", verb.as_ref())?.to_string();
    let v = receiver("check", v.as_ref())?;
    charge(CHECK_COST)?;
    let mut asked = v.check.clone();
    asked.verb = verb;
    match v.checks.ask(asked.clone()) {
        Some(answer) => Ok(CowVal::owned(AuthzVal {
            checks: v.checks.clone(),
            check: asked,
            kind: Kind::Decision(answer),
        })),
        None => Err(ExecutionError::function_error("check", PENDING)),
    }
}

fn answer_of<'b>(function: &str, v: &'b (dyn Val + '_)) -> Result<&'b Answer, ExecutionError> {
    match &receiver(function, v)?.kind {
        Kind::Decision(a) => Ok(a),
        _ => Err(no_such_overload(function, &[v])),
    }
}

fn getter<'b, 'v>(function: &str, args: Vec<CowVal<'b, 'v>>) -> Result<Answer, ExecutionError> {
    let [v] = take(args)?;
    answer_of(function, v.as_ref()).cloned()
}

fn allowed<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelBool::from(getter("allowed", args)?.allowed)))
}

fn reason<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelString::from(getter("reason", args)?.reason)))
}

fn errored<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelBool::from(!getter("errored", args)?.error.is_empty())))
}

fn error<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelString::from(getter("error", args)?.error)))
}
