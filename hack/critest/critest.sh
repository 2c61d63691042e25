#!/usr/bin/env bash
# Runs the CRI conformance suite (critest) and the NRI specs against berth,
# and a by-hand check of NRI plugins. A by-hand rig: CI cannot fetch
# cri-tools or NRI's sample plugins, and nothing here builds them. The
# results of its last run are in docs/critest.md.
#
#   critest.sh [BERTH_TARGET_DIR]
#
# $W/bin must hold, put there by the operator: critest, crictl, and the NRI
#   sample plugins nri-logger, nri-ulimit-adjuster, nri-device-injector,
#   nri-template (for the nri and plugins steps).
# BERTH_TARGET_DIR: where berth, berth-shim and examples/build_test_images are
#   (default /work/main/target/debug); they are copied to $W/bin first.
# Env: W (work dir, default /var/tmp/critest), STEPS (default "bin images
#   berth conformance nri plugins cleanup"), NRI_TIMEOUT (default 10s; the
#   late-plugin Synchronize specs hold Synchronize 2 s = berth's/containerd's
#   default plugin_request_timeout, so with "2s" they are cut off and Skip).
set -euo pipefail
BT=${1:-/work/main/target/debug}
W=${W:-/var/tmp/critest}
STEPS=${STEPS:-bin images berth conformance nri plugins cleanup}
NRI_TIMEOUT=${NRI_TIMEOUT:-10s}
BERTH_SRC=${BERTH_SRC:-/work/main}
mkdir -p "$W"/{bin,logs,reports,root,state,net.d,nri/plugins,nri/conf.d,certs.d,config.d,registry,manual/hostdir,imgsrc}
cd "$W"
SOCK=$W/berth.sock; NRISOCK=$W/nri/nri.sock
has() { [[ " $STEPS " == *" $1 "* ]]; }

if has bin; then
  for b in critest crictl; do
    [[ -x $W/bin/$b ]] || { echo "critest.sh: $W/bin/$b is missing (put it there first)" >&2; exit 1; }
  done
  cp "$BT/berth" "$BT/berth-shim" "$BT/examples/build_test_images" "$W/bin/"
  printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n' "$SOCK" "$SOCK" > "$W/bin/crictl.yaml"
fi

if has images; then
  REG=$("$BERTH_SRC/hack/registry.sh" start "$W/registry")
  "$W/bin/build_test_images" "$REG" > "$W/logs/images.log"
  # static helpers baked into the fake images (sources in imgsrc/, see mkimages.py)
  cp "$BERTH_SRC"/hack/critest/imgsrc/*.c "$W/imgsrc/"
  cp "$BERTH_SRC/hack/critest/mkimages.py" "$W/"
  gcc -static -O2 -o "$W/imgsrc/nnp" "$W/imgsrc/nnp.c"
  gcc -static -O2 -o "$W/imgsrc/nginx" "$W/imgsrc/nginx.c"
  python3 "$W/mkimages.py" "$REG" >> "$W/logs/images.log"
  for h in registry.k8s.io gcr.io k8s.gcr.io docker.io quay.io; do
    mkdir -p "$W/certs.d/$h"; printf 'server = "http://%s"\n' "$REG" > "$W/certs.d/$h/hosts.toml"
  done
fi

if has berth; then
  cat > "$W/config.toml" <<EOF
socket = "$SOCK"
root = "$W/root"
state = "$W/state"
log_level = "debug"

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
network_name = "berth-critest"
default_subnet = "10.199.250.0/24"
default_bridge = "bcrit0"
EOF
  printf '[nri]\nplugin_request_timeout = "%s"\n' "$NRI_TIMEOUT" > "$W/config.d/50-nri-timeout.toml"
  setsid "$W/bin/berth" --config "$W/config.toml" > "$W/logs/berth.log" 2>&1 < /dev/null &
  echo $! > "$W/berth.pid"
  for _ in $(seq 1 100); do "$W/bin/crictl" version >/dev/null 2>&1 && break; sleep 0.2; done
fi

CT=("$W/bin/critest" -runtime-endpoint "unix://$SOCK" -image-endpoint "unix://$SOCK" -ginkgo.v -ginkgo.no-color -ginkgo.timeout=1h -report-dir "$W/reports")
if has conformance; then
  "$W/bin/crictl" rmi -a >/dev/null 2>&1 || true
  "${CT[@]}" -report-prefix conformance > "$W/logs/conformance.log" 2>&1 || true
  grep -E "^Ran |Passed" "$W/logs/conformance.log"
fi
if has nri; then
  "${CT[@]}" -nri-socket "$NRISOCK" -ginkgo.focus=NRI -report-prefix nri > "$W/logs/nri.log" 2>&1 || true
  grep -E "^Ran |Passed|SKIPPED\] spec" "$W/logs/nri.log"
fi

if has plugins; then
  M=$W/manual; C="$W/bin/crictl"
  echo from-host > "$M/hostdir/hello"
  rm -f "$M/logger.log"
  setsid "$W/bin/nri-logger" -idx 05 -socket-path "$NRISOCK" -log-file "$M/logger.log" -add-env NRI_LOGGER_ENV > "$M/logger.out" 2>&1 < /dev/null & echo $! > "$M/logger.pid"
  setsid "$W/bin/nri-ulimit-adjuster" -idx 10 -socket "$NRISOCK" -verbose > "$M/ulimit.out" 2>&1 < /dev/null & echo $! > "$M/ulimit.pid"
  setsid "$W/bin/nri-device-injector" -idx 20 -socket-path "$NRISOCK" -verbose > "$M/devinj.out" 2>&1 < /dev/null & echo $! > "$M/devinj.pid"
  sleep 2
  cat > "$M/podp.json" <<EOF
{"metadata": {"name": "nri-plugins", "namespace": "critest-manual", "uid": "nri-plugins-uid", "attempt": 0},
 "annotations": {
  "ulimits.noderesource.dev/container.ctr0": "- type: RLIMIT_NOFILE\n  soft: 1234\n  hard: 5678\n- type: nproc\n  soft: 321\n  hard: 654\n",
  "devices.noderesource.dev/container.ctr0": "- path: /dev/nri-null\n  type: c\n  major: 1\n  minor: 3\n",
  "mounts.noderesource.dev/container.ctr0": "- source: $M/hostdir\n  destination: /host-dir\n  type: bind\n  options:\n  - bind\n  - ro\n"},
 "linux": {"security_context": {"namespace_options": {"pid": 1}}}}
EOF
  cat > "$M/ctrp.json" <<'EOF'
{"metadata": {"name": "ctr0"}, "image": {"image": "registry.k8s.io/e2e-test-images/busybox:1.29-2"},
 "command": ["sleep", "3600"], "linux": {"security_context": {"namespace_options": {"pid": 1}}}}
EOF
  "$C" pull registry.k8s.io/e2e-test-images/busybox:1.29-2 2>/dev/null
  P=$("$C" runp "$M/podp.json" 2>/dev/null); X=$("$C" create "$P" "$M/ctrp.json" "$M/podp.json" 2>/dev/null)
  "$C" start "$X" >/dev/null 2>&1; sleep 1
  "$C" exec "$X" sh -c 'echo pid1: $(tr "\0" " " </proc/1/cmdline); grep -E "Max open files|Max processes" /proc/1/limits; env | grep NRI_; ls -l /dev/nri-null; cat /host-dir/hello' 2>/dev/null
  "$C" stopp "$P" >/dev/null 2>&1; "$C" rmp "$P" >/dev/null 2>&1
  sleep 1
  echo "logger saw: $(grep -oE 'msg="[A-Za-z]+: (pod|container):"' "$M/logger.log" | awk '{print $1}' | uniq | sed 's/msg="//' | tr '\n' ' ')"
  for f in logger ulimit devinj; do kill -TERM "$(cat "$M/$f.pid")" 2>/dev/null || true; done
fi

if has cleanup; then
  for p in $("$W/bin/crictl" pods -q 2>/dev/null); do "$W/bin/crictl" stopp "$p" >/dev/null 2>&1; "$W/bin/crictl" rmp "$p" >/dev/null 2>&1; done
  "$W/bin/crictl" rmi -a >/dev/null 2>&1 || true
  [[ -f $W/berth.pid ]] && kill -TERM "$(cat "$W/berth.pid")" 2>/dev/null || true
  sleep 3
  "$BERTH_SRC/hack/registry.sh" stop "$W/registry"
  ip link del bcrit0 2>/dev/null || true
  # berth makes these shared mount points (the test harness undoes them the same way)
  umount "$W/state/netns" "$W/state/podns" 2>/dev/null || true
  rm -rf /var/lib/cni/networks/berth-critest
fi
