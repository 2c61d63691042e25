//! gRPC clients other than tonic's on the CRI socket: Python grpcio (gRPC
//! C-core, as grpc-java, C++, Ruby, C# and older grpc-go dial a unix socket)
//! sends the socket path as `:authority`, which the HTTP/2 layer under tonic
//! refused on every call before berth rewrote it. A tonic client still
//! works through the rewriting, and its cost per call can be measured.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Daemon;
use cri_api::v1;

/// The grpcio caller (hand-encoded messages, no generated stubs).
const CRI_CALL_PY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/grpc_clients/cri_call.py"
);

/// Runs `cmd` with a deadline; returns (success, stdout, stderr), or None
/// if it could not be started or ran past the deadline (it is then killed).
fn run_with_deadline(cmd: &mut Command, deadline: Duration) -> Option<(bool, String, String)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let mut stderr = child.stderr.take()?;
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().ok()? {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Some((
        status.success(),
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    ))
}

/// A python3 that can `import grpc`, installing grpcio from PyPI with pip if
/// it is missing; the test fails, saying why, if that cannot be done (it is
/// `#[ignore = "needs python3 with grpcio..."]`: a plain `cargo test` leaves
/// it out).
fn python_with_grpcio() -> &'static str {
    let python = "python3";
    let import = || {
        run_with_deadline(
            Command::new(python).args(["-c", "import grpc"]),
            Duration::from_secs(60),
        )
        .is_some_and(|(ok, _, _)| ok)
    };
    if import() {
        return python;
    }
    eprintln!("grpcio is missing: installing it with pip");
    let install = run_with_deadline(
        Command::new(python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "grpcio",
        ]),
        Duration::from_secs(600),
    );
    match install {
        Some((true, _, _)) if import() => python,
        Some((_, out, err)) => {
            panic!("needs python3 with grpcio: pip could not install grpcio:\n{out}\n{err}")
        }
        None => {
            panic!("needs python3 with grpcio: {python} -m pip could not run (or took over 600 s)")
        }
    }
}

/// Calls `methods` with grpcio on one channel to `socket`; the caller's output lines.
fn grpcio_calls(python: &str, socket: &Path, methods: &[&str]) -> (bool, String, String) {
    run_with_deadline(
        Command::new(python)
            .arg(CRI_CALL_PY)
            .arg(socket)
            .args(methods),
        Duration::from_secs(120),
    )
    .expect("the grpcio caller ran within 120 s")
}

#[tokio::test]
#[ignore = "needs python3 with grpcio (pip installs it): hack/test.sh runs it (--include-ignored)"]
async fn grpcio_calls_version_and_status_with_its_default_authority() {
    let python = python_with_grpcio();
    let daemon = Daemon::start("").await;
    let socket = daemon.sandbox.socket();
    // One channel, several calls: the client's HPACK dynamic table is used
    // from the second call on.
    let methods = ["Version", "Status", "Version", "Version", "Status"];
    let (ok, out, err) = {
        let socket = socket.clone();
        tokio::task::spawn_blocking(move || grpcio_calls(python, &socket, &methods))
            .await
            .unwrap()
    };
    assert!(
        ok,
        "grpcio calls failed:\n{out}\n{err}\ndaemon log:\n{}",
        daemon.stderr()
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), methods.len(), "{out}");
    for (line, method) in lines.iter().zip(methods) {
        match method {
            "Version" => assert_eq!(
                *line,
                format!(
                    "Version ok version=0.1.0 runtime_name=berth runtime_version={} runtime_api_version=v1",
                    env!("CARGO_PKG_VERSION")
                ),
            ),
            _ => assert!(
                line.starts_with("Status ok ") && line.contains("RuntimeReady=True"),
                "{line}"
            ),
        }
    }

    // A tonic client on the same daemon, meanwhile and after.
    let resp = daemon.version().await;
    assert_eq!(resp.runtime_name, "berth");
    let status = daemon
        .cri()
        .await
        .status(false)
        .await
        .expect("Status over tonic");
    assert!(status.status.is_some());
}

/// kubelet's relist from grpcio: the two list answers (sent by berth as
/// whole kept messages, not through tonic's encoder) read by gRPC C-core,
/// before and after a change, the same as tonic reads them.
#[tokio::test]
#[ignore = "needs python3 with grpcio (pip installs it): hack/test.sh runs it (--include-ignored)"]
async fn grpcio_reads_the_relist_answers() {
    let python = python_with_grpcio();
    let daemon = Daemon::start("").await;
    let cri = daemon.cri().await;
    let mut pods = Vec::new();
    for n in 0..3 {
        let config =
            common::pods::on_host_network(common::pods::pod_config(&format!("relist-{n}")));
        pods.push(cri.run_pod(&config).await.expect("RunPodSandbox"));
    }
    let relist = |expect_ready: usize| {
        let (python, socket) = (python, daemon.sandbox.socket());
        async move {
            let (ok, out, err) = tokio::task::spawn_blocking(move || {
                grpcio_calls(
                    python,
                    &socket,
                    &["ListPodSandbox", "ListContainers", "ListPodSandbox"],
                )
            })
            .await
            .unwrap();
            assert!(ok, "grpcio lists failed:\n{out}\n{err}");
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 3, "{out}");
            assert_eq!(lines[0], lines[2], "a kept answer, read again");
            assert_eq!(lines[1], "ListContainers ok items=0 ", "{out}");
            assert!(lines[0].starts_with("ListPodSandbox ok items=3 "), "{out}");
            // SANDBOX_READY is 0 (not written), SANDBOX_NOTREADY 1.
            assert_eq!(lines[0].matches(":0").count(), expect_ready, "{out}");
            lines[0].to_string()
        }
    };
    let before = relist(3).await;
    for id in &pods {
        assert!(before.contains(&id[..12]), "{before}");
    }
    cri.stop_pod(&pods[1]).await.expect("StopPodSandbox");
    let after = relist(2).await;
    assert!(after.contains(&format!("{}:1", &pods[1][..12])), "{after}");
    let tonic = cri
        .list_pods(None)
        .await
        .expect("ListPodSandbox over tonic");
    assert_eq!(tonic.len(), 3);
    for id in &pods {
        cri.stop_pod(id).await.unwrap();
        cri.remove_pod(id).await.unwrap();
    }
}

#[tokio::test]
async fn tonic_clients_work_through_the_rewriting() {
    let daemon = Daemon::start("").await;
    // Many calls on one connection and several connections at once.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let mut client = daemon.cri().await.runtime();
        tasks.push(tokio::spawn(async move {
            for _ in 0..200 {
                let resp = client
                    .version(v1::VersionRequest {
                        version: "v1".into(),
                    })
                    .await
                    .expect("Version")
                    .into_inner();
                assert_eq!(resp.runtime_name, "berth");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // A large request (CRI messages may be up to 16 MiB): its DATA frames
    // pass unchanged, and the filter matches nothing.
    let mut client = daemon.cri().await.runtime();
    let selector = [("berth.test/big".to_string(), "x".repeat(4 * 1024 * 1024))].into();
    let resp = client
        .list_containers(v1::ListContainersRequest {
            filter: Some(v1::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }),
        })
        .await
        .expect("ListContainers with a 4 MiB filter")
        .into_inner();
    assert!(resp.containers.is_empty());
}

/// The cost of a call: 10 rounds of 1,000 Version calls with a tonic
/// client on one connection; prints the median time per call. Against the
/// daemon this test starts, or against `BERTH_COST_SOCKET` if set (to
/// compare with a berth built without the rewriting).
#[tokio::test]
#[ignore = "a measurement, not a check: cargo test --test integration grpc_clients:: -- --ignored --nocapture"]
async fn version_call_cost() {
    let daemon;
    let socket = match std::env::var_os("BERTH_COST_SOCKET") {
        Some(socket) => std::path::PathBuf::from(socket),
        None => {
            daemon = Daemon::start("").await;
            daemon.sandbox.socket()
        }
    };
    // The raw client: the cost of the call alone.
    let mut client = common::cri::Cri::connect(&socket)
        .await
        .expect("connect")
        .runtime();
    for _ in 0..500 {
        client.version(v1::VersionRequest::default()).await.unwrap();
    }
    let mut rounds = Vec::new();
    for _ in 0..10 {
        let start = Instant::now();
        for _ in 0..1000 {
            client.version(v1::VersionRequest::default()).await.unwrap();
        }
        rounds.push(start.elapsed() / 1000);
    }
    rounds.sort();
    let median = (rounds[4] + rounds[5]) / 2;
    println!(
        "Version over {}: median of 10 rounds of 1,000 calls: {median:?} per call (rounds {rounds:?})",
        socket.display()
    );
}
