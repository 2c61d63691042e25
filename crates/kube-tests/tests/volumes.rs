//! Volumes and identity under kubelet on berth, as a user sees them from
//! inside the container (`kubectl exec`, logs) and as the host holds them:
//! emptyDir on disk and in memory, hostPath, configMap, secret, the
//! projected service-account token, the downward API, image volumes, user
//! namespaces, runAsUser/runAsGroup/fsGroup and the supplemental groups
//! policy. Needs the node of `hack/kube.sh up` (hack/test.sh runs these).

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use berth_kube_tests::images::BUSYBOX;
use berth_kube_tests::{
    container, container_id, host_pid, kubectl_json, node, part_log, restarts, share, summary,
    wait_until, Namespace, NODE,
};
use serde_json::Value;

const LIBRARY_BUSYBOX: &str = "docker.io/library/busybox:1.37";

/// `sh -c script` in container `c` of pod `pod`, its stdout.
fn sh(ns: &Namespace, pod: &str, c: &str, script: &str) -> String {
    ns.exec(pod, c, &["sh", "-c", script])
        .unwrap_or_else(|e| panic!("{pod}/{c}: {script}: {e}"))
}

/// Like [`sh`], for a script that must fail: what it printed (stdout and
/// stderr, `2>&1` inside) and its status as the script's last line.
fn sh_status(ns: &Namespace, pod: &str, c: &str, script: &str) -> (String, i32) {
    let out = sh(
        ns,
        pod,
        c,
        &format!("{{ {script} ; }} 2>&1; echo \"rc=$?\""),
    );
    let (text, rc) = out.trim_end().rsplit_once("rc=").expect("rc line");
    (text.to_string(), rc.trim().parse().expect("rc"))
}

/// The pod's uid.
fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().expect("uid").to_string()
}

/// Where kubelet keeps volume `name` of plugin `kind` (e.g. `empty-dir`) of
/// the pod on the host.
fn volume_dir(pod: &Value, kind: &str, name: &str) -> PathBuf {
    node()
        .unwrap()
        .join("kubelet/pods")
        .join(uid(pod))
        .join("volumes")
        .join(format!("kubernetes.io~{kind}"))
        .join(name)
}

/// The host's mount of `path`, as `(fstype, super options)` from
/// /proc/self/mountinfo, if mounted.
fn host_mount(path: &Path) -> Option<(String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let path = path.to_str().unwrap();
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        (f.get(4) == Some(&path)).then(|| (f[sep + 1].to_string(), f[sep + 3].to_string()))
    })
}

/// The line of `mount` (inside the container) for `target`.
fn mount_line(ns: &Namespace, pod: &str, c: &str, target: &str) -> String {
    let all = sh(ns, pod, c, "cat /proc/mounts");
    all.lines()
        .rev()
        .find(|l| l.split(' ').nth(1) == Some(target))
        .unwrap_or_else(|| panic!("{target} is not mounted in {pod}/{c}:\n{all}"))
        .to_string()
}

/// The mount options of a `/proc/mounts` line.
fn options(line: &str) -> BTreeSet<String> {
    line.split(' ')
        .nth(3)
        .unwrap_or("")
        .split(',')
        .map(String::from)
        .collect()
}

/// A scratch dir of the test on the host, `$KUBE_STATE/tmp/NS`, empty.
fn host_dir(ns: &Namespace) -> PathBuf {
    let dir = node().unwrap().join("tmp").join(&ns.name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The numbers of a whitespace-separated list (`id -G`).
fn ids(text: &str) -> BTreeSet<u32> {
    text.split_whitespace()
        .map(|g| g.parse().unwrap_or_else(|_| panic!("not a number: {g}")))
        .collect()
}

/// The container's user as kubelet shows it
/// (`status.containerStatuses[].user.linux`): uid, gid, supplemental groups.
fn status_user(pod: &Value, c: &str) -> (u64, u64, BTreeSet<u32>) {
    let l = &container(pod, c).expect("status")["user"]["linux"];
    let groups = l["supplementalGroups"]
        .as_array()
        .unwrap_or_else(|| panic!("no user.linux in the status of {c}: {l}"))
        .iter()
        .map(|g| g.as_u64().unwrap() as u32)
        .collect();
    (
        l["uid"].as_u64().unwrap(),
        l["gid"].as_u64().unwrap(),
        groups,
    )
}

/// The `Uid:`, `Gid:` (real ids) and `Groups:` of the host's process of
/// container `c` of the pod, from its /proc/PID/status.
fn host_ids(pod: &Value, c: &str) -> (u32, u32, BTreeSet<u32>) {
    let pid = host_pid(&container_id(pod, c).expect("container id")).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    let first = |name: &str| {
        field(name)
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (first("Uid:"), first("Gid:"), ids(field("Groups:")))
}

/// The events of the namespace's pod `name`, as `reason: message` lines.
fn events(ns: &Namespace, name: &str) -> Vec<String> {
    let ev = ns
        .json(&[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={name}"),
        ])
        .unwrap();
    ev["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e["reason"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// Decodes unpadded base64url (a JWT's segments).
fn base64url(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => panic!("not base64url: {c:#x}"),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// The payload (claims) of a JWT.
fn jwt_claims(token: &str) -> Value {
    let parts: Vec<&str> = token.trim().split('.').collect();
    assert_eq!(parts.len(), 3, "not a JWT: {token}");
    let header: Value = serde_json::from_slice(&base64url(parts[0])).unwrap();
    assert_eq!(header["alg"], "RS256", "{header}");
    serde_json::from_slice(&base64url(parts[1])).unwrap()
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn empty_dir_on_disk_is_shared_by_the_pods_containers() {
    let _g = share();
    let ns = Namespace::new("emptydir-disk");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: shared, emptyDir: {{}}}}]
  containers:
  - name: writer
    image: {BUSYBOX}
    command: ["sh", "-c", "echo from-writer > /shared/w; sleep 3600"]
    volumeMounts: [{{name: shared, mountPath: /shared}}]
  - name: reader
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    volumeMounts: [{{name: shared, mountPath: /data}}]
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    // What one container writes the other reads, both ways.
    let got = wait_until(30, "the writer's file, read by the reader", |seen| {
        *seen = ns.exec("p", "reader", &["cat", "/data/w"]).ok()?;
        (seen == "from-writer\n").then_some(())
    });
    got.unwrap();
    sh(&ns, "p", "reader", "echo from-reader > /data/r");
    assert_eq!(sh(&ns, "p", "writer", "cat /shared/r"), "from-reader\n");
    // On disk: not a tmpfs, in either container.
    for (c, at) in [("writer", "/shared"), ("reader", "/data")] {
        let line = mount_line(&ns, "p", c, at);
        assert!(!line.contains(" tmpfs "), "{c}: {line}");
        assert!(options(&line).contains("rw"), "{c}: {line}");
    }
    // The host holds it in kubelet's pod dir, as a plain dir.
    let dir = volume_dir(&pod, "empty-dir", "shared");
    assert_eq!(
        std::fs::read_to_string(dir.join("w")).unwrap(),
        "from-writer\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("r")).unwrap(),
        "from-reader\n"
    );
    assert_eq!(host_mount(&dir), None, "{} is a mount", dir.display());
    // Deleted with its pod.
    ns.kubectl(&["delete", "pod", "p", "--wait=true", "--timeout=60s"])
        .unwrap();
    wait_until(60, "the emptyDir removed from the host", |_| {
        (!dir.exists()).then_some(())
    })
    .unwrap();
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn memory_empty_dir_is_a_tmpfs_of_its_size_limit() {
    let _g = share();
    let ns = Namespace::new("emptydir-memory");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: mem, emptyDir: {{medium: Memory, sizeLimit: 8Mi}}}}]
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    volumeMounts: [{{name: mem, mountPath: /mem}}]
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    // kubelet sizes the tmpfs to the limit.
    let line = mount_line(&ns, "p", "c", "/mem");
    assert!(line.starts_with("tmpfs /mem tmpfs "), "{line}");
    assert!(options(&line).contains("size=8192k"), "{line}");
    let df = sh(&ns, "p", "c", "df -k /mem | tail -n 1");
    assert_eq!(df.split_whitespace().nth(1), Some("8192"), "{df}");
    let dir = volume_dir(&pod, "empty-dir", "mem");
    let (fstype, opts) = host_mount(&dir).expect("the emptyDir is mounted on the host");
    assert_eq!(fstype, "tmpfs");
    assert!(opts.split(',').any(|o| o == "size=8192k"), "{opts}");

    // Writing past the limit: the kernel refuses the write at 8 MiB, so
    // the volume never exceeds its sizeLimit and kubelet has nothing to
    // evict (it evicts only for usage above the limit).
    let (out, rc) = sh_status(&ns, "p", "c", "dd if=/dev/zero of=/mem/big bs=1M count=10");
    assert_ne!(rc, 0, "{out}");
    assert!(out.contains("No space left on device"), "{out}");
    assert_eq!(sh(&ns, "p", "c", "stat -c %s /mem/big"), "8388608\n");
    assert_eq!(std::fs::metadata(dir.join("big")).unwrap().len(), 8 << 20);
    let df = sh(&ns, "p", "c", "df -k /mem | tail -n 1");
    assert_eq!(df.split_whitespace().nth(3), Some("0"), "{df}");
    // Freed, it takes writes again; the container never stopped.
    sh(&ns, "p", "c", "rm /mem/big && echo ok > /mem/small");
    let pod = ns.pod("p").unwrap();
    assert_eq!(pod["status"]["phase"], "Running", "{}", summary(&pod));
    assert_eq!(restarts(&pod, "c"), 0, "{}", summary(&pod));
    let ev = events(&ns, "p");
    assert!(!ev.iter().any(|e| e.starts_with("Evicted")), "{ev:?}");
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn host_path_is_shared_with_the_host_and_read_only_holds() {
    let _g = share();
    let ns = Namespace::new("hostpath");
    let dir = host_dir(&ns);
    std::fs::write(dir.join("from-host"), "written on the host\n").unwrap();
    let path = dir.display();
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: h, hostPath: {{path: "{path}", type: Directory}}}}]
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    volumeMounts:
    - {{name: h, mountPath: /rw}}
    - {{name: h, mountPath: /ro, readOnly: true}}
"#
    ))
    .unwrap();
    ns.wait_ready("p", 120).unwrap();
    // Host to pod, through both mounts.
    for at in ["/rw", "/ro"] {
        assert_eq!(
            sh(&ns, "p", "c", &format!("cat {at}/from-host")),
            "written on the host\n"
        );
    }
    // Pod to host.
    sh(&ns, "p", "c", "echo written in the pod > /rw/from-pod");
    assert_eq!(
        std::fs::read_to_string(dir.join("from-pod")).unwrap(),
        "written in the pod\n"
    );
    // A change on the host shows at once, in the read-only mount too.
    std::fs::write(dir.join("from-host"), "changed\n").unwrap();
    assert_eq!(sh(&ns, "p", "c", "cat /ro/from-host"), "changed\n");
    // The read-only mount refuses writes, and changes nothing on the host.
    let (out, rc) = sh_status(&ns, "p", "c", "echo no > /ro/nope");
    assert_ne!(rc, 0, "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    let (out, rc) = sh_status(&ns, "p", "c", "rm /ro/from-host");
    assert_ne!(rc, 0, "{out}");
    assert!(dir.join("from-host").exists());
    assert!(!dir.join("nope").exists());
    assert!(options(&mount_line(&ns, "p", "c", "/ro")).contains("ro"));
    assert!(options(&mount_line(&ns, "p", "c", "/rw")).contains("rw"));
    ns.kubectl(&["delete", "pod", "p", "--wait=true", "--timeout=60s"])
        .unwrap();
    // The host's dir and files outlive the pod.
    assert!(dir.join("from-pod").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn config_map_as_volume_and_env_and_its_update_reaching_the_file() {
    let _g = share();
    let ns = Namespace::new("configmap");
    ns.apply(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data:
  greeting: hello
  other: value-1
"#,
    )
    .unwrap();
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {{name: all, configMap: {{name: cm, defaultMode: 0440}}}}
  - name: some
    configMap:
      name: cm
      items: [{{key: other, path: sub/renamed, mode: 0600}}]
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    env:
    - name: GREETING
      valueFrom: {{configMapKeyRef: {{name: cm, key: greeting}}}}
    envFrom: [{{prefix: CM_, configMapRef: {{name: cm}}}}]
    volumeMounts:
    - {{name: all, mountPath: /cm}}
    - {{name: some, mountPath: /some}}
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    assert_eq!(sh(&ns, "p", "c", "cat /cm/greeting"), "hello");
    assert_eq!(sh(&ns, "p", "c", "cat /cm/other"), "value-1");
    assert_eq!(sh(&ns, "p", "c", "cat /some/sub/renamed"), "value-1");
    assert_eq!(
        sh(
            &ns,
            "p",
            "c",
            "ls /some/sub; test -e /some/greeting || echo none"
        ),
        "renamed\nnone\n"
    );
    // defaultMode and an item's mode (of the file the key's link leads to).
    assert_eq!(sh(&ns, "p", "c", "stat -L -c %a /cm/greeting"), "440\n");
    assert_eq!(
        sh(&ns, "p", "c", "stat -L -c %a /some/sub/renamed"),
        "600\n"
    );
    // configMap volumes are mounted read-only.
    let (out, rc) = sh_status(&ns, "p", "c", "echo x > /cm/new");
    assert_ne!(rc, 0, "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    let env = sh(&ns, "p", "c", "echo $GREETING $CM_greeting $CM_other");
    assert_eq!(env, "hello hello value-1\n");
    // On the host, kubelet's files.
    let host = volume_dir(&pod, "configmap", "all");
    assert_eq!(
        std::fs::read_to_string(host.join("greeting")).unwrap(),
        "hello"
    );

    // An update reaches the mounted files (kubelet's next sync of the pod),
    // not the environment, which was set at the start.
    ns.kubectl(&[
        "patch",
        "configmap",
        "cm",
        "--type=merge",
        "-p",
        r#"{"data":{"other":"value-2"}}"#,
    ])
    .unwrap();
    wait_until(
        120,
        "the update in /cm/other and /some/sub/renamed",
        |seen| {
            *seen = sh(&ns, "p", "c", "cat /cm/other; echo; cat /some/sub/renamed");
            (seen == "value-2\nvalue-2").then_some(())
        },
    )
    .unwrap();
    assert_eq!(sh(&ns, "p", "c", "stat -L -c %a /cm/other"), "440\n");
    assert_eq!(sh(&ns, "p", "c", "echo $CM_other"), "value-1\n");
    assert_eq!(restarts(&ns.pod("p").unwrap(), "c"), 0);
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn secret_with_binary_data_as_volume_and_key_as_env() {
    let _g = share();
    let ns = Namespace::new("secret");
    let dir = host_dir(&ns);
    let bytes: Vec<u8> = (0..=255u8).collect();
    let file = dir.join("bin");
    std::fs::write(&file, &bytes).unwrap();
    ns.kubectl(&[
        "create",
        "secret",
        "generic",
        "s",
        &format!("--from-file=bin={}", file.display()),
        "--from-literal=password=s3cr3t value",
    ])
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: s, secret: {{secretName: s, defaultMode: 0400}}}}]
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    env:
    - name: PASSWORD
      valueFrom: {{secretKeyRef: {{name: s, key: password}}}}
    volumeMounts: [{{name: s, mountPath: /s}}]
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    // Byte for byte, inside (as hex: exec's output is text) and on the host.
    let hex = sh(&ns, "p", "c", "od -An -v -tx1 /s/bin");
    let got: Vec<u8> = hex
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    assert_eq!(got, bytes);
    assert_eq!(sh(&ns, "p", "c", "stat -L -c %s /s/bin"), "256\n");
    let host = volume_dir(&pod, "secret", "s");
    assert_eq!(std::fs::read(host.join("bin")).unwrap(), bytes);
    assert_eq!(sh(&ns, "p", "c", "cat /s/password"), "s3cr3t value");
    assert_eq!(sh(&ns, "p", "c", "stat -L -c %a /s/bin"), "400\n");
    // A secret never touches the disk: a tmpfs inside and on the host.
    let line = mount_line(&ns, "p", "c", "/s");
    assert!(line.contains(" tmpfs "), "{line}");
    assert!(options(&line).contains("ro"), "{line}");
    assert_eq!(host_mount(&host).map(|m| m.0).as_deref(), Some("tmpfs"));
    assert_eq!(sh(&ns, "p", "c", "printf %s \"$PASSWORD\""), "s3cr3t value");
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn projected_service_account_token_names_the_pods_service_account() {
    let _g = share();
    let ns = Namespace::new("sa-token");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: tok
    projected:
      sources:
      - serviceAccountToken: {{audience: berth-test, expirationSeconds: 3600, path: token}}
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    volumeMounts: [{{name: tok, mountPath: /tok}}]
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    let sa = format!("system:serviceaccount:{}:default", ns.name);
    let check = |claims: &Value| {
        assert_eq!(claims["sub"], sa.as_str(), "{claims}");
        let k = &claims["kubernetes.io"];
        assert_eq!(k["namespace"], ns.name.as_str(), "{claims}");
        assert_eq!(k["serviceaccount"]["name"], "default", "{claims}");
        assert_eq!(k["pod"]["name"], "p", "{claims}");
        assert_eq!(k["pod"]["uid"], uid(&pod).as_str(), "{claims}");
        assert_eq!(k["node"]["name"], NODE, "{claims}");
        let (iat, exp) = (
            claims["iat"].as_i64().unwrap(),
            claims["exp"].as_i64().unwrap(),
        );
        assert!(exp > iat, "{claims}");
    };
    // The token kubelet mounts for every pod (kube-api-access-*), with the
    // apiserver's audience, next to the namespace and the cluster's CA.
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    let token = sh(&ns, "p", "c", &format!("cat {dir}/token"));
    let claims = jwt_claims(&token);
    check(&claims);
    assert_eq!(
        claims["aud"],
        serde_json::json!(["https://kubernetes.default.svc"])
    );
    assert_eq!(sh(&ns, "p", "c", &format!("cat {dir}/namespace")), ns.name);
    let ca = sh(&ns, "p", "c", &format!("cat {dir}/ca.crt"));
    let host_ca = std::fs::read_to_string(node().unwrap().join("pki/ca.crt")).unwrap();
    assert_eq!(ca, host_ca);
    let line = mount_line(&ns, "p", "c", dir);
    assert!(options(&line).contains("ro"), "{line}");
    // The projected one, with the audience asked for.
    let claims = jwt_claims(&sh(&ns, "p", "c", "cat /tok/token"));
    check(&claims);
    assert_eq!(claims["aud"], serde_json::json!(["berth-test"]));
    let life = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
    assert_eq!(life, 3600, "{claims}");
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn downward_api_shows_the_pod_as_files_and_env() {
    let _g = share();
    let ns = Namespace::new("downward");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: p
  labels: {{app: web, tier: front}}
  annotations: {{note: "hello world"}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: info
    downwardAPI:
      items:
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
      - {{path: annotations, fieldRef: {{fieldPath: metadata.annotations}}}}
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
      - {{path: namespace, fieldRef: {{fieldPath: metadata.namespace}}}}
      - {{path: uid, fieldRef: {{fieldPath: metadata.uid}}}}
      - {{path: cpu_limit, resourceFieldRef: {{containerName: c, resource: limits.cpu, divisor: 1m}}}}
      - {{path: mem_limit, resourceFieldRef: {{containerName: c, resource: limits.memory, divisor: 1Mi}}}}
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    resources: {{limits: {{cpu: 250m, memory: 64Mi}}}}
    env:
    - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    - {{name: POD_NAMESPACE, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
    - {{name: POD_UID, valueFrom: {{fieldRef: {{fieldPath: metadata.uid}}}}}}
    - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    - {{name: NODE_NAME, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}
    - {{name: APP, valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['app']"}}}}}}
    - {{name: CPU_LIMIT, valueFrom: {{resourceFieldRef: {{resource: limits.cpu, divisor: 1m}}}}}}
    - {{name: MEM_LIMIT, valueFrom: {{resourceFieldRef: {{resource: limits.memory}}}}}}
    volumeMounts: [{{name: info, mountPath: /info}}]
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    let pod_uid = uid(&pod);
    let file = |f: &str| sh(&ns, "p", "c", &format!("cat /info/{f}"));
    assert_eq!(file("labels"), "app=\"web\"\ntier=\"front\"");
    assert_eq!(
        file("annotations").lines().find(|l| l.starts_with("note=")),
        Some("note=\"hello world\"")
    );
    assert_eq!(file("name"), "p");
    assert_eq!(file("namespace"), ns.name);
    assert_eq!(file("uid"), pod_uid);
    assert_eq!(file("cpu_limit"), "250");
    assert_eq!(file("mem_limit"), "64");
    let env = sh(
        &ns,
        "p",
        "c",
        "echo $POD_NAME $POD_NAMESPACE $POD_UID $POD_IP $NODE_NAME $APP $CPU_LIMIT $MEM_LIMIT",
    );
    let want = format!(
        "p {} {pod_uid} {} {NODE} web 250 {}\n",
        ns.name,
        pod["status"]["podIP"].as_str().unwrap(),
        64 << 20
    );
    assert_eq!(env, want);
    // A label added later reaches the file.
    ns.kubectl(&["label", "pod", "p", "added=later"]).unwrap();
    wait_until(120, "the new label in /info/labels", |seen| {
        *seen = file("labels");
        seen.contains("added=\"later\"").then_some(())
    })
    .unwrap();
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn image_volume_shows_the_images_files_read_only() {
    let _g = share();
    let ns = Namespace::new("image-volume");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: v
    image: {{reference: "{LIBRARY_BUSYBOX}", pullPolicy: IfNotPresent}}
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    volumeMounts:
    - {{name: v, mountPath: /img}}
    - {{name: v, mountPath: /img-etc, subPath: etc}}
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    // The image's files: its busybox runs, its /etc/passwd is there.
    let out = sh(&ns, "p", "c", "/img/bin/busybox echo from-the-image");
    assert_eq!(out, "from-the-image\n");
    let passwd = sh(&ns, "p", "c", "cat /img/etc/passwd");
    assert!(passwd.starts_with("root:x:0:0:"), "{passwd}");
    assert_eq!(sh(&ns, "p", "c", "cat /img-etc/passwd"), passwd);
    // Read-only, through either mount.
    for path in ["/img/new", "/img/etc/passwd", "/img-etc/new"] {
        let (out, rc) = sh_status(&ns, "p", "c", &format!("echo x >> {path}"));
        assert_ne!(rc, 0, "{path}: {out}");
        assert!(out.contains("Read-only file system"), "{path}: {out}");
    }
    let line = mount_line(&ns, "p", "c", "/img");
    assert!(options(&line).contains("ro"), "{line}");
    // kubelet shows the image it mounted as a volume of the container.
    let st = container(&pod, "c").unwrap();
    let mounts = st["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "v" && m["mountPath"] == "/img"),
        "{mounts:?}"
    );
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn pod_without_host_users_runs_as_root_in_a_user_namespace() {
    let _g = share();
    let ns = Namespace::new("userns");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  hostUsers: false
  volumes: [{{name: e, emptyDir: {{}}}}]
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    volumeMounts: [{{name: e, mountPath: /e}}]
"#
    ))
    .unwrap();
    // Running, or refused: kubelet says why in an event.
    let pod = wait_until(120, "pod p Ready or its sandbox refused", |seen| {
        let p = ns.pod("p")?;
        *seen = summary(&p);
        if berth_kube_tests::condition(&p, "Ready") {
            return Some(Ok(p));
        }
        let refused = events(&ns, "p")
            .into_iter()
            .find(|e| e.starts_with("FailedCreatePodSandBox"))?;
        Some(Err(refused))
    })
    .unwrap();
    let pod = pod.unwrap_or_else(|refused| {
        let n = kubectl_json(&["get", "node", NODE]).unwrap();
        let why: Vec<String> = part_log("berth")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("user namespaces"))
            .map(String::from)
            .collect();
        panic!(
            "kubelet refused the pod: {refused}\n\
             the node's runtime handlers: {}\n\
             berth's log: {}",
            n["status"]["runtimeHandlers"],
            why.last().map_or("(nothing)", |s| s.as_str())
        )
    });
    // Inside: root, in a namespace whose map is not the identity.
    assert_eq!(sh(&ns, "p", "c", "id -u; id -g"), "0\n0\n");
    let map = sh(&ns, "p", "c", "cat /proc/self/uid_map");
    let f: Vec<u64> = map.split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert_eq!(f.len(), 3, "one range: {map}");
    assert_eq!(f[0], 0, "{map}");
    assert!(f[1] >= 65536, "root is mapped to host uid {}: {map}", f[1]);
    assert_eq!(f[2], 65536, "{map}");
    // On the host, the process runs as that high uid.
    let (host_uid, host_gid, _) = host_ids(&pod, "c");
    assert_eq!(u64::from(host_uid), f[1], "the host's uid of the process");
    assert!(
        host_gid >= 65536,
        "the host's gid of the process: {host_gid}"
    );
    // kubelet shows the ids inside the namespace.
    assert_eq!(status_user(&pod, "c").0, 0);
    // Volumes are idmapped mounts (KEP-127): a file the pod's root writes
    // is root's on the host's disk too, not the mapped uid's.
    sh(&ns, "p", "c", "echo x > /e/f");
    assert_eq!(sh(&ns, "p", "c", "stat -c %u /e/f"), "0\n");
    let meta = std::fs::metadata(volume_dir(&pod, "empty-dir", "e").join("f")).unwrap();
    assert_eq!(meta.uid(), 0);
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn run_as_user_group_and_fs_group_apply_to_process_and_volumes() {
    let _g = share();
    let ns = Namespace::new("fsgroup");
    ns.apply(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data: {k: v}
"#,
    )
    .unwrap();
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    fsGroup: 2000
    supplementalGroups: [4000]
  volumes:
  - {{name: e, emptyDir: {{}}}}
  - {{name: cm, configMap: {{name: cm}}}}
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", "echo hi > /e/made-by-c; sleep 3600"]
    volumeMounts: [{{name: e, mountPath: /e}}, {{name: cm, mountPath: /cm}}]
"#
    ))
    .unwrap();
    let pod = ns.wait_ready("p", 120).unwrap();
    assert_eq!(sh(&ns, "p", "c", "id -u; id -g"), "1000\n3000\n");
    assert_eq!(
        ids(&sh(&ns, "p", "c", "id -G")),
        BTreeSet::from([2000, 3000, 4000])
    );
    let status = sh(
        &ns,
        "p",
        "c",
        "grep -E '^(Uid|Gid|Groups):' /proc/self/status",
    );
    assert!(status.contains("Uid:\t1000\t1000\t1000\t1000"), "{status}");
    assert!(status.contains("Gid:\t3000\t3000\t3000\t3000"), "{status}");
    // The emptyDir is the fsGroup's, set-gid: files made in it are too.
    assert_eq!(sh(&ns, "p", "c", "stat -c '%g %A' /e"), "2000 drwxrwsrwx\n");
    assert_eq!(
        sh(&ns, "p", "c", "stat -c '%u %g' /e/made-by-c"),
        "1000 2000\n"
    );
    assert_eq!(sh(&ns, "p", "c", "stat -L -c %g /cm/k"), "2000\n");
    let host = volume_dir(&pod, "empty-dir", "e").join("made-by-c");
    let meta = std::fs::metadata(&host).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1000, 2000));
    // What kubelet shows of the container's user.
    let (u, g, groups) = status_user(&pod, "c");
    assert_eq!((u, g), (1000, 3000));
    assert_eq!(groups, BTreeSet::from([2000, 3000, 4000]));
    // And the host's view of the process.
    assert_eq!(
        host_ids(&pod, "c"),
        (1000, 3000, BTreeSet::from([2000, 3000, 4000]))
    );
}

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn supplemental_groups_policy_strict_leaves_out_the_images_groups() {
    let _g = share();
    let ns = Namespace::new("supplemental-groups");
    // The node says it can (berth answers it in its status).
    let n = kubectl_json(&["get", "node", NODE]).unwrap();
    assert_eq!(
        n["status"]["features"]["supplementalGroupsPolicy"], true,
        "{}",
        n["status"]["features"]
    );
    // busybox whose /etc/group makes app (1000) a member of group 50000
    // (hack/kube.sh's images).
    let image = "registry.k8s.io/berth-kube-tests/groups:1";
    for (pod, policy) in [("merge", "Merge"), ("strict", "Strict")] {
        ns.apply(&format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: {pod}}}
spec:
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    supplementalGroups: [4000]
    supplementalGroupsPolicy: {policy}
  containers:
  - name: c
    image: {image}
    command: ["sleep", "3600"]
"#
        ))
        .unwrap();
    }
    // Merge: the groups of the image's /etc/group that list user 1000
    // (app) join; Strict: only the pod's.
    for (pod, want) in [
        ("merge", BTreeSet::from([3000, 4000, 50000])),
        ("strict", BTreeSet::from([3000, 4000])),
    ] {
        let p = ns.wait_ready(pod, 120).unwrap();
        assert_eq!(sh(&ns, pod, "c", "id -u; id -g"), "1000\n3000\n", "{pod}");
        assert_eq!(ids(&sh(&ns, pod, "c", "id -G")), want, "{pod}");
        let line = sh(&ns, pod, "c", "grep ^Groups: /proc/self/status");
        assert_eq!(
            ids(line.trim_start_matches("Groups:")),
            want,
            "{pod}: {line}"
        );
        let (u, g, groups) = status_user(&p, "c");
        assert_eq!((u, g), (1000, 3000), "{pod}");
        assert_eq!(groups, want, "{pod}: the status's supplementalGroups");
        assert_eq!(host_ids(&p, "c"), (1000, 3000, want), "{pod}: on the host");
    }
}
