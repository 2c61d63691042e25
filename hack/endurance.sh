#!/usr/bin/env bash
# The endurance run (#28): kubelet-like churn against one berth for CYCLES
# pod + container life cycles, then the verdict. Run as root.
#
#   hack/endurance.sh [--debug] [--no-build] [--bin-dir DIR] [--keep] [--no-docs] [CYCLES] [-- CHURN-ARGS...]
#
#   CYCLES      measured life cycles after the warm-up [5000]
#   --debug     the debug build (faster to build; more memory) instead of release
#   --no-build  use the binaries already built
#   --bin-dir D use berth, berth-shim and berth-bench from D (no build)
#   --keep      keep the work dir (config, berth's log, CSV, JSON) afterwards
#   --no-docs   write the CSV, JSON and plot in the work dir only, not in docs/
#   -- ARGS     passed to `berth-bench churn` (e.g. --warmup 500 --batch 4)
#
# Builds berth, berth-shim and berth-bench, starts a registry with the test
# images (hack/registry.sh, hack/build-test-images.sh) and berth in a temp
# dir of its own, under a memory cgroup (1 GiB; BERTH_ENDURANCE_MEMORY), on
# its own CNI network (bridge + host-local + portmap, 10.204.0.0/24), and
# runs `berth-bench churn` (crates/bench/src/churn.rs): life cycles one
# after another and a few at a time (RunPodSandbox, PodSandboxStatus,
# CreateContainer, StartContainer, ContainerStatus, an ExecSync probe,
# ReopenContainerLog, every 5th an exec session and a port-forward session,
# StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox), a relist
# every second and the stats calls every 10 s. It samples the daemon's RSS,
# fds and threads every 50 life cycles.
#
# Fails (exit 1) when a call was not answered, when the daemon's RSS grew
# more than 2 MiB from the baseline (after the warm-up) to the end
# (BERTH_ENDURANCE_MAX_GROWTH_KIB), when its open fds or threads did not come
# back to the baseline, or when anything is left once the churn is done: a
# shim, a mount under berth's dirs, a netns or pinned namespace, a runc
# container, a record, a pod cgroup, an IPAM lease, a temp file.
#
# Writes docs/endurance.csv (the samples), docs/endurance.json (the
# summary) and docs/endurance-rss.png (RSS, fds and threads over the life
# cycles, drawn with gnuplot, installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "endurance.sh: $*" >&2
  exit 1
}
log() { echo "endurance.sh: $*" >&2; }

profile=release
build=1
keep=0
docs=1
cycles=5000
bin_dir=""
extra=()
while (($#)); do
  case $1 in
  --debug) profile=debug; shift ;;
  --no-build) build=0; shift ;;
  --bin-dir) bin_dir=${2:?--bin-dir needs a dir}; build=0; shift 2 ;;
  --keep) keep=1; shift ;;
  --no-docs) docs=0; shift ;;
  --) shift; extra=("$@"); break ;;
  -h | --help) usage ;;
  [0-9]*) cycles=$1; shift ;;
  *) usage ;;
  esac
done
[[ $(id -u) -eq 0 ]] || die "run as root (berth needs it)"

RUNC=/usr/sbin/runc
CNI_BIN=/usr/lib/cni
NET=(berth-endurance bendure0 10.204.0.0/24)
CGROUP_PARENT=berth-endurance-pods
MEMORY=${BERTH_ENDURANCE_MEMORY:-1G}
MAX_GROWTH_KIB=${BERTH_ENDURANCE_MAX_GROWTH_KIB:-2048}

bash hack/install-deps.sh
if ! command -v gnuplot >/dev/null; then
  log "installing gnuplot-nox (for the plot)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gnuplot-nox >/dev/null
fi
if ((build)); then
  log "building ($profile)"
  flags=(--locked -p berth -p berth-shim -p berth-bench)
  [[ $profile == release ]] && flags+=(--release)
  cargo build "${flags[@]}"
fi
if [[ -z $bin_dir ]]; then
  out=${CARGO_TARGET_DIR:-$repo/target}
  [[ $out == /* ]] || out=$repo/$out
  bin_dir=$out/$profile
fi
berth=$bin_dir/berth
bench=$bin_dir/berth-bench
[[ -x $berth && -x $bin_dir/berth-shim && -x $bench ]] || die "binaries missing in $bin_dir"

work=$(mktemp -d /tmp/berth-endurance-XXXXXX)
dir=$work/berth
berth_pid=""
cg_paths=()

# Stops a daemon by pid: SIGTERM, then SIGKILL after 20 s.
stop_pid() {
  local pid=$1 i
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# Pids of processes whose executable is named $1 and whose command line holds $2.
pids_of() {
  local exe=$1 needle=$2 p
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/exe" 2>/dev/null) == */"$exe" ]] || continue
    tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$needle" && echo "${p#/proc/}"
  done
  return 0
}

# The pods' cgroup dirs (every hierarchy), deepest first.
pod_cgroups() {
  local d
  for d in /sys/fs/cgroup/*/"$CGROUP_PARENT" /sys/fs/cgroup/"$CGROUP_PARENT"; do
    [[ -d $d ]] && find "$d" -mindepth 1 -type d
  done | sort -r
  return 0
}

cleanup() {
  local status=$?
  set +e
  trap - EXIT INT TERM
  if [[ -n $berth_pid ]] && kill -0 "$berth_pid" 2>/dev/null; then
    timeout 300 "$bench" cleanup --target "berth=$dir/berth.sock" >/dev/null 2>&1
  fi
  local id pid
  # berth itself first (it may run under BERTH_ENDURANCE_WRAP's command).
  for pid in $(pids_of berth "$dir/config.toml"); do
    stop_pid "$pid"
  done
  stop_pid "$berth_pid"
  if [[ -d $dir/state/runtime ]]; then
    for id in $("$RUNC" --root "$dir/state/runtime" list -q 2>/dev/null); do
      "$RUNC" --root "$dir/state/runtime" delete -f "$id" >/dev/null 2>&1
    done
  fi
  for pid in $(pids_of berth-shim "$dir/"); do
    kill -KILL "$pid" 2>/dev/null
  done
  awk -v w="$work/" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null; done
  ip link show "${NET[1]}" >/dev/null 2>&1 && ip link del "${NET[1]}"
  rm -rf "/var/lib/cni/networks/${NET[0]}"
  rm -f /var/lib/cni/results/"${NET[0]}"-*
  local d
  for d in $(pod_cgroups) /sys/fs/cgroup/*/"$CGROUP_PARENT" /sys/fs/cgroup/"$CGROUP_PARENT"; do
    [[ -d $d ]] && rmdir "$d" 2>/dev/null
  done
  for d in "${cg_paths[@]}"; do
    [[ -d $d ]] && rmdir "$d" 2>/dev/null
  done
  bash hack/registry.sh stop "$work/registry" 2>/dev/null
  if ((keep)); then
    log "kept $work"
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Fills @KEY@ placeholders of template $1 from KEY=VALUE arguments into $2.
fill() {
  local template=$1 dest=$2 text kv
  text=$(<"$template")
  shift 2
  for kv in "$@"; do
    text=${text//@${kv%%=*}@/${kv#*=}}
  done
  [[ $text != *@[A-Z_]*@* ]] || die "unfilled placeholder in $dest"
  printf '%s\n' "$text" >"$dest"
}

# A memory cgroup for berth (and the shims it forks): v1 or v2.
memory_cgroup() {
  local cg
  if [[ -f /sys/fs/cgroup/cgroup.controllers && ! -d /sys/fs/cgroup/memory ]]; then
    cg=/sys/fs/cgroup/berth-endurance-$$
    mkdir -p "$cg"
    echo "$MEMORY" >"$cg/memory.max"
  else
    cg=/sys/fs/cgroup/memory/berth-endurance-$$
    mkdir -p "$cg"
    echo "$MEMORY" >"$cg/memory.limit_in_bytes"
  fi
  cg_paths+=("$cg")
  echo "$cg"
}

log "registry and images"
addr=$(bash hack/registry.sh start "$work/registry" --max-lifetime 86400)
bash hack/build-test-images.sh "$addr" >/dev/null
image=$addr/berth-test/busybox:latest

log "starting berth ($profile) under a $MEMORY memory cgroup"
mkdir -p "$dir/net.d"
fill hack/bench/cni.conflist.in "$dir/net.d/10-${NET[0]}.conflist" \
  NETWORK="${NET[0]}" BRIDGE="${NET[1]}" SUBNET="${NET[2]}"
fill hack/bench/berth.toml.in "$dir/config.toml" DIR="$dir" RUNC="$RUNC" CNI_BIN="$CNI_BIN"
cg=$(memory_cgroup)
# BERTH_ENDURANCE_LABEL: what the plot's title calls the build.
# BERTH_ENDURANCE_WRAP: a command berth runs under, e.g. "heaptrack -o
# /tmp/berth.heaptrack" to see where its memory goes (the churn then finds
# berth's pid through its socket).
wrap=()
[[ -n ${BERTH_ENDURANCE_WRAP:-} ]] && read -r -a wrap <<<"$BERTH_ENDURANCE_WRAP"
# shellcheck disable=SC2016
bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" "${wrap[@]}" "$berth" \
  --config "$dir/config.toml" </dev/null >/dev/null 2>"$dir/berth.log" &
berth_pid=$!
pid_opt=,pid=$berth_pid
((${#wrap[@]} == 0)) || pid_opt=""
for _ in $(seq 1 300); do
  kill -0 "$berth_pid" 2>/dev/null || { tail -20 "$dir/berth.log" >&2; die "berth exited"; }
  [[ -S $dir/berth.sock ]] && break
  sleep 0.1
done
[[ -S $dir/berth.sock ]] || die "no socket after 30 s"

csv=$work/endurance.csv
json=$work/endurance.json
log "churn: $cycles life cycles (started $(date -u +%FT%TZ))"
status=0
# The shims of containers and pauses: their state dirs are below state/s/
# (the daemon's standby shim names state/s itself, and is there at the end
# as at the start).
RUST_BACKTRACE=0 "$bench" churn --target "berth=$dir/berth.sock,shim=berth-shim,match=$dir/state/s/$pid_opt" \
  --image "$image" --cycles "$cycles" --cgroup-parent "/$CGROUP_PARENT" \
  --csv "$csv" --json "$json" --max-rss-growth-kib "$MAX_GROWTH_KIB" "${extra[@]}" >/dev/null ||
  status=1

# What the life cycles may have left behind, with berth still running (its
# own dirs are there, empty).
left=()
check_empty() {
  local what=$1 path=$2 names
  [[ -d $path ]] || return 0
  names=$(ls -A "$path")
  [[ -z $names ]] || left+=("$what in $path: $(echo $names)")
}
check_empty "runc containers" "$dir/state/runtime"
check_empty "netns" "$dir/state/netns"
check_empty "pinned namespaces" "$dir/state/podns"
check_empty "shim dirs" "$dir/state/s"
for d in state/sandboxes state/containers root/sandboxes root/containers \
  root/records/sandboxes root/records/containers root/cni; do
  check_empty "files" "$dir/$d"
done
shims=$(pids_of berth-shim "$dir/state/s/")
[[ -z $shims ]] || left+=("shims: $(echo $shims)")
# Mounts under berth's dirs, but for the shared mount points the netns and
# pinned namespace dirs are (as /run/netns is).
mounts=$(awk -v w="$dir/" -v n="$dir/state/netns" -v p="$dir/state/podns" \
  'index($5, w) == 1 && $5 != n && $5 != p { print $5 }' /proc/self/mountinfo)
[[ -z $mounts ]] || left+=("mounts: $(echo $mounts)")
cgroups=$(pod_cgroups)
[[ -z $cgroups ]] || left+=("cgroups: $(echo $cgroups)")
leases=$(ls -A "/var/lib/cni/networks/${NET[0]}" 2>/dev/null | grep -Ev '^(lock|last_reserved_ip\..*)$' || true)
[[ -z $leases ]] || left+=("IPAM leases: $(echo $leases)")
temps=$(find "$dir" -name '*.tmp-*' 2>/dev/null)
[[ -z $temps ]] || left+=("temp files: $(echo $temps)")
if ((${#left[@]})); then
  status=1
  for l in "${left[@]}"; do
    log "LEFT: $l"
  done
else
  log "nothing left: no shim, mount, netns, runc container, record, cgroup, IPAM lease or temp file"
fi
kill -0 "$berth_pid" 2>/dev/null || { status=1; log "berth exited during the run"; }
[[ -f $json ]] || die "no summary (see $dir/berth.log)"

# The plot: RSS and anonymous RSS over the life cycles (top), open fds and
# threads (bottom), the baseline (end of the warm-up) marked.
png=$work/endurance-rss.png
baseline_cycle=$(sed -n 's/.*"warmup": \([0-9]*\).*/\1/p' "$json" | head -1)
growth=$(sed -n 's/.*"rss_growth_kib": \(-\{0,1\}[0-9]*\).*/\1/p' "$json" | head -1)
# The baseline's RSS (the second "rss_kib" of the summary: start, baseline, end).
base_rss=$(grep -o '"rss_kib": [0-9]*' "$json" | sed -n '2s/.*: //p')
title="berth under kubelet-like churn (${BERTH_ENDURANCE_LABEL:-$profile build}, $(date -u +%F)): RSS $growth KiB from the baseline to the end"
gnuplot <<EOF
set terminal pngcairo size 1100,700 font "sans,10"
set output "$png"
set datafile separator ","
set multiplot layout 2,1 title "$title"
set grid
set key left bottom
set arrow 1 from $baseline_cycle, graph 0 to $baseline_cycle, graph 1 nohead dt 2 lc rgb "gray40"
set label 1 "baseline (after warm-up)" at $baseline_cycle, graph 0.93 offset 0.5,0 tc rgb "gray40"
set ylabel "RSS, MiB"
set y2label "anonymous RSS, MiB"
set ytics nomirror
set y2tics
set format x ""
set lmargin 10
set rmargin 10
set bmargin 1
limit = ($base_rss + $MAX_GROWTH_KIB) / 1024.0
stats "$csv" using 1:(\$3/1024) skip 1 nooutput
set xrange [0:STATS_max_x]
top = STATS_max_y > limit ? STATS_max_y : limit
set yrange [*:top + 0.5]
plot "$csv" using 1:(\$3/1024) skip 1 with linespoints pt 7 ps 0.4 lw 2 title "RSS", \\
     "" using 1:(\$4/1024) skip 1 axes x1y2 with linespoints pt 7 ps 0.3 lw 1 title "anonymous RSS (right)", \\
     limit with lines dt 3 lc rgb "red" title sprintf("limit: baseline + %d KiB", $MAX_GROWTH_KIB)
unset label 1
unset y2label
unset y2tics
set ytics mirror
set format x "%g"
set tmargin 1
set bmargin 4
set xlabel "pod + container life cycles"
set ylabel "count"
set yrange [0:*]
set key left top
plot "$csv" using 1:5 skip 1 with steps lw 2 lc rgb "dark-green" title "open fds", \\
     "" using 1:6 skip 1 with steps lw 2 lc rgb "orange" title "threads"
unset multiplot
EOF
if ((docs)); then
  cp "$csv" docs/endurance.csv
  cp "$json" docs/endurance.json
  cp "$png" docs/endurance-rss.png
  log "wrote docs/endurance.csv, docs/endurance.json, docs/endurance-rss.png"
fi
grep -E '"(cycles_done|cycles_per_second|failures|rss_growth_kib|rss_slope_kib_per_cycle|peak_rss_kib|fds_back|threads_back)"' "$json" | tr -d ' ,' | tr '\n' ' ' >&2
echo >&2
if ((status)); then
  log "FAILED (see above; berth's log: $dir/berth.log with --keep)"
else
  log "passed"
fi
exit "$status"
