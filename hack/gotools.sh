#!/usr/bin/env bash
# Builds the upstream Go programs berth's node tests and benchmarks use, from
# their published Go modules, and caches them outside the clone.
#
#   bash hack/gotools.sh          build what is missing; the last stdout line
#                                 is the bin dir
#   bash hack/gotools.sh --dir    print the bin dir only (builds nothing)
#
# Programs (one Go module each under hack/go/, versions pinned by its go.mod
# and go.sum, so each upstream's dependency graph stays its own):
#   hack/go/kube        k8s.io/kubernetes: kubelet, kube-apiserver,
#                       kube-controller-manager, kube-scheduler, kubectl,
#                       agnhost, nnp (test/images/nonewprivs), the node e2e
#                       suite (e2e_node.test) and the ginkgo that runs it
#                       (its staging replaces come from gen-replace.sh)
#   hack/go/etcd        go.etcd.io/etcd: etcd, etcdctl
#   hack/go/cri-tools   sigs.k8s.io/cri-tools: crictl, critest (`go test -c`)
#   hack/go/runc        github.com/opencontainers/runc: runc (cgo, libseccomp)
#   hack/go/containerd  github.com/containerd/containerd/v2: containerd,
#                       containerd-shim-runc-v2, ctr (the reference runtime)
# Each is built as its upstream's release build does (flags, tags, version
# ldflags), with the version read from go.mod; "commit" fields, which a module
# does not carry, name the module and version instead.
#
# Cache: $BERTH_GOTOOLS_CACHE (default /var/cache/berth-gotools)/<key>/bin,
# where <key> hashes hack/go's go.mod, go.sum and .go files, this script, and
# the Go version. A present key dir is complete: it is built in a temp dir and
# renamed into place, so an interrupted run leaves nothing half built; a run
# with the key present builds nothing. Older keys are pruned (the two newest
# others are kept). Go's own caches (GOMODCACHE, GOCACHE) are used as set.
# Each step's time goes to stderr and to <key>/build-times.txt. From cold Go
# caches on two cores the build takes 29 CPU-minutes: 27-29 minutes measured
# beside a cargo build (about half a minute of it downloads), an estimated
# 15-20 alone; most of it is kubelet's step, which compiles the Kubernetes
# packages the other programs share. With a warm GOCACHE a new key takes
# about 2 minutes (mostly links).
# Needs: go, and for runc gcc, pkg-config and libseccomp-dev (installed with
# apt-get when missing and running as root).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
gomods=$root/hack/go
cache_root=${BERTH_GOTOOLS_CACHE:-/var/cache/berth-gotools}

log() { echo "gotools.sh: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "go not found on PATH"
  exit 1
fi

cache_key() {
  local f
  {
    go env GOVERSION GOOS GOARCH
    cat "$root/hack/gotools.sh"
    while IFS= read -r f; do
      printf '%s\n' "${f#"$gomods"/}"
      cat "$f"
    done < <(find "$gomods" -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort)
  } | sha256sum | cut -c1-20
}

key=$(cache_key)
final=$cache_root/$key
bin=$final/bin

case ${1:-} in
  --dir) echo "$bin"; exit 0 ;;
  "") ;;
  *) log "usage: bash hack/gotools.sh [--dir]"; exit 2 ;;
esac

if [[ -d $bin ]]; then
  touch "$final" 2>/dev/null || true
  echo "$bin"
  exit 0
fi

mkdir -p "$cache_root"
# One builder at a time per cache; the winner's result serves the others.
exec 9>"$cache_root/.lock"
flock 9
if [[ -d $bin ]]; then
  echo "$bin"
  exit 0
fi
# Under the lock, any temp dir left is from an interrupted run.
rm -rf "$cache_root"/.tmp.*
tmp=$(mktemp -d "$cache_root/.tmp.$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"

# runc links libseccomp with cgo.
need_pkgs=()
for pkg in gcc libc6-dev pkg-config libseccomp-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$pkg")
done
if ((${#need_pkgs[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    log "missing Debian packages ${need_pkgs[*]} (run as root, or install them)"
    exit 1
  fi
  log "installing ${need_pkgs[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
fi

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { s = b - a; printf "%dm%04.1fs", s / 60, s - int(s / 60) * 60 }'; }
total_start=$(now)
times=()

# step NAME DIR COMMAND...: runs COMMAND in hack/go/DIR and records its time.
step() {
  local name=$1 dir=$2 start
  shift 2
  start=$(now)
  log "$name ..."
  if ! (cd "$gomods/$dir" && "$@") >&2; then
    log "$name: build failed"
    exit 1
  fi
  times+=("$(printf '%-24s %s' "$name" "$(elapsed "$start")")")
  log "$name: $(elapsed "$start")"
}

# modver DIR MODULE: the version of MODULE that hack/go/DIR's go.mod selects.
modver() { go -C "$gomods/$1" list -m -f '{{.Version}}' "$2"; }
modtime() { go -C "$gomods/$1" list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' "$2"; }

for dir in kube etcd cri-tools runc containerd; do
  step "download ($dir)" "$dir" go mod download
done

# --- Kubernetes: as hack/lib/golang.sh builds release binaries (static,
# trimmed, stripped, tags selinux,notest,grpcnotrace) with the ldflags of
# hack/lib/version.sh.
kube_version=$(modver kube k8s.io/kubernetes)
[[ $kube_version =~ ^v([0-9]+)\.([0-9]+)\. ]] || { log "bad k8s.io/kubernetes version $kube_version"; exit 1; }
kube_ldflags=""
for kv in "gitVersion=$kube_version" "gitMajor=${BASH_REMATCH[1]}" "gitMinor=${BASH_REMATCH[2]}" \
  "gitCommit=k8s.io/kubernetes@$kube_version" "gitTreeState=clean" \
  "buildDate=$(modtime kube k8s.io/kubernetes)"; do
  kube_ldflags+=" -X 'k8s.io/client-go/pkg/version.$kv' -X 'k8s.io/component-base/version.$kv'"
done
kube_build=(env CGO_ENABLED=0 go build -trimpath -tags selinux,notest,grpcnotrace)
for prog in kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  step "$prog" kube "${kube_build[@]}" -ldflags "all=$kube_ldflags -s -w" \
    -o "$tmp/bin/$prog" "k8s.io/kubernetes/cmd/$prog"
done
# agnhost: test/images/image-util.sh builds it static with -w and
# main.Version from its VERSION file; the Kubernetes tags keep the shared
# packages' builds shared.
kube_dir=$(go -C "$gomods/kube" list -m -f '{{.Dir}}' k8s.io/kubernetes)
agnhost_version=$(tr -d '[:space:]' <"$kube_dir/test/images/agnhost/VERSION")
step agnhost kube "${kube_build[@]}" -ldflags "-w -X 'main.Version=$agnhost_version'" \
  -o "$tmp/bin/agnhost" k8s.io/kubernetes/test/images/agnhost

# nnp, the nonewprivs image's program (static, as its Makefile).
step nnp kube env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$tmp/bin/nnp" k8s.io/kubernetes/test/images/nonewprivs
# The node e2e suite as hack/lib/golang.sh builds test binaries (the same
# tags and ldflags; no vet, a check that changes nothing in it), and ginkgo
# at the version Kubernetes requires.
step e2e_node.test kube env CGO_ENABLED=0 go test -c -vet=off -trimpath -tags selinux,notest,grpcnotrace \
  -ldflags "all=$kube_ldflags -s -w" -o "$tmp/bin/e2e_node.test" k8s.io/kubernetes/test/e2e_node
step ginkgo kube env CGO_ENABLED=0 go build -trimpath \
  -o "$tmp/bin/ginkgo" github.com/onsi/ginkgo/v2/ginkgo

# --- etcd: as its scripts/build_lib.sh (static, trimmed, GitSHA ldflag).
etcd_version=$(modver etcd go.etcd.io/etcd/server/v3)
etcd_ldflags="-X=go.etcd.io/etcd/api/v3/version.GitSHA=go.etcd.io/etcd@$etcd_version"
step etcd etcd env CGO_ENABLED=0 go build -trimpath "-ldflags=$etcd_ldflags" \
  -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3
step etcdctl etcd env CGO_ENABLED=0 go build -trimpath "-ldflags=$etcd_ldflags" \
  -o "$tmp/bin/etcdctl" go.etcd.io/etcd/etcdctl/v3

# --- cri-tools: as its Makefile (CGO off, -trimpath, version without "v");
# critest is the test binary of cmd/critest.
crit_version=$(modver cri-tools sigs.k8s.io/cri-tools)
crit_ldflags="-X sigs.k8s.io/cri-tools/pkg/version.Version=${crit_version#v}"
step crictl cri-tools env CGO_ENABLED=0 go build -trimpath -ldflags "$crit_ldflags" \
  -o "$tmp/bin/crictl" sigs.k8s.io/cri-tools/cmd/crictl
step critest cri-tools env CGO_ENABLED=0 go test -c -trimpath -ldflags "$crit_ldflags" \
  -o "$tmp/bin/critest" sigs.k8s.io/cri-tools/cmd/critest

# --- runc: as its Makefile's `runc` target (cgo, PIE, trimmed), with tags
# "seccomp urfave_cli_no_docs": its default "libpathrs" tag needs the Rust
# libpathrs C library, which Debian 12 lacks (runc then uses its pure-Go
# path-resolution fallback). The version comes from runc's embedded VERSION.
runc_version=$(modver runc github.com/opencontainers/runc)
step runc runc env CGO_ENABLED=1 go build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" \
  -ldflags "-X main.gitCommit=github.com/opencontainers/runc@$runc_version" \
  -o "$tmp/bin/runc" github.com/opencontainers/runc

# --- containerd: as its Makefile (-s -w, version ldflags, urfave_cli_no_docs;
# the shim static with no_grpc), but with cgo off for all three: cgo is only
# for the btrfs snapshotter (tag no_btrfs), which the tests do not use.
ctrd_pkg=github.com/containerd/containerd/v2
ctrd_version=$(modver containerd $ctrd_pkg)
ctrd_ldflags="-X $ctrd_pkg/version.Version=$ctrd_version -X $ctrd_pkg/version.Revision=$ctrd_pkg@$ctrd_version -X $ctrd_pkg/version.Package=$ctrd_pkg -s -w"
for prog in containerd ctr; do
  step "$prog" containerd env CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs no_btrfs" \
    -ldflags "$ctrd_ldflags" -o "$tmp/bin/$prog" "$ctrd_pkg/cmd/$prog"
done
step containerd-shim-runc-v2 containerd env CGO_ENABLED=0 go build -trimpath \
  -tags "urfave_cli_no_docs no_btrfs no_grpc" -ldflags "$ctrd_ldflags -extldflags -static" \
  -o "$tmp/bin/containerd-shim-runc-v2" "$ctrd_pkg/cmd/containerd-shim-runc-v2"

total=$(elapsed "$total_start")
printf '%s\n' "${times[@]}" "$(printf '%-24s %s' total "$total")" >"$tmp/build-times.txt"
log "all built in $total"

# Publish atomically; then prune old keys, keeping the two newest others.
chmod 755 "$tmp"
rm -rf "$final"
mv -T "$tmp" "$final"
trap - EXIT
while IFS= read -r old; do
  rm -rf "${cache_root:?}/$old"
done < <(cd "$cache_root" && ls -1t | grep -vx "$key" | tail -n +3)
echo "$bin"
