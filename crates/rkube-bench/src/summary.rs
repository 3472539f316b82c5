//! `rkube bench summary`: BENCHMARKS.md made from the reports `rkube bench
//! all` wrote, refusing reports of different or modified builds, so every
//! figure in it comes from one named commit and none is typed by hand.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::cli::EVERY_SCENARIO;

/// The Markdown of BENCHMARKS.md from `<out>/<scenario>.{json,md}` of every
/// scenario.
///
/// # Errors
/// A missing or unreadable report; a report whose `machine.rkube_git_commit`
/// does not start with `commit` (at least 7 hex digits), or that was built
/// from a tree with uncommitted changes (`machine.rkube_git_dirty`).
pub fn benchmarks_md(out: &Path, commit: &str) -> anyhow::Result<String> {
    anyhow::ensure!(
        commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "--commit must name a commit by at least 7 hex digits, got {commit:?}"
    );
    let mut full_commit = String::new();
    let mut sections = String::new();
    let mut smoke = Vec::new();
    for scenario in EVERY_SCENARIO {
        let name = scenario.name();
        let json_path = out.join(format!("{name}.json"));
        let text = std::fs::read_to_string(&json_path)
            .with_context(|| format!("reading {} (run `rkube bench all --out {}`)", json_path.display(), out.display()))?;
        let report: Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", json_path.display()))?;
        let machine = &report["machine"];
        let measured = machine["rkube_git_commit"].as_str().unwrap_or("unknown");
        anyhow::ensure!(
            measured.starts_with(commit),
            "{} was measured on commit {measured}, not {commit}",
            json_path.display()
        );
        anyhow::ensure!(
            machine["rkube_git_dirty"] == Value::Bool(false),
            "{} was measured on a build with uncommitted changes (machine.rkube_git_dirty is not false)",
            json_path.display()
        );
        full_commit = measured.to_string();
        if report["command"].as_str().is_some_and(|c| c.contains("--quick")) {
            smoke.push(name);
        }
        let md_path = out.join(format!("{name}.md"));
        let md = std::fs::read_to_string(&md_path).with_context(|| format!("reading {}", md_path.display()))?;
        sections += &section(&md, name, out);
        sections += "\n";
    }
    let mut doc = String::from("# rkube benchmarks\n\n");
    doc += &format!(
        "Made by `rkube bench summary --commit {commit} --out {out}` from the reports in `{out}/` \
         (committed beside this file), which `rkube bench all --out {out}` wrote when run on the \
         release build of commit `{full_commit}` with no uncommitted changes. Every figure below is \
         copied from those reports by that command; none is typed by hand. Each section names its \
         command, machine, start time and parameters.\n\n",
        out = out.display()
    );
    if !smoke.is_empty() {
        doc += &format!(
            "**Smoke runs (`--quick`): the figures of {} mean nothing.**\n\n",
            smoke.join(", ")
        );
    }
    doc += "To measure again and regenerate this file:\n\n```sh\n";
    doc += "cargo build --release -p rkube\n";
    doc += &format!("target/release/rkube bench all --out {}\n", out.display());
    doc += &format!(
        "target/release/rkube bench summary --commit $(git rev-parse HEAD) --out {} > BENCHMARKS.md\n```\n\n",
        out.display()
    );
    doc += &sections;
    Ok(doc)
}

/// A scenario's Markdown one heading level down, its plot linked from beside `out`.
fn section(md: &str, name: &str, out: &Path) -> String {
    let mut s = String::with_capacity(md.len() + 64);
    for line in md.lines() {
        if line.starts_with('#') {
            s.push('#');
        }
        let plot = format!("]({name}.svg)");
        if line.contains(&plot) {
            s += &line.replace(&plot, &format!("]({}/{name}.svg)", out.display()));
        } else {
            s += line;
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write_reports(dir: &Path, commit: &str, dirty: bool, quick: bool) {
        for s in EVERY_SCENARIO {
            let name = s.name();
            let cmd = if quick { format!("rkube bench {name} --quick") } else { format!("rkube bench {name}") };
            let report = json!({"command": cmd, "machine": {"rkube_git_commit": commit, "rkube_git_dirty": dirty}});
            std::fs::write(dir.join(format!("{name}.json")), report.to_string()).unwrap();
            std::fs::write(dir.join(format!("{name}.md")), format!("# rkube bench {name}\n\n| a |\n![{name} plots]({name}.svg)\n")).unwrap();
        }
    }

    #[test]
    fn summary_names_the_one_commit_and_copies_every_report() {
        let dir = tempfile::tempdir().unwrap();
        let commit = "0123456789abcdef0123456789abcdef01234567";
        write_reports(dir.path(), commit, false, false);
        let md = benchmarks_md(dir.path(), "0123456").unwrap();
        assert!(md.contains(&format!("release build of commit `{commit}`")), "{md}");
        for s in EVERY_SCENARIO {
            let name = s.name();
            assert!(md.contains(&format!("\n## rkube bench {name}\n")), "{md}");
            assert!(md.contains(&format!("]({}/{name}.svg)", dir.path().display())), "{md}");
        }
        assert!(!md.contains("Smoke runs"));
    }

    #[test]
    fn reports_of_another_commit_or_a_dirty_tree_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_reports(dir.path(), "0123456789abcdef", false, false);
        let err = benchmarks_md(dir.path(), "fedcba9").unwrap_err().to_string();
        assert!(err.contains("was measured on commit 0123456789abcdef, not fedcba9"), "{err}");
        write_reports(dir.path(), "0123456789abcdef", true, true);
        let err = benchmarks_md(dir.path(), "0123456").unwrap_err().to_string();
        assert!(err.contains("uncommitted changes"), "{err}");
        write_reports(dir.path(), "0123456789abcdef", false, true);
        assert!(benchmarks_md(dir.path(), "0123456").unwrap().contains("**Smoke runs (`--quick`)"));
        std::fs::remove_file(dir.path().join("watch.json")).unwrap();
        assert!(benchmarks_md(dir.path(), "0123456").is_err());
        assert!(benchmarks_md(dir.path(), "xyz").is_err());
    }
}
