//! A local OCI image, built without any registry: one uncompressed layer holding a static
//! busybox as `/bin/busybox` plus applet symlinks, an image config, a manifest, and an OCI
//! image layout (`oci-layout`, `index.json`, `blobs/sha256/…`) written as a tar archive that
//! `ctr images import` accepts. Every name in `names` points at the same manifest.
//!
//! Formats: OCI image-spec v1 (layout, index, manifest, config), POSIX ustar archives.

use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

/// Applets linked to `/bin/busybox` in the layer.
const APPLETS: &[&str] = &["sh", "sleep", "true", "false", "echo", "cat", "ls", "stat", "sort", "touch", "ps", "grep", "tr"];

/// One archive entry.
enum Entry<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8], u32),
    Symlink(&'a str, &'a str),
}

/// Writes an octal field of `width` bytes (digits, then NUL).
fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let s = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(&s.as_bytes()[s.len() - digits..]);
    field[digits] = 0;
}

/// A POSIX ustar archive of `entries` (names < 100 bytes; root-owned; mtime 0).
fn ustar(entries: &[Entry<'_>]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    for entry in entries {
        let (name, data, mode, kind, link): (&str, &[u8], u32, u8, &str) = match entry {
            Entry::Dir(n) => (n, &[], 0o755, b'5', ""),
            Entry::File(n, d, m) => (n, d, *m, b'0', ""),
            Entry::Symlink(n, target) => (n, &[], 0o777, b'2', target),
        };
        anyhow::ensure!(name.len() < 100 && link.len() < 100, "tar name too long: {name}");
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        octal(&mut h[100..108], u64::from(mode));
        octal(&mut h[108..116], 0);
        octal(&mut h[116..124], 0);
        octal(&mut h[124..136], data.len() as u64);
        octal(&mut h[136..148], 0);
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[265..269].copy_from_slice(b"root");
        h[297..301].copy_from_slice(b"root");
        h[148..156].fill(b' ');
        let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
        octal(&mut h[148..155], sum);
        h[155] = b' ';
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    Ok(out)
}

fn sha256(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The OCI platform architecture of this machine.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Builds the image layout tarball at `out` from the static `busybox` binary, named `names`
/// (full references, e.g. `registry.k8s.io/pause:3.6`). The image's entrypoint sleeps for
/// ~68 years, so it also serves as the sandbox ("pause") image.
pub fn write_busybox_image(busybox: &Path, names: &[&str], out: &Path) -> anyhow::Result<()> {
    let binary = std::fs::read(busybox)?;
    let links: Vec<String> = APPLETS.iter().map(|a| format!("bin/{a}")).collect();
    let mut entries = vec![Entry::Dir("bin/"), Entry::File("bin/busybox", &binary, 0o755)];
    entries.extend(links.iter().map(|l| Entry::Symlink(l, "busybox")));
    let layer = ustar(&entries)?;
    let layer_digest = sha256(&layer);

    let config = serde_json::to_vec(&json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {"Entrypoint": ["/bin/sleep", "2147483647"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
    }))?;
    let config_digest = sha256(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer.len(),
        }],
    }))?;
    let manifest_digest = sha256(&manifest);
    let descriptors: Vec<serde_json::Value> = names
        .iter()
        .map(|name| {
            json!({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": format!("sha256:{manifest_digest}"),
                "size": manifest.len(),
                "platform": {"architecture": oci_arch(), "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name,
                },
            })
        })
        .collect();
    let index = serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": descriptors}))?;
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;

    let blob = |d: &str| format!("blobs/sha256/{d}");
    let (layer_path, config_path, manifest_path) = (blob(&layer_digest), blob(&config_digest), blob(&manifest_digest));
    let archive = ustar(&[
        Entry::File("oci-layout", layout, 0o644),
        Entry::File("index.json", &index, 0o644),
        Entry::Dir("blobs/"),
        Entry::Dir("blobs/sha256/"),
        Entry::File(&layer_path, &layer, 0o644),
        Entry::File(&config_path, &config, 0o644),
        Entry::File(&manifest_path, &manifest, 0o644),
    ])?;
    std::fs::write(out, archive)?;
    Ok(())
}
