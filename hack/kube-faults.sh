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
#   --ci        the short run (about 9 minutes with the node's start and
#               the end's checks): a smaller workload, a few kills of each
#               kind and a /run wipe, faults stopped after 6 minutes
#   --faults    the kinds to inject, in order (default: all of them, then
#               mixed); kinds: runtime-kill kubelet-kill both-kill run-wipe
#               cni-flaky runc-kill mixed
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
# Output: $KUBE_STATE/faults/RUNTIME-DATE/ (report.md, faults.log, the
# snapshots of each fault); report.md is printed at the end. Exit 0 when
# every fault injected converged with no restart (but a reboot's), no name
# conflict and no leak, and nothing was left at the end; 1 otherwise. The
# faults --minutes left out are listed as skipped, not failed.
#
# Env: KUBE_STATE (as hack/kube.sh), FAULTS_CONVERGE (the bound, seconds),
# FAULTS_SEED (the random seed, default the time).
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
  sed -n '2,57p' "$0" | sed 's/^# \{0,1\}//' >&2
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
  PLAN=${kinds:-runtime-kill,kubelet-kill,both-kill,run-wipe,mixed}
  declare -A COUNT=([runtime-kill]=4 [kubelet-kill]=2 [both-kill]=1 [run-wipe]=1 [cni-flaky]=1 [runc-kill]=1 [mixed]=2)
  [[ -n $minutes_set ]] || minutes=6
else
  REPLICAS=30
  PLAN=${kinds:-runtime-kill,kubelet-kill,both-kill,run-wipe,cni-flaky,runc-kill,mixed}
  declare -A COUNT=([runtime-kill]=20 [kubelet-kill]=5 [both-kill]=3 [run-wipe]=2 [cni-flaky]=2 [runc-kill]=2 [mixed]=6)
fi

OUT=$S/faults/$runtime-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
BIN=$(bash hack/gotools.sh | tail -n 1)
export PATH=$BIN:$PATH

kc() { timeout 40 kubectl --kubeconfig "$S/admin.kubeconfig" --request-timeout=30s "$@"; }
kn() { kc -n "$NS" "$@"; }
cri() { timeout 30 crictl --runtime-endpoint "unix://$SOCK" --timeout 20s "$@"; }

# ---- the node ----

BG=()
finish() {
  local rc=$?
  ((${#BG[@]} == 0)) || kill "${BG[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  if [[ -z $keep ]]; then
    bash hack/kube.sh down >>"$OUT/down.log" 2>&1 || log "kube.sh down failed: $(tail -n 5 "$OUT/down.log")"
    rm -rf "$FAULTS_BIN"
  fi
  exit "$rc"
}

node_up() {
  log "node up on $runtime (seed $SEED, output $OUT)"
  trap finish EXIT
  trap 'exit 130' INT TERM
  write_wrappers
  KUBE_CNI_BIN_DIR=$FAULTS_BIN KUBE_RUNC=$FAULTS_BIN/runc bash hack/kube.sh up --runtime "$runtime" >"$OUT/up.log" 2>&1 || die "kube.sh up failed: $(tail -n 5 "$OUT/up.log")"
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

JOBS=0
new_job() {
  JOBS=$((JOBS + 1))
  kn apply -f - >/dev/null 2>&1 <<EOF || true
apiVersion: batch/v1
kind: Job
metadata: {name: job-$$-$JOBS}
spec:
  ttlSecondsAfterFinished: 30
  backoffLimit: 3
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 2
      containers:
      - name: c
        image: $BUSYBOX
        command: ["sh", "-c", "echo job $JOBS; sleep 3"]
EOF
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
# one "uid/container before-count after-count" a line.
restarted_since() {
  join <(sort "$1") <(kn get pods -o json | jq -r '.items[] | .metadata.uid as $u | .status.containerStatuses[]?
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

failed_job_pods() {
  kn get pods -o json 2>/dev/null | jq '[.items[] | select(.status.phase == "Failed")] | length'
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
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v a="$S/$runtime/" -v b="$S/kubelet/" \
    -v re="$NETNS_RE" 'index($5, a) == 1 || index($5, b) == 1 || $5 ~ re { print $5 }' /proc/self/mountinfo | sort -r)
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

# The kinds after which the containers start again by design (a reboot).
RESTARTS_EXPECTED=" run-wipe "

MIXABLE=(runtime-kill kubelet-kill both-kill runtime-kill runtime-kill)

REPORT_ROWS=()
FAILED=0
declare -A SUM_N SUM_MAX SUM_RESTARTS SUM_BAD

# One fault of kind $1, number $2: prepare, inject, converge, measure.
one_fault() {
  local kind=$1 n=$2 run_kind=$1 delay t0 t0iso took restarted conflicts failed_before failed_after leaks note=''
  [[ $kind != mixed ]] || run_kind=${MIXABLE[RANDOM % ${#MIXABLE[@]}]}
  wait_converged "$CONVERGE" >/dev/null || log "fault $n: not converged before it: $(not_converged)"
  running_containers >"$OUT/fault-$n.before" || true
  failed_before=$(failed_job_pods) || failed_before=0
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
  failed_after=$(failed_job_pods) || failed_after=$failed_before
  leaks=$(leaked)
  rm -f "$OUT/pause"
  local label=$run_kind
  [[ $kind != mixed ]] || label="mixed: $run_kind"
  REPORT_ROWS+=("| $n | $label | ${delay}s | $took | $restarted | $((failed_after - failed_before)) | $conflicts | $leaks | ${note:-} |")
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
  if [[ $took == ">"* || $restarts_bad != 0 || $conflicts != 0 || $leaks != "netns+0 ip+0" ]]; then
    SUM_BAD[$kind]=$((${SUM_BAD[$kind]:-0} + 1))
    FAILED=1
  fi
  # Churn between faults.
  sleep $((3 + RANDOM % 10))
}

run_plan() {
  local kind i n=0 deadline=$((SECONDS + minutes * 60))
  for kind in ${PLAN//,/ }; do
    declare -F "fault_$kind" >/dev/null || [[ $kind == mixed ]] || die "unknown fault kind $kind"
    for ((i = 0; i < ${count:-${COUNT[$kind]:-3}}; i++)); do
      if ((SECONDS >= deadline)); then
        REPORT_ROWS+=("| - | $kind | | | | | | | skipped: past --minutes $minutes |")
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
# The images pulled again since the workload was up (all were complete).
pulled_twice() {
  join -a 2 -e 0 -o 0,1.2,2.2 "$OUT/pulls.before" <(pulls) | awk '$3 > $2 { print $1, $3 - $2, "more pulls" }'
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
  # A shim exits a moment after its sandbox is removed.
  end=$((SECONDS + 30))
  while [[ -n $(shims) ]] && ((SECONDS < end)); do sleep 1; done
  while read -r m; do END_LEFT+=("shim $m $(tr '\0' ' ' <"/proc/$m/cmdline" 2>/dev/null | cut -c1-120)"); done < <(shims)
  runtime_leftovers
  bash hack/kube.sh down >"$OUT/down.log" 2>&1 || END_LEFT+=("kube.sh down: $(grep -A20 'left behind' "$OUT/down.log" | tail -n +2 | tr '\n' ';')")
  keep=1 # down is done
}

# Mounts under the runtime's dirs (but the dirs it mounts on themselves to
# share their mounts: its netns and podns dirs), its container snapshots.
runtime_leftovers() {
  local m
  while read -r m; do END_LEFT+=("mount $m"); done < <(awk -v s="$S/$runtime/" -v own="^$STATE_DIR/(netns|podns)\$" \
    'index($5, s) == 1 && $5 !~ own { print $5 }' /proc/self/mountinfo)
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
    if ((${#END_LEFT[@]})); then
      echo "Left at the end (after deleting the workload, before and by \`kube.sh down\`):"
      echo
      printf -- '- %s\n' "${END_LEFT[@]}"
    else
      echo "Left at the end: nothing (records, shims, mounts, netns, pod cgroups, IP leases, iptables rules, snapshots; no image pulled twice)."
    fi
  } >"$f"
  cat "$f"
}

node_up
workload_start
run_plan
if [[ -z $keep ]]; then
  end_checks
fi
write_report
((${#END_LEFT[@]} == 0)) || FAILED=1
exit "$FAILED"
