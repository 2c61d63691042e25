#!/usr/bin/env bash
# Runs cri-tools' CRI conformance suite (critest) and its NRI specs against
# berth: the CI step, and usable by hand. The latest result is in
# docs/critest.md.
#
#   hack/critest/critest.sh [BERTH_TARGET_DIR]
#
# critest and crictl (cri-tools v1.37.0) and runc v1.5.3 come from
# hack/gotools.sh (built there when missing; GOBIN_DIR overrides its bin dir);
# berth, berth-shim and examples/build_test_images from BERTH_TARGET_DIR
# (default target/debug of this clone). All are copied to $W/bin first.
#
# Steps, in this order ($STEPS, default "images berth conformance nri
# runc-debian cleanup"):
#   images       a local registry (hack/registry.sh) with berth's test images
#                and a stand-in for every image critest names (mkimages.py,
#                from busybox-static; their /bin/sh is Debian's dynamic
#                busybox, fetched with `apt-get download busybox` into
#                $W/cache); berth maps registry.k8s.io, gcr.io, docker.io, ...
#                to it
#   berth        berth on its own socket, root, state, NRI socket, bridge
#                (bcrit0) and subnet (10.199.250.0/24), with the handlers runc
#                (runc v1.5.3 of gotools, the default), runc-debian (Debian's
#                /usr/sbin/runc) and crun (not run: crun refuses a cgroup v1
#                hybrid host such as CI's)
#   conformance  every critest spec but the NRI ones
#   nri          the NRI specs (-nri-socket)
#   runc-debian  berth restarted with runc-debian as its default handler
#                (a config.d drop-in), and the conformance specs again
#   plugins      (not by default) containerd/nri's sample plugins by hand:
#                nri-logger, nri-ulimit-adjuster, nri-device-injector in
#                $NRI_PLUGINS_BIN (default $W/bin), built by the operator
#   cleanup      pods, images, berth, registry, bridge, mounts, IPAM state,
#                berth's root and state; then checks that nothing is left
# With cleanup in STEPS it also runs when an earlier step fails.
#
# Output: a line per critest run and the names of its failed and skipped
# specs (the skip reasons), then last `critest: N passed, N failed, N
# skipped` over all runs (from ginkgo's JUnit reports in $W/reports; the
# benchmark specs, which critest itself leaves out of a validation run, and
# the specs of the other run are not counted). Exits 1 when a spec failed, a
# run did not run, or cleanup left something. Logs: $W/logs.
# Env: W (work dir, default /var/tmp/critest), NRI_TIMEOUT (berth's
#   nri.plugin_request_timeout; default: berth's own), CRITEST_ARGS (more
#   critest flags, e.g. -ginkgo.focus=Networking).
set -euo pipefail
# crictl and critest talk to this script's berth only: an endpoint in the
# environment (a node's, as hack/kube.sh env exports) would win over
# crictl.yaml and send its cleanup to that node's runtime.
unset CONTAINER_RUNTIME_ENDPOINT IMAGE_SERVICE_ENDPOINT
BERTH_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BT=${1:-${BERTH_TARGET_DIR:-$BERTH_SRC/target/debug}}
[[ $BT == /* ]] || BT=$PWD/$BT
W=${W:-/var/tmp/critest}
[[ $W == /*/* && $W != *..* ]] || { echo "critest.sh: W=$W: an absolute path below a directory, please" >&2; exit 2; }
W=${W%/}
STEPS=${STEPS:-images berth conformance nri runc-debian cleanup}
NRI_TIMEOUT=${NRI_TIMEOUT:-}
NRI_PLUGINS_BIN=${NRI_PLUGINS_BIN:-$W/bin}
read -r -a EXTRA <<<"${CRITEST_ARGS:-}"
SOCK=$W/berth.sock
NRISOCK=$W/nri/nri.sock
BRIDGE=bcrit0
NET=berth-critest
has() { [[ " $STEPS " == *" $1 "* ]]; }
log() { echo "critest.sh: $*"; }
die() {
  echo "critest.sh: $*" >&2
  exit 1
}

# Specs that cannot pass on this test rig, each with the reason (a ginkgo
# regular expression on the spec's full text, TAB, the reason).
SKIPS=(
  "public image with digest should be pulled and removed	pulls gcr.io/k8s-staging-cri-tools/test-image-digest@sha256:9700f9a2…: content pinned by digest, which the offline registry cannot hold"
)

mkdir -p "$W"/{bin,logs,reports,net.d,nri/plugins,nri/conf.d,certs.d,config.d,registry,imgsrc,cache}
cd "$W"
SECONDS=0
status=0

CRICTL=("$W/bin/crictl" --config "$W/bin/crictl.yaml")


berth_pid() {
  local p
  [[ -f $W/berth.pid ]] || return 1
  p=$(<"$W/berth.pid")
  [[ $p =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null || return 1
  [[ $(readlink "/proc/$p/exe" 2>/dev/null) == "$W/bin/berth"* ]] || return 1
  echo "$p"
}

stop_berth() {
  local p
  p=$(berth_pid) || return 0
  kill -TERM "$p"
  for _ in $(seq 1 150); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.2; done
  log "berth (pid $p) did not stop in 30 s: killing it"
  kill -KILL "$p" 2>/dev/null || true
}

start_berth() {
  local p log=$W/logs/berth-$1.log
  setsid "$W/bin/berth" --config "$W/config.toml" --config-dir "$W/config.d" >"$log" 2>&1 </dev/null &
  p=$!
  echo "$p" >"$W/berth.pid"
  for _ in $(seq 1 150); do
    "${CRICTL[@]}" version >/dev/null 2>&1 && return 0
    kill -0 "$p" 2>/dev/null || break
    sleep 0.2
  done
  tail -n 20 "$log" >&2
  die "berth did not come up (log: $log)"
}

# --- cleanup -------------------------------------------------------------------
# The cgroups named berth (the cgroupfs parent berth gives pods that name
# none, as critest's do) and those under them: the run's are the ones not
# there before it (cgroups.before, taken by the berth step).
berth_cgroups() { find /sys/fs/cgroup -mindepth 2 -maxdepth 4 -type d \( -name berth -o -path '*/berth/*' \) 2>/dev/null | sort; }

leftovers() {
  local p exe args
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    args=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
    [[ $exe == "$W/"* || $args == *"$W/"* ]] && echo "process ${p#/proc/}: $args"
  done
  grep -F " $W/" /proc/self/mountinfo | awk '{print "mount " $5}' || true
  ip link show "$BRIDGE" >/dev/null 2>&1 && echo "bridge $BRIDGE"
  [[ -e /var/lib/cni/networks/$NET ]] && echo "IPAM state /var/lib/cni/networks/$NET"
  iptables-save 2>/dev/null | grep -F "$NET" | sed 's/^/iptables /' | head -n 5 || true
  [[ -f $W/cgroups.before ]] && comm -13 "$W/cgroups.before" <(berth_cgroups) | sed 's/^/cgroup /'
  true
}

cleanup() {
  local p left
  if [[ -S $SOCK ]] && berth_pid >/dev/null; then
    for p in $("${CRICTL[@]}" pods -q 2>/dev/null); do
      "${CRICTL[@]}" stopp "$p" >/dev/null 2>&1 || true
      "${CRICTL[@]}" rmp -f "$p" >/dev/null 2>&1 || true
    done
    "${CRICTL[@]}" rmi -a >/dev/null 2>&1 || true
  fi
  stop_berth
  # the standby shim ends with the daemon
  for _ in $(seq 1 25); do pgrep -f -- "--state-root $W/state" >/dev/null || break; sleep 0.2; done
  "$BERTH_SRC/hack/registry.sh" stop "$W/registry" >/dev/null
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "/var/lib/cni/networks/$NET"
  # berth's shared mount points (the tests' harness undoes them the same way)
  umount "$W/state/netns" "$W/state/podns" 2>/dev/null || true
  # the empty /berth parents this run made (rmdir fails on one still in use)
  if [[ -f $W/cgroups.before ]]; then
    comm -13 "$W/cgroups.before" <(berth_cgroups) | grep '/berth$' | xargs -r rmdir 2>/dev/null || true
  fi
  left=$(leftovers)
  if [[ -n $left ]]; then
    log "cleanup left:"
    sed 's/^/  /' <<<"$left"
    status=1
  else
    # nothing is mounted under $W any more: berth's root and state can go
    rm -rf "$W/root" "$W/state" "$W/registry" "$W"/berth.{sock,sock.lock,pid} "$W/nri/nri.sock" "$W/cgroups.before"
    log "cleanup: nothing left (process, mount, bridge, IPAM state, iptables rule, cgroup)"
  fi
}

# the critest runs asked for; a report left by an earlier run must not count
RUNS=()
has conformance && RUNS+=(conformance)
has nri && RUNS+=(nri)
has runc-debian && RUNS+=(conformance-runc-debian)
for r in "${RUNS[@]}"; do rm -f "$W/reports/$r".{xml,counts}; done
# totals over the runs that were asked for
totals() {
  local r p f s passed=0 failed=0 skipped=0
  for r in "${RUNS[@]}"; do
    if [[ -s $W/reports/$r.counts ]]; then
      read -r p f s <"$W/reports/$r.counts"
      passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    else
      log "$r: did not run"
      status=1
    fi
  done
  ((failed == 0)) || status=1
  log "total time $((SECONDS / 60))m$((SECONDS % 60))s"
  echo "critest: $passed passed, $failed failed, $skipped skipped"
}
# on every exit, a failed step's too: cleanup (when asked for), then the totals
on_exit() {
  local rc=$?
  trap - EXIT
  ((rc == 0)) || status=1
  has cleanup && cleanup
  totals
  exit "$status"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- binaries ---------------------------------------------------------------
needs_bins=0
for s in images berth conformance nri runc-debian plugins; do has "$s" && needs_bins=1; done
if ((needs_bins)); then
  if [[ -z ${GOBIN_DIR:-} ]]; then
    GOBIN_DIR=$(bash "$BERTH_SRC/hack/gotools.sh" | tail -n 1)
  fi
  for b in critest crictl runc; do
    [[ -x $GOBIN_DIR/$b ]] || die "$GOBIN_DIR/$b is missing (bash hack/gotools.sh builds it)"
  done
  for b in berth berth-shim examples/build_test_images; do
    [[ -x $BT/$b ]] || die "$BT/$b is missing (cargo build --workspace --bins --examples)"
  done
  # copies: the daemon, its shims and runc must not change under a run
  # (another build of the clone, a gotools key pruned)
  for f in "$GOBIN_DIR"/{critest,crictl,runc} "$BT"/{berth,berth-shim,examples/build_test_images}; do
    cp -f "$f" "$W/bin/.new" && mv -f "$W/bin/.new" "$W/bin/${f##*/}"
  done
  printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n' "$SOCK" "$SOCK" >"$W/bin/crictl.yaml"
fi

# --- images -------------------------------------------------------------------
# A non-standalone busybox for the images' /bin/sh: Debian's busybox-static
# runs applets (ls, ...) inside the shell, so `sh -c ls` never execs /bin/ls
# and MaskedPaths ["/bin/ls"] (which critest checks that way) cannot show.
# Debian's dynamic busybox (package busybox, which conflicts with
# busybox-static, so only downloaded) execs what it finds in PATH, as the
# upstream busybox image does. Prints the directory holding bin/sh and its
# libraries, or nothing when it cannot be had.
shell_root() {
  local d=$W/cache/shroot deb x lib
  if [[ ! -x $d/bin/sh ]]; then
    rm -rf "$d" "$W/cache/deb"
    mkdir -p "$W/cache/deb"
    (cd "$W/cache/deb" && { timeout 120 apt-get download busybox || { timeout 300 apt-get update -qq && timeout 120 apt-get download busybox; }; }) >"$W/logs/busybox-deb.log" 2>&1 || return 0
    deb=$(ls "$W"/cache/deb/busybox_*.deb 2>/dev/null | head -n 1)
    [[ -n $deb ]] || return 0
    x=$W/cache/deb/x
    dpkg-deb -x "$deb" "$x"
    mkdir -p "$d/bin"
    cp "$x/bin/busybox" "$d/bin/sh"
    # its libraries and loader, at the paths it names
    while read -r lib; do
      mkdir -p "$d$(dirname "$lib")"
      cp -L "$lib" "$d$lib"
    done < <(ldd "$x/bin/busybox" | grep -oE '/[^ ]+' | sort -u)
    rm -rf "$W/cache/deb"
  fi
  # it must look PATH up for ls (no applet of its own run in place)
  if (cd "$d" && PATH=/nonexistent bin/sh -c ls) >/dev/null 2>&1; then
    log "$d/bin/sh runs ls without PATH: not the shell needed (dropped; the next run fetches it again)" >&2
    rm -rf "$d"
    return 0
  fi
  echo "$d"
}

if has images; then
  REG=$("$BERTH_SRC/hack/registry.sh" start "$W/registry")
  "$W/bin/build_test_images" "$REG" >"$W/logs/images.log"
  # static helpers baked into the stand-in images (sources in imgsrc/)
  gcc -static -O2 -o "$W/imgsrc/nnp" "$BERTH_SRC/hack/critest/imgsrc/nnp.c"
  gcc -static -O2 -o "$W/imgsrc/nginx" "$BERTH_SRC/hack/critest/imgsrc/nginx.c"
  SHROOT=$(shell_root)
  : >"$W/images.skips"
  if [[ -z $SHROOT ]]; then
    log "no non-standalone busybox for the images' /bin/sh (from apt-get download busybox, log: $W/logs/busybox-deb.log): MaskedPaths is skipped"
    printf '%s\t%s\n' "runtime should support MaskedPaths" \
      "the images' /bin/sh (Debian's busybox-static) runs ls as an applet, never exec'ing the masked /bin/ls" >"$W/images.skips"
  fi
  W=$W SHROOT=$SHROOT python3 "$BERTH_SRC/hack/critest/mkimages.py" "$REG" >>"$W/logs/images.log"
  rm -rf "$W/certs.d"
  for h in registry.k8s.io gcr.io k8s.gcr.io docker.io quay.io; do
    mkdir -p "$W/certs.d/$h"
    printf 'server = "http://%s"\n' "$REG" >"$W/certs.d/$h/hosts.toml"
  done
  log "images: registry $REG, $(wc -l <"$W/logs/images.log") images (${SECONDS}s)"
fi

# --- berth --------------------------------------------------------------------
if has berth; then
  if berth_pid >/dev/null; then
    log "a berth of an earlier run is still up: stopping it"
    stop_berth
  fi
  [[ -f $W/cgroups.before ]] || berth_cgroups >"$W/cgroups.before"
  cat >"$W/config.toml" <<EOF
socket = "$SOCK"
root = "$W/root"
state = "$W/state"
log_level = "debug"

[runtime]
default_handler = "runc"

[runtime.handlers.runc]
binary = "$W/bin/runc"

[runtime.handlers.runc-debian]
binary = "/usr/sbin/runc"

[runtime.handlers.crun]
binary = "$(command -v crun || echo crun)"

[registry]
config_path = "$W/certs.d"
mirror_only = true

[nri]
enable = true
socket_path = "$NRISOCK"
plugin_path = "$W/nri/plugins"
plugin_config_path = "$W/nri/conf.d"

[cni]
conf_dir = "$W/net.d"
network_name = "$NET"
default_subnet = "10.199.250.0/24"
default_bridge = "$BRIDGE"
EOF
  rm -f "$W"/config.d/*.toml
  if [[ -n $NRI_TIMEOUT ]]; then
    printf '[nri]\nplugin_request_timeout = "%s"\n' "$NRI_TIMEOUT" >"$W/config.d/50-nri-timeout.toml"
  fi
  start_berth runc
  log "berth: up (runc $("$W/bin/runc" --version | sed -n '1s/runc version //p'), runc-debian $(/usr/sbin/runc --version | sed -n '1s/runc version //p'))"
fi

# --- critest runs ---------------------------------------------------------------
# run_critest LABEL SCOPE FLAGS...: one critest run; SCOPE is what the
# summary counts (conformance: all but NRI; nri: NRI only).
run_critest() {
  local label=$1 scope=$2 s args=() start=$SECONDS rc=0
  shift 2
  { printf '%s\n' "${SKIPS[@]}"; cat "$W/images.skips" 2>/dev/null || true; } >"$W/reports/$label.skips"
  while IFS= read -r s; do
    if [[ -n $s ]]; then args+=("-ginkgo.skip=${s%%	*}"); fi
  done <"$W/reports/$label.skips"
  "${CRICTL[@]}" rmi -a >/dev/null 2>&1 || true
  "$W/bin/critest" -runtime-endpoint "unix://$SOCK" -image-endpoint "unix://$SOCK" \
    -ginkgo.v -ginkgo.no-color -ginkgo.timeout=30m \
    -ginkgo.junit-report="$W/reports/$label.xml" \
    "${args[@]}" "$@" "${EXTRA[@]}" >"$W/logs/$label.log" 2>&1 || rc=$?
  python3 "$BERTH_SRC/hack/critest/summary.py" "$label" "$scope" "$W/reports/$label.xml" \
    "$W/reports/$label.skips" "$W/reports/$label.counts" "$((SECONDS - start))" "$rc" || status=1
}

if has conformance; then
  run_critest conformance conformance -ginkgo.skip='\bNRI\b'
fi
if has nri; then
  run_critest nri nri -nri-socket "$NRISOCK" -ginkgo.focus='\bNRI\b'
fi
if has runc-debian; then
  stop_berth
  printf '[runtime]\ndefault_handler = "runc-debian"\n' >"$W/config.d/60-runc-debian.toml"
  start_berth runc-debian
  run_critest conformance-runc-debian conformance -ginkgo.skip='\bNRI\b'
  rm -f "$W/config.d/60-runc-debian.toml"
fi

# --- NRI sample plugins by hand (not by default) ----------------------------------
if has plugins; then
  for b in nri-logger nri-ulimit-adjuster nri-device-injector; do
    [[ -x $NRI_PLUGINS_BIN/$b ]] || die "$NRI_PLUGINS_BIN/$b is missing (containerd/nri's sample plugin, built by hand)"
  done
  M=$W/manual
  mkdir -p "$M/hostdir"
  echo from-host >"$M/hostdir/hello"
  rm -f "$M/logger.log"
  setsid "$NRI_PLUGINS_BIN/nri-logger" -idx 05 -socket-path "$NRISOCK" -log-file "$M/logger.log" -add-env NRI_LOGGER_ENV >"$M/logger.out" 2>&1 </dev/null &
  echo $! >"$M/logger.pid"
  setsid "$NRI_PLUGINS_BIN/nri-ulimit-adjuster" -idx 10 -socket "$NRISOCK" -verbose >"$M/ulimit.out" 2>&1 </dev/null &
  echo $! >"$M/ulimit.pid"
  setsid "$NRI_PLUGINS_BIN/nri-device-injector" -idx 20 -socket-path "$NRISOCK" -verbose >"$M/devinj.out" 2>&1 </dev/null &
  echo $! >"$M/devinj.pid"
  sleep 2
  cat >"$M/podp.json" <<EOF
{"metadata": {"name": "nri-plugins", "namespace": "critest-manual", "uid": "nri-plugins-uid", "attempt": 0},
 "annotations": {
  "ulimits.noderesource.dev/container.ctr0": "- type: RLIMIT_NOFILE\n  soft: 1234\n  hard: 5678\n- type: nproc\n  soft: 321\n  hard: 654\n",
  "devices.noderesource.dev/container.ctr0": "- path: /dev/nri-null\n  type: c\n  major: 1\n  minor: 3\n",
  "mounts.noderesource.dev/container.ctr0": "- source: $M/hostdir\n  destination: /host-dir\n  type: bind\n  options:\n  - bind\n  - ro\n"},
 "linux": {"security_context": {"namespace_options": {"pid": 1}}}}
EOF
  cat >"$M/ctrp.json" <<'EOF'
{"metadata": {"name": "ctr0"}, "image": {"image": "registry.k8s.io/e2e-test-images/busybox:1.29-2"},
 "command": ["sleep", "3600"], "linux": {"security_context": {"namespace_options": {"pid": 1}}}}
EOF
  C=("${CRICTL[@]}")
  "${C[@]}" pull registry.k8s.io/e2e-test-images/busybox:1.29-2 >/dev/null
  P=$("${C[@]}" runp "$M/podp.json")
  X=$("${C[@]}" create "$P" "$M/ctrp.json" "$M/podp.json")
  "${C[@]}" start "$X" >/dev/null
  sleep 1
  "${C[@]}" exec "$X" sh -c 'echo pid1: $(tr "\0" " " </proc/1/cmdline); grep -E "Max open files|Max processes" /proc/1/limits; env | grep NRI_; ls -l /dev/nri-null; cat /host-dir/hello' || true
  "${C[@]}" stopp "$P" >/dev/null
  "${C[@]}" rmp "$P" >/dev/null
  sleep 1
  echo "logger saw: $(grep -oE 'msg="[A-Za-z]+: (pod|container):"' "$M/logger.log" | awk '{print $1}' | uniq | sed 's/msg="//' | tr '\n' ' ')"
  for f in logger ulimit devinj; do kill -TERM "$(cat "$M/$f.pid")" 2>/dev/null || true; done
fi

exit "$status"
