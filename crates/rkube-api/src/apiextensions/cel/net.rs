//! Kubernetes' CEL IP and CIDR libraries (upstream
//! `k8s.io/apiserver/pkg/cel/library/ip.go` and `cidr.go`), over the
//! standard library's addresses.
//!
//! - `ip(s)`, `isIP(s)`, `ip.isCanonical(s)`, `string(ip)`, and the methods
//!   `family()` (4 or 6), `isUnspecified()`, `isLoopback()`,
//!   `isLinkLocalMulticast()`, `isLinkLocalUnicast()`, `isGlobalUnicast()`
//!   with Go's `netip` meanings. Zones (`fe80::1%eth0`), IPv4-mapped IPv6
//!   addresses (`::ffff:1.2.3.4`) and IPv4 octets with leading zeros are
//!   refused, as upstream.
//! - `cidr(s)`, `isCIDR(s)`, `string(cidr)`, and the methods
//!   `containsIP(ip or string)`, `containsCIDR(cidr or string)`, `ip()`
//!   (the address as written), `masked()`, `prefixLength()`.
//!
//! Not as upstream: a string that is not an address fails with Go's
//! generic `unable to parse IP` reason rather than the precise one Go's
//! parser names (e.g. `IPv4 field has value >255`). Each call charges one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cel::common::types::{CelBool, CelInt, CelString, Type, STRING_TYPE};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::cost::charge;
use super::library::{no_such_overload, string_arg, take};

static IP_TYPE: Type = Type::new_unspecified_type("net.IP");
static CIDR_TYPE: Type = Type::new_unspecified_type("net.CIDR");

/// An IP address as a CEL value (`net.IP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip(pub IpAddr);

/// A network (`net.CIDR`): the address as written and the prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The address before the `/`, host bits kept.
    pub addr: IpAddr,
    /// The prefix length in bits.
    pub bits: u8,
}

macro_rules! static_val {
    ($t:ty, $ty:expr) => {
        impl Val for $t {
            fn get_type(&self) -> &Type {
                &$ty
            }
            fn cel_type() -> &'static Type {
                &$ty
            }
            fn equals(&self, other: &dyn Val) -> bool {
                other.downcast_ref::<$t>().is_some_and(|o| o == self)
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
                Box::new(*self)
            }
            fn as_any(&self) -> Option<&dyn std::any::Any> {
                Some(self)
            }
        }
        impl StaticVal for $t {}
    };
}
static_val!(Ip, IP_TYPE);
static_val!(Cidr, CIDR_TYPE);

type Function = cel::common::functions::Function;

/// Registers the functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let (ip, cidr) = (|| IP_TYPE.to_owned(), || CIDR_TYPE.to_owned());
    env.add_overload("ip", "string_to_ip", vec![STRING_TYPE], to_ip)?;
    env.add_overload("isIP", "is_ip", vec![STRING_TYPE], is_ip)?;
    env.add_overload("ip.isCanonical", "ip_is_canonical", vec![STRING_TYPE], is_canonical)?;
    env.add_overload("string", "ip_to_string", vec![ip()], to_string)?;
    let predicates: [(&str, Function); 6] = [
        ("family", family),
        ("isUnspecified", is_unspecified),
        ("isLoopback", is_loopback),
        ("isLinkLocalMulticast", is_link_local_multicast),
        ("isLinkLocalUnicast", is_link_local_unicast),
        ("isGlobalUnicast", is_global_unicast),
    ];
    for (name, f) in predicates {
        env.add_member_overload(name, &format!("ip_{name}"), ip(), vec![], f)?;
    }
    env.add_overload("cidr", "string_to_cidr", vec![STRING_TYPE], to_cidr)?;
    env.add_overload("isCIDR", "is_cidr", vec![STRING_TYPE], is_cidr)?;
    env.add_overload("string", "cidr_to_string", vec![cidr()], to_string)?;
    env.add_member_overload("containsIP", "cidr_contains_ip_string", cidr(), vec![STRING_TYPE], contains_ip)?;
    env.add_member_overload("containsIP", "cidr_contains_ip_ip", cidr(), vec![ip()], contains_ip)?;
    env.add_member_overload("containsCIDR", "cidr_contains_cidr_string", cidr(), vec![STRING_TYPE], contains_cidr)?;
    env.add_member_overload("containsCIDR", "cidr_contains_cidr", cidr(), vec![cidr()], contains_cidr)?;
    env.add_member_overload("ip", "cidr_ip", cidr(), vec![], cidr_ip)?;
    env.add_member_overload("prefixLength", "cidr_prefix_length", cidr(), vec![], prefix_length)?;
    env.add_member_overload("masked", "cidr_masked", cidr(), vec![], masked)
}

/// Parses an address as upstream's `parseIPAddr`; the error is upstream's.
pub fn parse_ip(raw: &str) -> Result<IpAddr, String> {
    if let Some((addr, _zone)) = raw.split_once('%') {
        if addr.parse::<Ipv6Addr>().is_ok() {
            return Err(format!("IP address {raw:?} with zone value is not allowed"));
        }
    }
    let addr: IpAddr = raw.parse().map_err(|_| {
        format!("IP Address {raw:?} parse error during conversion from string: ParseAddr({raw:?}): unable to parse IP")
    })?;
    if let IpAddr::V6(v6) = addr {
        if v6.to_ipv4_mapped().is_some() {
            return Err(format!("IPv4-mapped IPv6 address {raw:?} is not allowed"));
        }
    }
    Ok(addr)
}

/// Parses a network as upstream's `parseCIDR`; the error is Go's
/// `netip.ParsePrefix` reason.
pub fn parse_cidr(raw: &str) -> Result<Cidr, String> {
    let prefix_err = |reason: String| format!("netip.ParsePrefix({raw:?}): {reason}");
    let Some((addr, bits)) = raw.rsplit_once('/') else { return Err(prefix_err("no '/'".into())) };
    if addr.contains('%') {
        return Err(prefix_err("IPv6 zones cannot be present in a prefix".into()));
    }
    let addr: IpAddr = addr.parse().map_err(|_| prefix_err(format!("ParseAddr({addr:?}): unable to parse IP")))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let canonical_digits = !bits.is_empty() && (bits == "0" || !bits.starts_with('0')) && bits.bytes().all(|b| b.is_ascii_digit());
    let bits: u8 = match bits.parse::<u16>() {
        Ok(b) if canonical_digits && b <= max => b as u8,
        Ok(_) if canonical_digits => return Err(prefix_err("prefix length out of range".into())),
        _ => return Err(prefix_err(format!("bad bits after slash: {bits:?}"))),
    };
    if let IpAddr::V6(v6) = addr {
        if v6.to_ipv4_mapped().is_some() {
            return Err(format!("IPv4-mapped IPv6 address {raw:?} is not allowed"));
        }
    }
    Ok(Cidr { addr, bits })
}

/// `addr` with the bits after the first `bits` cleared.
fn mask(addr: IpAddr, bits: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits)) };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if bits == 0 { 0 } else { u128::MAX << (128 - u32::from(bits)) };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

impl Cidr {
    /// Whether `ip` is in this network (same family, same masked bits).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.bits) == mask(self.addr, self.bits)
    }
}

/// Go's `netip.Addr` predicates.
fn link_local_multicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => a.segments()[0] & 0xff0f == 0xff02,
    }
}

fn link_local_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.octets()[..2] == [169, 254],
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn global_unicast(ip: IpAddr) -> bool {
    if ip == IpAddr::V4(Ipv4Addr::BROADCAST) {
        return false;
    }
    !ip.is_unspecified() && !ip.is_loopback() && !ip.is_multicast() && !link_local_unicast(ip)
}

fn fail(function: &str, message: String) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn ip_arg(function: &str, v: &dyn Val) -> Result<IpAddr, ExecutionError> {
    if let Some(ip) = v.downcast_ref::<Ip>() {
        return Ok(ip.0);
    }
    parse_ip(string_arg(function, v)?).map_err(|e| fail(function, e))
}

fn cidr_arg(function: &str, v: &dyn Val) -> Result<Cidr, ExecutionError> {
    if let Some(c) = v.downcast_ref::<Cidr>() {
        return Ok(*c);
    }
    let s = string_arg(function, v)?;
    parse_cidr(s).map_err(|e| fail(function, cidr_error(&e)))
}

/// Upstream wraps the parse error twice.
fn cidr_error(e: &str) -> String {
    if e.starts_with("netip.") {
        format!("network address parse error during conversion from string: network address parse error during conversion from string: {e}")
    } else {
        format!("network address parse error during conversion from string: {e}")
    }
}

fn bool_val<'b, 'v>(b: bool) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelBool::from(b)))
}

fn to_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(1)?;
    let [s] = take(args)?;
    Ok(CowVal::owned(Ip(ip_arg("ip", s.as_ref())?)))
}

fn is_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(1)?;
    let [s] = take(args)?;
    bool_val(parse_ip(string_arg("isIP", s.as_ref())?).is_ok())
}

fn is_canonical<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(1)?;
    let [s] = take(args)?;
    let raw = string_arg("ip.isCanonical", s.as_ref())?;
    let addr = parse_ip(raw).map_err(|e| fail("ip.isCanonical", e))?;
    bool_val(addr.to_string() == raw)
}

fn to_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [v] = take(args)?;
    let text = if let Some(ip) = v.downcast_ref::<Ip>() {
        ip.0.to_string()
    } else if let Some(c) = v.downcast_ref::<Cidr>() {
        format!("{}/{}", c.addr, c.bits)
    } else {
        return Err(no_such_overload("string", &[v.as_ref()]));
    };
    Ok(CowVal::owned(CelString::from(text)))
}

macro_rules! ip_method {
    ($name:ident, $cel:literal, |$ip:ident| $body:expr) => {
        fn $name<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
            charge(1)?;
            let [v] = take(args)?;
            let $ip = v.downcast_ref::<Ip>().map(|i| i.0).ok_or_else(|| no_such_overload($cel, &[v.as_ref()]))?;
            Ok(CowVal::owned($body))
        }
    };
}
ip_method!(family, "family", |ip| CelInt::from(if ip.is_ipv4() { 4 } else { 6 }));
ip_method!(is_unspecified, "isUnspecified", |ip| CelBool::from(ip.is_unspecified()));
ip_method!(is_loopback, "isLoopback", |ip| CelBool::from(ip.is_loopback()));
ip_method!(is_link_local_multicast, "isLinkLocalMulticast", |ip| CelBool::from(link_local_multicast(ip)));
ip_method!(is_link_local_unicast, "isLinkLocalUnicast", |ip| CelBool::from(link_local_unicast(ip)));
ip_method!(is_global_unicast, "isGlobalUnicast", |ip| CelBool::from(global_unicast(ip)));

fn to_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(1)?;
    let [s] = take(args)?;
    Ok(CowVal::owned(cidr_arg("cidr", s.as_ref())?))
}

fn is_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(1)?;
    let [s] = take(args)?;
    bool_val(parse_cidr(string_arg("isCIDR", s.as_ref())?).is_ok())
}

fn contains_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(1)?;
    let [c, ip] = take(args)?;
    let c = cidr_arg("containsIP", c.as_ref())?;
    bool_val(c.contains(ip_arg("containsIP", ip.as_ref())?))
}

fn contains_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(1)?;
    let [c, other] = take(args)?;
    let (c, other) = (cidr_arg("containsCIDR", c.as_ref())?, cidr_arg("containsCIDR", other.as_ref())?);
    bool_val(c.bits <= other.bits && c.contains(other.addr))
}

fn cidr_of(function: &str, v: &dyn Val) -> Result<Cidr, ExecutionError> {
    v.downcast_ref::<Cidr>().copied().ok_or_else(|| no_such_overload(function, &[v]))
}

fn cidr_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [c] = take(args)?;
    Ok(CowVal::owned(Ip(cidr_of("ip", c.as_ref())?.addr)))
}

fn prefix_length<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [c] = take(args)?;
    Ok(CowVal::owned(CelInt::from(i64::from(cidr_of("prefixLength", c.as_ref())?.bits))))
}

fn masked<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [c] = take(args)?;
    let c = cidr_of("masked", c.as_ref())?;
    Ok(CowVal::owned(Cidr { addr: mask(c.addr, c.bits), bits: c.bits }))
}
