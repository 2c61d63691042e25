//! kubelet's image garbage collection on berth: unused images go, a used
//! one stays. kubelet collects at its start (too early: its image
//! filesystem's stats are not in yet, as on any runtime) and then every
//! five minutes, so this test waits for that tick; hack/test.sh runs it
//! beside critest. Needs the node of `hack/kube.sh up`.

use berth_kube_tests::images::AGNHOST;
use berth_kube_tests::{crictl, disrupt, restarts, wait_until, KubeletWith, Namespace};

#[test]
#[ignore = "needs the node of hack/kube.sh up (hack/test.sh runs it)"]
fn image_gc_removes_unused_images_and_never_a_used_one() {
    let _g = disrupt();
    let ns = Namespace::new("image-gc");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {AGNHOST}
    args: ["pause"]
"#
    ))
    .unwrap();
    ns.wait_ready("p", 120).unwrap();
    let unused = "docker.io/library/busybox:1.37";
    crictl(&["pull", unused]).unwrap();
    let has = |image: &str| {
        crictl(&["images", "-q", image])
            .map(|o| !o.trim().is_empty())
            .unwrap_or(false)
    };
    assert!(has(unused));
    // Thresholds far below the disk's use: kubelet frees all it can.
    let _k = KubeletWith::restart(
        "",
        "imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\nimageMinimumGCAge: 0s",
    )
    .unwrap();
    wait_until(
        420,
        "the unused image removed (kubelet's five-minute tick)",
        |_| (!has(unused)).then_some(()),
    )
    .unwrap();
    assert!(has(AGNHOST), "the image of a running pod was removed");
    assert_eq!(restarts(&ns.pod("p").unwrap(), "c"), 0);
}
