//! Every flag `rkube <subcommand> --help` lists is used: the test walks the
//! clap definition of the whole command line (every subcommand, every flag,
//! whatever crate defines it) and fails, naming the flag, when the field it
//! is parsed into is never read by the non-test code of the workspace (no
//! `.field` access outside `#[cfg(test)]` modules). Flags kept only for old
//! command lines must be declared in `rkube::DEPRECATED_FLAGS`, and then
//! warn when used, as upstream's deprecated flags do.
//!
//! A read is found by text, not by type: a field read only to be copied into
//! a setting nobody uses still counts as read; the behaviour of each flag is
//! the job of its own tests.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

/// The non-test Rust source of every crate of the workspace.
fn workspace_source() -> String {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("crates dir")
        .filter_map(|e| e.ok().map(|e| e.path().join("src")))
        .filter(|p| p.is_dir())
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("source dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut all = String::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read source");
        // Test modules sit at the end of a file, after `#[cfg(test)]`.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        all.push_str(code);
        all.push('\n');
    }
    all
}

/// Whether `source` reads the field `field` (`x.field` not followed by `(`
/// or more identifier characters).
fn reads_field(source: &str, field: &str) -> bool {
    let needle = format!(".{field}");
    source.match_indices(&needle).any(|(at, _)| {
        let next = source[at + needle.len()..].chars().next();
        !matches!(next, Some(c) if c.is_alphanumeric() || c == '_' || c == '(')
    })
}

/// `rkube <path> --<flag>` for every flag whose field `source` never reads.
fn unread_flags(cmd: &clap::Command, path: &str, source: &str, out: &mut Vec<String>) {
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if matches!(id, "help" | "version") {
            continue;
        }
        let deprecated = rkube::DEPRECATED_FLAGS.iter().any(|d| d.command == path && d.flag == id);
        if !deprecated && !reads_field(source, id) {
            let name = arg.get_long().map(|l| format!("--{l}")).unwrap_or_else(|| format!("<{id}>"));
            out.push(format!("rkube {path} {name} (field `{id}`)"));
        }
    }
    for sub in cmd.get_subcommands() {
        let path = if path.is_empty() { sub.get_name().to_string() } else { format!("{path} {}", sub.get_name()) };
        unread_flags(sub, &path, source, out);
    }
}

#[test]
fn every_flag_is_read_or_declared_deprecated() {
    let cli = rkube::Cli::command();
    let source = workspace_source();
    let mut unread = Vec::new();
    unread_flags(&cli, "", &source, &mut unread);
    assert!(unread.is_empty(), "flags parsed but never read:\n{}", unread.join("\n"));
    // The walk saw every subcommand and their flags.
    let subs: Vec<&str> = cli.get_subcommands().map(|s| s.get_name()).collect();
    for expected in ["apiserver", "up", "proxy", "runtime", "node", "scheduler", "controller-manager", "bench"] {
        assert!(subs.contains(&expected), "{subs:?}");
    }
}

#[test]
fn the_check_finds_an_unread_flag() {
    #[derive(clap::Parser)]
    struct Fake {
        #[arg(long)]
        used: bool,
        #[arg(long = "never-read")]
        never_read: Option<String>,
    }
    let source = "fn run(a: Fake) { if a.used { } let _ = a.never_read_len(); }";
    let mut unread = Vec::new();
    unread_flags(&Fake::command(), "fake", source, &mut unread);
    assert_eq!(unread, vec!["rkube fake --never-read (field `never_read`)".to_string()]);
}

#[test]
fn deprecated_flags_exist_and_warn_like_upstream() {
    let cli = rkube::Cli::command();
    for d in rkube::DEPRECATED_FLAGS {
        let sub = cli.find_subcommand(d.command).unwrap_or_else(|| panic!("no subcommand {}", d.command));
        assert!(sub.get_arguments().any(|a| a.get_id() == d.flag), "{} has no --{}", d.command, d.flag);
    }
    let matches = cli.clone().try_get_matches_from(["rkube", "up", "--secure"]).expect("parses");
    assert_eq!(
        rkube::deprecation_warnings(&matches),
        vec!["Flag --secure has been deprecated, HTTPS is the default; --insecure serves plain HTTP".to_string()]
    );
    let matches = cli.try_get_matches_from(["rkube", "up"]).expect("parses");
    assert!(rkube::deprecation_warnings(&matches).is_empty());
}
