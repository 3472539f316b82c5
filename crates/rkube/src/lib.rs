//! The `rkube` command line, as a library so tests can enumerate it: the
//! subcommands ([`Command`]), each with its crate's flags, and the flags kept
//! only for compatibility ([`DEPRECATED_FLAGS`]), which warn when used as
//! upstream's deprecated flags do (`Flag --x has been deprecated, ...`).

use clap::{Parser, Subcommand};

/// rkube: a Kubernetes control-plane core and node data path.
#[derive(Parser, Debug)]
#[command(name = "rkube", version, about)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Parsed once at start-up, so the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a Kubernetes-compatible API server (flags named like kube-apiserver's).
    Apiserver(rkube_apiserver::cli::ApiserverArgs),
    /// Start an API server on the embedded store in a data directory and print the kubeconfig export line.
    Up(rkube_apiserver::cli::UpArgs),
    /// Run the service proxy (iptables mode, partial restores; flags named like kube-proxy's).
    Proxy(rkube_proxy::cli::ProxyArgs),
    /// Run the CRI v1 runtime that runs containers as host processes.
    Runtime(rkube_runtime::cli::RuntimeArgs),
    /// Run the node agent (registers a Node, runs its pods through a CRI runtime, evented PLEG).
    Node(rkube_node::cli::NodeArgs),
    /// Run the scheduler: binds pending pods to nodes that fit (flags named like kube-scheduler's).
    Scheduler(rkube_scheduler::cli::SchedulerArgs),
    /// Run the controllers that drive workloads (deployment, replicaset, ...; flags named like kube-controller-manager's).
    ControllerManager(rkube_controller_manager::cli::ControllerManagerArgs),
    /// Run a benchmark scenario (or `all`) and write bench-results/<scenario>.{json,md,svg}; `summary` prints BENCHMARKS.md from them.
    Bench(rkube_bench::cli::BenchArgs),
    /// Save, restore or check snapshots of the embedded store (like etcdctl/etcdutl snapshot).
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
}

/// `rkube snapshot ...` (see `rkube_storage::embedded::snapshot`).
#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Write a consistent copy of the store, at one revision, to FILE; works while the server runs.
    Save(SnapshotSaveArgs),
    /// Install FILE as the store of a data dir (the server must be stopped); keeps the snapshot's revision.
    Restore(SnapshotRestoreArgs),
    /// Verify a store or snapshot file and print its revision, keys and size.
    Check(SnapshotCheckArgs),
}

/// `rkube snapshot save FILE [--data-dir DIR]`.
#[derive(clap::Args, Debug)]
pub struct SnapshotSaveArgs {
    /// The snapshot file to write (replaced if it exists; mode 0600).
    pub file: std::path::PathBuf,
    /// The data dir whose embedded store is saved.
    #[arg(long = "data-dir", default_value = "./.rkube")]
    pub data_dir: std::path::PathBuf,
}

/// `rkube snapshot restore FILE [--data-dir DIR] [--overwrite]`.
#[derive(clap::Args, Debug)]
pub struct SnapshotRestoreArgs {
    /// The snapshot file.
    pub file: std::path::PathBuf,
    /// The data dir to restore into (created 0700 if missing).
    #[arg(long = "data-dir", default_value = "./.rkube")]
    pub data_dir: std::path::PathBuf,
    /// Replace a store that already holds data (its later revision is kept, marked compacted).
    #[arg(long)]
    pub overwrite: bool,
}

/// `rkube snapshot check FILE`.
#[derive(clap::Args, Debug)]
pub struct SnapshotCheckArgs {
    /// A snapshot file, or a data dir's rkube.redb.
    pub file: std::path::PathBuf,
}

/// A flag kept only so old command lines still parse.
#[derive(Debug, Clone, Copy)]
pub struct DeprecatedFlag {
    /// The subcommand (`up`).
    pub command: &'static str,
    /// The flag's long name, without dashes (also its clap id).
    pub flag: &'static str,
    /// What to do instead.
    pub message: &'static str,
}

/// Every deprecated flag; using one prints
/// `Flag --<flag> has been deprecated, <message>` on stderr (the text of
/// upstream's `spf13/pflag` for a flag marked deprecated).
pub const DEPRECATED_FLAGS: &[DeprecatedFlag] = &[DeprecatedFlag {
    command: "up",
    flag: "secure",
    message: "HTTPS is the default; --insecure serves plain HTTP",
}];

/// The warnings for the deprecated flags set on `matches`' command line.
pub fn deprecation_warnings(matches: &clap::ArgMatches) -> Vec<String> {
    let Some((command, sub)) = matches.subcommand() else { return Vec::new() };
    DEPRECATED_FLAGS
        .iter()
        .filter(|d| d.command == command)
        .filter(|d| sub.try_contains_id(d.flag).unwrap_or(false) && sub.value_source(d.flag) == Some(clap::parser::ValueSource::CommandLine))
        .map(|d| format!("Flag --{} has been deprecated, {}", d.flag, d.message))
        .collect()
}

/// Parses the process's arguments (exiting with clap's message on an
/// error) and prints a warning for each deprecated flag used.
pub fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    for w in deprecation_warnings(&matches) {
        eprintln!("{w}");
    }
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}
