#!/usr/bin/env bash
# Benchmarks berth against one or more containerds and their CRI plugin
# (by default Debian's 1.6, from PATH), side by side in one run: all on the
# same runc, the same CNI plugins and the same kind of network (each its own
# bridge and subnet), images from one local registry. Prints the table
# (Markdown: a column per runtime, and berth/peer for each peer) and writes
# it as JSON.
#
#   hack/bench.sh [--quick] [--big-pull] [--no-build] [--no-nri] [--containerd DIR]... [--json FILE] [--keep] [-- BERTH-BENCH-RUN-ARGS...]
#
#   --quick    fewer iterations and smaller sizes (for development); pulls
#              only the 200 MiB image unless --big-pull
#   --big-pull also pull the 1 GiB image in 10 gzip layers (full runs always do)
#   --no-build use the binaries already built (for development)
#   --json F   where the JSON goes (default: bench.json in the work dir, kept)
#   --keep     keep the work dir (configs, daemon logs) afterwards
#   --berth-only  run berth alone (no containerd), e.g. for its memory at scale
#   --containerd DIR  a peer: DIR holds `containerd` and
#              `containerd-shim-runc-v2` (DIR comes first in the PATH the
#              daemon finds its shim in); repeat it for more peers, e.g.
#              --containerd /usr/bin --containerd /opt/containerd-2.3/bin.
#              The config template follows `containerd --version`: 1.x
#              hack/bench/containerd.toml.in (version 2), 2.x
#              hack/bench/containerd-v3.toml.in (version 3). Each peer is
#              named containerd-MAJOR.MINOR in the table [default: the
#              directory of the containerd in PATH]
#   --berth-b BIN  also run another build of berth (BIN, with its berth-shim
#              beside it) as runtime `berth-b`, second after berth, on its own
#              dirs and network (10.208.0.0/24), interleaved with the others:
#              an A/B of a change in one run (its step profile too)
#   --berth-b-config FILE  a TOML drop-in for berth-b's config.d (e.g.
#              `[runtime]` `cgroup_warmup = false`): an A/B of a setting, with
#              --berth-b naming the same build
#   --no-nri   skip the NRI table: the life cycle on a second berth with one
#              no-op NRI plugin (berth-nri-test-plugin, pre-installed,
#              subscribed to every event) against berth without one,
#              interleaved, with the difference (what the plugin costs);
#              300 life cycles (a difference of ~1 ms between two medians
#              of ~75 ms needs them on 2 cores) unless --quick or
#              -- --iterations N says otherwise
#   --readme   write the run's tables into docs/benchmarks.md, between the
#              lines `<!-- bench.sh --readme: begin -->` and `<!-- bench.sh
#              --readme: end -->` (what is between them is replaced): the
#              command line, the machine, the table and the NRI table, as
#              the script printed them (no date: the commit has one)
#   -- ARGS    passed to `berth-bench run`, e.g. -- --iterations 50
#
# Installs what is missing (hack/install-deps.sh), builds berth (release), the
# static berth-shim and berth-bench, starts a registry (hack/registry.sh) with
# the test images and the benchmark's own (a pause image for containerd and a
# 4 × 50 MiB image, and, unless --quick, a 1 GiB image in 10 gzip layers;
# berth-bench pushes an image of the same shape with fresh layers for each
# timed pull round, and drops the page cache before each pull),
# then berth and each containerd, each with its own config, root, state,
# socket and CNI network in a temp dir (containerd's system service is never
# touched), runs berth-bench, and stops and removes everything it started.
# Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
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
readme=0
command_line="bash hack/bench.sh $*"
ctrd_bins=()
berth_b=""
berth_b_config=""
extra=()
while (($#)); do
  case $1 in
  --quick) quick=1; shift ;;
  --big-pull) big_pull=1; shift ;;
  --keep) keep=1; shift ;;
  --readme) readme=1; shift ;;
  --berth-only) berth_only=1; shift ;;
  --no-nri) nri=0; shift ;;
  --no-build) build=0; shift ;;
  --json) json=${2:?--json needs a file}; shift 2 ;;
  --berth-b) berth_b=${2:?--berth-b needs a berth binary}; shift 2 ;;
  --berth-b-config) berth_b_config=${2:?--berth-b-config needs a file}; shift 2 ;;
  --containerd) ctrd_bins+=("${2:?--containerd needs a directory}"); shift 2 ;;
  --) shift; extra=("$@"); break ;;
  -h | --help) usage ;;
  *) usage ;;
  esac
done
[[ $(id -u) -eq 0 ]] || die "run as root (the runtimes need it)"

RUNC=/usr/sbin/runc
CNI_BIN=/usr/lib/cni
BERTH_NET=(berth-bench-berth bbench0 10.200.0.0/24)
FLOOR_NET=(berth-bench-floor fbench0 10.202.0.0/24)
NRI_NET=(berth-bench-nri nbench0 10.203.0.0/24)
BERTH_B_NET=(berth-bench-berth-b bbbench0 10.208.0.0/24)
# The peers' subnets, in the order of --containerd (bridges cbench0, 1, ...).
CTRD_SUBNETS=(10.201.0.0/24 10.204.0.0/24 10.205.0.0/24 10.206.0.0/24 10.207.0.0/24)

if ((build)); then
  bash hack/install-deps.sh
  log "building (release)"
  cargo build --release --locked
  cargo rustc --release --locked -p berth-shim --bin berth-shim --no-default-features \
    -- -C target-feature=+crt-static
  cargo build --release --locked -p berth-bench -p berth-nri-test-plugin
fi
if ((berth_only)); then
  ctrd_bins=()
elif ((${#ctrd_bins[@]} == 0)); then
  default=$(command -v containerd) || die "containerd not found (or give --containerd DIR)"
  ctrd_bins=("$(dirname "$(readlink -f "$default")")")
fi
((${#ctrd_bins[@]} <= ${#CTRD_SUBNETS[@]})) || die "at most ${#CTRD_SUBNETS[@]} peers"
# Per peer: name (containerd-MAJOR.MINOR), bin dir, config template.
ctrd_names=()
ctrd_templates=()
for i in "${!ctrd_bins[@]}"; do
  bin=$(readlink -f "${ctrd_bins[$i]}") || die "--containerd ${ctrd_bins[$i]}: no such directory"
  ctrd_bins[i]=$bin
  for exe in containerd containerd-shim-runc-v2; do
    [[ -x $bin/$exe ]] || die "--containerd $bin: no executable $exe"
  done
  # "containerd github.com/containerd/containerd[/v2] [v]X.Y.Z... REVISION"
  version=$("$bin/containerd" --version | awk '{ print $3 }')
  version=${version#v}
  [[ $version =~ ^([0-9]+)\.([0-9]+) ]] || die "$bin/containerd: version ${version@Q} not understood"
  name=containerd-${BASH_REMATCH[1]}.${BASH_REMATCH[2]}
  [[ " ${ctrd_names[*]} " == *" $name "* ]] && name=$name-$i
  ctrd_names+=("$name")
  if ((BASH_REMATCH[1] >= 2)); then
    ctrd_templates+=(hack/bench/containerd-v3.toml.in)
  else
    ctrd_templates+=(hack/bench/containerd.toml.in)
  fi
done
out=${CARGO_TARGET_DIR:-$repo/target}
[[ $out == /* ]] || out=$repo/$out
berth=$out/release/berth
bench=$out/release/berth-bench
[[ -x $berth && -x $out/release/berth-shim && -x $bench ]] || die "binaries missing in $out/release"

# The networks have fixed names: a second run at the same time would share
# them, and its cleanup would delete the other's bridges. Refuse instead:
# one run at a time (a lock held until this script exits), and no bridge
# of ours may exist already (a run of an older bench.sh, or one killed).
exec {lock_fd}>/run/lock/berth-bench.lock
flock -n "$lock_fd" || die "another hack/bench.sh is running (/run/lock/berth-bench.lock)"
for bridge in "${BERTH_NET[1]}" "${FLOOR_NET[1]}" "${NRI_NET[1]}" "${BERTH_B_NET[1]}" \
  $(for i in "${!ctrd_names[@]}"; do echo "cbench$i"; done); do
  ! ip link show "$bridge" >/dev/null 2>&1 ||
    die "bridge $bridge exists: is another hack/bench.sh running? (if not, ip link del $bridge)"
done
work=$(mktemp -d /tmp/berth-bench-XXXXXX)
[[ -n $json ]] || json=$work/bench.json
berth_dir=$work/berth
nri_dir=$work/berth-nri
b_dir=$work/berth-b
berth_pid=""
nri_pid=""
b_pid=""
if [[ -n $berth_b ]]; then
  berth_b=$(readlink -f "$berth_b")
  [[ -x $berth_b && -x $(dirname "$berth_b")/berth-shim ]] || die "--berth-b: $berth_b or its berth-shim missing"
fi
if [[ -n $berth_b_config ]]; then
  [[ -n $berth_b ]] || die "--berth-b-config needs --berth-b"
  berth_b_config=$(readlink -f "$berth_b_config")
  [[ -f $berth_b_config ]] || die "--berth-b-config: no file $berth_b_config"
fi
b_target="berth-b=$b_dir/berth.sock,shim=berth-shim,match=$b_dir/"
berth_target="berth=$berth_dir/berth.sock,shim=berth-shim,match=$berth_dir/"
# Per peer: its dir, pid (once started) and target.
ctrd_dirs=()
ctrd_pids=()
ctrd_targets=()
for i in "${!ctrd_names[@]}"; do
  ctrd_dirs+=("$work/${ctrd_names[$i]}")
  ctrd_pids+=("")
  ctrd_targets+=("${ctrd_names[$i]}=${ctrd_dirs[$i]}/containerd.sock,shim=containerd-shim-runc-v2,match=${ctrd_dirs[$i]}/containerd.sock")
done
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

# How many memory cgroups the kernel counts, dying ones included.
memcgs() {
  awk '$1 == "memory" { print $3 }' /proc/cgroups
}

# Waits, at most $1 s, until the machine is quiet: under 10 % of its CPU
# time busy over 2 s (the kernel frees the network namespaces of hundreds of
# pods for a while after they are removed). Says how busy it was.
wait_quiet() {
  local limit=$1 waited=0 busy=100 a b
  while ((waited < limit)); do
    read -ra a < <(head -1 /proc/stat)
    sleep 2
    read -ra b < <(head -1 /proc/stat)
    local total=0 idle k
    for k in 1 2 3 4 5 6 7 8; do total=$((total + b[k] - a[k])); done
    idle=$((b[4] - a[4] + b[5] - a[5]))
    ((total > 0)) && busy=$(((total - idle) * 100 / total))
    waited=$((waited + 2))
    ((busy < 10)) && break
  done
  log "machine ${busy}% busy after waiting ${waited} s for it to be quiet"
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
  local i
  if [[ -x $bench ]]; then
    local targets=()
    [[ -n $berth_pid ]] && kill -0 "$berth_pid" 2>/dev/null && targets+=(--target "$berth_target")
    for i in "${!ctrd_pids[@]}"; do
      [[ -n ${ctrd_pids[$i]} ]] && kill -0 "${ctrd_pids[$i]}" 2>/dev/null &&
        targets+=(--target "${ctrd_targets[$i]}")
    done
    [[ -n $nri_pid ]] && kill -0 "$nri_pid" 2>/dev/null && targets+=(--target "$nri_target")
    [[ -n $b_pid ]] && kill -0 "$b_pid" 2>/dev/null && targets+=(--target "$b_target")
    ((${#targets[@]})) && timeout 300 "$bench" cleanup "${targets[@]}" >&2
  fi
  stop_pid "$berth_pid"
  for i in "${!ctrd_pids[@]}"; do
    stop_pid "${ctrd_pids[$i]}"
  done
  stop_pid "$nri_pid"
  stop_pid "$b_pid"
  # The no-op plugin berth-nri launched (it exits when berth goes).
  for pid in $(pids_of 10-noop ""); do
    kill -KILL "$pid" 2>/dev/null
  done
  # Whatever the daemons left: containers, then their shims.
  local root id pid dir shims=()
  local roots=("$berth_dir/state/runtime" "$nri_dir/state/runtime" "$b_dir/state/runtime")
  for dir in "${ctrd_dirs[@]}"; do
    roots+=("$dir/runc/k8s.io")
    shims+=($(pids_of containerd-shim-runc-v2 "$dir/containerd.sock"))
  done
  for root in "${roots[@]}"; do
    [[ -d $root ]] || continue
    for id in $("$RUNC" --root "$root" list -q 2>/dev/null); do
      "$RUNC" --root "$root" delete -f "$id" >/dev/null 2>&1
    done
  done
  for pid in $(pids_of berth-shim "$berth_dir/") $(pids_of berth-shim "$nri_dir/") \
    $(pids_of berth-shim "$b_dir/") "${shims[@]}"; do
    kill -KILL "$pid" 2>/dev/null
  done
  # Mounts (rootfs overlays, netns, shm) under the work dir, deepest first.
  awk -v w="$work/" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null; done
  local net nets=("${BERTH_NET[*]}" "${FLOOR_NET[*]}" "${NRI_NET[*]}" "${BERTH_B_NET[*]}")
  for i in "${!ctrd_names[@]}"; do
    nets+=("$(ctrd_net "$i")")
  done
  for net in "${nets[@]}"; do
    set -- $net
    ip link show "$2" >/dev/null 2>&1 && ip link del "$2"
    rm -rf "/var/lib/cni/networks/$1"
    rm -f /var/lib/cni/results/"$1"-*
  done
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '/^berth-bench-floor-/ { print $1 }'); do
    ip netns del "$ns" 2>/dev/null
  done
  local cg name cgs=()
  for name in berth berth-nri berth-b floor "${ctrd_names[@]}"; do
    cgs+=(/sys/fs/cgroup/*/"berth-bench-$name" "/sys/fs/cgroup/berth-bench-$name")
  done
  for cg in "${cgs[@]}"; do
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

# The network of peer $1: "NAME BRIDGE SUBNET".
ctrd_net() {
  echo "berth-bench-${ctrd_names[$1]} cbench$1 ${CTRD_SUBNETS[$1]}"
}

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
# A free loopback port for a berth's Prometheus endpoint.
free_port() {
  local port
  for _ in $(seq 1 20); do
    port=$((20000 + RANDOM % 40000))
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . || { echo "127.0.0.1:$port"; return 0; }
  done
  die "no free port for berth's metrics"
}
# berth's Prometheus endpoint on a free loopback port (a drop-in beside the
# config): the status group reads the server-side time of each call there.
metrics_addr=$(free_port)
mkdir -p "$berth_dir/config.d"
printf '[metrics]\naddress = "%s"\n' "$metrics_addr" >"$berth_dir/config.d/90-bench-metrics.toml"
"$berth" --config "$berth_dir/config.toml" </dev/null >/dev/null 2>"$berth_dir/berth.log" &
berth_pid=$!

if [[ -n $berth_b ]]; then
  log "starting berth-b ($berth_b)"
  mkdir -p "$b_dir/net.d" "$b_dir/config.d"
  fill hack/bench/cni.conflist.in "$b_dir/net.d/10-${BERTH_B_NET[0]}.conflist" \
    NETWORK="${BERTH_B_NET[0]}" BRIDGE="${BERTH_B_NET[1]}" SUBNET="${BERTH_B_NET[2]}"
  fill hack/bench/berth.toml.in "$b_dir/config.toml" DIR="$b_dir" RUNC="$RUNC" CNI_BIN="$CNI_BIN"
  b_metrics=$(free_port)
  printf '[metrics]\naddress = "%s"\n' "$b_metrics" >"$b_dir/config.d/90-bench-metrics.toml"
  [[ -z $berth_b_config ]] || cp "$berth_b_config" "$b_dir/config.d/95-berth-b.toml"
  "$berth_b" --config "$b_dir/config.toml" </dev/null >/dev/null 2>"$b_dir/berth.log" &
  b_pid=$!
fi

for i in "${!ctrd_names[@]}"; do
  dir=${ctrd_dirs[$i]}
  bin=${ctrd_bins[$i]}
  read -r net_name net_bridge net_subnet <<<"$(ctrd_net "$i")"
  log "starting ${ctrd_names[$i]} ($bin/containerd, ${ctrd_templates[$i]##*/})"
  mkdir -p "$dir/net.d" "$dir/certs.d/$addr"
  fill hack/bench/cni.conflist.in "$dir/net.d/10-$net_name.conflist" \
    NETWORK="$net_name" BRIDGE="$net_bridge" SUBNET="$net_subnet"
  socket_dir=$dir/s
  ((${#socket_dir} <= 42)) || socket_dir=""
  fill "${ctrd_templates[$i]}" "$dir/config.toml" \
    DIR="$dir" RUNC="$RUNC" CNI_BIN="$CNI_BIN" REGISTRY="$addr" PAUSE_IMAGE="$pause_image" \
    SHIM_SOCKET_DIR="$socket_dir"
  # containerd 2.x reaches registries through hosts.toml files only.
  printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
    "$addr" "$addr" >"$dir/certs.d/$addr/hosts.toml"
  # Its shim from its own directory first.
  PATH="$bin:$PATH" "$bin/containerd" --config "$dir/config.toml" </dev/null >/dev/null \
    2>"$dir/containerd.log" &
  ctrd_pids[i]=$!
done

wait_socket "$berth_dir/berth.sock" "$berth_pid" "$berth_dir/berth.log"
targets=(--target "$berth_target")
pauseless=(--pauseless berth)
metrics=(--metrics "berth=$metrics_addr")
if [[ -n $berth_b ]]; then
  wait_socket "$b_dir/berth.sock" "$b_pid" "$b_dir/berth.log"
  targets+=(--target "$b_target")
  pauseless+=(--pauseless berth-b)
  metrics+=(--metrics "berth-b=$b_metrics")
fi
for i in "${!ctrd_names[@]}"; do
  wait_socket "${ctrd_dirs[$i]}/containerd.sock" "${ctrd_pids[$i]}" "${ctrd_dirs[$i]}/containerd.log"
  targets+=(--target "${ctrd_targets[$i]}")
done

args=(run "${targets[@]}"
  --image "$addr/berth-test/busybox:latest" --prepull "$pause_image"
  --big-image "$big_image" --big-image-desc "4 × 50 MiB layers (gzip)"
  --runc "$RUNC" --json "$json"
  --floor-cni "$work/floor.conflist" --cni-bin "$CNI_BIN" "${pauseless[@]}" "${metrics[@]}")
((big_pull)) && args+=(--big-image "${pushed[2]}" --big-image-desc "1 GiB in 10 gzip layers")
((quick)) && args+=(--quick)
log "running berth-bench (started $(date -u +%FT%TZ))"
start=$SECONDS
"$bench" "${args[@]}" "${extra[@]}" | tee "$work/table.md"
log "done in $((SECONDS - start)) s; JSON: $json"

if ((nri)); then
  # The same berth, its own dirs, socket and network, with NRI on its own
  # socket and one pre-installed no-op plugin (launched by berth, fd 3):
  # the life cycle on both, interleaved, and what the plugin adds.
  # Only berth and berth-nri take part: the peers and berth-b (their pods
  # removed by the run above) are stopped, and the table waits for the
  # machine to go quiet.
  for i in "${!ctrd_pids[@]}"; do
    stop_pid "${ctrd_pids[$i]}"
    ctrd_pids[i]=""
  done
  stop_pid "$b_pid"
  b_pid=""
  # The density and scale phases leave about a thousand dying memory
  # cgroups (removed, still pinned by the page cache charged to them);
  # with them the daemon started next paid +0.4-0.5 ms in its overlay
  # mount and +0.2-0.3 ms in its pod files that the other did not, which
  # the table then counted as the plugin's (+3.3 ms paired after density,
  # +1.5 with this, 2026-12-06). Dropping the clean caches frees them.
  log "memory cgroups before dropping the caches: $(memcgs)"
  sync
  echo 3 >/proc/sys/vm/drop_caches
  log "memory cgroups after: $(memcgs)"
  wait_quiet 120
  log "starting berth with a no-op NRI plugin"
  mkdir -p "$nri_dir/net.d" "$nri_dir/config.d" "$nri_dir/nri/plugins" "$nri_dir/nri/conf.d"
  fill hack/bench/cni.conflist.in "$nri_dir/net.d/10-${NRI_NET[0]}.conflist" \
    NETWORK="${NRI_NET[0]}" BRIDGE="${NRI_NET[1]}" SUBNET="${NRI_NET[2]}"
  fill hack/bench/berth.toml.in "$nri_dir/config.toml" \
    DIR="$nri_dir" RUNC="$RUNC" CNI_BIN="$CNI_BIN"
  printf '[nri]\nenable = true\nsocket_path = "%s"\nplugin_path = "%s"\nplugin_config_path = "%s"\n' \
    "$nri_dir/nri/nri.sock" "$nri_dir/nri/plugins" "$nri_dir/nri/conf.d" \
    >"$nri_dir/config.d/80-bench-nri.toml"
  nri_metrics=$(free_port)
  printf '[metrics]\naddress = "%s"\n' "$nri_metrics" >"$nri_dir/config.d/90-bench-metrics.toml"
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
    --json "$nri_json" --metrics "berth-nri=$nri_metrics" --metrics "berth=$metrics_addr")
  ((quick)) && nri_args+=(--quick)
  if ((!quick)) && [[ " ${extra[*]} " != *--iterations* ]]; then
    nri_args+=(--iterations 300)
  fi
  log "running berth-bench: NRI (berth-nri against berth)"
  "$bench" "${nri_args[@]}" "${extra[@]}" | tee "$work/nri-table.md"
  log "NRI JSON: $nri_json"
fi

# The tables into docs/benchmarks.md, between its markers (--readme).
if ((readme)); then
  page=docs/benchmarks.md
  begin='<!-- bench.sh --readme: begin -->'
  end='<!-- bench.sh --readme: end -->'
  grep -qxF "$begin" "$page" && grep -qxF "$end" "$page" ||
    die "--readme: $page has no $begin ... $end lines"
  {
    echo "Written by \`hack/bench.sh --readme\`, in $(( (SECONDS - start) / 60 )) min:"
    echo "\`${command_line}\`"
    echo
    cat "$work/table.md"
    if [[ -s $work/nri-table.md ]]; then
      echo
      echo "NRI: the life cycle with one no-op plugin (berth-nri) against none (berth), interleaved:"
      echo
      cat "$work/nri-table.md"
    fi
  } >"$work/readme-part.md"
  awk -v begin="$begin" -v end="$end" -v part="$work/readme-part.md" '
    $0 == begin { print; while ((getline line < part) > 0) print line; skip = 1; next }
    $0 == end { skip = 0 }
    !skip { print }' "$page" >"$work/benchmarks.md"
  cat "$work/benchmarks.md" >"$page"
  log "$page: the tables written between its bench.sh markers"
fi
