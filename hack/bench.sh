#!/usr/bin/env bash
# Benchmarks berth against containerd (Debian's 1.6 and its CRI plugin), side
# by side in one run: both on the same runc, the same CNI plugins and the same
# kind of network (each its own bridge and subnet), images from one local
# registry. Prints the table (Markdown) and writes it as JSON.
#
#   hack/bench.sh [--quick] [--big-pull] [--no-build] [--no-nri] [--json FILE] [--keep] [-- BERTH-BENCH-RUN-ARGS...]
#
#   --quick    fewer iterations and smaller sizes (for development); pulls
#              only the 200 MiB image unless --big-pull
#   --big-pull also pull the 1 GiB image in 10 gzip layers (full runs always do)
#   --no-build use the binaries already built (for development)
#   --json F   where the JSON goes (default: bench.json in the work dir, kept)
#   --keep     keep the work dir (configs, daemon logs) afterwards
#   --berth-only  run berth alone (no containerd), e.g. for its memory at scale
#   --no-nri   skip the NRI table: the life cycle on a second berth with one
#              no-op NRI plugin (berth-nri-test-plugin, pre-installed,
#              subscribed to every event) against berth without one,
#              interleaved, with the difference (what the plugin costs)
#   -- ARGS    passed to `berth-bench run`, e.g. -- --iterations 50
#
# Installs what is missing (hack/install-deps.sh), builds berth (release), the
# static berth-shim and berth-bench, starts a registry (hack/registry.sh) with
# the test images and the benchmark's own (a pause image for containerd and a
# 4 × 50 MiB image, and, unless --quick, a 1 GiB image in 10 gzip layers),
# then berth and containerd, each with its own config,
# root, state and socket in a temp dir (containerd's system service is never
# touched), runs berth-bench, and stops and removes everything it started.
# Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

usage() {
  sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "bench.sh: $*" >&2
  exit 1
}
log() { echo "bench.sh: $*" >&2; }

quick=0
big_pull=0
build=1
keep=0
berth_only=0
nri=1
json=""
extra=()
while (($#)); do
  case $1 in
  --quick) quick=1; shift ;;
  --big-pull) big_pull=1; shift ;;
  --keep) keep=1; shift ;;
  --berth-only) berth_only=1; shift ;;
  --no-nri) nri=0; shift ;;
  --no-build) build=0; shift ;;
  --json) json=${2:?--json needs a file}; shift 2 ;;
  --) shift; extra=("$@"); break ;;
  -h | --help) usage ;;
  *) usage ;;
  esac
done
[[ $(id -u) -eq 0 ]] || die "run as root (the runtimes need it)"

RUNC=/usr/sbin/runc
CNI_BIN=/usr/lib/cni
BERTH_NET=(berth-bench-berth bbench0 10.200.0.0/24)
CTRD_NET=(berth-bench-containerd cbench0 10.201.0.0/24)
FLOOR_NET=(berth-bench-floor fbench0 10.202.0.0/24)
NRI_NET=(berth-bench-nri nbench0 10.203.0.0/24)

if ((build)); then
  bash hack/install-deps.sh
  log "building (release)"
  cargo build --release --locked
  cargo rustc --release --locked -p berth-shim --bin berth-shim --no-default-features \
    -- -C target-feature=+crt-static
  cargo build --release --locked -p berth-bench -p berth-nri-test-plugin
fi
command -v containerd >/dev/null || die "containerd not found"
out=${CARGO_TARGET_DIR:-$repo/target}
[[ $out == /* ]] || out=$repo/$out
berth=$out/release/berth
bench=$out/release/berth-bench
[[ -x $berth && -x $out/release/berth-shim && -x $bench ]] || die "binaries missing in $out/release"

work=$(mktemp -d /tmp/berth-bench-XXXXXX)
[[ -n $json ]] || json=$work/bench.json
berth_dir=$work/berth
ctrd_dir=$work/containerd
nri_dir=$work/berth-nri
berth_pid=""
ctrd_pid=""
nri_pid=""
berth_target="berth=$berth_dir/berth.sock,shim=berth-shim,match=$berth_dir/"
ctrd_target="containerd=$ctrd_dir/containerd.sock,shim=containerd-shim-runc-v2,match=$ctrd_dir/containerd.sock"
nri_target="berth-nri=$nri_dir/berth.sock,shim=berth-shim,match=$nri_dir/"

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

cleanup() {
  local status=$?
  set +e
  trap - EXIT INT TERM
  log "cleaning up"
  if [[ -x $bench ]] && { [[ -n $berth_pid ]] || [[ -n $ctrd_pid ]] || [[ -n $nri_pid ]]; }; then
    local targets=()
    [[ -n $berth_pid ]] && kill -0 "$berth_pid" 2>/dev/null && targets+=(--target "$berth_target")
    [[ -n $ctrd_pid ]] && kill -0 "$ctrd_pid" 2>/dev/null && targets+=(--target "$ctrd_target")
    [[ -n $nri_pid ]] && kill -0 "$nri_pid" 2>/dev/null && targets+=(--target "$nri_target")
    ((${#targets[@]})) && timeout 300 "$bench" cleanup "${targets[@]}" >&2
  fi
  stop_pid "$berth_pid"
  stop_pid "$ctrd_pid"
  stop_pid "$nri_pid"
  # The no-op plugin berth-nri launched (it exits when berth goes).
  for pid in $(pids_of 10-noop ""); do
    kill -KILL "$pid" 2>/dev/null
  done
  # Whatever the daemons left: containers, then their shims.
  local root id pid
  for root in "$berth_dir/state/runtime" "$nri_dir/state/runtime" "$ctrd_dir/runc/k8s.io"; do
    [[ -d $root ]] || continue
    for id in $("$RUNC" --root "$root" list -q 2>/dev/null); do
      "$RUNC" --root "$root" delete -f "$id" >/dev/null 2>&1
    done
  done
  for pid in $(pids_of berth-shim "$berth_dir/") $(pids_of berth-shim "$nri_dir/") \
    $(pids_of containerd-shim-runc-v2 "$ctrd_dir/containerd.sock"); do
    kill -KILL "$pid" 2>/dev/null
  done
  # Mounts (rootfs overlays, netns, shm) under the work dir, deepest first.
  awk -v w="$work/" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null; done
  local net
  for net in "${BERTH_NET[*]}" "${CTRD_NET[*]}" "${FLOOR_NET[*]}" "${NRI_NET[*]}"; do
    set -- $net
    ip link show "$2" >/dev/null 2>&1 && ip link del "$2"
    rm -rf "/var/lib/cni/networks/$1"
    rm -f /var/lib/cni/results/"$1"-*
  done
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '/^berth-bench-floor-/ { print $1 }'); do
    ip netns del "$ns" 2>/dev/null
  done
  local cg
  for cg in /sys/fs/cgroup/*/berth-bench-berth /sys/fs/cgroup/*/berth-bench-containerd \
    /sys/fs/cgroup/*/berth-bench-berth-nri /sys/fs/cgroup/berth-bench-berth-nri \
    /sys/fs/cgroup/*/berth-bench-floor /sys/fs/cgroup/berth-bench-floor \
    /sys/fs/cgroup/berth-bench-berth /sys/fs/cgroup/berth-bench-containerd; do
    [[ -d $cg ]] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  # containerd's shims keep their sockets in /run/containerd/s whatever the
  # state dir; remove the directories if they were left empty.
  rmdir /run/containerd/s /run/containerd 2>/dev/null
  bash hack/registry.sh stop "$work/registry" 2>/dev/null
  if ((keep)); then
    log "kept $work"
  else
    # Keep the JSON when it was written inside the work dir.
    if [[ $json == "$work"/* && -f $json ]]; then
      local stamp
      stamp=$(date +%Y%m%d-%H%M%S)
      cp "$json" "/tmp/berth-bench-$stamp.json" && log "JSON kept as /tmp/berth-bench-$stamp.json"
      [[ -f ${json%.json}-nri.json ]] && cp "${json%.json}-nri.json" "/tmp/berth-bench-$stamp-nri.json" &&
        log "NRI JSON kept as /tmp/berth-bench-$stamp-nri.json"
    fi
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

# Waits for the CRI socket $1 of process $2 (log $3).
wait_socket() {
  local sock=$1 pid=$2 logf=$3 i
  for i in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || { tail -20 "$logf" >&2; die "daemon $pid exited"; }
    [[ -S $sock ]] && return 0
    sleep 0.1
  done
  tail -20 "$logf" >&2
  die "no socket $sock after 30 s"
}

log "registry and images"
addr=$(bash hack/registry.sh start "$work/registry" --max-lifetime 7200)
bash hack/build-test-images.sh "$addr" >/dev/null
((quick)) || big_pull=1
push_args=(--registry "$addr")
((big_pull)) && push_args+=(--huge)
pushed=$("$bench" push-images "${push_args[@]}") || die "push-images failed"
mapfile -t pushed <<<"$pushed"
((${#pushed[@]} == 2 + big_pull)) || die "push-images printed ${pushed[*]}"
pause_image=${pushed[0]}
big_image=${pushed[1]}

# The floor's network: the same plugins, its own bridge and subnet.
fill hack/bench/cni.conflist.in "$work/floor.conflist" \
  NETWORK="${FLOOR_NET[0]}" BRIDGE="${FLOOR_NET[1]}" SUBNET="${FLOOR_NET[2]}"

log "starting berth"
mkdir -p "$berth_dir/net.d"
fill hack/bench/cni.conflist.in "$berth_dir/net.d/10-${BERTH_NET[0]}.conflist" \
  NETWORK="${BERTH_NET[0]}" BRIDGE="${BERTH_NET[1]}" SUBNET="${BERTH_NET[2]}"
fill hack/bench/berth.toml.in "$berth_dir/config.toml" \
  DIR="$berth_dir" RUNC="$RUNC" CNI_BIN="$CNI_BIN"
# berth's Prometheus endpoint on a free loopback port (a drop-in beside the
# config): the status group reads the server-side time of each call there.
metrics_addr=""
for _ in $(seq 1 20); do
  port=$((20000 + RANDOM % 40000))
  ss -Hltn "sport = :$port" 2>/dev/null | grep -q . || { metrics_addr=127.0.0.1:$port; break; }
done
[[ -n $metrics_addr ]] || die "no free port for berth's metrics"
mkdir -p "$berth_dir/config.d"
printf '[metrics]\naddress = "%s"\n' "$metrics_addr" >"$berth_dir/config.d/90-bench-metrics.toml"
"$berth" --config "$berth_dir/config.toml" </dev/null >/dev/null 2>"$berth_dir/berth.log" &
berth_pid=$!

if ((!berth_only)); then
  log "starting containerd"
  mkdir -p "$ctrd_dir/net.d"
  fill hack/bench/cni.conflist.in "$ctrd_dir/net.d/10-${CTRD_NET[0]}.conflist" \
    NETWORK="${CTRD_NET[0]}" BRIDGE="${CTRD_NET[1]}" SUBNET="${CTRD_NET[2]}"
  fill hack/bench/containerd.toml.in "$ctrd_dir/config.toml" \
    DIR="$ctrd_dir" RUNC="$RUNC" CNI_BIN="$CNI_BIN" REGISTRY="$addr" PAUSE_IMAGE="$pause_image"
  containerd --config "$ctrd_dir/config.toml" </dev/null >/dev/null 2>"$ctrd_dir/containerd.log" &
  ctrd_pid=$!
fi

wait_socket "$berth_dir/berth.sock" "$berth_pid" "$berth_dir/berth.log"
targets=(--target "$berth_target")
if ((!berth_only)); then
  wait_socket "$ctrd_dir/containerd.sock" "$ctrd_pid" "$ctrd_dir/containerd.log"
  targets+=(--target "$ctrd_target")
fi

args=(run "${targets[@]}"
  --image "$addr/berth-test/busybox:latest" --prepull "$pause_image"
  --big-image "$big_image" --big-image-desc "4 × 50 MiB layers (gzip)"
  --runc "$RUNC" --json "$json"
  --floor-cni "$work/floor.conflist" --cni-bin "$CNI_BIN" --pauseless berth
  --metrics "berth=$metrics_addr")
((big_pull)) && args+=(--big-image "${pushed[2]}" --big-image-desc "1 GiB in 10 gzip layers")
((quick)) && args+=(--quick)
log "running berth-bench (started $(date -u +%FT%TZ))"
start=$SECONDS
"$bench" "${args[@]}" "${extra[@]}"
log "done in $((SECONDS - start)) s; JSON: $json"

if ((nri)); then
  # The same berth, its own dirs, socket and network, with NRI on its own
  # socket and one pre-installed no-op plugin (launched by berth, fd 3):
  # the life cycle on both, interleaved, and what the plugin adds.
  log "starting berth with a no-op NRI plugin"
  mkdir -p "$nri_dir/net.d" "$nri_dir/config.d" "$nri_dir/nri/plugins" "$nri_dir/nri/conf.d"
  fill hack/bench/cni.conflist.in "$nri_dir/net.d/10-${NRI_NET[0]}.conflist" \
    NETWORK="${NRI_NET[0]}" BRIDGE="${NRI_NET[1]}" SUBNET="${NRI_NET[2]}"
  fill hack/bench/berth.toml.in "$nri_dir/config.toml" \
    DIR="$nri_dir" RUNC="$RUNC" CNI_BIN="$CNI_BIN"
  printf '[nri]\nenable = true\nsocket_path = "%s"\nplugin_path = "%s"\nplugin_config_path = "%s"\n' \
    "$nri_dir/nri/nri.sock" "$nri_dir/nri/plugins" "$nri_dir/nri/conf.d" \
    >"$nri_dir/config.d/80-bench-nri.toml"
  cp "$out/release/berth-nri-test-plugin" "$nri_dir/nri/plugins/10-noop"
  "$berth" --config "$nri_dir/config.toml" </dev/null >/dev/null 2>"$nri_dir/berth.log" &
  nri_pid=$!
  wait_socket "$nri_dir/berth.sock" "$nri_pid" "$nri_dir/berth.log"
  for _ in $(seq 1 100); do
    grep -q 'NRI plugin connected' "$nri_dir/berth.log" && break
    sleep 0.1
  done
  grep -q 'NRI plugin connected' "$nri_dir/berth.log" || die "the no-op NRI plugin did not connect"
  nri_json=${json%.json}-nri.json
  nri_args=(run --target "$nri_target" --target "$berth_target" --only lifecycle --difference
    --image "$addr/berth-test/busybox:latest" --prepull "$pause_image" --runc "$RUNC"
    --json "$nri_json")
  ((quick)) && nri_args+=(--quick)
  log "running berth-bench: NRI (berth-nri against berth)"
  "$bench" "${nri_args[@]}" "${extra[@]}"
  log "NRI JSON: $nri_json"
fi
