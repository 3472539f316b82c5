//! The `rkube` command line: a thin layer over the library crates.
//!
//! `rkube apiserver | up | proxy | runtime | node | scheduler | controller-manager | bench | snapshot`; the
//! command line is defined in the `rkube` library (`src/lib.rs`), each
//! subcommand's flags and behaviour in its crate (`rkube_apiserver::cli`,
//! `rkube_proxy::cli`, `rkube_storage::embedded::snapshot`).

use rkube::{Command, SnapshotCommand};

/// jemalloc, with its background purging threads: after a burst (clients
/// stalled on large LISTs, then gone) it gives the memory back to the system,
/// where glibc's malloc kept 42–70 MiB of it and mimalloc all of it.
/// `rkube bench stalled` (100 HTTP/1.1 clients + 100 HTTP/2 streams on a
/// 14 MiB LIST; RSS 20 s after they left minus RSS before; debug builds of
/// one commit, 3 runs each, interleaved): glibc +42, +70, +51 MiB; jemalloc
/// 0, 0, 0 (below the baseline); mimalloc +91, +93, +92 MiB.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once before `main` (jemalloc's `malloc_conf`
/// global; the `_rjem_` prefix is tikv-jemalloc-sys's symbol prefix; a
/// NUL-terminated C string, of which jemalloc reads the pointer, the first
/// word of the slice). `_RJEM_MALLOC_CONF` in the environment still
/// overrides it.
///
/// `oversize_threshold:0` turns off jemalloc 5.3's separate arena for
/// allocations of 8 MiB and more, which gives their pages back at once
/// (`madvise`) when they are freed: a large request body (a 3 MiB ConfigMap
/// of 168,000 keys decodes into maps whose entry arrays pass 8 MiB) then
/// paid for faulting in fresh zeroed pages for each one, about a fifth of
/// its CPU time. Large allocations now come from the ordinary arenas and are
/// purged by the background threads after `dirty_decay_ms` (10 s), so memory
/// is still returned after a burst. Measured with `rkube bench bodies` (see
/// BENCHMARKS.md).
///
/// `narenas:1`: one arena for every thread (jemalloc's default is four per
/// CPU). The threads that run requests change all the time: a large body
/// is decoded under `block_in_place`, which hands the worker's place to
/// another thread, and storage reads run on the blocking pool, whose
/// threads come and go. Each new thread was bound to one of the 8 arenas,
/// so a request's memory was often freed into one arena and needed again
/// in another, where it came as fresh pages: about 12,000 page faults per
/// accepted create of a 1 MiB ConfigMap, against about 4,000 with one
/// arena. Measured on 2 CPUs, `rkube bench` on one release build with and
/// without `_RJEM_MALLOC_CONF=narenas:1`, 2 rounds interleaved: the
/// accepted create 135 → 114 ms of CPU, the PUT 120 → 107 ms, refused 3 MiB
/// creates 0.63–0.89 of before, server-side apply within its noise (0.88,
/// 1.14); LIST of 100,000 objects, writes at concurrency 1–64 and the
/// memory of stalled clients unchanged within the noise (±10 %). On a
/// machine with many CPUs, `_RJEM_MALLOC_CONF=narenas:N` gives more arenas
/// back.
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &[u8] = b"oversize_threshold:0,narenas:1\0";

/// Gives arena 0, the one arena every thread uses ([`MALLOC_CONF`]'s
/// `narenas:1`), the oversize threshold `oversize_threshold:0` asks for.
/// jemalloc 5.3 creates arena 0 before it turns that option into the
/// threshold arenas get (`arena_init_huge` runs after `arena_boot`), so
/// arena 0 kept the default 8 MiB: every extent of 8 MiB or more freed
/// there was purged at once, and the next large allocation faulted in
/// fresh zeroed pages (the map entries of a 3 MiB ConfigMap pass 8 MiB).
/// Errors of the control call are ignored: the allocator works either way.
fn keep_large_extents_in_arena_zero() {
    // SAFETY: `arena.0.oversize_threshold` is a size_t control of arena 0,
    // which exists once jemalloc is initialised (any allocation does it;
    // `rkube::parse` has allocated).
    let _ = unsafe { tikv_jemalloc_ctl::raw::write(b"arena.0.oversize_threshold\0", usize::MAX) };
}

fn main() -> std::process::ExitCode {
    let cli = rkube::parse();
    keep_large_extents_in_arena_zero();
    // One crypto provider (ring) for every TLS client and server in the process:
    // reqwest, kube-rs and the API server's rustls all find it here, whatever
    // features cargo unified for them.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("rkube: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Apiserver(args) => rkube_apiserver::cli::run_apiserver(args).await,
            Command::Up(args) => up(args).await,
            Command::Proxy(args) => rkube_proxy::cli::run(args).await,
            Command::Runtime(args) => rkube_runtime::cli::run(args).await,
            Command::Node(args) => rkube_node::cli::run(args).await,
            Command::Scheduler(args) => rkube_scheduler::cli::run(args).await,
            Command::ControllerManager(args) => rkube_controller_manager::cli::run(args).await,
            Command::Bench(args) => rkube_bench::cli::run(args).await,
            Command::Snapshot(cmd) => tokio::task::spawn_blocking(move || run_snapshot(cmd)).await?,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("rkube: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs `rkube snapshot ...`; prints one line on success.
fn run_snapshot(cmd: SnapshotCommand) -> anyhow::Result<()> {
    use rkube_storage::embedded::snapshot;
    match cmd {
        SnapshotCommand::Save(args) => {
            let status = snapshot::save(&args.data_dir, &args.file)?;
            println!("Snapshot saved at {}: {status}", args.file.display());
        }
        SnapshotCommand::Restore(args) => {
            let status = snapshot::restore(&args.file, &args.data_dir, args.overwrite)?;
            println!("Restored {} into {}: {status}", args.file.display(), args.data_dir.display());
        }
        SnapshotCommand::Check(args) => {
            let status = snapshot::check(&args.file)?;
            println!("{}: ok: {status}", args.file.display());
        }
    }
    Ok(())
}

/// `rkube up [--node]`: the API server, then, once it answers, the
/// controller manager (every controller enabled by default) as
/// `system:kube-controller-manager`, the scheduler as `system:kube-scheduler`
/// and, with `--node`, a local node (CRI runtime + node agent); they stop,
/// in reverse order, when the server does.
async fn up(args: rkube_apiserver::cli::UpArgs) -> anyhow::Result<()> {
    let data_dir = args.data_dir.clone();
    let (with_node, insecure) = (args.node, args.insecure);
    let storage_path = args.default_local_storage_path.clone();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let mut server = tokio::spawn(rkube_apiserver::cli::run_up_with(args, move || {
        let _ = ready_tx.send(());
    }));
    tokio::select! {
        ready = ready_rx => {
            if ready.is_err() {
                return server.await?;
            }
        }
        result = &mut server => return result?,
    }
    let data_dir = std::fs::canonicalize(&data_dir)?;
    let storage_path = storage_path.unwrap_or_else(|| data_dir.join("storage"));
    if let Err(err) = ensure_default_storage_class(&data_dir).await {
        server.abort();
        return Err(err.context("creating the default StorageClass"));
    }
    let controllers = match start_controllers(&data_dir, insecure, storage_path).await {
        Ok(cm) => cm,
        Err(err) => {
            server.abort();
            return Err(err.context("starting the controller manager"));
        }
    };
    let scheduler = match start_scheduler(&data_dir, insecure).await {
        Ok(s) => s,
        Err(err) => {
            server.abort();
            controllers.shutdown().await;
            return Err(err.context("starting the scheduler"));
        }
    };
    let node = if with_node {
        let starting = rkube_node::run_local_node(data_dir.join("kubeconfig"), &data_dir);
        tokio::pin!(starting);
        // SIGTERM while the node starts (it waits for its serving certificate) stops at once.
        let started = tokio::select! {
            started = &mut starting => started,
            result = &mut server => {
                let _ = scheduler.shutdown().await;
                controllers.shutdown().await;
                return result?;
            }
        };
        match started {
            Ok(node) => {
                eprintln!("rkube: node {} is running pods on this machine", node.node_name);
                Some(node)
            }
            Err(err) => {
                server.abort();
                let _ = scheduler.shutdown().await;
                controllers.shutdown().await;
                return Err(err.context("starting the local node"));
            }
        }
    } else {
        None
    };
    let result = server.await;
    if let Some(node) = node {
        node.shutdown().await;
    }
    if let Err(err) = scheduler.shutdown().await {
        eprintln!("rkube: scheduler: {err}");
    }
    controllers.shutdown().await;
    result?
}

/// The in-process scheduler of `rkube up`: one replica, so no leader
/// election and no health server (`--leader-elect=false --secure-port=0`).
/// It authenticates as `system:kube-scheduler` with the kubeconfig `rkube up`
/// wrote for it (`scheduler.kubeconfig`), or with `--insecure` as everyone
/// does, through the plain kubeconfig.
async fn start_scheduler(data_dir: &std::path::Path, insecure: bool) -> anyhow::Result<rkube_scheduler::cli::SchedulerHandle> {
    let file = if insecure { "kubeconfig" } else { "scheduler.kubeconfig" };
    let client = rkube_component::client::client(Some(&data_dir.join(file))).await?;
    rkube_scheduler::cli::start(client, rkube_scheduler::cli::StartOptions::default()).await
}

/// The controllers `rkube controller-manager` runs by default, plus the
/// local-path provisioner writing under `storage_path` (as k3s ships it), in
/// this process, as `system:kube-controller-manager` with the kubeconfig
/// `rkube up` wrote for it (`controller-manager.kubeconfig`) and
/// `--use-service-account-credentials`: each controller acts as its
/// ServiceAccount `kube-system/<name>` (as kubeadm runs
/// kube-controller-manager). With `--insecure` (no authentication) every
/// controller uses the plain kubeconfig.
async fn start_controllers(
    data_dir: &std::path::Path,
    insecure: bool,
    storage_path: std::path::PathBuf,
) -> anyhow::Result<rkube_controller_manager::cli::ControllerManager> {
    use rkube_controller_manager::client_builder::{ControllerClients, ServiceAccountClients};
    use rkube_controller_manager::{cli, context::ControllerConfig, controllers};
    let file = if insecure { "kubeconfig" } else { "controller-manager.kubeconfig" };
    let kube_config = rkube_component::client::config(Some(&data_dir.join(file))).await?;
    let client = rkube_component::client::client_from_config(kube_config.clone())?;
    let clients = if insecure {
        ControllerClients::Shared(client)
    } else {
        ControllerClients::ServiceAccounts(ServiceAccountClients::new(client, &kube_config))
    };
    let spec = ["*".to_string(), "local-path-provisioner-controller".to_string()];
    let (selected, _) = controllers::select(&spec).map_err(|e| anyhow::anyhow!(e))?;
    let config = ControllerConfig { local_path_root: storage_path, ..ControllerConfig::default() };
    cli::start_with_clients(&clients, &selected, config).await
}

/// Creates k3s's default StorageClass `local-path` (provisioner
/// `rancher.io/local-path`, `WaitForFirstConsumer`, reclaim `Delete`) unless
/// a StorageClass of that name exists (a user's edits are kept).
async fn ensure_default_storage_class(data_dir: &std::path::Path) -> anyhow::Result<()> {
    use k8s_openapi::api::storage::v1::StorageClass;
    use rkube_controller_manager::controllers::volume::localpath;
    let client = rkube_component::client::client(Some(&data_dir.join("kubeconfig"))).await?;
    let api: kube::Api<StorageClass> = kube::Api::all(client);
    let class: StorageClass = serde_json::from_value(localpath::default_storage_class())?;
    match api.create(&Default::default(), &class).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    /// The options string is the one jemalloc reads: `opt.oversize_threshold`
    /// is 0 (its default is 8 MiB), one arena, and the background threads are on.
    #[test]
    fn jemalloc_reads_the_options() {
        // Any allocation initialises jemalloc before the options are read.
        drop(vec![0u8; 64]);
        // SAFETY: both names are jemalloc options of these types.
        let threshold: usize = unsafe { tikv_jemalloc_ctl::raw::read(b"opt.oversize_threshold\0") }.expect("opt.oversize_threshold");
        let background: bool = unsafe { tikv_jemalloc_ctl::raw::read(b"opt.background_thread\0") }.expect("opt.background_thread");
        // SAFETY: `opt.narenas` is an unsigned jemalloc option.
        let arenas: u32 = unsafe { tikv_jemalloc_ctl::raw::read(b"opt.narenas\0") }.expect("opt.narenas");
        if std::env::var_os("_RJEM_MALLOC_CONF").is_none() {
            assert_eq!(threshold, 0, "oversize_threshold from MALLOC_CONF");
            assert_eq!(arenas, 1, "narenas from MALLOC_CONF");
        }
        assert!(background, "background threads");
    }

    /// A 20 MiB buffer freed in arena 0 is reused whole: allocating it again
    /// faults in no new page (before [`super::keep_large_extents_in_arena_zero`],
    /// about 5,000).
    #[test]
    fn arena_zero_reuses_a_freed_large_extent() {
        fn faults() -> u64 {
            let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
            stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(7)).and_then(|f| f.parse().ok()).expect("minflt")
        }
        drop(vec![0u8; 64]);
        super::keep_large_extents_in_arena_zero();
        // SAFETY: `thread.arena` is an unsigned control binding this thread to arena 0.
        unsafe { tikv_jemalloc_ctl::raw::write(b"thread.arena\0", 0u32) }.expect("thread.arena");
        let size = 20 << 20;
        let touch = || {
            let v = vec![1u8; size];
            std::hint::black_box(&v);
        };
        touch();
        let before = faults();
        touch();
        touch();
        let faulted = faults() - before;
        assert!(faulted < 100, "{faulted} page faults reallocating a freed 20 MiB buffer");
    }
}
