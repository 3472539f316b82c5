//! Talking to iptables: the [`Iptables`] trait and [`ExecIptables`], which spawns
//! `iptables-restore`, `iptables-save` and `iptables` (optionally as
//! `ip netns exec <ns> …`, which is how the tests aim at a namespace they made).
//!
//! Follows upstream `pkg/util/iptables` (`RestoreAll` with `--noflush
//! --counters`, `SaveInto`, `EnsureChain`, `EnsureRule`, `ParseError` line
//! extraction). Also parses `iptables-save` output ([`SavedTable`]) and
//! normalizes it for comparisons ([`normalize_save`]).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// Errors from iptables commands.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// The command ran and failed.
    #[error("{command} failed ({status}): {stderr}{context}")]
    Failed {
        /// The command line.
        command: String,
        /// Exit status.
        status: String,
        /// Its standard error.
        stderr: String,
        /// For restores: the input lines around the failing one.
        context: String,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, Error>;

/// An iptables table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// `nat`.
    Nat,
    /// `filter`.
    Filter,
    /// `mangle`.
    Mangle,
}

impl Table {
    /// The table's name.
    pub fn name(self) -> &'static str {
        match self {
            Table::Nat => "nat",
            Table::Filter => "filter",
            Table::Mangle => "mangle",
        }
    }
}

/// What the proxy needs from iptables. Implementations act on one network namespace.
pub trait Iptables: Send {
    /// `iptables-restore --noflush --counters` with `data` on stdin: chains named in
    /// `data` are replaced, all others left alone.
    fn restore_all(&mut self, data: &[u8]) -> Result<()>;
    /// `iptables-save -t <table>`.
    fn save(&mut self, table: Table) -> Result<String>;
    /// The `iptables-save` text of each of `tables` (empty for a table that does not
    /// exist yet). The default saves them one by one; [`ExecIptables`] runs a single
    /// `iptables-save`, since iptables-nft reads the whole ruleset for any table
    /// (at 10,000 services a filter-only save costs as much as the nat one).
    fn save_tables(&mut self, tables: &[Table]) -> Result<BTreeMap<Table, String>> {
        let mut out = BTreeMap::new();
        for &t in tables {
            out.insert(t, self.save(t)?);
        }
        Ok(out)
    }
    /// Create `chain` in `table` unless it exists (upstream `EnsureChain`).
    fn ensure_chain(&mut self, table: Table, chain: &str) -> Result<()>;
    /// Insert the rule `args` at the top of `chain` unless an identical rule exists
    /// (upstream `EnsureRule(Prepend, …)`).
    fn ensure_rule_prepend(&mut self, table: Table, chain: &str, args: &[&str]) -> Result<()>;
    /// IPv4 addresses of the namespace's interfaces (for `--nodeport-addresses`).
    fn local_ipv4_addresses(&mut self) -> Result<Vec<Ipv4Addr>>;
    /// Whether the binaries program the kernel through nf_tables (`iptables
    /// --version` prints `(nf_tables)`) rather than legacy x_tables. The writer
    /// splits large nat updates into several transactions only for nf_tables.
    /// The default says legacy (one transaction, always valid).
    fn is_nf_tables(&mut self) -> Result<bool> {
        Ok(false)
    }
}

/// The real thing: spawns the iptables binaries (`iptables*`, whichever backend the
/// system's alternatives select, or explicitly `iptables-legacy*`).
#[derive(Debug, Clone, Default)]
pub struct ExecIptables {
    netns: Option<String>,
    legacy: bool,
    /// `iptables --version` said nf_tables (asked once).
    nf_tables: Option<bool>,
}

impl ExecIptables {
    /// Act on the current network namespace.
    pub fn new() -> Self {
        Self { netns: None, legacy: false, nf_tables: None }
    }

    /// Act inside the named namespace (`ip netns exec <ns> …`).
    pub fn in_netns(ns: impl Into<String>) -> Self {
        Self { netns: Some(ns.into()), legacy: false, nf_tables: None }
    }

    /// Use the legacy (x_tables) binaries `iptables-legacy`, `iptables-legacy-save`
    /// and `iptables-legacy-restore` instead of the default ones.
    pub fn legacy(mut self) -> Self {
        self.legacy = true;
        self
    }

    /// The binary for `program` (`iptables`, `iptables-save`, `iptables-restore`).
    fn binary(&self, program: &str) -> String {
        match (self.legacy, program.strip_prefix("iptables")) {
            (true, Some(rest)) => format!("iptables-legacy{rest}"),
            _ => program.to_string(),
        }
    }

    fn command(&self, program: &str, args: &[&str]) -> (Command, String) {
        let program = self.binary(program);
        let mut argv: Vec<&str> = Vec::new();
        if let Some(ns) = &self.netns {
            argv.extend(["ip", "netns", "exec", ns.as_str()]);
        }
        argv.push(&program);
        argv.extend_from_slice(args);
        let line = argv.join(" ");
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..]);
        (cmd, line)
    }

    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<(bool, String, String, String)> {
        let (mut cmd, line) = self.command(program, args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        let mut child = cmd.spawn().map_err(|source| Error::Spawn { command: line.clone(), source })?;
        if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(data).map_err(|source| Error::Spawn { command: line.clone(), source })?;
        }
        let out = child.wait_with_output().map_err(|source| Error::Spawn { command: line.clone(), source })?;
        Ok((
            out.status.success(),
            out.status.to_string(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// Whether `chain` exists in `table`.
    pub fn chain_exists(&self, table: Table, chain: &str) -> Result<bool> {
        let (ok, ..) = self.run("iptables", &["-w", "5", "-t", table.name(), "-S", chain, "1"], None)?;
        Ok(ok)
    }

    fn check(&self, program: &str, args: &[&str]) -> Result<String> {
        let (ok, status, stdout, stderr) = self.run(program, args, None)?;
        if ok {
            Ok(stdout)
        } else {
            Err(Error::Failed { command: self.command(program, args).1, status, stderr, context: String::new() })
        }
    }
}

impl Iptables for ExecIptables {
    fn restore_all(&mut self, data: &[u8]) -> Result<()> {
        let args = ["-w", "5", "--noflush", "--counters"];
        let (ok, status, _, stderr) = self.run("iptables-restore", &args, Some(data))?;
        if ok {
            return Ok(());
        }
        Err(Error::Failed {
            command: self.command("iptables-restore", &args).1,
            status,
            context: failing_line(&stderr).map(|n| extract_lines(data, n, 3)).unwrap_or_default(),
            stderr,
        })
    }

    fn save(&mut self, table: Table) -> Result<String> {
        self.check("iptables-save", &["-t", table.name()])
    }

    fn save_tables(&mut self, tables: &[Table]) -> Result<BTreeMap<Table, String>> {
        let all = self.check("iptables-save", &[])?;
        let mut sections = split_save_tables(&all);
        Ok(tables.iter().map(|t| (*t, sections.remove(t.name()).unwrap_or_default())).collect())
    }

    fn ensure_chain(&mut self, table: Table, chain: &str) -> Result<()> {
        if self.chain_exists(table, chain)? {
            return Ok(());
        }
        self.check("iptables", &["-w", "5", "-t", table.name(), "-N", chain]).map(|_| ())
    }

    fn ensure_rule_prepend(&mut self, table: Table, chain: &str, args: &[&str]) -> Result<()> {
        let mut check = vec!["-w", "5", "-t", table.name(), "-C", chain];
        check.extend_from_slice(args);
        let (exists, ..) = self.run("iptables", &check, None)?;
        if exists {
            return Ok(());
        }
        let mut insert = vec!["-w", "5", "-t", table.name(), "-I", chain];
        insert.extend_from_slice(args);
        self.check("iptables", &insert).map(|_| ())
    }

    fn local_ipv4_addresses(&mut self) -> Result<Vec<Ipv4Addr>> {
        let mut args: Vec<&str> = Vec::new();
        if let Some(ns) = &self.netns {
            args.extend(["-n", ns.as_str()]);
        }
        args.extend(["-o", "-4", "addr", "show"]);
        let (cmd, line) = (Command::new("ip").args(&args).output(), format!("ip {}", args.join(" ")));
        let out = cmd.map_err(|source| Error::Spawn { command: line.clone(), source })?;
        if !out.status.success() {
            return Err(Error::Failed {
                command: line,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                context: String::new(),
            });
        }
        Ok(parse_ip_addr_output(&String::from_utf8_lossy(&out.stdout)))
    }

    fn is_nf_tables(&mut self) -> Result<bool> {
        if self.legacy {
            return Ok(false);
        }
        if let Some(known) = self.nf_tables {
            return Ok(known);
        }
        let version = self.check("iptables", &["--version"])?;
        let known = version.contains("nf_tables");
        self.nf_tables = Some(known);
        Ok(known)
    }
}

/// Split the output of `iptables-save` (all tables) into each table's text, keyed
/// by table name, each from its `*table` line through its `COMMIT`.
pub fn split_save_tables(text: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('*') {
            current = Some(name.trim().to_string());
        }
        if let Some(name) = &current {
            let section = out.entry(name.clone()).or_default();
            section.push_str(line);
            section.push('\n');
        }
        if line == "COMMIT" {
            current = None;
        }
    }
    out
}

/// Addresses from `ip -o -4 addr show` lines (`… inet 10.0.0.1/24 …`).
pub fn parse_ip_addr_output(text: &str) -> Vec<Ipv4Addr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "inet")?;
            words.next()?.split('/').next()?.parse().ok()
        })
        .collect()
}

/// The line number iptables-restore names in "line N failed" (upstream `ParseError`).
fn failing_line(stderr: &str) -> Option<usize> {
    let idx = stderr.find("line ")?;
    stderr[idx + 5..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Lines `n-count..=n+count` of `data`, numbered, the failing one marked
/// (upstream `ExtractLines`).
pub fn extract_lines(data: &[u8], n: usize, count: usize) -> String {
    let text = String::from_utf8_lossy(data);
    let mut out = String::from("\n");
    for (i, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
        if i + count >= n && i <= n + count {
            let mark = if i == n { "=>" } else { "  " };
            out.push_str(&format!("{mark} {i}: {line}\n"));
        }
    }
    out
}

/// One table as `iptables-save` printed it: chains with their rules in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedTable {
    /// Chain name → rule lines (`-A CHAIN …`) in kernel order. Built-in chains included.
    pub chains: BTreeMap<String, Vec<String>>,
}

impl SavedTable {
    /// Parse `iptables-save` output of a single table (comments and counters ignored).
    pub fn parse(text: &str) -> Self {
        let mut chains: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for line in text.lines() {
            if let Some(decl) = line.strip_prefix(':') {
                if let Some(name) = decl.split_whitespace().next() {
                    chains.entry(name.to_string()).or_default();
                }
            } else if let Some(rule) = line.strip_prefix("-A ") {
                if let Some(name) = rule.split_whitespace().next() {
                    chains.entry(name.to_string()).or_default().push(line.to_string());
                }
            }
        }
        Self { chains }
    }

    /// Number of rules in the chains `owned` accepts.
    pub fn rule_count(&self, owned: impl Fn(&str) -> bool) -> usize {
        self.chains.iter().filter(|(c, _)| owned(c)).map(|(_, r)| r.len()).sum()
    }
}

/// Normalize `iptables-save` output for comparison: drop comments, `*table`/`COMMIT`
/// framing and counters; list chains sorted by name, each followed by its rules in
/// kernel order (order within a chain matters, order of chains does not).
pub fn normalize_save(text: &str) -> String {
    let table = SavedTable::parse(text);
    let mut out = String::new();
    for (chain, rules) in &table.chains {
        out.push(':');
        out.push_str(chain);
        out.push('\n');
        for r in rules {
            out.push_str(r);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_selects_legacy_binaries() {
        let ipt = ExecIptables::in_netns("x").legacy();
        assert_eq!(ipt.binary("iptables-restore"), "iptables-legacy-restore");
        assert_eq!(ipt.binary("iptables"), "iptables-legacy");
        assert_eq!(ExecIptables::new().binary("iptables-save"), "iptables-save");
        assert_eq!(ipt.command("iptables-save", &["-t", "nat"]).1, "ip netns exec x iptables-legacy-save -t nat");
    }

    #[test]
    fn failing_line_is_found_and_context_extracted() {
        let stderr = "iptables-restore: line 3 failed\n";
        assert_eq!(failing_line(stderr), Some(3));
        let ctx = extract_lines(b"a\nb\nc\nd\ne\nf\ng\n", 3, 1);
        assert_eq!(ctx, "\n   2: b\n=> 3: c\n   4: d\n");
    }

    #[test]
    fn save_output_normalizes_chain_order_and_counters() {
        let a = "# Generated\n*nat\n:KUBE-B - [3:4]\n:KUBE-A - [0:0]\n-A KUBE-B -j RETURN\n-A KUBE-A -j KUBE-B\nCOMMIT\n";
        let b = "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-A KUBE-B -j RETURN\nCOMMIT\n# done\n";
        assert_eq!(normalize_save(a), normalize_save(b));
        assert_eq!(SavedTable::parse(a).rule_count(|c| c.starts_with("KUBE-")), 2);
        assert_eq!(SavedTable::parse(a).rule_count(|c| c == "KUBE-A"), 1);
    }

    #[test]
    fn save_of_all_tables_splits_into_tables() {
        let text = "# Generated by iptables-nft-save\n*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n\
                    # Completed\n*nat\n:KUBE-SVC-A - [0:0]\n-A KUBE-SVC-A -j KUBE-SEP-B\nCOMMIT\n";
        let tables = split_save_tables(text);
        assert_eq!(tables.len(), 2);
        assert!(SavedTable::parse(&tables["mangle"]).chains.contains_key("KUBE-PROXY-CANARY"));
        let nat = SavedTable::parse(&tables["nat"]);
        assert_eq!(nat.chains["KUBE-SVC-A"], vec!["-A KUBE-SVC-A -j KUBE-SEP-B".to_string()]);
        assert!(!nat.chains.contains_key("KUBE-PROXY-CANARY"));
    }

    #[test]
    fn ip_addr_output_yields_ipv4_addresses() {
        let text = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n\
                    5: veth0    inet 10.200.1.1/24 scope global veth0\\ valid_lft forever\n";
        assert_eq!(
            parse_ip_addr_output(text),
            vec![Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(10, 200, 1, 1)]
        );
    }
}
