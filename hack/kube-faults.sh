#!/usr/bin/env bash
# Faults under a real kubelet (issue #53): stands up the node of hack/kube.sh
# on berth or containerd, runs a churning workload on it, injects faults one
# kind at a time and then mixed, and after each checks that the node
# converges: every pod Running (and Ready) or Completed as the workload says,
# no container restarted because of the fault, no pod stuck in
# ContainerCreating or Terminating, no name wedged. At the end it deletes the
# workload, checks that the runtime left nothing (records, shims, mounts,
# netns, pod cgroups, IP leases, iptables rules, snapshots) and that no
# complete image was pulled twice, takes the node down and writes a report.
#
#   bash hack/kube-faults.sh [--runtime berth|containerd] [--minutes N] [--ci]
#                            [--faults K1,K2,...] [--count N] [--keep]
#
#   --runtime   the runtime under test (default berth); containerd v2.4.2 gives
#               the reference column
#   --minutes   stop injecting faults after N minutes (default 30); the
#               faults not reached are listed as skipped
#   --ci        the short run (under 10 minutes with the node's start and
#               the end's checks): a smaller workload, one or two faults of
#               each kind but cni-flaky, runc-kill and mixed, faults stopped
#               after 5 minutes
#   --faults    the kinds to inject, in order (default: all of them, then
#               mixed); kinds: runtime-kill kubelet-kill both-kill run-wipe
#               cni-flaky runc-kill registry-drop disk-full mixed
#   --count     inject each kind N times (default: 20 runtime-kill, 5
#               kubelet-kill, 3 both-kill, 2 of each other kind, 6 mixed)
#   --keep      leave the node up at the end (no down, no end checks)
#
# Run it as root under the node lock (one node per machine):
#   flock /run/berth-kube.lock bash hack/kube-faults.sh --ci
# It brings its node down on exit, even on failure.
#
# The workload (namespace `faults`): Deployment `web` (30 busybox replicas,
# 10 with --ci; an exec liveness probe every 10 s) rolled every minute;
# Deployment `steady` (3 replicas, exec readiness and liveness probes every
# second, never rolled: the witnesses of "no restart"); a Job every 15 s
# (deleted 30 s after it finishes); `kubectl exec` and `kubectl logs -f`
# sessions one after another on the steady pods.
#
# One fault: the restart counts of every running container are taken; a
# rollout and a Job are started so that RunPodSandbox, CreateContainer and
# StopPodSandbox are in flight; after a random 1-8 s the fault is injected;
# the time to converge is measured from the injection (from the end of the
# window for cni-flaky and runc-kill, which last 60 s), bounded by
# FAULTS_CONVERGE (default 240 s). Each fault's row: time to converge,
# restarts caused (restartCount grown or container id changed, for the
# containers running before the fault), Job pods failed, name-conflict
# events, and netns mounts / IP leases beyond the runtime's ready sandboxes.
#
# registry-drop pulls a fresh image (busybox and three layers of random
# bytes, pushed for the fault) through hack/faults-registry.py, a proxy in
# front of the node's registry that resets the connection in the middle of
# one big blob in three for 30 s. disk-full puts the runtime's root on a
# loop device (ext4, FAULTS_DISK_MB, for the whole run) and fills it for
# 40 s while a fresh image is pulled, a container writes into its rootfs and
# web rolls, then frees it. After each: no partial download left in the
# runtime's root, no blob of an image already complete fetched again; at
# the end, the root's used space back to what it was before the first fault.
#
# A fault that does not converge within the bound is a result, not the end
# of the run: the pods it left unready are deleted and the node given 120 s
# more; if it still does not converge the faults left are skipped. The
# report is written and the node taken down whatever happens (also on
# SIGINT or SIGTERM); report.md is rewritten after each fault.
#
# Output: $KUBE_STATE/faults/RUNTIME-DATE/ (report.md, faults.log, the
# snapshots of each fault); report.md is printed at the end. Exit 0 when
# every fault injected converged with no restart (but a reboot's), no name
# conflict and no leak, and nothing was left at the end; 1 otherwise. The
# faults --minutes left out are listed as skipped, not failed.
#
# Env: KUBE_STATE (as hack/kube.sh), FAULTS_CONVERGE (the bound, seconds),
# FAULTS_SEED (the random seed, default the time), FAULTS_DISK_MB (the
# loop device's size, default 768), FAULTS_PROXY_PORT (the registry proxy's
# port on 127.0.0.1, default 25050).
set -euo pipefail
cd "$(dirname "$0")/.."

S=${KUBE_STATE:-/var/tmp/berth-kube}
NS=faults
CONVERGE=${FAULTS_CONVERGE:-240}
SEED=${FAULTS_SEED:-$(date +%s)}

log() {
  echo "kube-faults: $*" >&2
  [[ -z ${OUT:-} ]] || echo "$(date -u +%T) $*" >>"$OUT/faults.log"
}
die() {
  log "$*"
  exit 2
}
usage() {
  sed -n '2,76p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

runtime=berth minutes=30 minutes_set='' ci='' keep='' kinds='' count=''
while (($#)); do
  case $1 in
  --runtime) runtime=${2:?}; shift 2 ;;
  --minutes) minutes=${2:?} minutes_set=1; shift 2 ;;
  --ci) ci=1; shift ;;
  --faults) kinds=${2:?}; shift 2 ;;
  --count) count=${2:?}; shift 2 ;;
  --keep) keep=1; shift ;;
  *) usage ;;
  esac
done
[[ $runtime == berth || $runtime == containerd ]] || usage
[[ $(id -u) == 0 ]] || die "run as root"
RANDOM=$SEED

if [[ -n $ci ]]; then
  REPLICAS=10
  # How many of each kind; the CI run keeps within ten minutes.
  PLAN=${kinds:-runtime-kill,kubelet-kill,both-kill,run-wipe,registry-drop,disk-full}
  declare -A COUNT=([runtime-kill]=2 [kubelet-kill]=1 [both-kill]=1 [run-wipe]=1 [cni-flaky]=1 [runc-kill]=1
    [registry-drop]=1 [disk-full]=1 [mixed]=1)
  [[ -n $minutes_set ]] || minutes=5
else
  REPLICAS=30
  PLAN=${kinds:-runtime-kill,kubelet-kill,both-kill,run-wipe,cni-flaky,runc-kill,registry-drop,disk-full,mixed}
  declare -A COUNT=([runtime-kill]=20 [kubelet-kill]=5 [both-kill]=3 [run-wipe]=2 [cni-flaky]=2 [runc-kill]=2
    [registry-drop]=2 [disk-full]=2 [mixed]=6)
fi

OUT=$S/faults/$runtime-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
BIN=$(bash hack/gotools.sh | tail -n 1)
export PATH=$BIN:$PATH

kc() { timeout 40 kubectl --kubeconfig "$S/admin.kubeconfig" --request-timeout=30s "$@"; }
kn() { kc -n "$NS" "$@"; }
cri() { timeout 30 crictl --runtime-endpoint "unix://$SOCK" --timeout 20s "$@"; }

# ---- the node ----

BG=() REPORTED='' DOWN_DONE='' STOPPED=''
# On every exit: the background loops and the proxy stopped, the node taken
# down (but with --keep), the loop device released, and the report written
# if the run ended before writing it (a die, SIGINT, SIGTERM).
finish() {
  local rc=$?
  trap - EXIT INT TERM
  ((${#BG[@]} == 0)) || kill "${BG[@]}" 2>/dev/null || true
  stop_proxy
  wait 2>/dev/null || true
  if [[ -z $keep && -z $DOWN_DONE ]]; then
    bash hack/kube.sh down >>"$OUT/down.log" 2>&1 || {
      log "kube.sh down failed: $(tail -n 5 "$OUT/down.log")"
      END_LEFT+=("kube.sh down: $(grep -A20 'left behind' "$OUT/down.log" | tail -n +2 | tr '\n' ';')")
    }
    DOWN_DONE=1
  fi
  if [[ -z $keep ]]; then
    release_disk
    rm -rf "$FAULTS_BIN"
  fi
  if [[ -z $REPORTED ]]; then
    STOPPED=${STOPPED:-the run ended early (exit $rc): see faults.log}
    write_report
    cat "$OUT/report.md"
    ((rc != 0)) || rc=1
  fi
  exit "$rc"
}

node_up() {
  log "node up on $runtime (seed $SEED, output $OUT)"
  trap finish EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  write_wrappers
  write_fresh_registry
  if [[ ",$PLAN," == *,disk-full,* ]]; then
    make_disk
    # A full imagefs is disk pressure to kubelet: it evicts pods, removes
    # unused images and taints the node until the pressure has been gone
    # for this long (5 minutes by default, which would be all the fault
    # measured). Exported: `kube.sh restart kubelet` writes it again.
    export KUBE_KUBELET_CONFIG="${KUBE_KUBELET_CONFIG:+$KUBE_KUBELET_CONFIG
}evictionPressureTransitionPeriod: 10s"
  fi
  KUBE_CNI_BIN_DIR=$FAULTS_BIN KUBE_RUNC=$FAULTS_BIN/runc bash hack/kube.sh up --runtime "$runtime" >"$OUT/up.log" 2>&1 || die "kube.sh up failed: $(tail -n 5 "$OUT/up.log")"
  start_proxy
  case $runtime in
  berth)
    SOCK=$S/berth/berth.sock STATE_DIR=$S/berth/run
    NETNS_RE="^$S/berth/run/netns/" SHIM_RE='/berth-shim$'
    ;;
  containerd)
    SOCK=$S/containerd/containerd.sock STATE_DIR=$S/containerd/run
    NETNS_RE='^/run/netns/cni-' SHIM_RE='/containerd-shim-runc-v2$'
    ;;
  esac
  cni_rules >"$OUT/cni-rules.before"
  all_ip_leases >"$OUT/leases.before"
  flaky_network bridge faults-flaky
}

# ---- the workload ----

BUSYBOX=registry.k8s.io/e2e-test-images/busybox:1.37.0-2

workload_apply() {
  kc create namespace "$NS" >/dev/null
  kn apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: $REPLICAS
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: c
        image: $BUSYBOX
        command: ["sh", "-c", "trap 'exit 0' TERM; i=0; while :; do echo tick \$i; i=\$((i+1)); sleep 1; done"]
        livenessProbe: {exec: {command: ["true"]}, periodSeconds: 10}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: steady}
spec:
  replicas: 3
  selector: {matchLabels: {app: steady}}
  template:
    metadata: {labels: {app: steady}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: c
        image: $BUSYBOX
        command: ["sh", "-c", "trap 'exit 0' TERM; i=0; while :; do echo tick \$i; i=\$((i+1)); sleep 1; done"]
        readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
        livenessProbe: {exec: {command: ["true"]}, periodSeconds: 1, failureThreshold: 5}
EOF
}

# Applies Job $1 of $2 pods (one at a time or all at once) of image $3
# running `sh -c "$4"`, removed $5 s after it finished.
apply_job() {
  kn apply -f - >/dev/null <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $1}
spec:
  ttlSecondsAfterFinished: $5
  backoffLimit: 3
  parallelism: $2
  completions: $2
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 2
      containers:
      - name: c
        image: $3
        command: ["sh", "-c", $(jq -n --arg c "$4" '$c')]
EOF
}

JOBS=0
new_job() {
  JOBS=$((JOBS + 1))
  apply_job "job-$$-$JOBS" 1 "$BUSYBOX" "echo job $JOBS; sleep 3" 30 2>/dev/null || true
}

# Rolls web every minute and starts a Job every 15 s, unless paused (while
# the node converges after a fault).
churn_loop() {
  local last_roll=$SECONDS
  while :; do
    if [[ ! -e $OUT/pause ]]; then
      if ((SECONDS - last_roll >= 60)); then
        kn rollout restart deploy/web >/dev/null 2>&1 || true
        last_roll=$SECONDS
      fi
      new_job
    fi
    sleep 15
  done
}

# kubectl exec and logs -f sessions on the steady pods, one after another,
# each line "TIME exec|logs ok|cut [error]" in sessions.log.
sessions_loop() {
  local kind=$1 pod n err=$OUT/session-$1.err
  while :; do
    pod=$(kn get pods -l app=steady -o jsonpath='{.items[0].metadata.name}' 2>/dev/null) || pod=''
    if [[ -z $pod ]]; then
      sleep 2
      continue
    fi
    if [[ $kind == exec ]]; then
      n=$(timeout 40 kubectl --kubeconfig "$S/admin.kubeconfig" -n "$NS" exec "$pod" -- \
        sh -c 'i=0; while [ $i -lt 20 ]; do echo $i; i=$((i+1)); sleep 1; done' 2>"$err" | wc -l) || true
      ((n == 20)) && echo "$(date +%T) exec ok" || echo "$(date +%T) exec cut $n $(tail -n 1 "$err")"
    else
      n=$(timeout 20 kubectl --kubeconfig "$S/admin.kubeconfig" -n "$NS" logs -f --tail=0 "$pod" 2>"$err" | wc -l) || true
      ((n >= 15)) && echo "$(date +%T) logs ok" || echo "$(date +%T) logs cut $n $(tail -n 1 "$err")"
    fi
    sleep 2
  done >>"$OUT/sessions.log"
}

workload_start() {
  workload_apply
  wait_converged 300 >/dev/null || die "the workload did not come up in 300 s: $(not_converged)"
  pulls >"$OUT/pulls.before"
  if [[ -n $DISK ]]; then
    # The images of the end's measure: agnhost, which runtime-kill pulls.
    cri pull "$AGNHOST" >/dev/null || die "pulling $AGNHOST failed"
    DISK_BEFORE=$(disk_used_mib)
  fi
  churn_loop &
  BG+=($!)
  sessions_loop exec &
  BG+=($!)
  sessions_loop logs &
  BG+=($!)
  log "workload up: web $REPLICAS replicas, steady 3, a Job every 15 s"
}

# ---- convergence ----

# Zero when every Deployment is rolled out and Ready, every Job finished,
# every pod Running and Ready or finished, and none is being deleted.
CONVERGED='
  def deploy_ok: .spec.replicas as $r | .status.observedGeneration == .metadata.generation
    and .status.updatedReplicas == $r and .status.readyReplicas == $r
    and .status.availableReplicas == $r and .status.replicas == $r;
  def job_ok: (.status.completionTime != null) or ((.status.failed // 0) > 0 and (.status.active // 0) == 0);
  def pod_ok: .metadata.deletionTimestamp == null and (.status.phase == "Succeeded" or .status.phase == "Failed"
    or (.status.phase == "Running" and ([.status.containerStatuses[]?.ready] | all)));
  ([.items[] | select(.kind == "Deployment") | deploy_ok] | all)
  and ([.items[] | select(.kind == "Job") | job_ok] | all)
  and ([.items[] | select(.kind == "Pod") | pod_ok] | all)'

converged() {
  kn get deployments,jobs,pods -o json 2>/dev/null | jq -e "$CONVERGED" >/dev/null
}

# What is not converged, one pod or object a line.
not_converged() {
  kn get pods -o json 2>/dev/null | jq -r '.items[]
    | select(.metadata.deletionTimestamp != null or (.status.phase != "Succeeded" and .status.phase != "Failed"
        and (.status.phase != "Running" or ([.status.containerStatuses[]?.ready] | all | not))))
    | "\(.metadata.name) \(.status.phase) \(if .metadata.deletionTimestamp then "Terminating " else "" end)\([.status.containerStatuses[]?.state | keys[0] + ":" + (.[keys[0]].reason // "")] | join(","))"' |
    head -n 20 | tr '\n' ';'
}

# Waits up to $1 s for convergence; prints the seconds it took.
wait_converged() {
  local bound=$1 start=${2:-$SECONDS}
  while ! converged; do
    ((SECONDS - start < bound)) || return 1
    sleep 1
  done
  echo $((SECONDS - start))
}

# "uid/container restartCount containerID" of every running container.
running_containers() {
  kn get pods -o json | jq -r '.items[] | .metadata.uid as $u | .status.containerStatuses[]?
    | select(.state.running != null) | "\($u)/\(.name) \(.restartCount) \(.containerID)"' | sort
}

# The containers of $1 (running before) that restarted or were replaced,
# one "uid/container before-count after-count" a line; but those of pods
# kubelet evicted (under disk pressure: counted apart).
restarted_since() {
  join <(sort "$1") <(kn get pods -o json | jq -r '.items[] | select(.status.reason != "Evicted")
    | .metadata.uid as $u | .status.containerStatuses[]?
    | "\($u)/\(.name) \(.restartCount) \(.containerID)"' | sort) |
    awk '$2 != $4 || $3 != $5 { print $1, $2, $4 }'
}

# Warning events since $1 (RFC 3339) naming a name conflict: a name kept
# reserved or a record already there.
name_conflicts() {
  kn get events -o json 2>/dev/null | jq -r --arg t "$1" '.items[]
    | select((.lastTimestamp // .eventTime // .metadata.creationTimestamp) >= $t)
    | select(.type == "Warning" and (.message | test("reserved|already exists|already in use"; "i")))
    | "\(.count // 1) \(.involvedObject.name): \(.message | .[0:200])"'
}

# The Job pods failed, one name a line.
failed_job_pods() {
  kn get pods -o json 2>/dev/null | jq -r '.items[] | select(.status.phase == "Failed" and .metadata.labels["job-name"] != null)
    | .metadata.name' | sort
}
evicted_pods() {
  kn get pods -o json 2>/dev/null | jq '[.items[] | select(.status.reason == "Evicted")] | length'
}

# ---- what the runtime holds ----

netns_mounts() { awk -v re="$NETNS_RE" '$5 ~ re { print $5 }' /proc/self/mountinfo | sort -u; }
ready_sandboxes() { cri pods --state ready -q 2>/dev/null | grep -c . || true; }
# host-local's lease files of each network in the node's CNI config dir,
# but those there before the node was up (berth's default network keeps its
# leases in /var/lib/cni/networks, which the node shares with the host).
ip_leases() { comm -13 "$OUT/leases.before" <(all_ip_leases); }
all_ip_leases() {
  local f name dir
  for f in "$S"/net.d/*.conflist; do
    [[ -f $f ]] || continue
    name=$(jq -r .name "$f")
    dir=$(jq -r '[.plugins[].ipam.dataDir // empty][0] // "/var/lib/cni/networks"' "$f")
    find "$dir/$name" -maxdepth 1 -type f -regextype egrep -regex '.*/[0-9a-f.:]+$' 2>/dev/null || true
  done | sort -u
}
cni_rules() { { iptables-save; ip6tables-save; } 2>/dev/null | grep -E -- '-A CNI-|-j CNI-' | sort || true; }
all_shims() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    [[ ! $exe =~ $SHIM_RE ]] || echo "${p#/proc/}"
  done
}
# The runtime's shims but berth's standby one (started ahead for the next
# container, by design).
shims() {
  local p
  for p in $(all_shims); do
    # (a zombie is gone but for its parent's wait)
    [[ $(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null) != Z ]] || continue
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- ' --standby ' || echo "$p"
  done
}
pod_cgroups() { find /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods* -maxdepth 3 -type d -name 'pod*' 2>/dev/null | sort -u; }

# netns mounts and IP leases beyond the runtime's ready sandboxes (the
# workload has no host-network pod): what a fault leaked.
leaked() {
  local ready netns leases
  ready=$(ready_sandboxes)
  netns=$(netns_mounts | grep -c . || true)
  leases=$(ip_leases | grep -c . || true)
  echo "netns+$((netns > ready ? netns - ready : 0)) ip+$((leases > ready ? leases - ready : 0))"
}

# ---- the faults ----

kill_part() {
  local pid
  pid=$(cat "$S/pids/$1" 2>/dev/null) || return 0
  kill -KILL "$pid" 2>/dev/null || true
}
restart_part() { bash hack/kube.sh restart "$@" >>"$OUT/faults.log" 2>&1; }

# Every other time, a pull is in flight too: an image the workload does not
# use, removed and pulled again; after the restart it must pull whole.
AGNHOST=registry.k8s.io/e2e-test-images/agnhost:2.66.1
KILLS=0
fault_runtime-kill() {
  local puller=''
  KILLS=$((KILLS + 1))
  if ((KILLS % 2 == 0)); then
    cri rmi "$AGNHOST" >/dev/null 2>&1 || true
    cri pull "$AGNHOST" >/dev/null 2>&1 &
    puller=$!
    sleep 0.$((RANDOM % 10))
  fi
  restart_part "$runtime" --kill || return 1
  if [[ -n $puller ]]; then
    wait "$puller" || true
    cri pull "$AGNHOST" >/dev/null 2>&1 || note+="the pull cut by the kill failed again; "
  fi
}
fault_kubelet-kill() { restart_part kubelet --kill; }
fault_both-kill() {
  kill_part kubelet
  kill_part "$runtime"
  sleep 1
  restart_part "$runtime" && restart_part kubelet
}

# A reboot as the node's parts see it: kubelet, the runtime, its shims and
# every process of the pods killed; every mount of the runtime and kubelet
# and every netns gone, the runtime's state dir (its /run) wiped, the pods'
# cgroups removed; what is on disk stays (records, images, IP leases).
# kubelet and the runtime start again and kubelet makes the pods anew.
fault_run-wipe() {
  local p f m
  kill_part kubelet
  kill_part "$runtime"
  for p in $(all_shims); do kill -KILL "$p" 2>/dev/null || true; done
  for f in $(find /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods* -name cgroup.procs 2>/dev/null); do
    while read -r p; do kill -KILL "$p" 2>/dev/null || true; done <"$f"
  done
  sleep 1
  # (but the small disk's bind: a reboot keeps the disk)
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v a="$S/$runtime/" -v b="$S/kubelet/" \
    -v re="$NETNS_RE" -v disk="${DISK:+$S/$runtime/root}" \
    '(index($5, a) == 1 || index($5, b) == 1 || $5 ~ re) && $5 != disk { print $5 }' /proc/self/mountinfo | sort -r)
  rm -rf "$STATE_DIR"
  [[ $runtime != containerd ]] || rm -f /run/netns/cni-*
  find /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods* -depth -mindepth 1 -type d -name 'pod*' \
    -exec rmdir {} + 2>/dev/null || true
  find /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods* -depth -mindepth 2 -type d \
    -exec rmdir {} + 2>/dev/null || true
  restart_part "$runtime" && restart_part kubelet
}
# The wrappers of cni-flaky and runc-kill: kube.sh runs the node with
# KUBE_CNI_BIN_DIR and KUBE_RUNC pointing at them; each passes every call
# through until its switch file (FAULTS_BIN/NAME.on) exists.
FAULTS_BIN=$S/faults-bin
write_wrappers() {
  mkdir -p "$FAULTS_BIN"
  rm -f "$FAULTS_BIN"/*.on
  # bridge, failing one ADD or DEL in ten and hanging one in ten for 100 s
  # (longer than berth's CNI timeout) before failing.
  cat >"$FAULTS_BIN/faults-flaky" <<EOF
#!/bin/bash
if [[ -e $FAULTS_BIN/cni.on && (\$CNI_COMMAND == ADD || \$CNI_COMMAND == DEL) ]]; then
  case \$((RANDOM % 10)) in
  0) echo "\$(date +%T) fail \$CNI_COMMAND \$CNI_CONTAINERID" >>$FAULTS_BIN/cni.log
     echo '{"cniVersion": "1.0.0", "code": 11, "msg": "kube-faults: injected failure"}'
     exit 1 ;;
  1) echo "\$(date +%T) hang \$CNI_COMMAND \$CNI_CONTAINERID" >>$FAULTS_BIN/cni.log
     sleep 100
     echo '{"cniVersion": "1.0.0", "code": 11, "msg": "kube-faults: injected hang"}'
     exit 1 ;;
  esac
fi
exec /usr/lib/cni/bridge
EOF
  # runc, killed with SIGKILL a moment into one create or run in ten.
  cat >"$FAULTS_BIN/runc" <<EOF
#!/bin/bash
if [[ -e $FAULTS_BIN/runc.on && " \$* " =~ \ (create|run)\  && \$((RANDOM % 10)) == 0 ]]; then
  $BIN/runc "\$@" &
  sleep 0.0\$((RANDOM % 10))
  kill -KILL \$! 2>/dev/null
  echo "\$(date +%T) killed runc \$*" >>$FAULTS_BIN/runc.log
  exit 137
fi
exec $BIN/runc "\$@"
EOF
  chmod 755 "$FAULTS_BIN/faults-flaky" "$FAULTS_BIN/runc"
}

# The bridge plugin of the node's network replaced by faults-flaky (the
# runtimes read their CNI config again when it changes).
flaky_network() {
  local f
  for f in "$S"/net.d/*.conflist; do
    jq --arg from "$1" --arg to "$2" '.plugins |= map(if .type == $from then .type = $to else . end)' "$f" >"$f.new"
    mv "$f.new" "$f"
  done
}

# For WINDOW seconds, CNI calls fail or hang one in ten (cni-flaky), or
# runc create/run is killed one in ten (runc-kill), while web rolls and
# Jobs start; then the part is whole again.
WINDOW=60
window_fault() {
  touch "$FAULTS_BIN/$1.on"
  kn rollout restart deploy/web >/dev/null 2>&1 || true
  sleep 20
  new_job
  sleep $((WINDOW - 20))
  rm -f "$FAULTS_BIN/$1.on"
  FAULT_END=1
}
fault_cni-flaky() { window_fault cni; }
fault_runc-kill() { window_fault runc; }

# ---- the registry proxy and fresh images (registry-drop, disk-full) ----

# Images named FRESH_HOST/... are pulled through the proxy: a mirror of the
# runtime's config (berth's drop-in, containerd's hosts.toml), written before
# the node is up.
FRESH_HOST=faults.invalid
PROXY_PORT=${FAULTS_PROXY_PORT:-25050}
PROXY_DIR=$OUT/proxy
PROXY_PID=''
write_fresh_registry() {
  mkdir -p "$PROXY_DIR"
  case $runtime in
  berth)
    mkdir -p "$S/berth/config.d"
    printf '[registry.mirrors."%s"]\nendpoints = ["http://127.0.0.1:%s"]\nmirror_only = true\n' \
      "$FRESH_HOST" "$PROXY_PORT" >"$S/berth/config.d/90-kube-faults.toml"
    ;;
  containerd)
    mkdir -p "$S/containerd/certs.d/$FRESH_HOST"
    printf 'server = "https://%s"\n[host."http://127.0.0.1:%s"]\n  capabilities = ["pull", "resolve"]\n' \
      "$FRESH_HOST" "$PROXY_PORT" >"$S/containerd/certs.d/$FRESH_HOST/hosts.toml"
    ;;
  esac
}
# The proxy closes what it inherited past stdio (the caller's flock of the
# node lock among them) and is stopped with this script.
start_proxy() {
  ! ss -Hltn "sport = :$PROXY_PORT" | grep -q . || die "port $PROXY_PORT is taken (FAULTS_PROXY_PORT)"
  # shellcheck disable=SC2016
  bash -c 'for fd in /proc/self/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done; exec "$@"' _ \
    python3 hack/faults-registry.py proxy "127.0.0.1:$PROXY_PORT" "$(<"$S/registry.addr")" "$PROXY_DIR" \
    </dev/null >>"$PROXY_DIR/proxy.log" 2>&1 &
  PROXY_PID=$!
  local end=$((SECONDS + 20))
  until curl -fs -m 2 -o /dev/null "http://127.0.0.1:$PROXY_PORT/v2/"; do
    ((SECONDS < end)) || die "the registry proxy did not start: $(tail -n 3 "$PROXY_DIR/proxy.log")"
    sleep 0.5
  done
}
stop_proxy() {
  [[ -z $PROXY_PID ]] || kill "$PROXY_PID" 2>/dev/null || true
  PROXY_PID=''
}

# Pushes the fresh image of fault $1 (busybox and three layers of 8 MiB of
# random bytes) to the node's registry; its name is FRESH_IMAGE, its blobs
# in $OUT/fresh-$1 ("base DIGEST" for busybox's, complete in the runtime
# already; "new DIGEST" for the rest).
FRESH_MIB=8
push_fresh() {
  FRESH_IMAGE=$FRESH_HOST/faults/fresh:$1
  python3 hack/faults-registry.py push "$(<"$S/registry.addr")" e2e-test-images/busybox:1.37.0-2 \
    "faults/fresh:$1" 3 "$FRESH_MIB" >"$OUT/fresh-$1" 2>>"$PROXY_DIR/proxy.log"
}

# A Job of 2 pods of the fresh image, each checking that every fresh layer
# is there whole.
fresh_job() {
  # shellcheck disable=SC2016
  apply_job "$1" 2 "$FRESH_IMAGE" 'for i in 0 1 2; do [ $(wc -c </kube-faults/layer-$i) -eq '$((FRESH_MIB << 20))' ] || exit 1; done' 600
}
# Job $1 completed $2 pods.
job_succeeded() { [[ $(kn get job "$1" -o jsonpath='{.status.succeeded}' 2>/dev/null) == "$2" ]]; }

# What fault $1's pulls through the proxy did, from its blobs log: blobs
# cut, resumed (a Range), new layers (1 MiB or more: not the config) fetched
# whole more than once, base blobs (complete before) fetched at all. Sets PULL_NOTE; PULL_BAD when a
# complete blob was fetched again.
pull_figures() {
  local n=$1 log=$PROXY_DIR/blobs-$1.log cuts ranges again base
  mv "$PROXY_DIR/blobs.log" "$log" 2>/dev/null || : >"$log"
  cuts=$(awk '$5 == "cut"' "$log" | grep -c . || true)
  ranges=$(awk '$3 != "0"' "$log" | grep -c . || true)
  again=$(awk '$5 == "whole" && $3 == "0" && $2 >= 1048576 { print $1 }' "$log" | sort | uniq -d | grep -c . || true)
  base=$(grep -c -F -f <(awk '$1 == "base" { print $2 }' "$OUT/fresh-$n") "$log" || true)
  PULL_NOTE="blobs cut $cuts, resumed $ranges, layers fetched whole twice $again, complete ones fetched $base; "
  PULL_BAD=''
  ((base == 0)) || PULL_BAD=1
}

# Downloads and unpacks in progress in the runtime's root: files in the
# content store's `ingest` dir (berth's and containerd's), berth's snapshots
# being unpacked (dot-named).
partial_downloads() {
  {
    find "$S/$runtime/root" -path '*/ingest/*' -type f 2>/dev/null
    find "$S/$runtime/root/images/snapshots" -mindepth 1 -maxdepth 1 -name '.*' 2>/dev/null
  } | grep -c . || true
}

# The checks after a fault that pulled the fresh image: the Job of it
# completed, no partial download left, no complete blob fetched again.
after_pull() {
  local partial
  pull_figures "$1"
  partial=$(partial_downloads)
  note+=$PULL_NOTE
  job_succeeded "pull-$1" 2 || {
    note+="the Job of the fresh image did not complete; "
    FAULT_BAD=1
  }
  ((partial == 0)) || {
    note+="$partial partial downloads left; "
    FAULT_BAD=1
  }
  [[ -z $PULL_BAD ]] || FAULT_BAD=1
}

# A registry that drops the connection in the middle of a layer: for 30 s,
# one big blob in three is cut (the first one among them) while two pods
# pull the fresh image; then the proxy passes everything again. Measured
# from the start of the pulls.
prepare_registry-drop() { push_fresh "$1"; }
fault_registry-drop() {
  : >"$PROXY_DIR/blobs.log"
  echo 3 >"$PROXY_DIR/cut.on"
  fresh_job "pull-$FAULT_N"
  (
    sleep 30
    rm -f "$PROXY_DIR/cut.on"
  ) &
  BG+=($!)
}
after_registry-drop() {
  rm -f "$PROXY_DIR/cut.on"
  after_pull "$1"
}

# ---- the small disk (disk-full) ----

# The runtime's root is a bind of DISK_MNT/root, DISK_MNT a loop device's
# ext4 (no blocks reserved for root: berth runs as root); mounted before
# the node is up, for the whole run, and kept by run-wipe (a reboot keeps
# the disk); kube.sh down unmounts both with all under KUBE_STATE.
DISK_MB=${FAULTS_DISK_MB:-768}
DISK_IMG=$S/faults-disk.img DISK_MNT=$S/faults-disk DISK='' DISK_BEFORE=''
make_disk() {
  release_disk
  truncate -s "${DISK_MB}M" "$DISK_IMG"
  mkfs.ext4 -q -F -m 0 "$DISK_IMG"
  mkdir -p "$DISK_MNT" "$S/$runtime/root"
  mount -o loop "$DISK_IMG" "$DISK_MNT"
  mkdir -p "$DISK_MNT/root"
  mount --bind "$DISK_MNT/root" "$S/$runtime/root"
  DISK=1
  log "the runtime's root is on a ${DISK_MB} MiB loop device"
}
release_disk() {
  local dev
  umount "$S/$runtime/root" 2>/dev/null || true
  umount "$DISK_MNT" 2>/dev/null || true
  while read -r dev; do losetup -d "$dev" 2>/dev/null || true; done < <(losetup -j "$DISK_IMG" 2>/dev/null | cut -d: -f1)
  rmdir "$DISK_MNT" 2>/dev/null || true
  rm -f "$DISK_IMG"
}
disk_used_mib() { df -B1M --output=used "$DISK_MNT" | tail -n 1 | tr -d ' '; }

# The disk filled (but 1 MiB) for 40 s while two pods pull the fresh image,
# a container writes 16 MiB into its rootfs and web rolls (its sandboxes'
# records, its containers' rootfs); then freed. Measured from the free.
FULL=40
prepare_disk-full() {
  [[ -n $DISK ]] || die "disk-full needs the loop device (made when the plan has disk-full)"
  push_fresh "$1"
  EVICTED_BEFORE=$(evicted_pods) || EVICTED_BEFORE=0
}
fault_disk-full() {
  local avail
  : >"$PROXY_DIR/blobs.log"
  avail=$(df -B1 --output=avail "$DISK_MNT" | tail -n 1 | tr -d ' ')
  fallocate -l $((avail > (2 << 20) ? avail - (1 << 20) : 1 << 20)) "$DISK_MNT/fill" || true
  log "disk full: $(df -h --output=used,avail "$DISK_MNT" | tail -n 1)"
  fresh_job "pull-$FAULT_N"
  apply_job "write-$FAULT_N" 1 "$BUSYBOX" "dd if=/dev/zero of=/big bs=1M count=16 || echo the write failed; rm -f /big" 600
  kn rollout restart deploy/web >/dev/null 2>&1 || true
  sleep "$FULL"
  rm -f "$DISK_MNT/fill"
  FAULT_END=1
}
after_disk-full() {
  local evicted
  # The images kubelet removed under disk pressure it pulls again, by
  # design: counted from here on.
  pulls >"$OUT/pulls.before"
  after_pull "$1"
  job_succeeded "write-$1" 1 || {
    note+="the writing Job did not complete; "
    FAULT_BAD=1
  }
  evicted=$(evicted_pods) || evicted=$EVICTED_BEFORE
  ((evicted == EVICTED_BEFORE)) || note+="$((evicted - EVICTED_BEFORE)) pods evicted by kubelet (disk pressure); "
}

# The kinds after which the containers start again by design (a reboot).
RESTARTS_EXPECTED=" run-wipe "

MIXABLE=(runtime-kill kubelet-kill both-kill runtime-kill runtime-kill)

REPORT_ROWS=()
FAILED=0
declare -A SUM_N SUM_MAX SUM_RESTARTS SUM_BAD

# One fault of kind $1, number $2: prepare, inject, converge, measure.
one_fault() {
  local kind=$1 n=$2 run_kind=$1 delay t0 t0iso took restarted conflicts failed leaks note=''
  [[ $kind != mixed ]] || run_kind=${MIXABLE[RANDOM % ${#MIXABLE[@]}]}
  FAULT_N=$n FAULT_BAD=''
  wait_converged "$CONVERGE" >/dev/null || log "fault $n: not converged before it: $(not_converged)"
  ! declare -F "prepare_$run_kind" >/dev/null || "prepare_$run_kind" "$n"
  running_containers >"$OUT/fault-$n.before" || true
  failed_job_pods >"$OUT/fault-$n.failed" || true
  # Work in flight when the fault lands.
  kn rollout restart deploy/web >/dev/null 2>&1 || true
  new_job
  delay=$((1 + RANDOM % 8))
  sleep "$delay"
  t0=$SECONDS t0iso=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  touch "$OUT/pause"
  FAULT_END=''
  "fault_$run_kind" || note+="the restart failed; "
  # A fault of a window is measured from its end.
  [[ -z $FAULT_END ]] || t0=$SECONDS
  if took=$(wait_converged "$CONVERGE" "$t0"); then
    :
  else
    took=">$CONVERGE"
    note+="not converged: $(not_converged)"
  fi
  restarted_since "$OUT/fault-$n.before" >"$OUT/fault-$n.restarted" || true
  restarted=$(grep -c . "$OUT/fault-$n.restarted" || true)
  conflicts=$(name_conflicts "$t0iso" | tee "$OUT/fault-$n.conflicts" | grep -c . || true)
  # (those removed since, a finished Job's, are not counted)
  failed=$(comm -13 "$OUT/fault-$n.failed" <(failed_job_pods) | grep -c . || true)
  leaks=$(leaked)
  ! declare -F "after_$run_kind" >/dev/null || "after_$run_kind" "$n"
  local label=$run_kind
  [[ $kind != mixed ]] || label="mixed: $run_kind"
  REPORT_ROWS+=("| $n | $label | ${delay}s | $took | $restarted | $failed | $conflicts | $leaks | ${note:-} |")
  log "fault $n ($label, ${delay}s into the churn): converged in ${took}s, $restarted restarted, $conflicts name conflicts, $leaks ${note:-}"
  SUM_N[$kind]=$((${SUM_N[$kind]:-0} + 1))
  SUM_RESTARTS[$kind]=$((${SUM_RESTARTS[$kind]:-0} + restarted))
  if [[ $took == ">"* ]]; then
    SUM_MAX[$kind]=">$CONVERGE"
  elif [[ ${SUM_MAX[$kind]:-0} != ">"* ]] && ((took > ${SUM_MAX[$kind]:-0})); then
    SUM_MAX[$kind]=$took
  fi
  local restarts_bad=$restarted
  [[ $RESTARTS_EXPECTED != *" $run_kind "* ]] || restarts_bad=0
  if [[ $took == ">"* || $restarts_bad != 0 || $conflicts != 0 || $leaks != "netns+0 ip+0" || -n $FAULT_BAD ]]; then
    SUM_BAD[$kind]=$((${SUM_BAD[$kind]:-0} + 1))
    FAILED=1
  fi
  [[ $took != ">"* ]] || recover "$n"
  rm -f "$OUT/pause"
  write_report
  # Churn between faults.
  sleep $((3 + RANDOM % 10))
}

# After fault $1 did not converge: the pods not converged are deleted (their
# controllers make them anew) and the node given RECOVER s more; if it still
# has not converged, the faults left are skipped (STOPPED says why).
RECOVER=120
recover() {
  local pods
  pods=$(kn get pods -o json 2>/dev/null | jq -r '.items[]
    | select(.metadata.deletionTimestamp != null or (.status.phase != "Succeeded" and .status.phase != "Failed"
        and (.status.phase != "Running" or ([.status.containerStatuses[]?.ready] | all | not))))
    | .metadata.name') || pods=''
  log "fault $1: not converged; deleting the pods not converged: $(echo $pods)"
  # shellcheck disable=SC2086
  [[ -z $pods ]] || kn delete pod --grace-period 5 --wait=false $pods >/dev/null 2>&1 || true
  if wait_converged "$RECOVER" >/dev/null; then
    log "fault $1: converged after deleting them"
    REPORT_ROWS+=("| | (recovery) | | | | | | | converged once the pods not converged were deleted |")
  else
    STOPPED="fault $1 did not converge, nor within $RECOVER s after its unready pods were deleted: $(not_converged); the faults left were skipped"
    log "$STOPPED"
  fi
}

run_plan() {
  local kind i n=0 deadline=$((SECONDS + minutes * 60))
  for kind in ${PLAN//,/ }; do
    declare -F "fault_$kind" >/dev/null || [[ $kind == mixed ]] || die "unknown fault kind $kind"
    for ((i = 0; i < ${count:-${COUNT[$kind]:-3}}; i++)); do
      if ((SECONDS >= deadline)) || [[ -n $STOPPED ]]; then
        REPORT_ROWS+=("| - | $kind | | | | | | | skipped: ${STOPPED:+the node did not converge}${STOPPED:-past --minutes $minutes} |")
        break
      fi
      n=$((n + 1))
      one_fault "$kind" "$n"
    done
  done
}

# ---- the end ----

END_LEFT=()
# "image pulls" of each image kubelet pulled: its "Pulling" events (with
# IfNotPresent, an image the runtime has is not pulled again).
pulls() {
  kn get events -o json 2>/dev/null | jq -r '[.items[] | select(.reason == "Pulling")
    | {i: (.message | capture("image \"(?<i>[^\"]+)\"").i), c: (.count // 1)}]
    | group_by(.i)[] | "\(.[0].i) \(map(.c) | add)"' | sort
}
# The images pulled again since the workload was up (all were complete);
# the fresh images are new to the node (their blobs are checked instead).
pulled_twice() {
  join -a 2 -e 0 -o 0,1.2,2.2 "$OUT/pulls.before" <(pulls) |
    awk -v fresh="$FRESH_HOST/" '$3 > $2 && index($1, fresh) != 1 { print $1, $3 - $2, "more pulls" }'
}

end_checks() {
  local m
  kill "${BG[@]}" 2>/dev/null || true
  wait "${BG[@]}" 2>/dev/null || true
  BG=()
  pulled_twice >"$OUT/pulled-twice" || true
  while read -r m; do END_LEFT+=("pulled twice: $m"); done <"$OUT/pulled-twice"
  kc delete namespace "$NS" --wait=false >/dev/null || true
  local end=$((SECONDS + 180))
  while kc get namespace "$NS" >/dev/null 2>&1 && ((SECONDS < end)); do sleep 2; done
  kc get namespace "$NS" >/dev/null 2>&1 && END_LEFT+=("namespace $NS not deleted in 180 s")
  # kubelet removes the sandboxes of deleted pods on its garbage collection
  # (every minute).
  end=$((SECONDS + 150))
  while [[ -n $(cri pods -q 2>/dev/null) ]] && ((SECONDS < end)); do sleep 3; done
  while read -r m; do END_LEFT+=("sandbox $m"); done < <(cri pods -q 2>/dev/null)
  while read -r m; do END_LEFT+=("container $m"); done < <(cri ps -a -q 2>/dev/null)
  while read -r m; do END_LEFT+=("netns $m"); done < <(netns_mounts)
  while read -r m; do END_LEFT+=("ip lease $m"); done < <(ip_leases)
  while read -r m; do END_LEFT+=("pod cgroup $m"); done < <(pod_cgroups)
  while read -r m; do END_LEFT+=("iptables $m"); done < <(comm -13 "$OUT/cni-rules.before" <(cni_rules))
  # A shim exits a moment after its sandbox is removed (it answers its
  # delete, then exits): how many were still there, and for how long.
  local first
  first=$(shims | grep -c . || true)
  end=$((SECONDS + 30))
  while [[ -n $(shims) ]] && ((SECONDS < end)); do sleep 1; done
  SHIMS_NOTE="$first shims when the last sandbox was gone, $(shims | grep -c . || true) after $((SECONDS - end + 30)) s"
  log "$SHIMS_NOTE"
  while read -r m; do END_LEFT+=("shim $m $(tr '\0' ' ' <"/proc/$m/cmdline" 2>/dev/null | cut -c1-120)"); done < <(shims)
  runtime_leftovers
  [[ -z $DISK ]] || disk_leftovers
  END_DONE=1
  DOWN_DONE=1
  bash hack/kube.sh down >"$OUT/down.log" 2>&1 || END_LEFT+=("kube.sh down: $(grep -A20 'left behind' "$OUT/down.log" | tail -n +2 | tr '\n' ';')")
}

# The small disk once the fresh images are removed: no partial download,
# and its used space no more than before the first fault (with the same
# images, the workload's containers then running) and 16 MiB of slack.
disk_leftovers() {
  local m partial used
  while read -r m; do cri rmi "$m" >/dev/null 2>&1 || END_LEFT+=("fresh image $m not removable"); done < <(
    cri images -o json 2>/dev/null | jq -r --arg h "$FRESH_HOST/" '.images[].repoTags[]? | select(startswith($h))')
  partial=$(partial_downloads)
  ((partial == 0)) || END_LEFT+=("$partial partial downloads in the runtime's root")
  used=$(disk_used_mib)
  DISK_END=$used
  ((used <= DISK_BEFORE + 16)) || END_LEFT+=("the root's disk: $used MiB used, $DISK_BEFORE MiB before the first fault")
}

# Mounts under the runtime's dirs (but the dirs it mounts on themselves to
# share their mounts: its netns and podns dirs), its container snapshots.
runtime_leftovers() {
  local m
  while read -r m; do END_LEFT+=("mount $m"); done < <(awk -v s="$S/$runtime/" -v own="^$STATE_DIR/(netns|podns)\$" \
    -v disk="${DISK:+$S/$runtime/root}" 'index($5, s) == 1 && $5 !~ own && $5 != disk { print $5 }' /proc/self/mountinfo)
  case $runtime in
  berth) ;;
  containerd)
    while read -r m; do END_LEFT+=("snapshot $m"); done < <(timeout 30 ctr -a "$SOCK" -n k8s.io snapshots ls 2>/dev/null | awk '$3 == "Active" { print $1 }')
    ;;
  esac
}

write_report() {
  local kind f="$OUT/report.md" sessions
  sessions=$(awk '{ print $2, $3 }' "$OUT/sessions.log" 2>/dev/null | sort | uniq -c | awk '{ printf "%s%s %s %s", sep, $2, $3, $1; sep = ", " }')
  {
    echo "## kube-faults on $runtime, $(date -u +%Y-%m-%d)"
    echo
    echo "\`bash hack/kube-faults.sh --runtime $runtime${ci:+ --ci}${kinds:+ --faults $kinds}${count:+ --count $count}" \
      "--minutes $minutes\` (seed $SEED; web $REPLICAS replicas," \
      "steady 3, a Job every 15 s; bound $CONVERGE s)"
    echo
    echo "| kind | faults | max time to converge (s) | restarts caused | faults not clean |"
    echo "|---|---|---|---|---|"
    for kind in ${PLAN//,/ }; do
      echo "| $kind | ${SUM_N[$kind]:-0} | ${SUM_MAX[$kind]:-} | ${SUM_RESTARTS[$kind]:-0} | ${SUM_BAD[$kind]:-0} |"
    done
    echo
    echo "<details><summary>each fault</summary>"
    echo
    echo "| # | fault | into the churn | converged (s) | restarts caused | Job pods failed | name conflicts | leaked | note |"
    echo "|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${REPORT_ROWS[@]}"
    echo
    echo "</details>"
    echo
    echo "Sessions (kubectl exec / logs -f, cut ones include those cut by a fault): ${sessions:-none}"
    echo
    if [[ -n $SHIMS_NOTE ]]; then
      echo "Shims at the end (but the standby one): $SHIMS_NOTE."
      echo
    fi
    if [[ -n $DISK ]]; then
      echo "The runtime's root on a $DISK_MB MiB loop device: ${DISK_BEFORE:-?} MiB used before the first fault, ${DISK_END:-?} at the end."
      echo
    fi
    if [[ -n $STOPPED ]]; then
      echo "**Stopped:** $STOPPED"
      echo
    fi
    if ((${#END_LEFT[@]})); then
      echo "Left at the end (after deleting the workload, before and by \`kube.sh down\`):"
      echo
      printf -- '- %s\n' "${END_LEFT[@]}"
    elif [[ -n $END_DONE ]]; then
      echo "Left at the end: nothing (records, shims, mounts, netns, pod cgroups, IP leases, iptables rules, snapshots; no image pulled twice)."
    else
      echo "The end's checks did not run; \`kube.sh down\` ${DOWN_DONE:+found nothing left}${DOWN_DONE:-did not run}."
    fi
  } >"$f"
}

END_DONE='' SHIMS_NOTE=''
node_up
workload_start
run_plan
if [[ -z $keep ]]; then
  end_checks
fi
REPORTED=1
write_report
cat "$OUT/report.md"
((${#END_LEFT[@]} == 0)) || FAILED=1
[[ -z $STOPPED ]] || FAILED=1
exit "$FAILED"
