//! Stamps the commit the binary is built from into it (`RKUBE_BUILD_COMMIT`,
//! `RKUBE_BUILD_DIRTY`), so a report names the build's commit even when the
//! binary runs from another checkout. Reruns when the checkout's HEAD, its
//! branch ref, or any source of the workspace changes.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let crate_dir = Path::new(&manifest);
    // crates/rkube-bench -> workspace root
    let root = crate_dir.ancestors().nth(2).unwrap_or(crate_dir);
    println!("cargo:rerun-if-changed={}", root.join("crates").display());
    println!("cargo:rerun-if-changed={}", root.join("Cargo.lock").display());
    if let Some(git_dir) = git(root, &["rev-parse", "--absolute-git-dir"]) {
        let git_dir = Path::new(&git_dir);
        println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
        println!("cargo:rerun-if-changed={}", git_dir.join("index").display());
        if let Some(r) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
            // Worktrees keep branch refs in the common dir.
            let common = git(root, &["rev-parse", "--git-common-dir"]).map(|c| root.join(c));
            let base = common.as_deref().unwrap_or(git_dir);
            println!("cargo:rerun-if-changed={}", base.join(&r).display());
            println!("cargo:rerun-if-changed={}", base.join("packed-refs").display());
        }
    }
    let commit = git(root, &["rev-parse", "HEAD"]).unwrap_or_default();
    // Outputs of benchmark runs do not make a build dirty.
    let dirty = git(
        root,
        &["status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench-results", ":(exclude)BENCHMARKS.md"],
    )
    .map(|s| if s.is_empty() { "false" } else { "true" })
    .unwrap_or("");
    println!("cargo:rustc-env=RKUBE_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=RKUBE_BUILD_DIRTY={dirty}");
}
