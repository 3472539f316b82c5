//! Helpers of the containerd test: a private containerd ([`daemon`]), a local OCI image
//! ([`oci`]), the node agent on it with an API server ([`node`]), and the "is containerd here" gate. The in-process `rkube up` API server is in
//! `tests/common`.

pub mod daemon;
pub mod node;
pub mod oci;

use std::path::PathBuf;

/// The static busybox, when every binary the test needs is installed and we are root.
/// Otherwise: panics when `$CI` is set (CI must not pass without containerd), or prints why the
/// test is skipped and returns `None`.
pub fn prerequisites() -> Option<PathBuf> {
    let missing: Vec<&str> = daemon::REQUIRED.iter().filter(|(bin, _)| daemon::which(bin).is_none()).map(|(b, _)| *b).collect();
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let problem = if !missing.is_empty() {
        let mut packages: Vec<&str> = daemon::REQUIRED.iter().map(|(_, p)| *p).collect();
        packages.dedup();
        Some(format!("{} not on PATH (apt-get install -y {})", missing.join(", "), packages.join(" ")))
    } else if !root {
        Some("containerd needs root".to_string())
    } else {
        None
    };
    let busybox = daemon::which("busybox");
    let problem = problem.or_else(|| {
        let is_static = busybox.as_deref().and_then(|b| std::fs::read(b).ok()).is_some_and(|elf| is_static_elf(&elf));
        (!is_static).then(|| "busybox on PATH is not statically linked (apt-get install -y busybox-static)".to_string())
    });
    match problem {
        None => busybox,
        Some(why) if std::env::var_os("CI").is_some() => panic!("CI is set but the containerd test cannot run: {why}"),
        Some(why) => {
            eprintln!("SKIPPED containerd test: {why}");
            None
        }
    }
}

/// A 64-bit little-endian ELF without a `PT_INTERP` program header (needs no dynamic loader).
fn is_static_elf(elf: &[u8]) -> bool {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |o: usize| elf.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at = |o: usize| elf.get(o..o + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    if elf.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else { return false };
    let Ok(phoff) = usize::try_from(phoff) else { return false };
    (0..phnum).all(|i| u32_at(phoff + i * phentsize).is_some_and(|ty| ty != 3))
}
