#!/usr/bin/env bash
# The kubelet group of the benchmarks: berth against containerd 2.4 as a
# real kubelet sees them. On the node of hack/kube.sh (the same kubelet
# build, flags, runc 1.5.3, CNI bridge and pod subnet for both), on each
# runtime in turn: the pause image pulled first, then for each size a
# Deployment of that many pods (registry.k8s.io/pause, no service account
# token, no service links) created at once, waited for until all pods are
# Ready, left running a quiet spell, then deleted and waited for until all
# are gone. kubelet's /metrics (and berth's) are saved before, at Ready,
# after the quiet spell and when gone; the daemon's and its shims' memory
# (PSS and RSS from smaps_rollup) in the quiet spell. `berth-bench
# kubelet-report` makes the tables from what is saved.
#
#   hack/kube-bench.sh [--sizes 30,110,250] [--only berth|containerd] [--first berth|containerd]
#                      [--out DIR] [--steady SECS] [--no-build] [--report-only] [--readme]
#
#   --sizes L   the Deployments' sizes, in order; kubelet's maxPods is its
#               default (110) up to 110 pods, the size above it (kubelet
#               restarted with KUBE_KUBELET_CONFIG="maxPods: N")
#   --only R    run one runtime (the other's saved steps, if any, stay:
#               runs split this way merge in the report)
#   --first R   which runtime goes first [default: the one that went second
#               in DIR's last run, berth the first time]
#   --out DIR   where steps are saved: DIR/RUNTIME/SIZE/ [/var/tmp/berth-kube-bench]
#   --steady S  seconds all pods run before the relist scrape [20]
#   --no-build  use the binaries already built
#   --report-only  no run: the tables from DIR
#   --readme    write the tables into docs/benchmarks.md between
#               `<!-- kube-bench.sh --readme: begin -->` and `... end -->`
#
# Each runtime's node is stood up under /run/berth-kube.lock and brought
# down (kube.sh down) before the lock is let go: one hold per runtime.
# berth runs its release build (copied to DIR/bin with the debug image
# builders kube.sh needs); its metrics endpoint is a config drop-in written
# before kube.sh up. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

log() { echo "kube-bench.sh: $*" >&2; }
die() {
  log "$*"
  exit 1
}
usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
  exit 2
}

sizes=30,110,250
only=""
first=""
out=/var/tmp/berth-kube-bench
steady=20
build=1
run=1
readme=0
command_line="bash hack/kube-bench.sh $*"
while (($#)); do
  case $1 in
  --sizes) sizes=${2:?}; shift 2 ;;
  --only) only=${2:?}; shift 2 ;;
  --first) first=${2:?}; shift 2 ;;
  --out) out=${2:?}; shift 2 ;;
  --steady) steady=${2:?}; shift 2 ;;
  --no-build) build=0; shift ;;
  --report-only) run=0; shift ;;
  --readme) readme=1; shift ;;
  *) usage ;;
  esac
done
[[ -z $only || $only == berth || $only == containerd ]] || die "--only berth|containerd"
[[ -z $first || $first == berth || $first == containerd ]] || die "--first berth|containerd"
[[ $sizes =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--sizes N,N,..."
[[ $(id -u) -eq 0 ]] || die "run as root"
IFS=, read -ra size_list <<<"$sizes"
mkdir -p "$out"
out=$(realpath "$out")

S=${KUBE_STATE:-/var/tmp/berth-kube}
bindir=$out/bin
target=${CARGO_TARGET_DIR:-$repo/target}
[[ $target == /* ]] || target=$repo/$target
bench=$target/debug/berth-bench

if ((build)); then
  log "building berth (release), the image builders and berth-bench"
  cargo build --release --locked -p berth -p berth-shim --bins
  cargo build --locked --examples -p berth-oci-image
  cargo build --locked -p berth-bench
fi
[[ -x $bench ]] || die "no $bench (build it, or drop --no-build)"

# The runtimes in this run's order.
runtimes=()
if [[ -n $only ]]; then
  runtimes=("$only")
else
  [[ -n $first ]] || case $(cat "$out/last-first" 2>/dev/null) in
  berth) first=containerd ;;
  *) first=berth ;;
  esac
  if [[ $first == berth ]]; then runtimes=(berth containerd); else runtimes=(containerd berth); fi
  echo "$first" >"$out/last-first"
fi

gobin=$(bash hack/gotools.sh | tail -n 1)
kctl() { "$gobin/kubectl" --kubeconfig "$S/admin.kubeconfig" "$@"; }
crictl() { "$gobin/crictl" --runtime-endpoint "$endpoint" "$@"; }

scrape_kubelet() {
  curl -sSf --max-time 30 --cacert "$S/pki/ca.crt" --cert "$S/pki/admin.crt" --key "$S/pki/admin.key" \
    https://127.0.0.1:10250/metrics >"$1"
}
scrape_berth() {
  [[ $rt == berth ]] || return 0
  curl -sSf --max-time 30 "http://$berth_metrics/metrics" >"$1"
}
load1() { cut -d' ' -f1 /proc/loadavg; }
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f\n", b - a }'; }

# PSS and RSS (KiB) summed over pids: "PSS RSS".
mem_of() {
  local pid pss=0 rss=0 p r
  for pid in "$@"; do
    read -r p r < <(awk '$1 == "Pss:" { p = $2 } $1 == "Rss:" { r = $2 } END { print p + 0, r + 0 }' \
      "/proc/$pid/smaps_rollup" 2>/dev/null || echo "0 0")
    pss=$((pss + p)) rss=$((rss + r))
  done
  echo "$pss $rss"
}
# Pids whose executable is $1 (a full path).
pids_of_exe() {
  local p
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/exe" 2>/dev/null) == "$1" ]] && echo "${p#/proc/}"
  done
  return 0
}

node_ready() {
  [[ $(kctl get node 127.0.0.1 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}
wait_until() { # SECS CMD...
  local end=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    sleep 0.5
  done
}
runtime_empty() { [[ -z $(crictl pods -q 2>/dev/null) ]]; }

max_pods=110
# kubelet's maxPods for a step of $1 pods: its default up to 110.
want_max_pods() { if (($1 > 110)); then echo "$1"; else echo 110; fi; }

deployment() { # NAME N
  cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1}
spec:
  replicas: $2
  selector: {matchLabels: {app: $1}}
  template:
    metadata: {labels: {app: $1}}
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      containers:
      - name: pause
        image: registry.k8s.io/pause:3.10.2
        imagePullPolicy: IfNotPresent
EOF
}

step() { # N
  local n=$1 dir=$out/$rt/$1 name=kbench-$1 t0 pids daemon shims
  local want
  want=$(want_max_pods "$n")
  if ((want != max_pods)); then
    log "$rt: kubelet restarted with maxPods: $want"
    KUBE_KUBELET_CONFIG="maxPods: $want" bash hack/kube.sh restart kubelet
    wait_until 120 node_ready || die "the node is not Ready after kubelet's restart"
    max_pods=$want
    sleep 5
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  log "$rt: $n pods (load $(load1))"
  {
    echo "load_before=$(load1)"
    echo "max_pods=$max_pods"
  } >"$dir/facts.part"
  scrape_kubelet "$dir/before.prom"
  scrape_berth "$dir/berth-before.prom"
  t0=$(now)
  deployment "$name" "$n" | kctl create -f - >/dev/null
  kctl rollout status "deploy/$name" --timeout=1200s >/dev/null || die "$rt: $n pods not Ready in 20 min"
  echo "ready_s=$(since "$t0")" >>"$dir/facts.part"
  scrape_kubelet "$dir/ready.prom"
  sleep "$steady"
  daemon=$(cat "$S/pids/$rt")
  if [[ $rt == berth ]]; then
    mapfile -t pids < <(pids_of_exe "$bindir/berth-shim")
  else
    mapfile -t pids < <(pids_of_exe "$gobin/containerd-shim-runc-v2")
  fi
  read -r dp dr < <(mem_of "$daemon")
  read -r sp sr < <(mem_of "${pids[@]}")
  {
    echo "daemon_pss_kib=$dp"
    echo "daemon_rss_kib=$dr"
    echo "shims_pss_kib=$sp"
    echo "shims_rss_kib=$sr"
    echo "shims=${#pids[@]}"
  } >>"$dir/facts.part"
  scrape_kubelet "$dir/steady.prom"
  t0=$(now)
  kctl delete "deploy/$name" --wait=false >/dev/null
  kctl wait --for=delete pod -l "app=$name" --timeout=1200s >/dev/null 2>&1 ||
    wait_until 60 bash -c "[[ -z \$(\"$gobin/kubectl\" --kubeconfig \"$S/admin.kubeconfig\" get pods -l app=$name -o name) ]]" ||
    die "$rt: $n pods not gone in 20 min"
  echo "gone_s=$(since "$t0")" >>"$dir/facts.part"
  # kubelet removes the stopped sandboxes in its garbage collection (every
  # minute): their RemovePodSandbox belongs to the step.
  wait_until 90 runtime_empty || log "$rt: sandboxes left 90 s after the pods went"
  echo "runtime_empty_s=$(since "$t0")" >>"$dir/facts.part"
  scrape_kubelet "$dir/gone.prom"
  scrape_berth "$dir/berth-gone.prom"
  echo "load_after=$(load1)" >>"$dir/facts.part"
  mv "$dir/facts.part" "$dir/facts"
  log "$rt: $n pods: $(tr '\n' ' ' <"$dir/facts")"
}

lock_fd=""
node_up=0
finish() {
  local status=$?
  set +e
  if ((node_up)); then
    bash hack/kube.sh down || status=1
    node_up=0
  fi
  [[ -z $lock_fd ]] || flock -u "$lock_fd"
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT TERM

if ((run)); then
  mkdir -p "$bindir"
  # berth's release build, when berth runs (a containerd-only run needs none).
  if [[ " ${runtimes[*]} " == *" berth "* ]]; then
    cp "$target/release/berth" "$target/release/berth-shim" "$bindir/"
  fi
  ln -sfn "$target/debug/examples" "$bindir/examples"
  export BERTH_TARGET_DIR=$bindir
  for rt in "${runtimes[@]}"; do
    exec {lock_fd}>/run/berth-kube.lock
    log "$rt: waiting for /run/berth-kube.lock"
    flock "$lock_fd"
    hold=$SECONDS
    max_pods=$(want_max_pods "${size_list[0]}")
    berth_metrics=""
    if [[ $rt == berth ]]; then
      # berth's metrics endpoint: a drop-in where kube.sh's berth reads them.
      berth_metrics=127.0.0.1:$((20000 + RANDOM % 40000))
      mkdir -p "$S/berth/config.d"
      printf '[metrics]\naddress = "%s"\n' "$berth_metrics" >"$S/berth/config.d/90-kube-bench.toml"
    fi
    node_up=1
    KUBE_KUBELET_CONFIG="maxPods: $max_pods" bash hack/kube.sh up --runtime "$rt"
    endpoint=$(eval "$(bash hack/kube.sh env)"; echo "$CONTAINER_RUNTIME_ENDPOINT")
    mkdir -p "$out/$rt"
    {
      echo "date=$(date -u +%FT%TZ)"
      echo "order=${runtimes[*]}"
      echo "version=$(crictl version 2>/dev/null | awk '/RuntimeVersion/ { print $2 }')"
    } >"$out/$rt/meta"
    log "$rt: pulling registry.k8s.io/pause:3.10.2"
    crictl pull registry.k8s.io/pause:3.10.2 >/dev/null
    for n in "${size_list[@]}"; do
      step "$n"
    done
    bash hack/kube.sh down
    node_up=0
    flock -u "$lock_fd"
    exec {lock_fd}>&-
    lock_fd=""
    log "$rt: done; the lock held $((SECONDS - hold)) s"
  done
fi

report=$out/report.md
"$bench" kubelet-report "$out" >"$report"
cat "$report"

if ((readme)); then
  page=docs/benchmarks.md
  begin='<!-- kube-bench.sh --readme: begin -->'
  end='<!-- kube-bench.sh --readme: end -->'
  grep -qxF "$begin" "$page" && grep -qxF "$end" "$page" || die "--readme: $page has no $begin ... $end lines"
  maxload=$(cat "$out"/*/*/facts 2>/dev/null | awk -F= '$1 ~ /^load_/ && $2 > m { m = $2 } END { print m + 0 }')
  {
    for rt in berth containerd; do
      [[ -f $out/$rt/meta ]] || continue
      echo "- $rt: $(awk -F= '$1 == "version" { v = $2 } $1 == "date" { d = $2 } $1 == "order" { o = $2 }
        END { printf "%s, run %s (order: %s)", v, d, o }' "$out/$rt/meta")"
    done
    echo "- \`${command_line}\`, on $(nproc) cores ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo))"
    if awk -v m="$maxload" 'BEGIN { exit !(m > 1.5) }'; then
      echo "- the machine was shared: the load average reached $maxload (other builds beside the run)"
    fi
    echo
    cat "$report"
  } >"$out/readme-part.md"
  awk -v begin="$begin" -v end="$end" -v part="$out/readme-part.md" '
    $0 == begin { print; while ((getline line < part) > 0) print line; skip = 1; next }
    $0 == end { skip = 0 }
    !skip { print }' "$page" >"$out/benchmarks.md"
  cat "$out/benchmarks.md" >"$page"
  log "$page: the tables written between its kube-bench.sh markers"
fi
