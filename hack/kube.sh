#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine, driven by a real kubelet
# v1.37.2 over a CRI runtime: berth (this workspace's build) or, as the
# reference, containerd v2.4.2. All of Kubernetes, etcd, runc 1.5.3 and
# containerd are built from their Go modules by hack/gotools.sh.
#
#   kube.sh up [--runtime berth|containerd] [--runtime-only]
#       starts a local registry with the node's images, etcd, kube-apiserver,
#       kube-controller-manager, kube-scheduler, the runtime and kubelet, and
#       waits until the node is Ready; with --runtime-only, the registry and
#       the runtime alone (for a suite that brings its own kubelet and
#       control plane, as hack/node-e2e.sh).
#   kube.sh env
#       prints the exports to use the node: KUBECONFIG, PATH (our kubectl,
#       crictl), BERTH_SOCK, CONTAINER_RUNTIME_ENDPOINT.
#   kube.sh restart NAME [--kill]
#       stops the part NAME (berth, containerd, kubelet, etcd, apiserver,
#       controller-manager, scheduler) and starts it again with the same
#       command; --kill stops it with SIGKILL. A part that died is started.
#       kubelet's config is written again from KUBE_FEATURE_GATES and
#       KUBE_KUBELET_CONFIG as they are then.
#   kube.sh status
#       each part: running or not.
#   kube.sh down
#       deletes every pod, stops every part, kills what the runtime left
#       running (shims naming the state dir, processes in kubepods cgroups),
#       removes what the node made on the host (mounts, cgroups, links,
#       iptables chains, bridge); exits non-zero, naming it, if any is left
#       or if a live runtime left processes running after removing every pod.
#
# Env: KUBE_STATE (state dir, default /var/tmp/berth-kube: everything the
# node writes is in it, but kubelet's links in /var/log/containers, its
# cgroups and the pod network, which down removes), BERTH_TARGET_DIR (the
# berth build to run, default target/debug; built when missing),
# KUBE_FEATURE_GATES (kubelet's feature gates, e.g. EventedPLEG=true),
# KUBE_KUBELET_CONFIG (a YAML fragment appended to kubelet's config),
# KUBE_RUNC (the runc binary of the runtime's default handler, default
# gotools' runc 1.5.3), KUBE_CNI_BIN_DIR (a dir of CNI plugins searched
# before /usr/lib/cni; hack/kube-faults.sh puts its wrappers there). The
# runtime's root is KUBE_STATE/RUNTIME/root (berth's images, records and
# rootfs, containerd's content and snapshots): a file system mounted there
# before `up` is kept and used (hack/kube-faults.sh mounts a small one);
# `down` unmounts it with everything under KUBE_STATE.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

S=${KUBE_STATE:-/var/tmp/berth-kube}
BT=$(realpath -m "${BERTH_TARGET_DIR:-target/debug}")
ETCD_PORT=23790 ETCD_PEER_PORT=23800 API_PORT=6443 KUBELET_PORT=10250
NODE=127.0.0.1
SERVICE_CIDR=10.96.0.0/24
POD_BRIDGE=kube0 POD_SUBNET=10.89.0.0/16

log() { echo "kube.sh: $*" >&2; }
die() {
  log "$*"
  exit 1
}
usage() {
  sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

gobin() {
  [[ -n ${GOBIN_DIR:-} ]] || GOBIN_DIR=$(bash "$repo/hack/gotools.sh" | tail -n 1)
  echo "$GOBIN_DIR"
}

# Waits up to $1 seconds for "${@:3}" to succeed (its output discarded)
# while part $2 runs.
wait_for() {
  local secs=$1 what=$2
  shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    if [[ -f $S/cmd/$what ]] && ! pid_of "$what" >/dev/null; then
      log "$what exited: $(tail -n 3 "$S/logs/$what.log")"
      return 1
    fi
    sleep 0.2
  done
  log "$what ready after $((SECONDS - start))s"
}

# The memory cgroup each part runs in, under the one this shell is in: a
# part a probe makes eat memory is stopped there, not on the host.
MEM_LIMIT=${KUBE_MEM_LIMIT:-4G}
mem_root() {
  if [[ -f $S/memroot ]]; then
    cat "$S/memroot"
  elif [[ -d /sys/fs/cgroup/memory ]]; then
    echo "/sys/fs/cgroup/memory$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup | sed 's|^/$||')/berth-kube"
  else
    echo "/sys/fs/cgroup$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup | sed 's|^/$||')/berth-kube"
  fi
}
mem_cgroup() {
  local dir
  dir=$(mem_root)/$1
  mkdir -p "$dir"
  if [[ -e $dir/memory.limit_in_bytes ]]; then
    echo "$MEM_LIMIT" >"$dir/memory.limit_in_bytes"
  elif [[ -e $dir/memory.max ]]; then
    echo "$MEM_LIMIT" >"$dir/memory.max"
  fi
  echo "$dir"
}

pid_of() {
  local f=$S/pids/$1 pid
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# Starts part NAME as the command "$@" (kept in cmd/NAME for restart), in a
# session of its own, in its memory cgroup, logging to logs/NAME.log.
# Closes every descriptor past stdio, for a shell about to exec a daemon:
# what the caller inherited (a lock, say `flock /run/berth-kube.lock`) would
# otherwise be held by the node's parts for as long as they run.
# shellcheck disable=SC2016
CLOSE_FDS='for fd in /proc/self/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done'

start_part() {
  local name=$1
  shift
  mkdir -p "$S/pids" "$S/logs" "$S/cmd"
  local -a argv=("$@")
  declare -p argv >"$S/cmd/$name"
  launch "$name"
}
launch() {
  local name=$1 cg
  local -a argv
  # shellcheck disable=SC1090
  source "$S/cmd/$name"
  cg=$(mem_cgroup "$name")
  # The child writes itself into the cgroup before it becomes the part.
  setsid bash -c 'echo $$ >"$1/cgroup.procs"; shift; '"$CLOSE_FDS"'; exec "$@"' _ "$cg" "${argv[@]}" \
    </dev/null >>"$S/logs/$name.log" 2>&1 &
  echo $! >"$S/pids/$name"
}

stop_part() {
  local name=$1 sig=${2:-TERM} pid i
  pid=$(pid_of "$name") || {
    rm -f "$S/pids/$name"
    return 0
  }
  kill "-$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name ($pid) did not stop in 15 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$S/pids/$name"
}

# ---- certificates and kubeconfigs ----

cert() { # NAME CN O [SANS]
  local name=$1 cn=$2 o=$3 sans=${4:-}
  [[ -f $S/pki/$name.crt ]] && return 0
  local subj="/CN=$cn"
  [[ -n $o ]] && subj="/O=$o$subj"
  openssl genrsa -out "$S/pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$S/pki/$name.key" -subj "$subj" -out "$S/pki/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n $sans ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$S/pki/$name.ext"
  openssl x509 -req -in "$S/pki/$name.csr" -CA "$S/pki/ca.crt" -CAkey "$S/pki/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$S/pki/$name.ext" -out "$S/pki/$name.crt" 2>/dev/null
  rm -f "$S/pki/$name.csr" "$S/pki/$name.ext"
}

kubeconfig() { # NAME (client cert pki/NAME.crt)
  cat >"$S/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    certificate-authority: $S/pki/ca.crt
    server: https://127.0.0.1:$API_PORT
users:
- name: $1
  user:
    client-certificate: $S/pki/$1.crt
    client-key: $S/pki/$1.key
contexts:
- name: local
  context: {cluster: local, user: $1}
current-context: local
EOF
  chmod 600 "$S/$1.kubeconfig"
}

make_pki() {
  mkdir -p "$S/pki"
  chmod 700 "$S/pki"
  if [[ ! -f $S/pki/ca.crt ]]; then
    openssl genrsa -out "$S/pki/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$S/pki/ca.key" -subj "/CN=berth-kube-ca" -days 3650 \
      -out "$S/pki/ca.crt" 2>/dev/null
  fi
  [[ -f $S/pki/sa.key ]] || {
    openssl genrsa -out "$S/pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$S/pki/sa.key" -pubout -out "$S/pki/sa.pub" 2>/dev/null
  }
  cert apiserver kube-apiserver "" \
    "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert kubelet-server "system:node:$NODE" system:nodes "IP:127.0.0.1,DNS:localhost"
  cert admin admin system:masters
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert kubelet "system:node:$NODE" system:nodes
  cert controller-manager system:kube-controller-manager ""
  cert scheduler system:kube-scheduler ""
  kubeconfig admin
  kubeconfig kubelet
  kubeconfig controller-manager
  kubeconfig scheduler
}

# ---- the parts ----

start_registry() {
  REG=$(bash -c "$CLOSE_FDS; exec bash \"\$0\" start \"\$1\"" "$repo/hack/registry.sh" "$S/registry")
  echo "$REG" >"$S/registry.addr"
  local bin
  bin=$(gobin)
  "$BT/examples/build_test_images" "$REG" >"$S/logs/images.log"
  "$BT/examples/build_kube_images" "$REG" "$bin" "$(go -C "$repo/hack/go/kube" list -m -f '{{.Dir}}' k8s.io/kubernetes)" \
    >>"$S/logs/images.log"
}

start_etcd() {
  start_part etcd "$(gobin)/etcd" --name node --data-dir "$S/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "node=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" \
    --quota-backend-bytes 1073741824 --log-level warn
  wait_for 60 etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/health" || die "etcd did not start: $S/logs/etcd.log"
}

start_apiserver() {
  start_part apiserver "$(gobin)/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --endpoint-reconciler-type none \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --client-ca-file "$S/pki/ca.crt" --tls-cert-file "$S/pki/apiserver.crt" --tls-private-key-file "$S/pki/apiserver.key" \
    --kubelet-client-certificate "$S/pki/apiserver-kubelet-client.crt" --kubelet-client-key "$S/pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$S/pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$S/pki/sa.pub" \
    --service-account-signing-key-file "$S/pki/sa.key" --profiling=false
  wait_for 120 apiserver kctl get --raw /readyz || die "kube-apiserver did not start: $S/logs/apiserver.log"
}

start_controllers() {
  start_part controller-manager "$(gobin)/kube-controller-manager" --kubeconfig "$S/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$S/controller-manager.kubeconfig" --authorization-kubeconfig "$S/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file "$S/pki/sa.key" --root-ca-file "$S/pki/ca.crt" \
    --cluster-signing-cert-file "$S/pki/ca.crt" --cluster-signing-key-file "$S/pki/ca.key" --profiling=false
  start_part scheduler "$(gobin)/kube-scheduler" --kubeconfig "$S/scheduler.kubeconfig" \
    --authentication-kubeconfig "$S/scheduler.kubeconfig" --authorization-kubeconfig "$S/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false
}

runtime_sock() {
  case $(<"$S/runtime") in
  berth) echo "$S/berth/berth.sock" ;;
  containerd) echo "$S/containerd/containerd.sock" ;;
  esac
}

# The CNI plugin dirs of either runtime, as a TOML array's items.
cni_bin_dirs() { echo "${KUBE_CNI_BIN_DIR:+\"$KUBE_CNI_BIN_DIR\", }\"/usr/lib/cni\""; }

start_berth() {
  mkdir -p "$S/berth/config.d" "$S/net.d"
  local reg bin
  reg=$(<"$S/registry.addr")
  bin=$(gobin)
  cat >"$S/berth/config.toml" <<EOF
socket = "$S/berth/berth.sock"
root = "$S/berth/root"
state = "$S/berth/run"

[runtime]
default_handler = "runc"
shim_binary = "$BT/berth-shim"

[runtime.handlers.runc]
binary = "${KUBE_RUNC:-$bin/runc}"

[runtime.handlers.runc-debian]
binary = "/usr/sbin/runc"

[runtime.handlers.crun]
binary = "crun"

[cni]
conf_dir = "$S/net.d"
bin_dirs = [$(cni_bin_dirs)]
default_bridge = "$POD_BRIDGE"
default_subnet = "$POD_SUBNET"

[registry.mirrors."registry.k8s.io"]
endpoints = ["http://$reg"]
mirror_only = true

[registry.mirrors."docker.io"]
endpoints = ["http://$reg"]
mirror_only = true
EOF
  start_part berth "$BT/berth" --config "$S/berth/config.toml" --config-dir "$S/berth/config.d"
  wait_for 60 berth "$bin/crictl" --runtime-endpoint "unix://$S/berth/berth.sock" version ||
    die "berth did not start: $S/logs/berth.log"
}

start_containerd() {
  local reg bin
  reg=$(<"$S/registry.addr")
  bin=$(gobin)
  mkdir -p "$S/containerd/certs.d/registry.k8s.io" "$S/containerd/certs.d/docker.io" "$S/containerd/bin" "$S/net.d"
  for h in registry.k8s.io docker.io; do
    printf 'server = "https://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$h" "$reg" \
      >"$S/containerd/certs.d/$h/hosts.toml"
  done
  # containerd writes no network of its own: the same bridge berth writes.
  [[ -f $S/net.d/10-kube.conflist ]] || cat >"$S/net.d/10-kube.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "kube", "plugins": [
  {"type": "bridge", "bridge": "$POD_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]], "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": "$S/cni-ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  cat >"$S/containerd/config.toml" <<EOF
version = 3
root = "$S/containerd/root"
state = "$S/containerd/run"
[grpc]
  address = "$S/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$S/containerd/certs.d"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "registry.k8s.io/pause:3.10.2"
[plugins.'io.containerd.cri.v1.runtime']
  # root here lacks CAP_SYS_RESOURCE: no oom_score_adj below its own.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [$(cni_bin_dirs)]
    conf_dir = "$S/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "${KUBE_RUNC:-$bin/runc}"
EOF
  start_part containerd env "PATH=$bin:$PATH" "$bin/containerd" --config "$S/containerd/config.toml"
  wait_for 60 containerd "$bin/crictl" --runtime-endpoint "unix://$S/containerd/containerd.sock" version ||
    die "containerd did not start: $S/logs/containerd.log"
}

start_runtime() {
  case $(<"$S/runtime") in
  berth) start_berth ;;
  containerd) start_containerd ;;
  esac
}

# kubelet's configuration, from the environment (KUBE_FEATURE_GATES,
# KUBE_KUBELET_CONFIG) as it is now: `restart kubelet` writes it again.
write_kubelet_config() {
  mkdir -p "$S/kubelet" "$S/manifests" "$S/pod-logs"
  cat >"$S/kubelet.yaml.new" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
containerRuntimeEndpoint: unix://$(runtime_sock)
imageServiceEndpoint: unix://$(runtime_sock)
failCgroupV1: false
failSwapOn: false
staticPodPath: $S/manifests
podLogsDir: $S/pod-logs
tlsCertFile: $S/pki/kubelet-server.crt
tlsPrivateKeyFile: $S/pki/kubelet-server.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $S/pki/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", nodefs.inodesFree: "2%", imagefs.available: "2%"}
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
shutdownGracePeriod: 0s
EOF
  if [[ -n ${KUBE_FEATURE_GATES:-} ]]; then
    echo "featureGates:" >>"$S/kubelet.yaml.new"
    local kv
    for kv in ${KUBE_FEATURE_GATES//,/ }; do
      echo "  ${kv%%=*}: ${kv#*=}" >>"$S/kubelet.yaml.new"
    done
  fi
  [[ -z ${KUBE_KUBELET_CONFIG:-} ]] || printf '%s\n' "$KUBE_KUBELET_CONFIG" >>"$S/kubelet.yaml.new"
  mv "$S/kubelet.yaml.new" "$S/kubelet.yaml"
}

start_kubelet() {
  write_kubelet_config
  start_part kubelet "$(gobin)/kubelet" --config "$S/kubelet.yaml" --kubeconfig "$S/kubelet.kubeconfig" \
    --root-dir "$S/kubelet" --hostname-override "$NODE" --v 2
}

kctl() { "$(gobin)/kubectl" --kubeconfig "$S/admin.kubeconfig" "$@"; }

node_ready() {
  [[ $(kctl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

cmd_up() {
  local runtime=berth only=''
  while (($#)); do
    case $1 in
    --runtime)
      runtime=${2:?}
      shift 2
      ;;
    --runtime-only)
      only=1
      shift
      ;;
    *) usage ;;
    esac
  done
  [[ $runtime == berth || $runtime == containerd ]] || die "--runtime berth|containerd"
  [[ $(id -u) == 0 ]] || die "run as root"
  if [[ -f $S/runtime ]] && { pid_of apiserver || pid_of berth || pid_of containerd; } >/dev/null; then
    die "a node is up already ($S); kube.sh down first"
  fi
  start=$SECONDS
  mkdir -p "$S/logs"
  # Passable by a user-namespaced pod's root on the way to berth's state;
  # what is private (pki/) is 0700 itself.
  chmod 711 "$S"
  echo "$runtime" >"$S/runtime"
  mem_root >"$S/memroot.new" && mv "$S/memroot.new" "$S/memroot"
  chains >"$S/chains.before"
  gobin >/dev/null
  if [[ ! -x $BT/berth || ! -x $BT/examples/build_kube_images ]]; then
    log "building berth ($BT)"
    cargo build --locked --bins --examples -p berth -p berth-shim -p berth-oci-image >&2
  fi
  make_pki
  start_registry
  log "registry and images ready after $((SECONDS - start))s"
  if [[ -n $only ]]; then
    start_runtime
    log "$runtime up in $((SECONDS - start))s: unix://$(runtime_sock)"
    return
  fi
  start_etcd
  start_apiserver
  start_controllers
  start_runtime
  start_kubelet
  wait_for 120 kubelet node_ready || die "the node did not become Ready: $S/logs/kubelet.log"
  kctl get node -o wide >&2
  log "up in $((SECONDS - start))s; use it with: eval \"\$(bash hack/kube.sh env)\""
}

cmd_env() {
  local bin
  bin=$(bash "$repo/hack/gotools.sh" --dir)
  echo "export KUBECONFIG=$S/admin.kubeconfig"
  echo "export PATH=$bin:\$PATH"
  if [[ -f $S/runtime ]]; then
    echo "export CONTAINER_RUNTIME_ENDPOINT=unix://$(runtime_sock)"
    [[ $(<"$S/runtime") != berth ]] || echo "export BERTH_SOCK=$S/berth/berth.sock"
  fi
  echo "export KUBE_STATE=$S"
}

cmd_restart() {
  local name=${1:?} sig=TERM
  [[ ${2:-} == --kill ]] && sig=KILL
  [[ -f $S/cmd/$name ]] || die "no part named $name"
  start=$SECONDS
  stop_part "$name" "$sig"
  [[ $name != kubelet ]] || write_kubelet_config
  launch "$name"
  case $name in
  berth | containerd)
    wait_for 60 "$name" "$(gobin)/crictl" --runtime-endpoint "unix://$(runtime_sock)" version || die "$name did not start"
    ;;
  apiserver) wait_for 120 apiserver kctl get --raw /readyz || die "kube-apiserver did not start" ;;
  kubelet) wait_for 60 kubelet curl -fsS "http://127.0.0.1:10248/healthz" || die "kubelet did not start" ;;
  esac
}

cmd_status() {
  local f name
  for f in "$S"/cmd/*; do
    [[ -e $f ]] || continue
    name=${f##*/}
    if pid_of "$name" >/dev/null; then echo "$name running ($(pid_of "$name"))"; else echo "$name stopped"; fi
  done
}

# The iptables and ip6tables chains of each table, as "CMD TABLE CHAIN".
chains() {
  local cmd t
  for cmd in iptables ip6tables; do
    for t in filter nat mangle raw; do
      "$cmd" -t "$t" -S 2>/dev/null | awk -v c="$cmd" -v t="$t" '$1 == "-N" { print c, t, $2 }'
    done
  done | sort
}
# The chains made since `up` (kubelet's, the CNI plugins').
new_chains() {
  [[ -f $S/chains.before ]] || return 0
  comm -13 "$S/chains.before" <(chains)
}
# Removes the chains made since `up`, and the rules that jump to them.
remove_new_chains() {
  local cmd t chain rule
  while read -r cmd t chain; do
    while read -r rule; do
      eval "$cmd -t $t ${rule/#-A/-D}" 2>/dev/null || true
    done < <("$cmd" -t "$t" -S 2>/dev/null | grep -E -- "-j $chain( |$)")
    "$cmd" -t "$t" -F "$chain" 2>/dev/null || true
  done < <(new_chains)
  while read -r cmd t chain; do
    "$cmd" -t "$t" -X "$chain" 2>/dev/null || true
  done < <(new_chains)
}

# Removes a cgroup tree, deepest first, in every hierarchy.
rm_cgroup_tree() {
  local rel=$1 h
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [[ -d $h$rel ]] || continue
    find "$h$rel" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

# The pids of the processes the runtime left: its shims (berth-shim,
# containerd-shim-*, whose command line names the state dir) and their
# descendants, and every process in the node's kubepods cgroups; never
# this shell or its ancestors. Reads /proc without forking per process.
runtime_leftovers() {
  local p pid comm stat rest f
  local -a fields args
  local -A parent=() keep=() left=()
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    read -r stat 2>/dev/null <"$p/stat" || continue
    rest=${stat##*) }
    read -r -a fields <<<"$rest"
    parent[$pid]=${fields[1]:-0}
    read -r comm 2>/dev/null <"$p/comm" || continue
    case $comm in
    berth-shim | containerd-shim*)
      mapfile -d '' -t args 2>/dev/null <"$p/cmdline" || continue
      [[ " ${args[*]} " != *"$S/"* ]] || left[$pid]=1
      ;;
    esac
  done
  for f in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d $f ]] || continue
    while read -r pid; do left[$pid]=1; done < <(find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null)
  done
  # Descendants: a shim's container, and what it started.
  local grew=1
  while ((grew)); do
    grew=0
    for pid in "${!parent[@]}"; do
      if [[ -z ${left[$pid]:-} && -n ${left[${parent[$pid]:-0}]:-} ]]; then
        left[$pid]=1
        grew=1
      fi
    done
  done
  pid=$$
  while [[ -n $pid && $pid != 0 && -z ${keep[$pid]:-} ]]; do
    keep[$pid]=1
    pid=${parent[$pid]:-}
  done
  for pid in "${!left[@]}"; do
    [[ -n ${keep[$pid]:-} || ! -d /proc/$pid ]] || echo "$pid"
  done
}

# One line naming process $1: its pid and command line.
process_line() {
  local -a args
  mapfile -d '' -t args 2>/dev/null <"/proc/$1/cmdline" || true
  local cmd="${args[*]}"
  echo "process $1 ${cmd:0:160}"
}

# Kills what the runtime left running (see runtime_leftovers): a runtime
# that is dead, was stopped in the middle of a pod's stop, or forgot its
# pods leaves its shims and their containers, whose cgroups then cannot be
# removed. Thaws frozen pod cgroups first (a frozen process cannot die),
# names each process on stderr, and waits up to 10 s for them to go.
kill_runtime_leftovers() {
  local pid f i
  local -a pids
  mapfile -t pids < <(runtime_leftovers)
  ((${#pids[@]})) || return 0
  log "down: killing what the runtime left running:"
  for pid in "${pids[@]}"; do
    echo "  $(process_line "$pid")" >&2
  done
  for f in /sys/fs/cgroup/freezer/kubepods; do
    [[ -d $f ]] || continue
    find "$f" -name freezer.state -exec sh -c 'for s; do echo THAWED >"$s"; done' _ {} + 2>/dev/null || true
  done
  for ((i = 0; i < 50; i++)); do
    mapfile -t pids < <(runtime_leftovers)
    ((${#pids[@]})) || return 0
    kill -KILL "${pids[@]}" 2>/dev/null || true
    sleep 0.2
  done
}

cmd_down() {
  [[ -d $S ]] || return 0
  start=$SECONDS
  local leftovers=() bin
  bin=$(bash "$repo/hack/gotools.sh" --dir)
  if pid_of apiserver >/dev/null && pid_of kubelet >/dev/null; then
    # What kubelet runs goes as users delete it: gracefully, through kubelet.
    kctl delete deployments,statefulsets,daemonsets,jobs,replicasets --all -A --wait=false >/dev/null 2>&1 || true
    rm -f "$S"/manifests/*
    kctl delete pods --all -A --grace-period 5 --timeout 90s >/dev/null 2>&1 || true
  fi
  stop_part kubelet
  if pid_of berth >/dev/null || pid_of containerd >/dev/null; then
    local ep
    ep=unix://$(runtime_sock)
    # crictl's own 2 s deadline would abandon a slow pod stop just before
    # the runtime is stopped.
    if "$bin/crictl" --runtime-endpoint "$ep" --timeout 60s rmp -fa >/dev/null 2>&1; then
      # Every pod removed: a live runtime must have ended their shims and
      # processes (its standby shim aside). Killed below, but a leak.
      local leaked=() i p
      for ((i = 0; i < 50; i++)); do
        mapfile -t leaked < <(runtime_leftovers | while read -r p; do
          l=$(process_line "$p")
          [[ $l == *--standby* ]] || echo "$l"
        done)
        ((${#leaked[@]})) || break
        sleep 0.2
      done
      for p in "${leaked[@]}"; do leftovers+=("$p (left running by the runtime after every pod was removed)"); done
    fi
    [[ $(<"$S/runtime") != containerd ]] || "$bin/crictl" --runtime-endpoint "$ep" rmi --all >/dev/null 2>&1 || true
  fi
  stop_part berth
  stop_part containerd
  stop_part scheduler
  stop_part controller-manager
  stop_part apiserver
  stop_part etcd
  bash "$repo/hack/registry.sh" stop "$S/registry" >/dev/null 2>&1 || true
  kill_runtime_leftovers
  # What kubelet leaves on the host: its mounts, cgroups, links, chains.
  local m
  while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(awk -v s="$S/" 'index($5, s) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  rm_cgroup_tree kubepods
  find /var/log/containers -maxdepth 1 -type l -lname "$S/*" -delete 2>/dev/null || true
  remove_new_chains
  ip link del "$POD_BRIDGE" 2>/dev/null || true
  local mem
  mem=$(mem_root)
  [[ ! -d $mem ]] || find "$mem" -depth -type d -exec rmdir {} + 2>/dev/null || true
  [[ ! -d $mem ]] || leftovers+=("cgroup $mem")
  rm -rf "$S/etcd" "$S/kubelet" "$S/berth" "$S/containerd" "$S/pod-logs" "$S/cni-ipam" "$S/net.d" "$S/pids" \
    "$S/cmd" "$S/runtime" "$S/memroot"

  # What must not be left: the node's programs (those of the shared Go
  # tools only when they name this node's dir: a benchmark may run their
  # containerd beside the node).
  local p
  for p in /proc/[0-9]*; do
    local exe
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case $exe in
    "$BT"/berth | "$BT"/berth-shim) leftovers+=("process ${p#/proc/} $exe") ;;
    "$bin"/*) [[ $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) != *"$S/"* ]] || leftovers+=("process ${p#/proc/} $exe") ;;
    esac
  done
  while read -r p; do leftovers+=("$(process_line "$p")"); done < <(runtime_leftovers)
  while read -r m; do leftovers+=("mount $m"); done < <(awk -v s="$S/" 'index($5, s) == 1 { print $5 }' /proc/self/mountinfo)
  while read -r m; do leftovers+=("mount $m"); done < <(awk '$5 ~ "^/run/netns/berth|^/var/run/netns/cni-" { print $5 }' /proc/self/mountinfo)
  for m in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d $m ]] && leftovers+=("cgroup $m")
  done
  if ip link show "$POD_BRIDGE" >/dev/null 2>&1; then leftovers+=("link $POD_BRIDGE"); fi
  while read -r m; do leftovers+=("iptables chain $m"); done < <(new_chains)
  while read -r m; do leftovers+=("link $m"); done < <(find /var/log/containers -maxdepth 1 -lname "$S/*" 2>/dev/null)
  rm -f "$S/chains.before"
  if ((${#leftovers[@]})); then
    log "down left behind:"
    printf '  %s\n' "${leftovers[@]}" >&2
    return 1
  fi
  log "down in $((SECONDS - start))s, nothing left"
}

case ${1:-} in
up)
  shift
  cmd_up "$@"
  ;;
env) cmd_env ;;
restart)
  shift
  cmd_restart "$@"
  ;;
status) cmd_status ;;
down) cmd_down ;;
*) usage ;;
esac
