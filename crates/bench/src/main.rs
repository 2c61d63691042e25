//! berth-bench: runs the same CRI workload against two (or more) runtimes,
//! in turns, and prints a table of all of them with the ratio of the first
//! to each of the others (the peers) for every figure; also as JSON. Memory and time are measured,
//! never asserted.
//!
//! - `berth-bench push-images --registry ADDR [--huge]`: builds and pushes
//!   the pause image and the large image the run needs (and the 1 GiB one).
//! - `berth-bench run --target NAME=SOCKET[,shim=EXE][,match=TEXT] ...`: the
//!   benchmark (see `hack/bench.sh`, which starts berth and containerd for it),
//!   with the floor (`floor.rs`: the same CNI and runc work done directly)
//!   when `--floor-cni` is given.
//! - `berth-bench cleanup --target ...`: removes every pod this program made.
//! - `berth-bench churn --target ... --image IMAGE`: kubelet-like churn
//!   against one runtime, sampling its RSS, fds and threads (`churn.rs`;
//!   `hack/endurance.sh` runs it).
//! - `berth-bench kubelet-report DIR`: the kubelet group's tables from the
//!   metrics `hack/kube-bench.sh` saved (`kubelet.rs`).

mod churn;
mod floor;
mod kubelet;
mod memory;
mod push;
mod report;
mod target;
mod workload;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use report::Report;
use target::{Target, TargetSpec};
use workload::{Settings, Workload};

#[derive(Parser)]
#[command(name = "berth-bench", about = "Benchmarks CRI runtimes side by side")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Builds the pause image and the large image and pushes them to a registry.
    PushImages(PushArgs),
    /// Runs the benchmark against every --target, in turns.
    Run(Box<RunArgs>),
    /// Stops and removes every pod berth-bench made on the targets.
    Cleanup(CleanupArgs),
    /// Measures only the floor (CNI plugins and runc, done directly).
    Floor(FloorArgs),
    /// Kubelet-like churn against one runtime, sampling its memory, fds
    /// and threads (the endurance test).
    Churn(Box<ChurnArgs>),
    /// The kubelet group's tables (Markdown) from the steps
    /// hack/kube-bench.sh saved in DIR (DIR/RUNTIME/SIZE/).
    KubeletReport { dir: PathBuf },
}

#[derive(Args)]
struct ChurnArgs {
    /// The runtime: NAME=SOCKET[,shim=EXE][,match=TEXT][,pid=PID].
    #[arg(long)]
    target: TargetSpec,
    /// The container image (busybox: sh, sleep, nc, echo, true).
    #[arg(long)]
    image: String,
    /// Measured life cycles, after the warm-up.
    #[arg(long, default_value_t = 5000)]
    cycles: usize,
    /// Life cycles before the baseline.
    #[arg(long, default_value_t = 300)]
    warmup: usize,
    /// A sample every this many life cycles.
    #[arg(long, default_value_t = 50)]
    sample_every: usize,
    /// Life cycles at once in a concurrent round.
    #[arg(long, default_value_t = 3)]
    batch: usize,
    /// Every this many rounds one is concurrent (0: never).
    #[arg(long, default_value_t = 3)]
    concurrent_every: usize,
    /// An exec session every this many life cycles (0: never).
    #[arg(long, default_value_t = 5)]
    exec_every: usize,
    /// A port-forward session every this many life cycles (0: never).
    #[arg(long, default_value_t = 5)]
    port_forward_every: usize,
    /// Every this many life cycles a pod whose containers share its PID
    /// namespace (a pod with a pause process); 0: never.
    #[arg(long, default_value_t = 4)]
    pause_every: usize,
    /// Milliseconds between relists.
    #[arg(long, default_value_t = 1000)]
    relist_ms: u64,
    /// Seconds of quiet before the baseline and the end samples.
    #[arg(long, default_value_t = 12)]
    quiet_secs: u64,
    /// Seconds fds and threads may take to come back after the end sample.
    #[arg(long, default_value_t = 30)]
    settle_secs: u64,
    /// Cgroup parent of the pods.
    #[arg(long, default_value = "/berth-churn")]
    cgroup_parent: String,
    /// Where pod log directories go (default: a new temp dir, removed after).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// The samples, as CSV (cycle,seconds,rss_kib,anon_kib,fds,threads,shims).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// The summary, as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Fail when RSS grows more than this after the warm-up.
    #[arg(long)]
    max_rss_growth_kib: Option<u64>,
}

#[derive(Args)]
struct FloorArgs {
    /// The CNI conflist (its own bridge and subnet).
    #[arg(long)]
    cni: PathBuf,
    #[arg(long, default_value = "/usr/lib/cni")]
    cni_bin: PathBuf,
    #[arg(long, default_value = "/usr/sbin/runc")]
    runc: PathBuf,
    #[arg(long, default_value_t = 20)]
    iterations: usize,
    #[arg(long, default_value = "/berth-bench-floor")]
    cgroup_parent: String,
}

#[derive(Args)]
struct PushArgs {
    /// The registry, HOST:PORT (plain HTTP).
    #[arg(long)]
    registry: String,
    /// Layers of the large image.
    #[arg(long, default_value_t = 4)]
    big_layers: usize,
    /// MiB of random data in each layer.
    #[arg(long, default_value_t = 50)]
    big_layer_mib: usize,
    /// Also the 1 GiB image (printed third).
    #[arg(long)]
    huge: bool,
    /// Layers of the 1 GiB image.
    #[arg(long, default_value_t = 10)]
    huge_layers: usize,
    /// MiB of files in the 1 GiB image, shared by its layers.
    #[arg(long, default_value_t = 1024)]
    huge_mib: usize,
}

#[derive(Args)]
struct RunArgs {
    /// A runtime: NAME=SOCKET[,shim=EXE][,match=TEXT][,pid=PID]. Shims are
    /// the processes whose executable is named EXE and whose command line
    /// contains TEXT. One ratio column per target after the first:
    /// first/that one.
    #[arg(long = "target", required = true)]
    targets: Vec<TargetSpec>,
    /// The container image (busybox: sh, sleep, true).
    #[arg(long)]
    image: String,
    /// Images every target pulls before the run (e.g. a pause image).
    #[arg(long)]
    prepull: Vec<String>,
    /// A large image for the pull benchmark, once per image (none: no image
    /// figures).
    #[arg(long)]
    big_image: Vec<String>,
    /// How each --big-image is described in the table, in the same order.
    #[arg(long)]
    big_image_desc: Vec<String>,
    /// Fewer iterations and smaller sizes, for development.
    #[arg(long)]
    quick: bool,
    /// Timed life cycles per runtime [full: 100, quick: 10].
    #[arg(long)]
    iterations: Option<usize>,
    /// Untimed life cycles before them [2].
    #[arg(long)]
    warmup: Option<usize>,
    /// Pods started at once, comma separated [full: 20,50, quick: 5,10].
    #[arg(long, value_delimiter = ',')]
    concurrency: Option<Vec<usize>>,
    /// Running pods at which memory is read [full: 10,50,100,250, quick: 5,10].
    #[arg(long, value_delimiter = ',')]
    density: Option<Vec<usize>>,
    /// Containers present for the list timings (in the pods of the last
    /// density) [full: 300,500, quick: 10,20].
    #[arg(long, value_delimiter = ',')]
    scale: Option<Vec<usize>>,
    /// Timed calls per list measurement [full: 100, quick: 20].
    #[arg(long)]
    list_iterations: Option<usize>,
    /// Timed pulls of the large image per runtime [full: 3, quick: 1].
    #[arg(long)]
    pull_runs: Option<usize>,
    /// Seconds to wait before memory is read [full: 3, quick: 1].
    #[arg(long)]
    settle_secs: Option<u64>,
    /// Cgroup parent of the pods (the runtime's name is appended).
    #[arg(long, default_value = "/berth-bench")]
    cgroup_parent: String,
    /// Where pod log directories go (default: a new temp dir, removed after).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// The OCI runtime binary, for its version in the report.
    #[arg(long, default_value = "/usr/sbin/runc")]
    runc: PathBuf,
    /// Write the report as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
    /// A CNI conflist for the floor (the same plugins as the runtimes'
    /// networks, its own bridge and subnet); none: no floor figures.
    #[arg(long)]
    floor_cni: Option<PathBuf>,
    /// Targets (by name) whose pods run without a pause and whose
    /// StartContainer is one `runc run --detach`: the floor of their work.
    #[arg(long)]
    pauseless: Vec<String>,
    /// Where the CNI plugins are, for the floor.
    #[arg(long, default_value = "/usr/lib/cni")]
    cni_bin: PathBuf,
    /// A target's Prometheus endpoint, NAME=HOST:PORT (berth's
    /// `[metrics] address`): the status group reads the server-side time
    /// of each call from its RPC histogram.
    #[arg(long = "metrics", value_parser = parse_metrics)]
    metrics: Vec<(String, String)>,
    /// Run only these groups, comma separated: lifecycle, status, floor,
    /// concurrency, density (with scale), image [all; the floor and the
    /// image group need --floor-cni and --big-image].
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// Also show first − second for every figure (two set-ups of one
    /// runtime: what the first one adds, e.g. an NRI plugin).
    #[arg(long)]
    difference: bool,
}

/// `NAME=HOST:PORT` of `--metrics`.
fn parse_metrics(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, addr)) if !name.is_empty() && addr.contains(':') => {
            Ok((name.to_string(), addr.to_string()))
        }
        _ => Err(format!("--metrics {s:?}: want NAME=HOST:PORT")),
    }
}

impl RunArgs {
    /// Whether `group` is to run (`--only`).
    fn runs(&self, group: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|g| g == group))
    }
}

#[derive(Args)]
struct CleanupArgs {
    /// As for `run` (only NAME=SOCKET matters).
    #[arg(long = "target", required = true)]
    targets: Vec<TargetSpec>,
    /// Also remove this image.
    #[arg(long)]
    image: Vec<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    // reqwest's rustls (when features are unified with berth-oci-image's,
    // e.g. `cargo build --workspace`) has no provider of its own.
    let _ = rustls::crypto::ring::default_provider().install_default();
    match Cli::parse().command {
        Command::PushImages(a) => {
            println!("{}", push::push_pause(&a.registry).await?);
            println!(
                "{}",
                push::push_big(&a.registry, a.big_layers, a.big_layer_mib).await?
            );
            if a.huge {
                println!(
                    "{}",
                    push::push_huge(&a.registry, a.huge_layers, a.huge_mib).await?
                );
            }
            Ok(())
        }
        Command::Run(a) => run(*a).await,
        Command::Cleanup(a) => cleanup(a).await,
        Command::Churn(a) => churn(*a).await,
        Command::KubeletReport { dir } => {
            print!("{}", kubelet::markdown(&dir)?);
            Ok(())
        }
        Command::Floor(a) => {
            let floor = floor::Floor {
                conflist: a.cni,
                cni_bin: a.cni_bin,
                runc: a.runc,
                cgroup_parent: a.cgroup_parent,
            };
            let f = tokio::task::spawn_blocking(move || floor.measure(a.iterations)).await??;
            println!("{f:#?}");
            Ok(())
        }
    }
}

impl RunArgs {
    fn settings(&self) -> Settings {
        let q = self.quick;
        let pick = |v: &Option<Vec<usize>>, full: &[usize], quick: &[usize]| {
            let mut v = v
                .clone()
                .unwrap_or_else(|| if q { quick } else { full }.to_vec());
            v.sort_unstable();
            v
        };
        Settings {
            iterations: self.iterations.unwrap_or(if q { 10 } else { 100 }),
            warmup: self.warmup.unwrap_or(2),
            concurrency: pick(&self.concurrency, &[20, 50], &[5, 10]),
            // Full: up to 250 pods, then 2 containers in each (#20's node).
            densities: pick(&self.density, &[10, 50, 100, 250], &[5, 10]),
            scales: pick(&self.scale, &[300, 500], &[10, 20]),
            list_iterations: self.list_iterations.unwrap_or(if q { 20 } else { 100 }),
            pull_runs: self.pull_runs.unwrap_or(if q { 1 } else { 3 }),
            settle: Duration::from_secs(self.settle_secs.unwrap_or(if q { 1 } else { 3 })),
        }
    }
}

async fn connect_all(specs: &[TargetSpec]) -> Result<Vec<Target>> {
    let mut targets = Vec::new();
    for spec in specs {
        targets.push(Target::connect(spec.clone()).await?);
    }
    Ok(targets)
}

async fn run(mut a: RunArgs) -> Result<()> {
    // `--only` without them: no floor, no image group.
    if !a.runs("floor") {
        a.floor_cni = None;
    }
    if !a.runs("image") {
        a.big_image.clear();
    }
    let settings = a.settings();
    let targets = connect_all(&a.targets).await?;
    let (log_dir, _log_tmp) = log_dir(a.log_dir.as_ref(), "berth-bench-logs-")?;
    let mut big_images = a.big_image.iter().enumerate().map(|(i, image)| {
        let desc = a.big_image_desc.get(i).cloned();
        (image.clone(), desc.unwrap_or_else(|| "large image".into()))
    });
    let workload = Arc::new(Workload {
        image: a.image.clone(),
        big_image: big_images.next(),
        cgroup_parent: a.cgroup_parent.clone(),
        log_dir,
        run_id: run_id(),
        metrics: a.metrics.iter().cloned().collect(),
    });
    let mut report = Report {
        targets: targets.iter().map(|t| t.name().to_string()).collect(),
        machine: machine_info(&targets, &a.runc),
        settings: serde_json::to_value(&settings)?,
        difference: a.difference,
        ..Default::default()
    };
    clear_and_pull(&targets, &a).await?;

    eprintln!("berth-bench: {settings:?}");
    lifecycle_status_and_floor(&a, &workload, &targets, &settings, &mut report).await?;
    if a.runs("concurrency") {
        workload.concurrency(&targets, &settings, &mut report).await;
    }
    if a.runs("density") {
        workload
            .density_and_scale(&targets, &settings, &mut report)
            .await;
    }
    workload.image(&targets, &settings, &mut report).await;
    for big in big_images {
        let w = Workload {
            image: workload.image.clone(),
            big_image: Some(big),
            cgroup_parent: workload.cgroup_parent.clone(),
            log_dir: workload.log_dir.clone(),
            run_id: workload.run_id.clone(),
            metrics: workload.metrics.clone(),
        };
        w.image(&targets, &settings, &mut report).await;
    }
    for t in &targets {
        if let Err(e) = workload.teardown(t, None).await {
            report.error(t.name(), "final teardown", &e);
        }
    }
    publish(&report, a.json.as_deref())
}

/// Where pod logs go: `given` (`--log-dir`), or a temporary directory
/// named with `prefix` that lives as long as the second value.
fn log_dir(given: Option<&PathBuf>, prefix: &str) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    Ok(match given {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempfile::Builder::new()
                .prefix(prefix)
                .tempdir()
                .context("making a log dir")?;
            (t.path().to_path_buf(), Some(t))
        }
    })
}

/// Tells this run's pods from others': the start time in milliseconds, in
/// hex.
fn run_id() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    )
}

/// Readies each target: the pods of an earlier run removed, the images the
/// run uses pulled.
async fn clear_and_pull(targets: &[Target], a: &RunArgs) -> Result<()> {
    for t in targets {
        let left = workload::remove_all_bench_pods(t)
            .await
            .with_context(|| format!("{}: removing pods of earlier runs", t.name()))?;
        if left > 0 {
            eprintln!("{}: removed {left} pods of an earlier run", t.name());
        }
        for image in std::iter::once(&a.image).chain(&a.prepull) {
            t.pull(image)
                .await
                .with_context(|| format!("{}: pulling {image}", t.name()))?;
        }
    }
    Ok(())
}

/// The life-cycle and status groups, and the floor: its rounds interleaved
/// with the life cycles when they run, else measured on its own.
async fn lifecycle_status_and_floor(
    a: &RunArgs,
    workload: &Arc<Workload>,
    targets: &[Target],
    settings: &Settings,
    report: &mut Report,
) -> Result<()> {
    let floor = a.floor_cni.as_ref().map(|conflist| floor::Floor {
        conflist: conflist.clone(),
        cni_bin: a.cni_bin.clone(),
        runc: a.runc.clone(),
        cgroup_parent: format!("{}-floor", a.cgroup_parent),
    });
    let mut floor_rounds = None;
    if a.runs("lifecycle") {
        let rounds = match floor.clone().map(floor::FloorRounds::new).transpose() {
            Ok(rounds) => rounds,
            Err(e) => {
                report.error("floor", "its scratch dir", &e);
                None
            }
        };
        if rounds.is_some() {
            eprintln!("floor: a round between the life cycles of each round");
        }
        floor_rounds = workload.lifecycle(targets, settings, report, rounds).await;
    }
    if a.runs("status") {
        workload.status(targets, settings, report).await;
    }
    match (floor_rounds, floor) {
        (Some(rounds), _) => floor::report(report, &rounds.figures(), &a.pauseless),
        (None, Some(floor)) if !a.runs("lifecycle") => {
            let iterations = settings.iterations;
            eprintln!("floor: {iterations} rounds");
            match tokio::task::spawn_blocking(move || floor.measure(iterations)).await? {
                Ok(figures) => floor::report(report, &figures, &a.pauseless),
                Err(e) => report.error("floor", "measuring", &e),
            }
        }
        _ => {}
    }
    Ok(())
}

/// Prints the report (and writes its JSON with `--json`); an error if any
/// measurement failed.
fn publish(report: &Report, json: Option<&std::path::Path>) -> Result<()> {
    println!("{}", report.markdown());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&report.to_json())?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
        eprintln!("berth-bench: wrote {}", path.display());
    }
    if !report.errors.is_empty() {
        bail!("{} errors (listed under the table)", report.errors.len());
    }
    Ok(())
}

async fn cleanup(a: CleanupArgs) -> Result<()> {
    let mut failed = false;
    for spec in a.targets {
        let name = spec.name.clone();
        let result = async {
            let t = Target::connect(spec).await?;
            let n = workload::remove_all_bench_pods(&t).await?;
            for image in &a.image {
                t.remove_image(image).await?;
            }
            anyhow::Ok(n)
        }
        .await;
        match result {
            Ok(n) => eprintln!("{name}: removed {n} pods"),
            Err(e) => {
                eprintln!("{name}: cleanup: {e:#}");
                failed = true;
            }
        }
    }
    if failed {
        bail!("cleanup failed");
    }
    Ok(())
}

async fn churn(a: ChurnArgs) -> Result<()> {
    let t = Target::connect(a.target.clone()).await?;
    let (log_dir, _log_tmp) = log_dir(a.log_dir.as_ref(), "berth-churn-logs-")?;
    let left = workload::remove_all_bench_pods(&t).await?;
    if left > 0 {
        eprintln!("churn: removed {left} pods of an earlier run");
    }
    t.pull(&a.image).await?;
    let job = churn::Job {
        image: a.image.clone(),
        cgroup_parent: a.cgroup_parent.clone(),
        log_dir,
        run_id: format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis()
        ),
    };
    let settings = churn::Settings {
        cycles: a.cycles,
        warmup: a.warmup,
        sample_every: a.sample_every,
        batch: a.batch,
        concurrent_every: a.concurrent_every,
        exec_every: a.exec_every,
        port_forward_every: a.port_forward_every,
        pause_every: a.pause_every,
        relist_every: Duration::from_millis(a.relist_ms),
        quiet: Duration::from_secs(a.quiet_secs),
        settle: Duration::from_secs(a.settle_secs),
    };
    eprintln!("churn: {settings:?} against {} (pid {})", t.version, t.pid);
    let summary = churn::run(&t, &job, &settings, a.csv.as_deref(), a.max_rss_growth_kib).await?;
    let text = serde_json::to_string_pretty(&summary)?;
    if let Some(path) = &a.json {
        std::fs::write(path, text.clone() + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("{text}");
    eprintln!(
        "churn: {} life cycles in {:.0} s ({:.2}/s), {} calls, {} exec and {} port-forward sessions, {} relists, {} events, {} failures; \
         RSS {} KiB at the start, {} KiB at the baseline (after {} cycles), {} KiB at the end: {:+} KiB ({:.3} KiB per cycle); \
         fds {} → {}, threads {} → {}, shims left {}",
        summary.cycles_done,
        summary.seconds,
        summary.cycles_per_second,
        summary.calls,
        summary.exec_sessions,
        summary.port_forward_sessions,
        summary.relists,
        summary.events,
        summary.failures,
        summary.start.rss_kib,
        summary.baseline.rss_kib,
        summary.baseline.cycle,
        summary.end.rss_kib,
        summary.rss_growth_kib,
        summary.rss_slope_kib_per_cycle,
        summary.baseline.fds,
        summary.end.fds,
        summary.baseline.threads,
        summary.end.threads,
        summary.end.shims,
    );
    if !summary.problems.is_empty() {
        bail!("churn: {}", summary.problems.join("; "));
    }
    Ok(())
}

/// The machine and the runtimes, for the report.
fn machine_info(targets: &[Target], runc: &std::path::Path) -> Vec<(String, String)> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|x| x.1.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| {
            Some(
                l.strip_prefix("PRETTY_NAME=")?
                    .trim_matches('"')
                    .to_string(),
            )
        })
        .unwrap_or_default();
    let cgroup = if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "v2"
    } else {
        "v1"
    };
    let runc_version = std::process::Command::new(runc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    let mut info = vec![
        ("cpu".to_string(), format!("{cores} × {model}")),
        (
            "memory".to_string(),
            format!("{:.1} GiB", mem_kib as f64 / 1048576.0),
        ),
        (
            "kernel".to_string(),
            read("/proc/sys/kernel/osrelease").trim().to_string(),
        ),
        ("os".to_string(), os),
        ("cgroup".to_string(), cgroup.to_string()),
        (
            "OCI runtime".to_string(),
            format!("{} ({runc_version})", runc.display()),
        ),
    ];
    for t in targets {
        info.push((t.name().to_string(), t.version.clone()));
    }
    info
}
