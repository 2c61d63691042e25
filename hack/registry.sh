#!/usr/bin/env bash
# Runs Debian's docker-registry (distribution 2.x) for tests, bound to
# 127.0.0.1 on a free port, with its storage, config, log and pid file in DIR.
#
#   hack/registry.sh start DIR [--auth USER:PASS] [--max-lifetime SECS]
#                              [--tls CERT:KEY [--client-ca CA]]
#       starts a registry (or finds the one already running in DIR) and prints
#       its address, e.g. 127.0.0.1:41234. --auth turns on htpasswd (bcrypt)
#       basic auth for USER; --max-lifetime stops the registry by itself after
#       SECS seconds (tests use it so that a crashed test leaks nothing);
#       --tls serves HTTPS with that certificate and key (PEM files), and
#       --client-ca then requires client certificates signed by CA.
#   hack/registry.sh stop DIR
#       stops the registry of DIR (no error when none runs).
#   hack/registry.sh addr DIR
#       prints the address of the running registry of DIR.
set -euo pipefail

REGISTRY_BIN=${REGISTRY_BIN:-/usr/bin/docker-registry}

die() {
  echo "registry.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

running_pid() {
  local dir=$1 pid
  [[ -f $dir/registry.pid ]] || return 1
  pid=$(<"$dir/registry.pid")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# Answers 0 when the registry at $1 serves the v2 API (200, or 401 with auth).
# With TLS ($2 = tls) any HTTP answer counts (the certificate is not checked);
# with client certificates required ($2 = mtls) a listening port does.
answers() {
  local addr=$1 mode=${2:-plain} code
  case $mode in
  plain) code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$addr/v2/" || true) ;;
  tls) code=$(curl -sk -o /dev/null -m 2 -w '%{http_code}' "https://$addr/v2/" || true) ;;
  mtls)
    ss -Hltn "sport = :${addr##*:}" 2>/dev/null | grep -q .
    return
    ;;
  esac
  [[ $code == 200 || $code == 401 ]]
}

write_config() {
  local dir=$1 port=$2 auth=$3 tls=${4:-} client_ca=${5:-}
  {
    echo "version: 0.1"
    echo "log:"
    echo "  level: warn"
    echo "  accesslog:"
    echo "    disabled: true"
    echo "storage:"
    echo "  filesystem:"
    echo "    rootdirectory: $dir/data"
    echo "  delete:"
    echo "    enabled: true"
    echo "  maintenance:"
    echo "    uploadpurging:"
    echo "      enabled: false"
    echo "http:"
    echo "  secret: berth-test-$port"
    echo "  addr: 127.0.0.1:$port"
    if [[ -n $tls ]]; then
      echo "  tls:"
      echo "    certificate: ${tls%%:*}"
      echo "    key: ${tls#*:}"
      if [[ -n $client_ca ]]; then
        echo "    clientcas:"
        echo "      - $client_ca"
      fi
    fi
    if [[ -n $auth ]]; then
      echo "auth:"
      echo "  htpasswd:"
      echo "    realm: berth-test"
      echo "    path: $dir/htpasswd"
    fi
  } >"$dir/config.yml"
}

start() {
  local dir="" auth="" lifetime="" tls="" client_ca="" mode=plain
  while (($#)); do
    case $1 in
    --tls)
      tls=${2:?--tls needs CERT:KEY}
      [[ $tls == *:* ]] || die "--tls wants CERT:KEY"
      shift 2
      ;;
    --client-ca)
      client_ca=${2:?--client-ca needs a file}
      shift 2
      ;;
    --auth)
      auth=${2:?--auth needs USER:PASS}
      shift 2
      ;;
    --max-lifetime)
      lifetime=${2:?--max-lifetime needs SECS}
      [[ $lifetime =~ ^[0-9]+$ ]] || die "--max-lifetime: not a number: $lifetime"
      shift 2
      ;;
    -*) usage ;;
    *)
      [[ -z $dir ]] || usage
      dir=$1
      shift
      ;;
    esac
  done
  [[ -n $dir ]] || usage
  if [[ -n $tls ]]; then
    local f
    for f in "${tls%%:*}" "${tls#*:}"; do
      [[ $f == /* && -r $f ]] || die "--tls: $f is not a readable absolute path"
    done
    mode=tls
  fi
  if [[ -n $client_ca ]]; then
    [[ -n $tls ]] || die "--client-ca needs --tls"
    [[ $client_ca == /* && -r $client_ca ]] || die "--client-ca: $client_ca is not a readable absolute path"
    mode=mtls
  fi
  [[ -x $REGISTRY_BIN ]] || die "$REGISTRY_BIN not found (apt-get install docker-registry, or run hack/install-deps.sh)"
  command -v curl >/dev/null || die "curl not found (run hack/install-deps.sh)"
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)

  if running_pid "$dir" >/dev/null && [[ -f $dir/registry.addr ]] && answers "$(<"$dir/registry.addr")" "$mode"; then
    cat "$dir/registry.addr"
    return 0
  fi

  if [[ -n $auth ]]; then
    command -v htpasswd >/dev/null || die "htpasswd not found (apt-get install apache2-utils, or run hack/install-deps.sh)"
    [[ $auth == *:* ]] || die "--auth wants USER:PASS"
    htpasswd -Bbn "${auth%%:*}" "${auth#*:}" >"$dir/htpasswd" 2>/dev/null || die "htpasswd failed"
  fi

  local attempt port pid addr i
  for attempt in $(seq 1 20); do
    port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    if ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
      continue
    fi
    addr=127.0.0.1:$port
    write_config "$dir" "$port" "$auth" "$tls" "$client_ca"
    # Its own session, so that it outlives this script and gets no signal from
    # the caller's terminal; stdio to the log file.
    if [[ -n $lifetime ]]; then
      setsid timeout "$lifetime" "$REGISTRY_BIN" serve "$dir/config.yml" \
        </dev/null >>"$dir/registry.log" 2>&1 &
    else
      setsid "$REGISTRY_BIN" serve "$dir/config.yml" \
        </dev/null >>"$dir/registry.log" 2>&1 &
    fi
    pid=$!
    echo "$pid" >"$dir/registry.pid"
    for i in $(seq 1 100); do
      if ! kill -0 "$pid" 2>/dev/null; then
        break # died: most likely the port was taken meanwhile; try another
      fi
      if answers "$addr" "$mode"; then
        echo "$addr" >"$dir/registry.addr"
        echo "$addr"
        return 0
      fi
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$dir/registry.pid"
  done
  die "could not start $REGISTRY_BIN in $dir (see $dir/registry.log)"
}

stop() {
  local dir=${1:-}
  [[ -n $dir ]] || usage
  local pid i
  if pid=$(running_pid "$dir"); then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/registry.pid" "$dir/registry.addr"
}

case ${1:-} in
start)
  shift
  start "$@"
  ;;
stop)
  shift
  stop "$@"
  ;;
addr)
  shift
  [[ -n ${1:-} ]] || usage
  running_pid "$1" >/dev/null || die "no registry runs in $1"
  cat "$1/registry.addr"
  ;;
*) usage ;;
esac
