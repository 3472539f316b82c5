//! API Priority and Fairness classification and seats (KEP-1040; upstream
//! `staging/src/k8s.io/apiserver/pkg/util/flowcontrol/`).
//!
//! [`FlowControl`] holds the FlowSchemas and PriorityLevelConfigurations
//! (`flowcontrol.apiserver.k8s.io/v1`) last [installed](FlowControl::install)
//! by the configuration controller ([`crate::flowcontrol`], which follows
//! them through the watch cache). A request is classified by the first
//! FlowSchema, lowest `spec.matchingPrecedence` first (ties: by name), one of
//! whose `rules` matches it:
//! - a subject matches the user: `User` by name, `Group` by one of the
//!   user's groups, `ServiceAccount` by the username
//!   `system:serviceaccount:<namespace>:<name>`; `*` matches any name;
//! - a `resourceRule` matches a resource request when `verbs`, `apiGroups`,
//!   `resources` (`<resource>/<subresource>` for a subresource) each hold
//!   the request's value or `*`, and the request is namespaced in one of
//!   `namespaces` (`*`: any) or, cluster-scoped, `clusterScope` is true;
//! - a `nonResourceRule` matches a non-resource request by `verbs` and
//!   `nonResourceURLs` (`*`, the exact path, or a prefix ending in `/*`).
//!
//! FlowSchemas naming a priority level that does not exist are skipped, as
//! upstream; a request no FlowSchema matches goes to `catch-all`.
//!
//! Seats: the server's concurrency limit (`--max-requests-inflight` +
//! `--max-mutating-requests-inflight`) is shared among the `Limited` levels
//! in proportion to `nominalConcurrencyShares`: a level's nominal limit is
//! ceil(limit × shares / sum of every level's shares) seats, upstream's
//! formula. Of these, round(nominal × `lendablePercent` / 100) are lent to
//! a pool every Limited level may borrow from (at most
//! round(nominal × `borrowingLimitPercent` / 100) at a time when that is
//! set); the rest are the level's own. `Exempt` levels take no seat. A
//! request takes one seat, its level's own or else a borrowed one, for as
//! long as it (and its response body) lasts.
//!
//! A request finding no seat:
//! - `limitResponse.type: Reject`: answered 429 at once;
//! - `Queue`: waits in the level's queue for the first seat that frees (its
//!   level's or the pool's) for at most a quarter of `--request-timeout`; a
//!   queue already holding `queues × queueLengthLimit` requests, or a wait
//!   that runs out, is answered 429.
//!
//! Not as upstream: there is one FIFO queue per priority level; requests
//! are not split into flows by `distinguisherMethod`, so there is no fair
//! queuing among flows and no shuffle sharding (a busy client of a level
//! can delay the others of that level by the queue's length). Lending is a
//! shared pool taken first come first served, not upstream's periodic
//! reallocation of each level's current limit by seat demand (a lender does
//! not get its lent seats back before their borrowers finish). Every request
//! is one seat (no work estimation), and long-running requests (watches
//! included) are not classified.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::flowcontrol::v1 as fc;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::filters::authn::UserInfo;
use crate::filters::metrics::ApiserverMetrics;
use crate::filters::requestinfo::RequestAttributes;

/// The annotation marking bootstrap objects the server keeps up to date.
pub const AUTOUPDATE_ANNOTATION: &str = "apf.kubernetes.io/autoupdate-spec";
/// Response header naming the UID of the FlowSchema a request matched.
pub const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";
/// Response header naming the UID of the request's priority level.
pub const PRIORITY_LEVEL_UID_HEADER: &str = "X-Kubernetes-PF-PriorityLevel-UID";
/// The mandatory FlowSchema and priority level of requests nothing else matches.
pub const CATCH_ALL: &str = "catch-all";

/// Upstream's mandatory configuration objects (FlowSchema and priority level of each name).
pub const MANDATORY: [&str; 2] = ["exempt", CATCH_ALL];
/// Default `nominalConcurrencyShares` of a Limited level (the v1 API's default).
const DEFAULT_SHARES: i32 = 30;
/// Default `queues` and `queueLengthLimit` (the v1 API's defaults).
const DEFAULT_QUEUES: i32 = 64;
const DEFAULT_QUEUE_LENGTH_LIMIT: i32 = 50;

/// One priority level: its seats and its queue.
#[derive(Debug)]
pub struct PriorityLevel {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` (the `X-Kubernetes-PF-PriorityLevel-UID` header).
    pub uid: String,
    /// `spec.type: Exempt` (or no concurrency limit on the server): takes no seat.
    pub exempt: bool,
    /// `limitResponse.type: Reject`: a request finding no free seat is refused at once.
    pub reject: bool,
    /// The level's nominal concurrency limit, seats.
    pub seats: usize,
    /// Of [`PriorityLevel::seats`], those lent to the shared pool.
    pub lendable: usize,
    /// How many seats it may borrow from the pool at once (`None`: no limit).
    pub borrowing_limit: Option<usize>,
    /// How many requests may wait (`queues × queueLengthLimit`; 0 for Reject).
    pub queue_capacity: usize,
    /// Its own seats, `seats - lendable` (`None` when exempt).
    pub(crate) semaphore: Option<Arc<Semaphore>>,
    /// Requests waiting now.
    pub(crate) waiting: AtomicUsize,
    /// Seats borrowed from the pool now.
    pub(crate) borrowed: AtomicUsize,
}

impl PriorityLevel {
    /// Whether `other` has the same settings (a level is kept across
    /// configuration changes that do not touch it, with its queue).
    fn same_as(&self, other: &PriorityLevel) -> bool {
        (self.name.as_str(), self.uid.as_str(), self.exempt, self.reject, self.seats, self.queue_capacity)
            == (other.name.as_str(), other.uid.as_str(), other.exempt, other.reject, other.seats, other.queue_capacity)
            && (self.lendable, self.borrowing_limit) == (other.lendable, other.borrowing_limit)
    }

    /// Whether the level may borrow one more seat now.
    pub(crate) fn may_borrow(&self) -> bool {
        self.borrowed.load(Ordering::Acquire) < self.borrowing_limit.unwrap_or(usize::MAX)
    }

    /// Takes a borrowing slot when the level's `borrowingLimitPercent` allows one more.
    pub(crate) fn start_borrowing(&self) -> bool {
        let limit = self.borrowing_limit.unwrap_or(usize::MAX);
        self.borrowed.fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| (b < limit).then_some(b + 1)).is_ok()
    }

    /// Gives back a borrowing slot taken by [`PriorityLevel::start_borrowing`].
    pub(crate) fn stop_borrowing(&self) {
        self.borrowed.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A FlowSchema, decoded.
#[derive(Debug)]
struct Schema {
    name: String,
    uid: String,
    precedence: i32,
    level: String,
    rules: Vec<fc::PolicyRulesWithSubjects>,
}

/// What a request was classified as.
#[derive(Debug, Clone)]
pub struct Classification {
    /// The FlowSchema's name (the `flow_schema` metric label).
    pub flow_schema: String,
    /// The FlowSchema's UID (the `X-Kubernetes-PF-FlowSchema-UID` header).
    pub flow_schema_uid: String,
    /// The priority level.
    pub level: Arc<PriorityLevel>,
    /// The seats the Limited levels lend, for the level to borrow from.
    pub(crate) lendable_pool: Arc<Semaphore>,
}

/// One installed configuration.
#[derive(Debug)]
struct Config {
    /// Sorted by precedence, then name; only those whose level exists.
    schemas: Vec<Schema>,
    levels: HashMap<String, Arc<PriorityLevel>>,
    /// The lent seats (their sum over the Limited levels).
    lendable_pool: Arc<Semaphore>,
    lendable_total: usize,
}

/// The classifier and the priority levels' seats (see the module docs).
#[derive(Debug)]
pub struct FlowControl {
    /// The server's concurrency limit, shared among the Limited levels (0: no limit).
    server_concurrency: usize,
    config: RwLock<Option<Arc<Config>>>,
    /// Where `apiserver_flowcontrol_nominal_limit_seats` goes.
    metrics: Option<Arc<ApiserverMetrics>>,
}

fn name_uid(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (meta.name.clone().unwrap_or_default(), meta.uid.clone().unwrap_or_default())
}

impl FlowControl {
    /// A classifier sharing `server_concurrency` seats (0: unlimited) among
    /// the levels, reporting the levels' seats to `metrics`; it classifies
    /// nothing until a configuration is installed.
    pub fn new(server_concurrency: usize, metrics: Option<Arc<ApiserverMetrics>>) -> Self {
        FlowControl { server_concurrency, config: RwLock::new(None), metrics }
    }

    /// Whether a configuration has been installed.
    pub fn is_configured(&self) -> bool {
        self.config.read().map(|c| c.is_some()).unwrap_or(false)
    }

    /// Replaces the configuration with these FlowSchemas and
    /// PriorityLevelConfigurations (JSON objects as stored). Objects that do
    /// not decode are skipped with a warning. Levels whose settings did not
    /// change keep their queue and the requests holding their seats.
    ///
    /// The mandatory `exempt` and `catch-all` objects are filled in from the
    /// bootstrap ones when missing, as upstream's configuration controller
    /// does, so `system:masters` stays exempt whatever is deleted.
    pub fn install(&self, flow_schemas: &[Value], priority_levels: &[Value]) {
        let (boot_schemas, boot_levels) = crate::flowcontrol::bootstrap_objects();
        let with_mandatory = |objs: &[Value], boot: &[Value]| -> Vec<Value> {
            let mut all = objs.to_vec();
            for name in MANDATORY {
                let named = |v: &Value| v["metadata"]["name"] == name;
                if !objs.iter().any(named) {
                    all.extend(boot.iter().find(|v| named(v)).cloned());
                }
            }
            all
        };
        let flow_schemas = with_mandatory(flow_schemas, &boot_schemas);
        let priority_levels = with_mandatory(priority_levels, &boot_levels);
        let plcs: Vec<fc::PriorityLevelConfiguration> = priority_levels
            .iter()
            .filter_map(|v| match serde_json::from_value::<fc::PriorityLevelConfiguration>(v.clone()) {
                // Upstream's validation requires `spec.type` Exempt or Limited; anything else is
                // skipped rather than taken for exempt.
                Ok(p) if p.spec.as_ref().is_some_and(|s| s.type_ == "Exempt" || s.type_ == "Limited") => Some(p),
                Ok(p) => {
                    tracing::warn!(name = ?p.metadata.name, "skipping a PriorityLevelConfiguration without spec.type Exempt or Limited");
                    None
                }
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a PriorityLevelConfiguration that does not decode");
                    None
                }
            })
            .collect();
        let shares = |p: &fc::PriorityLevelConfiguration| -> u64 {
            let spec = p.spec.as_ref();
            match spec.map(|s| s.type_.as_str()) {
                Some("Exempt") => {
                    spec.and_then(|s| s.exempt.as_ref()).and_then(|e| e.nominal_concurrency_shares).unwrap_or(0)
                }
                _ => spec
                    .and_then(|s| s.limited.as_ref())
                    .and_then(|l| l.nominal_concurrency_shares)
                    .unwrap_or(DEFAULT_SHARES),
            }
            .max(0) as u64
        };
        let sum: u64 = plcs.iter().map(shares).sum();
        let old = self.config.read().ok().and_then(|c| c.clone());
        let mut levels = HashMap::new();
        for p in &plcs {
            let (name, uid) = name_uid(&p.metadata);
            let spec = p.spec.as_ref();
            let exempt = self.server_concurrency == 0 || spec.is_none_or(|s| s.type_ == "Exempt");
            let limited = spec.and_then(|s| s.limited.as_ref());
            let reject = limited.is_some_and(|l| l.limit_response.as_ref().is_some_and(|r| r.type_ == "Reject"));
            let seats = if exempt || sum == 0 {
                0
            } else {
                (self.server_concurrency as u64 * shares(p)).div_ceil(sum) as usize
            };
            let percent_of = |p: i32| ((seats as f64) * f64::from(p.clamp(0, 100)) / 100.0).round() as usize;
            let lendable =
                if exempt { 0 } else { percent_of(limited.and_then(|l| l.lendable_percent).unwrap_or(0)).min(seats) };
            let borrowing_limit = limited
                .and_then(|l| l.borrowing_limit_percent)
                .map(|p| ((seats as f64) * f64::from(p.max(0)) / 100.0).round() as usize);
            let queuing = limited.and_then(|l| l.limit_response.as_ref()).and_then(|r| r.queuing.as_ref());
            let queue_capacity = if exempt || reject {
                0
            } else {
                let queues = queuing.and_then(|q| q.queues).unwrap_or(DEFAULT_QUEUES).max(1) as usize;
                let length =
                    queuing.and_then(|q| q.queue_length_limit).unwrap_or(DEFAULT_QUEUE_LENGTH_LIMIT).max(1) as usize;
                queues * length
            };
            let level = PriorityLevel {
                semaphore: (!exempt).then(|| Arc::new(Semaphore::new(seats - lendable))),
                name: name.clone(),
                uid,
                exempt,
                reject,
                seats,
                lendable,
                borrowing_limit,
                queue_capacity,
                waiting: AtomicUsize::new(0),
                borrowed: AtomicUsize::new(0),
            };
            let kept = old.as_ref().and_then(|c| c.levels.get(&name)).filter(|l| l.same_as(&level)).cloned();
            levels.insert(name, kept.unwrap_or_else(|| Arc::new(level)));
        }
        let mut schemas: Vec<Schema> = flow_schemas
            .iter()
            .filter_map(|v| match serde_json::from_value::<fc::FlowSchema>(v.clone()) {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a FlowSchema that does not decode");
                    None
                }
            })
            .filter_map(|f| {
                let (name, uid) = name_uid(&f.metadata);
                let spec = f.spec?;
                let level = spec.priority_level_configuration.name;
                levels.contains_key(&level).then(|| Schema {
                    name,
                    uid,
                    precedence: spec.matching_precedence.unwrap_or(1000),
                    level,
                    rules: spec.rules.unwrap_or_default(),
                })
            })
            .collect();
        schemas.sort_by(|a, b| a.precedence.cmp(&b.precedence).then_with(|| a.name.cmp(&b.name)));
        if let Some(m) = &self.metrics {
            for l in levels.values() {
                m.set_flowcontrol_nominal_seats(&l.name, l.seats);
            }
        }
        let lendable_total: usize = levels.values().map(|l| l.lendable).sum();
        let lendable_pool = match old.as_ref().filter(|c| c.lendable_total == lendable_total) {
            Some(c) => c.lendable_pool.clone(),
            None => Arc::new(Semaphore::new(lendable_total)),
        };
        let config = Arc::new(Config { schemas, levels, lendable_pool, lendable_total });
        if let Ok(mut c) = self.config.write() {
            *c = Some(config);
        }
    }

    /// The priority levels now, by name.
    pub fn levels(&self) -> Vec<Arc<PriorityLevel>> {
        let config = self.config.read().ok().and_then(|c| c.clone());
        let mut levels: Vec<_> = config.map(|c| c.levels.values().cloned().collect()).unwrap_or_default();
        levels.sort_by(|a, b| a.name.cmp(&b.name));
        levels
    }

    /// Classifies a request of `user`; `None` before a configuration is
    /// installed, or when neither a FlowSchema nor the `catch-all` level
    /// matches it.
    pub fn classify(&self, user: &UserInfo, attrs: &RequestAttributes) -> Option<Classification> {
        let config = self.config.read().ok()?.clone()?;
        let found = config.schemas.iter().find(|s| s.rules.iter().any(|r| rule_matches(r, user, attrs)));
        match found {
            Some(s) => Some(Classification {
                flow_schema: s.name.clone(),
                flow_schema_uid: s.uid.clone(),
                level: config.levels.get(&s.level)?.clone(),
                lendable_pool: config.lendable_pool.clone(),
            }),
            None => Some(Classification {
                flow_schema: CATCH_ALL.into(),
                flow_schema_uid: String::new(),
                level: config.levels.get(CATCH_ALL)?.clone(),
                lendable_pool: config.lendable_pool.clone(),
            }),
        }
    }
}

fn has(list: &[String], value: &str, all: &str) -> bool {
    list.iter().any(|v| v == all || v == value)
}

/// Whether one `PolicyRulesWithSubjects` matches (upstream `matchesPolicyRule`).
fn rule_matches(rule: &fc::PolicyRulesWithSubjects, user: &UserInfo, a: &RequestAttributes) -> bool {
    if !rule.subjects.iter().any(|s| subject_matches(s, user)) {
        return false;
    }
    if a.is_resource_request {
        rule.resource_rules.iter().flatten().any(|r| resource_rule_matches(r, a))
    } else {
        rule.non_resource_rules.iter().flatten().any(|r| non_resource_rule_matches(r, a))
    }
}

fn subject_matches(s: &fc::Subject, user: &UserInfo) -> bool {
    match s.kind.as_str() {
        "User" => s.user.as_ref().is_some_and(|u| u.name == "*" || u.name == user.username),
        "Group" => s.group.as_ref().is_some_and(|g| g.name == "*" || user.groups.contains(&g.name)),
        "ServiceAccount" => s.service_account.as_ref().is_some_and(|sa| {
            let Some(rest) = user.username.strip_prefix("system:serviceaccount:") else { return false };
            let Some((ns, name)) = rest.split_once(':') else { return false };
            ns == sa.namespace && (sa.name == "*" || sa.name == name)
        }),
        _ => false,
    }
}

fn resource_rule_matches(r: &fc::ResourcePolicyRule, a: &RequestAttributes) -> bool {
    let resource =
        if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    has(&r.verbs, &a.verb, "*")
        && has(&r.api_groups, &a.api_group, "*")
        && has(&r.resources, &resource, "*")
        && if a.namespace.is_empty() {
            r.cluster_scope.unwrap_or(false)
        } else {
            r.namespaces.as_deref().is_some_and(|ns| has(ns, &a.namespace, "*"))
        }
}

fn non_resource_rule_matches(r: &fc::NonResourcePolicyRule, a: &RequestAttributes) -> bool {
    has(&r.verbs, &a.verb, "*")
        && r.non_resource_urls.iter().any(|u| {
            u == "*" || *u == a.path || u.strip_suffix('*').is_some_and(|p| p.ends_with('/') && a.path.starts_with(p))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, Method, Uri};
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            username: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: Default::default(),
        }
    }

    fn attrs(method: &str, path: &str) -> RequestAttributes {
        RequestAttributes::new(&method.parse::<Method>().unwrap(), &path.parse::<Uri>().unwrap(), &HeaderMap::new())
    }

    fn with_uids(mut objs: Vec<Value>) -> Vec<Value> {
        for o in &mut objs {
            let name = o["metadata"]["name"].as_str().unwrap().to_string();
            o["metadata"]["uid"] = json!(format!("uid-{name}"));
        }
        objs
    }

    fn bootstrap(total: usize) -> FlowControl {
        let f = FlowControl::new(total, None);
        let (fs, pl) = crate::flowcontrol::bootstrap_objects();
        f.install(&with_uids(fs), &with_uids(pl));
        f
    }

    fn class(f: &FlowControl, u: &UserInfo, method: &str, path: &str) -> (String, String) {
        let c = f.classify(u, &attrs(method, path)).unwrap();
        (c.flow_schema, c.level.name.clone())
    }

    #[test]
    fn bootstrap_configuration_classifies_as_upstream() {
        let f = bootstrap(600);
        let node = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1";
        assert_eq!(class(&f, &node, "PUT", lease), ("system-node-high".into(), "node-high".into()));
        assert_eq!(
            class(&f, &node, "PATCH", "/api/v1/nodes/n1/status"),
            ("system-node-high".into(), "node-high".into())
        );
        assert_eq!(class(&f, &node, "GET", "/api/v1/namespaces/a/pods"), ("system-nodes".into(), "system".into()));
        let admin = user("admin", &["system:masters", "system:authenticated"]);
        assert_eq!(class(&f, &admin, "GET", "/api/v1/pods"), ("exempt".into(), "exempt".into()));
        let anyone = user("alice", &["system:authenticated"]);
        assert_eq!(class(&f, &anyone, "GET", "/healthz"), ("probes".into(), "exempt".into()));
        assert_eq!(class(&f, &anyone, "GET", "/api/v1/pods"), ("global-default".into(), "global-default".into()));
        let kcm = user("system:kube-controller-manager", &["system:authenticated"]);
        assert_eq!(
            class(&f, &kcm, "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kcm"),
            ("system-leader-election".into(), "leader-election".into())
        );
        assert_eq!(
            class(&f, &kcm, "POST", "/api/v1/namespaces/a/pods"),
            ("kube-controller-manager".into(), "workload-high".into())
        );
        let sa = user(
            "system:serviceaccount:kube-system:deployment-controller",
            &["system:serviceaccounts", "system:authenticated"],
        );
        assert_eq!(
            class(&f, &sa, "GET", "/apis/apps/v1/deployments"),
            ("kube-system-service-accounts".into(), "workload-high".into())
        );
        let other_sa = user("system:serviceaccount:team:builder", &["system:serviceaccounts", "system:authenticated"]);
        assert_eq!(
            class(&f, &other_sa, "GET", "/api/v1/namespaces/team/pods"),
            ("service-accounts".into(), "workload-low".into())
        );
        let anonymous = user("system:anonymous", &["system:unauthenticated"]);
        assert_eq!(class(&f, &anonymous, "GET", "/version"), ("global-default".into(), "global-default".into()));
    }

    #[test]
    fn seats_are_shared_by_nominal_concurrency_shares_rounded_up() {
        let f = bootstrap(600);
        let seats: HashMap<String, (usize, usize, bool, bool)> =
            f.levels().iter().map(|l| (l.name.clone(), (l.seats, l.lendable, l.exempt, l.reject))).collect();
        // Shares 30 + 40 + 10 + 40 + 100 + 20 + 5 (+ exempt 0) = 245.
        assert_eq!(seats["node-high"], (98, 25, false, false)); // ceil(600 × 40 / 245), lends round(25 %)
        assert_eq!(seats["workload-low"], (245, 221, false, false)); // ceil(600 × 100 / 245), lends round(90 %)
        assert_eq!(seats["leader-election"], (25, 0, false, false));
        assert_eq!(seats["catch-all"], (13, 0, false, true)); // ceil(600 × 5 / 245), Reject
        assert_eq!(seats["exempt"], (0, 0, true, false));
        // Lent: system 74 × 33 % = 24, node-high 25, workload-high 98 × 50 % = 49, workload-low 221, global-default 49 × 50 % = 25.
        let anyone = user("carol", &["system:authenticated"]);
        let c = f.classify(&anyone, &attrs("GET", "/api/v1/pods")).unwrap();
        assert_eq!(c.lendable_pool.available_permits(), 24 + 25 + 49 + 221 + 25);
        assert_eq!(c.level.semaphore.as_ref().unwrap().available_permits(), 49 - 25);
        let lvl = f.levels().into_iter().find(|l| l.name == "global-default").unwrap();
        assert_eq!(lvl.queue_capacity, 128 * 50);
    }

    #[test]
    fn schemas_with_missing_levels_are_skipped_and_unchanged_levels_are_kept() {
        let f = bootstrap(10);
        let before = f.levels().into_iter().find(|l| l.name == "node-high").unwrap();
        let (mut fs, pl) = crate::flowcontrol::bootstrap_objects();
        fs.push(json!({"metadata": {"name": "dangling", "uid": "u"}, "spec": {"matchingPrecedence": 3,
            "priorityLevelConfiguration": {"name": "nope"},
            "rules": [{"subjects": [{"kind": "User", "user": {"name": "*"}}],
                       "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}));
        f.install(&with_uids(fs), &with_uids(pl));
        let after = f.levels().into_iter().find(|l| l.name == "node-high").unwrap();
        assert!(Arc::ptr_eq(&before, &after));
        let anyone = user("bob", &["system:authenticated"]);
        assert_eq!(class(&f, &anyone, "GET", "/version").0, "global-default");
    }

    #[test]
    fn mandatory_objects_are_filled_in_and_levels_without_a_type_are_skipped() {
        let f = FlowControl::new(600, None);
        let (fs, pl) = crate::flowcontrol::bootstrap_objects();
        let not_mandatory = |v: &Value| !matches!(v["metadata"]["name"].as_str(), Some("exempt" | "catch-all"));
        let mut fs: Vec<Value> = fs.into_iter().filter(not_mandatory).collect();
        let mut pl: Vec<Value> = pl.into_iter().filter(not_mandatory).collect();
        // A level with no spec (or an unknown type) must not become exempt for what points at it.
        pl.push(json!({"metadata": {"name": "typeless"}}));
        pl.push(json!({"metadata": {"name": "odd"}, "spec": {"type": "Odd"}}));
        for (name, level) in [("to-typeless", "typeless"), ("to-odd", "odd")] {
            fs.push(json!({"metadata": {"name": name}, "spec": {"matchingPrecedence": 2,
                "priorityLevelConfiguration": {"name": level},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": "mallory"}}],
                           "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]}]}}));
        }
        f.install(&with_uids(fs), &with_uids(pl));
        let admin = user("admin", &["system:masters", "system:authenticated"]);
        assert_eq!(class(&f, &admin, "GET", "/api/v1/pods"), ("exempt".into(), "exempt".into()));
        let names: Vec<String> = f.levels().iter().map(|l| l.name.clone()).collect();
        assert!(names.contains(&"catch-all".to_string()), "{names:?}");
        assert!(!names.iter().any(|n| n == "typeless" || n == "odd"), "{names:?}");
        let mallory = user("mallory", &["system:authenticated"]);
        assert_eq!(class(&f, &mallory, "GET", "/api/v1/pods").1, "global-default");
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let r = |u: &str| fc::NonResourcePolicyRule { verbs: vec!["get".into()], non_resource_urls: vec![u.into()] };
        assert!(non_resource_rule_matches(&r("/healthz"), &attrs("GET", "/healthz")));
        assert!(!non_resource_rule_matches(&r("/healthz"), &attrs("GET", "/healthz/etcd")));
        assert!(non_resource_rule_matches(&r("/healthz/*"), &attrs("GET", "/healthz/etcd")));
        assert!(!non_resource_rule_matches(&r("/healthz/*"), &attrs("POST", "/healthz/etcd")));
    }
}
