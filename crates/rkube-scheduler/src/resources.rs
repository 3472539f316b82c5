//! Resource amounts as the scheduler counts them (upstream
//! `pkg/scheduler/framework/types.go` `Resource`, and
//! `k8s.io/component-helpers/resource` for a pod's requests).
//!
//! CPU is counted in millicores, memory and ephemeral storage in bytes,
//! extended resources (`nvidia.com/gpu`, `hugepages-2Mi`, ...) in their
//! integer units; quantities round up as `Quantity.MilliValue`/`Value` do.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// CPU assumed for a container without a cpu request, when scoring
/// (`DefaultMilliCPURequest`, 0.1 core).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory assumed for a container without a memory request, when scoring
/// (`DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Parses a Kubernetes quantity (`100m`, `1.5`, `128Mi`, `1e3`, `2G`) into
/// thousandths of its unit, rounded up; `None` when it is not a quantity.
pub fn parse_milli(q: &str) -> Option<i128> {
    let s = q.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return None;
    }
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = format!("{int}{frac}");
    let mantissa: i128 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
    // value = mantissa * 10^(exp10 - frac.len()) * bin
    let (bin, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        e if e.starts_with(['e', 'E']) => (1, e[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let exp = exp10 + 3 - frac.len() as i32;
    let value = mantissa.checked_mul(bin)?;
    let milli = if exp >= 0 {
        value.checked_mul(10i128.checked_pow(exp as u32)?)?
    } else {
        let div = 10i128.checked_pow((-exp) as u32)?;
        (value + div - 1) / div
    };
    Some(if neg { -milli } else { milli })
}

fn milli(q: &Quantity) -> i64 {
    parse_milli(&q.0).map(|v| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64).unwrap_or(0)
}

fn units(q: &Quantity) -> i64 {
    parse_milli(&q.0).map(|v| ((v + 999).div_euclid(1000)).clamp(i64::MIN as i128, i64::MAX as i128) as i64).unwrap_or(0)
}

/// Amounts of resources (requests of a pod, sums on a node, allocatable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    /// CPU, millicores.
    pub milli_cpu: i64,
    /// Memory, bytes.
    pub memory: i64,
    /// Ephemeral storage, bytes.
    pub ephemeral_storage: i64,
    /// Pods (only meaningful for allocatable).
    pub pods: i64,
    /// Extended and hugepages resources by name, integer units.
    pub scalar: BTreeMap<String, i64>,
}

impl Resource {
    /// The sum of a resource list (`cpu`, `memory`, `ephemeral-storage`,
    /// `pods`, anything else as a scalar).
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Resource {
        let mut r = Resource::default();
        for (name, q) in list {
            match name.as_str() {
                "cpu" => r.milli_cpu += milli(q),
                "memory" => r.memory += units(q),
                "ephemeral-storage" => r.ephemeral_storage += units(q),
                "pods" => r.pods += units(q),
                other => *r.scalar.entry(other.to_string()).or_default() += units(q),
            }
        }
        r
    }

    /// Adds `o` to `self`.
    pub fn add(&mut self, o: &Resource) {
        self.milli_cpu += o.milli_cpu;
        self.memory += o.memory;
        self.ephemeral_storage += o.ephemeral_storage;
        self.pods += o.pods;
        for (k, v) in &o.scalar {
            *self.scalar.entry(k.clone()).or_default() += v;
        }
    }

    /// Takes `o` from `self` (undoing an [`Resource::add`] of `o`); a scalar
    /// resource that comes to zero is dropped, as if it had never been added.
    pub fn sub(&mut self, o: &Resource) {
        self.milli_cpu -= o.milli_cpu;
        self.memory -= o.memory;
        self.ephemeral_storage -= o.ephemeral_storage;
        self.pods -= o.pods;
        for (k, v) in &o.scalar {
            let left = self.scalar.get(k).copied().unwrap_or(0) - v;
            if left == 0 {
                self.scalar.remove(k);
            } else {
                self.scalar.insert(k.clone(), left);
            }
        }
    }

    /// Raises each amount of `self` to at least `o`'s.
    pub fn set_max(&mut self, o: &Resource) {
        self.milli_cpu = self.milli_cpu.max(o.milli_cpu);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    /// Whether every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0 && self.memory == 0 && self.ephemeral_storage == 0 && self.scalar.values().all(|v| *v == 0)
    }
}

fn container_requests(c: &Container, non_zero: bool) -> Resource {
    let empty = BTreeMap::new();
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref()).unwrap_or(&empty);
    let mut r = Resource::from_list(requests);
    if non_zero {
        if !requests.contains_key("cpu") {
            r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
        }
        if !requests.contains_key("memory") {
            r.memory = DEFAULT_MEMORY_REQUEST;
        }
    }
    r
}

/// A pod's effective requests: the sum over its containers and sidecars
/// (init containers with `restartPolicy: Always`), raised to what each
/// other init container needs while it runs (itself plus the sidecars
/// started before it), plus `spec.overhead`. With `non_zero`, a container
/// without a cpu or memory request counts [`DEFAULT_MILLI_CPU_REQUEST`] /
/// [`DEFAULT_MEMORY_REQUEST`] (upstream's scoring view).
pub fn pod_requests(pod: &Pod, non_zero: bool) -> Resource {
    let Some(spec) = pod.spec.as_ref() else { return Resource::default() };
    let mut sum = Resource::default();
    for c in &spec.containers {
        sum.add(&container_requests(c, non_zero));
    }
    let mut sidecars = Resource::default();
    let mut init_max = Resource::default();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c, non_zero);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            sum.add(&r);
            init_max.set_max(&sidecars);
        } else {
            let mut during = sidecars.clone();
            during.add(&r);
            init_max.set_max(&during);
        }
    }
    sum.set_max(&init_max);
    if let Some(overhead) = spec.overhead.as_ref() {
        sum.add(&Resource::from_list(overhead));
    }
    sum
}

/// A node's `status.allocatable` (falling back to `status.capacity`).
pub fn allocatable(node: &Node) -> Resource {
    let status = node.status.as_ref();
    let list = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
    list.map(Resource::from_list).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_milli_units_rounding_up() {
        let cases = [
            ("100m", Some(100)),
            ("1", Some(1000)),
            ("1.5", Some(1500)),
            ("0.0001", Some(1)),
            ("128Mi", Some(128 * 1024 * 1024 * 1000)),
            ("1Ki", Some(1_024_000)),
            ("2G", Some(2_000_000_000_000)),
            ("1e3", Some(1_000_000)),
            ("5n", Some(1)),
            ("-1", Some(-1000)),
            ("abc", None),
            ("1Qi", None),
        ];
        for (q, want) in cases {
            assert_eq!(parse_milli(q), want, "{q}");
        }
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": v})).unwrap()
    }

    #[test]
    fn pod_requests_sum_containers_and_take_the_largest_init_phase() {
        let p = pod(serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "200m", "example.com/gpu": "1"}}},
            ],
            "initContainers": [
                {"name": "init", "resources": {"requests": {"cpu": "1", "memory": "1Mi"}}},
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
            ],
            "overhead": {"cpu": "10m"},
        }));
        let r = pod_requests(&p, false);
        assert_eq!(r.milli_cpu, 1010, "init container 1 core dominates, plus overhead");
        assert_eq!(r.memory, 64 * 1024 * 1024);
        assert_eq!(r.scalar.get("example.com/gpu"), Some(&1));
        let empty = pod(serde_json::json!({"containers": [{"name": "a"}]}));
        assert!(pod_requests(&empty, false).is_zero());
        let nz = pod_requests(&empty, true);
        assert_eq!((nz.milli_cpu, nz.memory), (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST));
    }
}
