//! ClusterIP allocation for Services from the service CIDR
//! (upstream `--service-cluster-ip-range`, default here `10.96.0.0/12`).
//!
//! Simple and safe rather than fast: an allocation reads every stored
//! Service's `spec.clusterIPs` to learn which addresses are live, then picks a
//! random free one (never the network address, the broadcast address, or the
//! first host address, which upstream reserves for the `kubernetes` Service).
//! Addresses handed out but not yet stored are remembered for a short while so
//! two concurrent creates never get the same address.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long an address handed out but not seen in storage stays reserved.
const PENDING_TTL: Duration = Duration::from_secs(60);

/// Errors of the allocator.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocError {
    /// Every address of the range is in use.
    #[error("range is full")]
    Full,
    /// A requested address is outside the range.
    #[error("the provided IP ({0}) is not in the valid range. The range of valid IPs is {1}")]
    OutOfRange(String, String),
    /// A requested address is already allocated.
    #[error("provided IP is already allocated")]
    Allocated,
    /// The CIDR is not a valid IPv4 CIDR.
    #[error("invalid service CIDR {0:?}")]
    BadCidr(String),
}

/// An IPv4 CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    base: u32,
    prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n`.
    pub fn parse(s: &str) -> Result<Cidr, AllocError> {
        let bad = || AllocError::BadCidr(s.to_string());
        let (ip, len) = s.split_once('/').ok_or_else(bad)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let prefix: u8 = len.parse().map_err(|_| bad())?;
        if !(8..=30).contains(&prefix) {
            return Err(bad());
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(Cidr { base: u32::from(ip) & mask, prefix })
    }

    fn size(&self) -> u32 {
        1u32 << (32 - self.prefix)
    }

    fn contains(&self, ip: Ipv4Addr) -> bool {
        let v = u32::from(ip);
        v >= self.base && v - self.base < self.size()
    }

    /// The first host address (upstream reserves it for the `kubernetes` Service).
    pub fn first_host(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }
}

/// Hands out ClusterIPs.
#[derive(Debug)]
pub struct ClusterIpAllocator {
    cidr: Cidr,
    pending: Mutex<HashMap<Ipv4Addr, Instant>>,
}

impl ClusterIpAllocator {
    /// An allocator for `cidr`.
    pub fn new(cidr: Cidr) -> Self {
        ClusterIpAllocator { cidr, pending: Mutex::new(HashMap::new()) }
    }

    /// The range.
    pub fn cidr(&self) -> Cidr {
        self.cidr
    }

    /// The live addresses named by `services` (stored Service objects).
    pub fn live_ips<'a>(services: impl Iterator<Item = &'a Value>) -> HashSet<Ipv4Addr> {
        let mut live = HashSet::new();
        for svc in services {
            let ips = svc.pointer("/spec/clusterIPs").and_then(Value::as_array);
            let single = svc.pointer("/spec/clusterIP").and_then(Value::as_str);
            for ip in ips.into_iter().flatten().filter_map(Value::as_str).chain(single) {
                if let Ok(ip) = ip.parse::<Ipv4Addr>() {
                    live.insert(ip);
                }
            }
        }
        live
    }

    /// Allocates `requested` (when given) or a random free address, avoiding `live`.
    pub fn allocate(&self, requested: Option<&str>, live: &HashSet<Ipv4Addr>) -> Result<Ipv4Addr, AllocError> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        pending.retain(|ip, at| now.duration_since(*at) < PENDING_TTL && !live.contains(ip));
        if let Some(req) = requested {
            let ip: Ipv4Addr =
                req.parse().map_err(|_| AllocError::OutOfRange(req.to_string(), self.cidr.to_string()))?;
            if !self.cidr.contains(ip) {
                return Err(AllocError::OutOfRange(req.to_string(), self.cidr.to_string()));
            }
            if live.contains(&ip) || pending.contains_key(&ip) {
                return Err(AllocError::Allocated);
            }
            pending.insert(ip, now);
            return Ok(ip);
        }
        // Usable hosts: base+2 ..= base+size-2 (skip network, first host, broadcast).
        let usable = self.cidr.size().saturating_sub(3);
        if usable == 0 {
            return Err(AllocError::Full);
        }
        let start = u32::from_le_bytes(uuid::Uuid::new_v4().into_bytes()[..4].try_into().unwrap_or([0; 4])) % usable;
        for i in 0..usable {
            let offset = 2 + (start + i) % usable;
            let ip = Ipv4Addr::from(self.cidr.base + offset);
            if !live.contains(&ip) && !pending.contains_key(&ip) {
                pending.insert(ip, now);
                return Ok(ip);
            }
        }
        Err(AllocError::Full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_stay_in_range_and_never_repeat_live_ips() {
        let alloc = ClusterIpAllocator::new(Cidr::parse("10.96.0.0/29").unwrap());
        let mut live = HashSet::new();
        for _ in 0..5 {
            let ip = alloc.allocate(None, &live).unwrap();
            assert!(Cidr::parse("10.96.0.0/29").unwrap().contains(ip));
            assert_ne!(ip, Ipv4Addr::new(10, 96, 0, 1));
            assert!(live.insert(ip));
        }
        assert_eq!(alloc.allocate(None, &live), Err(AllocError::Full));
    }

    #[test]
    fn requested_ips_are_checked() {
        let alloc = ClusterIpAllocator::new(Cidr::parse("10.96.0.0/12").unwrap());
        let live: HashSet<Ipv4Addr> = ["10.96.0.10".parse().unwrap()].into_iter().collect();
        assert_eq!(alloc.allocate(Some("10.96.0.10"), &live), Err(AllocError::Allocated));
        assert!(matches!(alloc.allocate(Some("192.168.0.1"), &live), Err(AllocError::OutOfRange(..))));
        assert_eq!(alloc.allocate(Some("10.96.0.11"), &live).unwrap(), Ipv4Addr::new(10, 96, 0, 11));
    }
}
