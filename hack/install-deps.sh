#!/usr/bin/env bash
# Installs, with apt-get, everything berth and its tests need (now and for the
# issues ahead). Idempotent: installs only what is missing, and never starts
# the packages' own services (the tests start what they use themselves).
set -euo pipefail

PACKAGES=(
  runc                         # default OCI runtime
  crun                         # second runtime handler
  containernetworking-plugins  # CNI plugins in /usr/lib/cni
  docker-registry              # local OCI registry for test images (127.0.0.1 only)
  busybox-static               # content of test images
  apache2-utils                # htpasswd (bcrypt) for the test registry with auth
  curl                         # hack/registry.sh health check
  iptables                     # CNI portmap / bridge plugins
  iproute2                     # ip, for tests and debugging
  iputils-ping                 # ping, for the pod network tests
  containerd                   # benchmark peer only
  libc6-dev                    # libc.a: the release berth-shim links glibc statically
  ca-certificates
  openssl                      # certificates for the TLS registry tests
  pkg-config
  apparmor                     # apparmor_parser: berth's default profile is parsed in a test
  skopeo                       # image archives made and read back by the archive tests
  libseccomp-dev               # runc built by hack/gotools.sh links libseccomp (cgo)
  gcc                          # hack/critest: static helpers of the critest images
  python3                      # hack/critest: mkimages.py, summary.py
)

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps.sh: run as root (it uses apt-get)" >&2
  exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  echo "install-deps.sh: installing ${missing[*]}"
  # Keep the packages' services from starting: berth and the tests run their own.
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    created_policy=1
  fi
  trap '[[ $created_policy == 1 ]] && rm -f "$policy"' EXIT
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps.sh: all packages already installed"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps.sh: cargo not found: install a Rust toolchain (1.85 or newer, e.g. with rustup)" >&2
  exit 1
fi
