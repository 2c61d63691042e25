#!/usr/bin/env bash
# Kubernetes node conformance (k8s.io/kubernetes/test/e2e_node v1.37.2, the
# suite containerd and CRI-O run in their CI) on this machine, against berth
# or, as the reference, containerd v2.4.2, with the same kubelet, runc 1.5.3,
# CNI plugins, images and kubelet config.
#
#   bash hack/node-e2e.sh [--runtime berth|containerd] [--focus RE] [--skip RE]
#                         [--part parallel|serial|all] [--nodes N]
#
# Default selection, as upstream's node e2e jobs: focus \[NodeConformance\],
# skip \[Flaky\]|\[Slow\]|\[Serial\] on N ginkgo processes (--part parallel),
# then the [Serial] NodeConformance specs one at a time (--part serial);
# --part all runs both (the default). --focus/--skip replace the selection of
# the parallel part (and skip the serial one).
#
# What it does: builds what is missing (hack/gotools.sh: e2e_node.test,
# ginkgo, kubelet, runc, containerd), starts the node's registry with the
# suite's images (under upstream's names: the runtime mirrors registry.k8s.io
# and docker.io to it) and the runtime (hack/kube.sh up --runtime-only), runs
# the suite (which starts its own etcd, kube-apiserver and kubelet), writes
# the JUnit reports and a summary to the report dir, takes everything down,
# and checks nothing is left. The last line is
#   node-e2e: RUNTIME: N passed, N failed, N skipped
# Exit: 0 when no spec failed, 1 when one did, 2 on a setup failure.
#
# Env: NODE_E2E_STATE (default /var/tmp/berth-node-e2e), NODE_E2E_REPORT
# (default $NODE_E2E_STATE/report-RUNTIME), NODE_E2E_TIMEOUT (ginkgo's
# --timeout per part, default 60m), BERTH_TARGET_DIR as for hack/kube.sh.
#
# Host specifics (see docs/conformance.md): no systemd is PID 1 here, yet
# systemd-run is installed; with it on PATH the suite would launch kubelet
# through it, so the suite runs with a PATH from which systemd-run and
# systemctl are left out. kubelet needs failCgroupV1: false (cgroup v1) and
# failSwapOn: false. Without systemd the suite gives kubelet
# --system-cgroups=/system, which moves every process of the host's root
# cgroup into it: the script empties that flag. The node's address is
# 10.254.254.1, which the script adds to lo and removes.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
log() { echo "node-e2e: $*" >&2; }
die() {
  log "$*"
  exit 2
}

runtime=berth focus='' skip='' part=all nodes=${NODE_E2E_NODES:-4}
while (($#)); do
  case $1 in
  --runtime) runtime=${2:?}; shift 2 ;;
  --focus) focus=${2:?}; shift 2 ;;
  --skip) skip=${2:?}; shift 2 ;;
  --part) part=${2:?}; shift 2 ;;
  --nodes) nodes=${2:?}; shift 2 ;;
  *) die "usage: bash hack/node-e2e.sh [--runtime berth|containerd] [--focus RE] [--skip RE] [--part parallel|serial|all] [--nodes N]" ;;
  esac
done
[[ $runtime == berth || $runtime == containerd ]] || die "--runtime berth|containerd"
[[ $part == parallel || $part == serial || $part == all ]] || die "--part parallel|serial|all"
[[ $(id -u) == 0 ]] || die "run as root"
if [[ -n $focus || -n $skip ]]; then
  [[ $part != serial ]] || die "--focus/--skip select the parallel part"
  part=parallel
fi

S=${NODE_E2E_STATE:-/var/tmp/berth-node-e2e}
report=${NODE_E2E_REPORT:-$S/report-$runtime}
timeout=${NODE_E2E_TIMEOUT:-60m}
export KUBE_STATE=$S
kube() { bash "$repo/hack/kube.sh" "$@"; }

# The suite's kubelet uses fixed paths and ports: one node at a time.
for port in 6443 10250 10248 2379; do
  if ss -Hltn "sport = :$port" | grep -q .; then
    die "port $port is in use (a node of hack/kube.sh up? take it down first)"
  fi
done
[[ ! -e /var/lib/kubelet/pods ]] || die "/var/lib/kubelet/pods exists: another kubelet's state"
# The suite's kubelet evicts below 10% free on the node's filesystem and
# then wants 15% back (its evictionHard and evictionMinimumReclaim): with
# less, pods are rejected for DiskPressure and specs fail for no fault of
# the runtime's.
mkdir -p /var/lib/kubelet "$S"
for d in /var/lib/kubelet "$S"; do
  free=$(df --output=avail,size -k "$d" | awk 'NR == 2 { printf "%d", 100 * $1 / $2 }')
  ((free >= 16)) || die "$d's filesystem has $free% free: the suite's kubelet needs 16% (DiskPressure below 10%, until 15%)"
done

bin=$(bash hack/gotools.sh | tail -1)
kubelet_dir_mounted=''
! mountpoint -q /var/lib/kubelet || kubelet_dir_mounted=1
started=$SECONDS

cleanup() {
  local rc=$?
  trap - EXIT
  stop_suite
  down || rc=1
  exit "$rc"
}

# The suite, if it still runs (the script was stopped while it ran): ginkgo,
# its processes and the kubelet they started, all from $bin: TERM twice, 10 s
# apart, then KILL.
stop_suite() {
  local sig p exe found
  for sig in TERM TERM KILL; do
    found=''
    for p in /proc/[0-9]*; do
      exe=$(readlink "$p/exe" 2>/dev/null) || continue
      case $exe in
      "$bin/ginkgo" | "$bin/e2e_node.test" | "$bin/kubelet") found=1; kill -"$sig" "${p#/proc/}" 2>/dev/null || true ;;
      esac
    done
    [[ -n $found ]] || return 0
    log "stopping the suite's processes ($sig)"
    sleep 10
  done
}

# What the suite's kubelet leaves on the host besides what kube.sh down
# removes: its root dir and the cgroups it made (kubelet, system, runtime).
down() {
  local m ok=0
  while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(awk 'index($5, "/var/lib/kubelet/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  # kubelet makes /var/lib/kubelet a shared mount of itself.
  if [[ -z $kubelet_dir_mounted ]] && mountpoint -q /var/lib/kubelet; then
    umount -l /var/lib/kubelet 2>/dev/null || true
  fi
  kube down || ok=1
  rm -rf /var/lib/kubelet/pods /var/lib/kubelet/plugins /var/lib/kubelet/plugins_registry \
    /var/lib/kubelet/pod-resources /var/lib/kubelet/checkpoints /var/lib/kubelet/*_state \
    /var/lib/kubelet/kubeconfig /var/lib/kubelet/pki 2>/dev/null || true
  ip addr del "$NODE_IP/32" dev lo 2>/dev/null || true
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ ! -d ${h}kubelet ]] || find "${h}kubelet" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ ! -d ${h}kubelet ]] || { log "left: cgroup ${h}kubelet"; ok=1; }
  done
  if ip -o addr show dev lo | grep -q " $NODE_IP/"; then
    log "left: address $NODE_IP on lo"
    ok=1
  fi
  if awk 'index($5, "/var/lib/kubelet/") == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo ||
    { [[ -z $kubelet_dir_mounted ]] && mountpoint -q /var/lib/kubelet; }; then
    log "left: mounts under /var/lib/kubelet"
    ok=1
  fi
  return "$ok"
}

# The node's address: one of its own on lo (kube-apiserver does not proxy
# to a node at 127.0.0.0/8, and the host's other addresses are not the
# suite's).
NODE_IP=10.254.254.1
mkdir -p "$S"
trap cleanup EXIT
ip addr add "$NODE_IP/32" dev lo
kube up --runtime "$runtime" --runtime-only
eval "$(kube env)"
sock=${CONTAINER_RUNTIME_ENDPOINT#unix://}

# The kubelet config: upstream's jenkins default plus what this host needs.
kdir=$(go -C hack/go/kube list -m -f '{{.Dir}}' k8s.io/kubernetes)
{
  grep -v '^#' "$kdir/test/e2e_node/jenkins/default-kubelet-config.yaml"
  echo "failCgroupV1: false"
  echo "failSwapOn: false"
} >"$S/kubelet-config.yaml"

# A PATH without systemd-run and systemctl: links to everything else.
rm -rf "$S/path" && mkdir -p "$S/path"
for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  for f in "$d"/*; do
    n=${f##*/}
    [[ -x $f && ! -d $f && $n != systemd-run && $n != systemctl && ! -e $S/path/$n ]] || continue
    ln -s "$f" "$S/path/$n"
  done
done

# The suite's registries: every name under registry.k8s.io and docker.io
# comes from the node's registry (the runtime's mirrors); the private and
# the invalid registry are a closed port on loopback, so a pull from them
# fails at once and nothing leaves the machine.
cat >"$S/repo-list.yaml" <<EOF
gcAuthenticatedRegistry: 127.0.0.1:9/k8s-authenticated-test
privateRegistry: 127.0.0.1:9/k8s-authenticated-test
invalidRegistry: 127.0.0.1:9/invalid
EOF

rm -rf "$report" && mkdir -p "$report"
summary=$report/summary.txt
: >"$summary"
status=0

# run NAME NODES FOCUS SKIP: one ginkgo run of the suite.
run() {
  local name=$1 n=$2 f=$3 s=$4 start=$SECONDS rc=0
  log "$name: focus '$f' skip '$s' on $n process(es)"
  mkdir -p "$report/$name"
  (
    cd "$report/$name"
    env -i HOME=/root PATH="$S/path" KUBE_TEST_REPO_LIST="$S/repo-list.yaml" \
      "$bin/ginkgo" --nodes="$n" --timeout="$timeout" --no-color --poll-progress-after=5m \
      --focus="$f" --skip="$s" --junit-report=junit.xml --output-dir="$report/$name" \
      "$bin/e2e_node.test" -- \
      --container-runtime-endpoint="unix://$sock" --image-service-endpoint="unix://$sock" \
      --kubelet-config-file="$S/kubelet-config.yaml" \
      --prepull-images=false --report-dir="$report/$name" --node-name="$(hostname)" \
      --kubelet-flags="--node-ip=$NODE_IP --system-cgroups=" \
      --v=2 >"$report/$name/ginkgo.log" 2>&1
  ) || rc=$?
  local counts
  counts=$(junit_counts "$report/$name/junit.xml")
  echo "$name: $counts ($((SECONDS - start))s, ginkgo exit $rc)" | tee -a "$summary" >&2
  junit_failed "$report/$name/junit.xml" | sed 's/^/  failed: /' | tee -a "$summary" >&2
  [[ $rc == 0 ]] || status=1
}

# "N passed, N failed, N skipped" of a JUnit report.
junit_counts() {
  [[ -f $1 ]] || { echo "no report"; return; }
  python3 - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ET
p = f = s = 0
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if tc.get("name", "").startswith(("[SynchronizedBeforeSuite]", "[SynchronizedAfterSuite]", "[BeforeSuite]", "[AfterSuite]", "[ReportAfterSuite]", "[ReportBeforeSuite]", "[DeferCleanup")):
        if tc.find("failure") is None and tc.find("error") is None:
            continue
    sk = tc.find("skipped")
    if sk is not None:
        # "skipped" alone: left out by --focus/--skip, not run at all.
        if sk.get("message") != "skipped":
            s += 1
    elif tc.find("failure") is not None or tc.find("error") is not None:
        f += 1
    else:
        p += 1
print(f"{p} passed, {f} failed, {s} skipped")
EOF
}

junit_failed() {
  [[ -f $1 ]] || return 0
  python3 - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ET
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if tc.find("skipped") is None and (tc.find("failure") is not None or tc.find("error") is not None):
        print(tc.get("name"))
EOF
}

if [[ $part == parallel || $part == all ]]; then
  run parallel "$nodes" "${focus:-\[NodeConformance\]}" "${skip:-\[Flaky\]|\[Slow\]|\[Serial\]}"
fi
if [[ $part == serial || $part == all ]]; then
  run serial 1 '\[NodeConformance\].*\[Serial\]|\[Serial\].*\[NodeConformance\]' '\[Flaky\]|\[Slow\]'
fi

total=$(awk '{ for (i = 2; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^skipped/) s += $i } }
  END { printf "%d passed, %d failed, %d skipped", p, f, s }' <(grep -v '^  ' "$summary"))
log "$runtime: $total in $((SECONDS - started))s; reports in $report"
echo "node-e2e: $runtime: $total" | tee -a "$summary"
exit "$status"
