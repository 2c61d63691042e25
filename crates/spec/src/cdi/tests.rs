//! Tests of CDI: reading spec files, resolving device names and applying their edits.

use super::*;
use crate::ErrorKind;

const VENDOR: &str = r#"
cdiVersion: "0.6.0"
kind: example.com/test
containerEdits:
  env:
    - FROM_SPEC=1
devices:
  - name: "null"
    containerEdits:
      env:
        - CDI_DEV=null
        - SHARED=device
      deviceNodes:
        - path: /dev/xcdi
          hostPath: /dev/null
          permissions: rw
      mounts:
        - hostPath: /opt/lib
          containerPath: /usr/lib/vendor/
          options: [ro, nosuid, nodev, bind]
      hooks:
        - hookName: createContainer
          path: /usr/bin/vendor-hook
          args: [vendor-hook, update-ldcache]
      additionalGids: [44]
  - name: fifo
    containerEdits:
      deviceNodes:
        - path: /dev/xfifo
          type: p
"#;

fn config(names: &[&str]) -> v1::ContainerConfig {
    v1::ContainerConfig {
        cdi_devices: names
            .iter()
            .map(|n| v1::CdiDevice {
                name: n.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

fn base() -> Spec {
    let mut spec = Spec::default();
    let mut p = oci_spec::runtime::Process::default();
    p.set_env(Some(vec!["PATH=/bin".into(), "SHARED=image".into()]));
    spec.set_process(Some(p));
    spec
}

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(d.path().join(name), text).unwrap();
    }
    d
}

fn apply_to(config: &v1::ContainerConfig, dirs: &[&Path]) -> Result<Spec, Error> {
    let dirs: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    let mut spec = base();
    apply("c1", config, &dirs, &mut spec).map(|_| spec)
}

#[test]
fn a_device_brings_its_edits() {
    let d = dir_with(&[("vendor.yaml", VENDOR)]);
    let spec = apply_to(&config(&["example.com/test=null"]), &[d.path()]).unwrap();
    let p = spec.process().as_ref().unwrap();
    let env = p.env().as_ref().unwrap();
    assert!(env.contains(&"CDI_DEV=null".to_string()));
    assert!(env.contains(&"FROM_SPEC=1".to_string()));
    // Replaced, not doubled.
    assert!(env.contains(&"SHARED=device".to_string()));
    assert!(!env.iter().any(|e| e == "SHARED=image"));
    assert!(p.user().additional_gids().as_ref().unwrap().contains(&44));

    let l = spec.linux().as_ref().unwrap();
    let dev = &l.devices().as_ref().unwrap()[0];
    assert_eq!(dev.path(), Path::new("/dev/xcdi"));
    // From the host's /dev/null.
    assert_eq!(
        (dev.typ(), dev.major(), dev.minor()),
        (LinuxDeviceType::C, 1, 3)
    );
    let rule = l.resources().as_ref().unwrap().devices().as_ref().unwrap()[0].clone();
    assert!(rule.allow());
    assert_eq!((rule.major(), rule.minor()), (Some(1), Some(3)));
    assert_eq!(rule.access().as_deref(), Some("rw"));

    let m = spec
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.destination() == Path::new("/usr/lib/vendor"))
        .unwrap();
    assert_eq!(m.typ().as_deref(), Some("bind"));
    assert_eq!(m.source().as_deref(), Some(Path::new("/opt/lib")));
    let hooks = spec.hooks().as_ref().unwrap();
    let h = &hooks.create_container().as_ref().unwrap()[0];
    assert_eq!(h.path(), Path::new("/usr/bin/vendor-hook"));
}

#[test]
fn unknown_and_unqualified_devices_are_invalid_not_dropped() {
    let d = dir_with(&[("vendor.yaml", VENDOR)]);
    for name in ["example.com/test=gpu0", "other.org/x=null"] {
        let e = apply_to(&config(&[name]), &[d.path()]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(
            e.to_string().contains(name) && e.to_string().contains("c1"),
            "{e}"
        );
    }
    for name in ["null", "example.com=null", "example.com/test=", "/x=y"] {
        let e = apply_to(&config(&[name]), &[d.path()]).unwrap_err();
        assert!(e.to_string().contains("qualified"), "{name}: {e}");
    }
    // No spec dirs at all: still an error.
    let e = apply_to(
        &config(&["example.com/test=null"]),
        &[Path::new("/nonexistent-cdi")],
    )
    .unwrap_err();
    assert!(e.to_string().contains("not defined"), "{e}");
}

#[test]
fn annotations_request_devices_too() {
    let d = dir_with(&[("vendor.yaml", VENDOR)]);
    let mut c = config(&[]);
    c.annotations.insert(
        "cdi.k8s.io/plugin_dev".into(),
        "example.com/test=null, example.com/test=fifo".into(),
    );
    c.annotations
        .insert("other".into(), "example.com/test=missing".into());
    assert_eq!(
        requested_cdi_devices("c1", &c).unwrap(),
        vec!["example.com/test=null", "example.com/test=fifo"]
    );
    let spec = apply_to(&c, &[d.path()]).unwrap();
    let devs = spec.linux().as_ref().unwrap().devices().clone().unwrap();
    assert_eq!(devs.len(), 2);
    // A FIFO gets no device cgroup rule.
    let rules = spec
        .linux()
        .as_ref()
        .unwrap()
        .resources()
        .as_ref()
        .unwrap()
        .devices()
        .clone()
        .unwrap();
    assert_eq!(rules.len(), 1);
    c.annotations
        .insert("cdi.k8s.io/bad".into(), "not-qualified".into());
    let e = apply_to(&c, &[d.path()]).unwrap_err();
    assert!(e.to_string().contains("cdi.k8s.io/bad"), "{e}");
}

#[test]
fn later_dirs_win_and_duplicates_in_one_dir_conflict() {
    let low = dir_with(&[("a.yaml", VENDOR)]);
    let high_spec = r#"{"cdiVersion":"0.6.0","kind":"example.com/test",
            "devices":[{"name":"null","containerEdits":{"env":["WHICH=high"]}}]}"#;
    let high = dir_with(&[("b.json", high_spec)]);
    let spec = apply_to(
        &config(&["example.com/test=null"]),
        &[low.path(), high.path()],
    )
    .unwrap();
    let env = spec.process().as_ref().unwrap().env().clone().unwrap();
    assert!(env.contains(&"WHICH=high".to_string()), "{env:?}");
    assert!(!env.contains(&"CDI_DEV=null".to_string()));

    let both = dir_with(&[("a.yaml", VENDOR), ("b.json", high_spec)]);
    let e = apply_to(&config(&["example.com/test=null"]), &[both.path()]).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("more than once") && msg.contains("a.yaml") && msg.contains("b.json"),
        "{msg}"
    );
    // The other device of the file is still there.
    assert!(apply_to(&config(&["example.com/test=fifo"]), &[both.path()]).is_ok());
}

#[test]
fn unusable_files_are_skipped_and_named() {
    let d = dir_with(&[
        ("broken.yaml", "cdiVersion: [\n"),
        (
            "nokind.json",
            r#"{"cdiVersion":"0.6.0","kind":"bad","devices":[]}"#,
        ),
    ]);
    nix::unistd::mkfifo(
        &d.path().join("fifo.yaml"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let big = std::fs::File::create(d.path().join("big.yaml")).unwrap();
    big.set_len(MAX_SPEC_BYTES + 1).unwrap();
    std::fs::write(d.path().join("ignored.txt"), VENDOR).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = d.path().to_owned();
    std::thread::spawn(move || {
        let _ = tx.send(apply_to(&config(&["example.com/test=null"]), &[&dir]).map(|_| ()));
    });
    let e = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("reading the spec dir hangs")
        .unwrap_err();
    let msg = e.to_string();
    for f in ["broken.yaml", "nokind.json", "fifo.yaml", "big.yaml"] {
        assert!(msg.contains(f), "{f} not named: {msg}");
    }
    assert!(!msg.contains("ignored.txt"), "{msg}");
}

#[test]
fn edits_berth_cannot_make_are_refused() {
    let spec = r#"{"cdiVersion":"0.6.0","kind":"example.com/test",
            "devices":[{"name":"rdt","containerEdits":{"intelRdt":{"closID":"x"}}},
                       {"name":"rel","containerEdits":{"deviceNodes":[{"path":"dev/x","hostPath":"/dev/null"}]}},
                       {"name":"hook","containerEdits":{"hooks":[{"hookName":"whenever","path":"/bin/true"}]}},
                       {"name":"notdev","containerEdits":{"deviceNodes":[{"path":"/dev/x","hostPath":"/etc/passwd"}]}}]}"#;
    let d = dir_with(&[("x.json", spec)]);
    for (name, want) in [
        ("rdt", "intelRdt"),
        ("rel", "absolute"),
        ("hook", "unknown hook"),
        ("notdev", "not a device"),
    ] {
        let e = apply_to(&config(&[&format!("example.com/test={name}")]), &[d.path()]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains(want), "{name}: {e}");
    }
}

#[test]
fn nothing_asked_reads_nothing() {
    // A spec dir that would fail to read is never looked at.
    let mut spec = base();
    let before = spec.clone();
    apply(
        "c1",
        &config(&[]),
        &[PathBuf::from("/proc/self/mem")],
        &mut spec,
    )
    .unwrap();
    assert_eq!(spec, before);
}
