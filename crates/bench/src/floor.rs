//! The floor: the work a runtime cannot avoid, done directly, in the same
//! run — the CNI plugins of the same kind of network exec'd by hand (ADD and
//! DEL of one netns), and runc on a bundle like a pod's (`create` + `start`,
//! `run --detach`, `delete --force`). A runtime's overhead is its figure
//! minus the floor of the same work.
//!
//! The bundle's process is berth's pause program (the shim crate writes its
//! rootfs), in a cgroup under the benchmark's parent, with runc's default
//! namespaces: what a pause or a small container costs runc. runc is given
//! a pid file, as every runtime's shim gives it (the container's pid is
//! how a runtime knows it).
//!
//! With the life-cycle group, the floor is measured round by round between
//! the runtimes' life cycles ([`FloorRounds`], one of the round's
//! slots), so that both see the machine in the same state; alone
//! (`--only floor`, `berth-bench floor`), in rounds of its own.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::report::{millis, percentile, Report};

/// Where the floor runs: the network config, the plugins, runc.
#[derive(Debug, Clone)]
pub struct Floor {
    /// A CNI conflist like the runtimes' own (its own bridge and subnet).
    pub conflist: PathBuf,
    /// Where the plugins are.
    pub cni_bin: PathBuf,
    pub runc: PathBuf,
    /// Cgroup parent of the bundles.
    pub cgroup_parent: String,
}

/// Medians of the floor, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct FloorFigures {
    pub cni_add: f64,
    pub cni_del: f64,
    pub runc_create: f64,
    pub runc_start: f64,
    pub runc_run_detached: f64,
    pub runc_delete: f64,
}

impl FloorFigures {
    /// `runc create` + `runc start`: what one pause or container start costs.
    pub fn create_start(&self) -> f64 {
        self.runc_create + self.runc_start
    }
}

/// Runs `cmd` to completion (stdin from `input`, else /dev/null), within
/// `timeout`; fails on a non-zero exit, with what it printed. Output is
/// captured through pipes only with `capture`: a container's process
/// inherits runc's stdio, and would hold the pipes open.
fn run(
    mut cmd: Command,
    input: Option<&[u8]>,
    timeout: Duration,
    capture: bool,
) -> Result<Vec<u8>> {
    use std::io::Write;
    let out = || {
        if capture {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(out())
    .stderr(out());
    let what = format!("{cmd:?}");
    let mut child = cmd.spawn().with_context(|| format!("spawning {what}"))?;
    if let Some(input) = input {
        child.stdin.take().unwrap().write_all(input)?;
    }
    // A watchdog kills it after `timeout`; the wait itself is exact (no
    // polling in what is measured).
    let pid = child.id() as libc::pid_t;
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let late = wait.recv_timeout(timeout).is_err();
        if late {
            // SAFETY: the child is not reaped until wait_with_output returns.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        late
    });
    let out = child.wait_with_output();
    let _ = done.send(());
    if watchdog.join().unwrap_or(false) {
        bail!("{what} took longer than {timeout:?}");
    }
    let out = out?;
    if !out.status.success() {
        bail!(
            "{what}: {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

const STEP_TIMEOUT: Duration = Duration::from_secs(30);

impl Floor {
    /// One plugin chain run: ADD in order (each gets the previous result),
    /// or DEL in reverse (each gets the final result).
    fn cni(&self, command: &str, id: &str, netns: &Path, prev: Option<&Value>) -> Result<Value> {
        let text = std::fs::read_to_string(&self.conflist)
            .with_context(|| format!("reading {}", self.conflist.display()))?;
        let list: Value = serde_json::from_str(&text)?;
        let plugins = list["plugins"]
            .as_array()
            .context("conflist without plugins")?;
        let order: Vec<&Value> = if command == "ADD" {
            plugins.iter().collect()
        } else {
            plugins.iter().rev().collect()
        };
        let mut result = prev.cloned();
        for plugin in order {
            let mut conf = plugin.clone();
            conf["name"] = list["name"].clone();
            conf["cniVersion"] = list["cniVersion"].clone();
            if let Some(prev) = &result {
                conf["prevResult"] = prev.clone();
            }
            let kind = plugin["type"].as_str().context("plugin without type")?;
            let mut cmd = Command::new(self.cni_bin.join(kind));
            cmd.env_clear()
                .env("CNI_COMMAND", command)
                .env("CNI_CONTAINERID", id)
                .env("CNI_NETNS", netns)
                .env("CNI_IFNAME", "eth0")
                .env("CNI_PATH", &self.cni_bin)
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
            let out = run(cmd, Some(&serde_json::to_vec(&conf)?), STEP_TIMEOUT, true)?;
            if command == "ADD" {
                result = Some(serde_json::from_slice(&out).context("plugin result")?);
            }
        }
        Ok(result.unwrap_or(Value::Null))
    }

    /// A bundle with berth's pause as its process, in `dir`.
    fn bundle(&self, dir: &Path, id: &str) -> Result<PathBuf> {
        let bundle = dir.join(id);
        berth_shim::write_pause_rootfs(&bundle.join("rootfs"))?;
        let mut spec_cmd = Command::new(&self.runc);
        spec_cmd.args(["spec", "--bundle"]).arg(&bundle);
        run(spec_cmd, None, STEP_TIMEOUT, true)?;
        let mut spec: Value = serde_json::from_slice(&std::fs::read(bundle.join("config.json"))?)?;
        spec["process"]["terminal"] = json!(false);
        spec["process"]["args"] = json!([berth_shim::PAUSE_PATH]);
        spec["root"]["readonly"] = json!(true);
        spec["linux"]["cgroupsPath"] = json!(format!("{}/{id}", self.cgroup_parent));
        std::fs::write(bundle.join("config.json"), serde_json::to_vec(&spec)?)?;
        Ok(bundle)
    }

    /// One runc command, timed; its errors go to a log file (its stdio is
    /// the container's).
    /// `args` end with the container id.
    fn runc(&self, root: &Path, args: &[&str], bundle: Option<&Path>) -> Result<Duration> {
        let log = root.with_extension("log");
        let mut cmd = Command::new(&self.runc);
        let (id, flags) = args.split_last().expect("an id");
        cmd.arg("--root")
            .arg(root)
            .arg("--log")
            .arg(&log)
            .args(flags);
        if let Some(b) = bundle {
            cmd.arg("--bundle").arg(b);
        }
        cmd.arg(id);
        let start = Instant::now();
        let result = run(cmd, None, STEP_TIMEOUT, false);
        let took = start.elapsed();
        result.map_err(|e| {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            let last = said.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            e.context(last)
        })?;
        Ok(took)
    }

    /// `iterations` rounds of each, after one untimed; the medians.
    pub fn measure(self, iterations: usize) -> Result<FloorFigures> {
        let mut rounds = FloorRounds::new(self)?;
        for i in 0..=iterations {
            rounds.round(i, i > 0)?;
        }
        Ok(rounds.figures())
    }

    /// One round: two pods' starts done by hand, each in a fresh netns and
    /// measured where a runtime meets its steps, straight after the pod's
    /// CNI ADD: a pauseless pod's container (`run --detach` of one bundle),
    /// then a pod's pause (`create` + `start` of another); then each pod's
    /// CNI DEL and `delete --force`. The bundles are written before, untimed.
    ///
    /// Why the order matters: on a 2-core VM a runc right after another
    /// container's create and start ran about 8 ms faster (26 against 34 ms
    /// for `run --detach`) than one after other work, which is where every
    /// runtime's first runc of a pod comes. The round measured `run
    /// --detach` there before, and so under-counted the floor of a pauseless
    /// runtime's container.
    fn round(&self, dir: &Path, root: &Path, i: usize) -> Result<[Duration; 6]> {
        let mut d = [Duration::ZERO; 6];
        let id = format!("floor-{}-{i}", std::process::id());
        let (a, b) = (format!("{id}-a"), format!("{id}-b"));
        let (pid_a, pid_b) = (dir.join(format!("{a}.pid")), dir.join(format!("{b}.pid")));
        let (pid_a, pid_b) = (pid_a.to_string_lossy(), pid_b.to_string_lossy());
        let bundles = (|| anyhow::Ok((self.bundle(dir, &a)?, self.bundle(dir, &b)?)))();
        let result = bundles.and_then(|(bundle_a, bundle_b)| {
            // The pauseless pod: its network, then its container at once.
            (d[0], d[1], d[4]) = self.pod(&format!("{id}-p"), i, || {
                self.runc(
                    root,
                    &["run", "--detach", "--pid-file", &pid_b, &b],
                    Some(&bundle_b),
                )
            })?;
            // The pod with a pause: its network, then the pause.
            (_, _, (d[2], d[3])) = self.pod(&format!("{id}-q"), i, || {
                let create =
                    self.runc(root, &["create", "--pid-file", &pid_a, &a], Some(&bundle_a))?;
                Ok((create, self.runc(root, &["start", &a], None)?))
            })?;
            d[5] = self.runc(root, &["delete", "--force", &a], None)?;
            anyhow::Ok(())
        });
        for id in [&a, &b] {
            let _ = self.runc(root, &["delete", "--force", id], None);
        }
        for id in [&a, &b] {
            let _ = std::fs::remove_dir_all(dir.join(id));
        }
        for pid_file in [&*pid_a, &*pid_b] {
            let _ = std::fs::remove_file(pid_file);
        }
        result?;
        Ok(d)
    }

    /// A pod's network around `work`: a fresh netns, CNI ADD, `work`, CNI
    /// DEL, the netns deleted; ADD's and DEL's durations, and what `work` gave.
    fn pod<T>(
        &self,
        id: &str,
        i: usize,
        work: impl FnOnce() -> Result<T>,
    ) -> Result<(Duration, Duration, T)> {
        let netns_name = format!("berth-bench-floor-{}-{i}", std::process::id());
        let mut ip = Command::new("ip");
        ip.args(["netns", "add", &netns_name]);
        run(ip, None, STEP_TIMEOUT, true)?;
        let netns = PathBuf::from("/run/netns").join(&netns_name);
        let result = (|| {
            let start = Instant::now();
            let added = self.cni("ADD", id, &netns, None)?;
            let add = start.elapsed();
            let worked = work();
            let start = Instant::now();
            let deleted = self.cni("DEL", id, &netns, Some(&added));
            let del = start.elapsed();
            let worked = worked?;
            deleted?;
            Ok((add, del, worked))
        })();
        let mut ip = Command::new("ip");
        ip.args(["netns", "del", &netns_name]);
        let _ = run(ip, None, STEP_TIMEOUT, true);
        result
    }
}

/// The floor measured a round at a time (between other work): its
/// scratch dir and the samples of the rounds kept.
pub struct FloorRounds {
    floor: Floor,
    dir: tempfile::TempDir,
    samples: [Vec<Duration>; 6],
}

impl FloorRounds {
    pub fn new(floor: Floor) -> Result<FloorRounds> {
        let dir = tempfile::Builder::new()
            .prefix("berth-bench-floor-")
            .tempdir()?;
        Ok(FloorRounds {
            floor,
            dir,
            samples: Default::default(),
        })
    }

    /// Round `i` (blocking); its times are kept if `keep` (not a warm-up).
    pub fn round(&mut self, i: usize, keep: bool) -> Result<()> {
        let root = self.dir.path().join("runc");
        let d = self.floor.round(self.dir.path(), &root, i)?;
        if keep {
            for (k, v) in d.iter().enumerate() {
                self.samples[k].push(*v);
            }
        }
        Ok(())
    }

    /// The medians of the rounds kept.
    pub fn figures(&self) -> FloorFigures {
        let m = |k: usize| percentile(&millis(&self.samples[k]), 50.0).unwrap_or(0.0);
        FloorFigures {
            cni_add: m(0),
            cni_del: m(1),
            runc_create: m(2),
            runc_start: m(3),
            runc_run_detached: m(4),
            runc_delete: m(5),
        }
    }
}

/// The floor rows, and each runtime's overhead above it: its median minus
/// the floor of the same work. A runtime of `pauseless` (by name) runs the
/// bench's pods (kubelet's namespaces) without a pause and a container with
/// one `runc run --detach`: its RunPodSandbox floor is CNI ADD, its
/// CreateContainer + StartContainer floor `run --detach`. The others:
/// CNI ADD + the pause's runc create + start, and runc create + start.
pub fn report(report: &mut Report, f: &FloorFigures, pauseless: &[String]) {
    let n = report.targets.len();
    let same = |v: f64| vec![Some(v); n];
    for (figure, v) in [
        ("CNI ADD (plugins exec'd directly) median", f.cni_add),
        ("CNI DEL median", f.cni_del),
        ("runc create median", f.runc_create),
        ("runc start median", f.runc_start),
        ("runc run --detach median", f.runc_run_detached),
        ("runc delete --force median", f.runc_delete),
    ] {
        report.add("floor", figure, "ms", same(v));
    }
    let median = |figure: &str| -> Vec<Option<f64>> {
        report
            .rows
            .iter()
            .find(|r| r.group == "lifecycle" && r.figure == format!("{figure} median"))
            .map(|r| r.values.clone())
            .unwrap_or_else(|| vec![None; n])
    };
    let (run, create, start) = (
        median("RunPodSandbox"),
        median("CreateContainer"),
        median("StartContainer"),
    );
    // Per runtime: the floor of its pod (beyond CNI ADD) and of its container.
    let (pod_floor, ctr_floor): (Vec<f64>, Vec<f64>) = report
        .targets
        .iter()
        .map(|t| match pauseless.contains(t) {
            true => (0.0, f.runc_run_detached),
            false => (f.create_start(), f.create_start()),
        })
        .unzip();
    let minus = |v: &[Option<f64>], floor: &dyn Fn(usize) -> f64| -> Vec<Option<f64>> {
        v.iter()
            .enumerate()
            .map(|(i, x)| x.map(|x| x - floor(i)))
            .collect()
    };
    let whole: Vec<Option<f64>> = (0..n)
        .map(|i| Some(run[i]? + create[i]? + start[i]?))
        .collect();
    report.add(
        "floor",
        "RunPodSandbox above floor (− CNI ADD − the pause's runc create+start, if any)",
        "ms",
        minus(&run, &|i| f.cni_add + pod_floor[i]),
    );
    // Create and Start together: runtimes split runc's work between them
    // differently (berth runs `run --detach` at Start).
    let container: Vec<Option<f64>> = (0..n).map(|i| Some(create[i]? + start[i]?)).collect();
    report.add(
        "floor",
        "CreateContainer + StartContainer above floor (− runc run --detach, or create+start)",
        "ms",
        minus(&container, &|i| ctr_floor[i]),
    );
    report.add(
        "floor",
        "pod + container start above floor (Run+Create+Start − CNI ADD − the pause's and the container's runc)",
        "ms",
        minus(&whole, &|i| f.cni_add + pod_floor[i] + ctr_floor[i]),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overheads_subtract_the_floor_of_the_same_work() {
        let mut r = Report {
            targets: vec!["berth".into(), "containerd".into()],
            ..Default::default()
        };
        r.add(
            "lifecycle",
            "RunPodSandbox median",
            "ms",
            vec![Some(50.0), Some(80.0)],
        );
        r.add(
            "lifecycle",
            "CreateContainer median",
            "ms",
            vec![Some(4.0), Some(6.0)],
        );
        r.add(
            "lifecycle",
            "StartContainer median",
            "ms",
            vec![Some(40.0), None],
        );
        let f = FloorFigures {
            cni_add: 20.0,
            runc_create: 15.0,
            runc_start: 10.0,
            ..Default::default()
        };
        report(&mut r, &f, &[]);
        let row = |name: &str| r.rows.iter().find(|x| x.figure.starts_with(name)).unwrap();
        assert_eq!(
            row("RunPodSandbox above").values,
            vec![Some(5.0), Some(35.0)]
        );
        // 4 + 40 − 25; containerd failed a step: none.
        assert_eq!(
            row("CreateContainer + StartContainer above").values,
            vec![Some(19.0), None]
        );
        // 50 + 4 + 40 − 20 − 2 × 25; containerd failed a step: none.
        assert_eq!(row("pod + container").values, vec![Some(24.0), None]);
        assert_eq!(row("CNI ADD").values, vec![Some(20.0), Some(20.0)]);
    }

    #[test]
    fn a_pauseless_runtime_is_measured_against_its_own_work() {
        let mut r = Report {
            targets: vec!["berth".into(), "containerd".into()],
            ..Default::default()
        };
        for (figure, v) in [
            ("RunPodSandbox", [30.0, 120.0]),
            ("CreateContainer", [5.0, 10.0]),
            ("StartContainer", [55.0, 80.0]),
        ] {
            r.add(
                "lifecycle",
                &format!("{figure} median"),
                "ms",
                v.iter().map(|x| Some(*x)).collect(),
            );
        }
        let f = FloorFigures {
            cni_add: 20.0,
            runc_create: 40.0,
            runc_start: 10.0,
            runc_run_detached: 50.0,
            ..Default::default()
        };
        report(&mut r, &f, &["berth".to_string()]);
        let row = |name: &str| r.rows.iter().find(|x| x.figure.starts_with(name)).unwrap();
        // berth: 30 − 20; containerd: 120 − 20 − 50.
        assert_eq!(
            row("RunPodSandbox above").values,
            vec![Some(10.0), Some(50.0)]
        );
        // berth: 60 − 50; containerd: 90 − 50.
        assert_eq!(
            row("CreateContainer + StartContainer above").values,
            vec![Some(10.0), Some(40.0)]
        );
        // berth: 90 − 20 − 50; containerd: 210 − 20 − 2 × 50.
        assert_eq!(row("pod + container").values, vec![Some(20.0), Some(90.0)]);
    }
}
