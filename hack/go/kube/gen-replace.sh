#!/usr/bin/env bash
# Regenerates the replace block of hack/go/kube/go.mod.
#
# k8s.io/kubernetes maps each of its staging modules (k8s.io/api,
# k8s.io/client-go, ...) to ./staging/src/... at v0.0.0, which a module that
# requires k8s.io/kubernetes cannot resolve. This script reads the list of
# those modules from the go.mod of the k8s.io/kubernetes version required
# here (from the module cache, downloading it if needed) and replaces each
# with its published tag: Kubernetes v1.X.Y ships its staging modules as
# v0.X.Y. Then it tidies go.mod and go.sum.
#
# Usage: bash hack/go/kube/gen-replace.sh   (after changing the required
# k8s.io/kubernetes version in go.mod)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

kube_version=$(sed -nE 's/^[[:space:]]*(require[[:space:]]+)?k8s\.io\/kubernetes[[:space:]]+(v[^[:space:]]+).*/\2/p' go.mod | head -n1)
if [[ ! $kube_version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "gen-replace.sh: cannot read the k8s.io/kubernetes version from go.mod (got '$kube_version')" >&2
  exit 1
fi
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

upstream_mod=$(go mod download -json "k8s.io/kubernetes@$kube_version" |
  sed -nE 's/^[[:space:]]*"GoMod": "(.*)",?$/\1/p')
if [[ ! -f $upstream_mod ]]; then
  echo "gen-replace.sh: no go.mod for k8s.io/kubernetes@$kube_version" >&2
  exit 1
fi

# Every `OLD => ./staging/...` line, in the block form or the one-line form.
mapfile -t staging < <(sed -nE 's/^[[:space:]]*(replace[[:space:]]+)?([^[:space:]]+)[[:space:]]+=>[[:space:]]+\.\/staging\/.*/\2/p' "$upstream_mod" | sort -u)
if ((${#staging[@]} == 0)); then
  echo "gen-replace.sh: no staging replaces found in $upstream_mod" >&2
  exit 1
fi

# Drop every replace we had, then append one block with a line per module.
drop=()
while read -r old; do
  [[ -n $old ]] && drop+=("-dropreplace=$old")
done < <(go mod edit -json | awk '/"Replace"/{r=1} r&&/"Old"/{o=1;next} r&&o&&/"Path"/{gsub(/[",]/,"",$2);print $2;o=0}')
((${#drop[@]} == 0)) || go mod edit "${drop[@]}"
{
  printf '\n// Written by gen-replace.sh from k8s.io/kubernetes@%s/go.mod.\nreplace (\n' "$kube_version"
  for mod in "${staging[@]}"; do
    printf '\t%s => %s %s\n' "$mod" "$mod" "$staging_version"
  done
  printf ')\n'
} >>go.mod
go mod edit -fmt
go mod tidy
echo "gen-replace.sh: k8s.io/kubernetes $kube_version: ${#staging[@]} staging modules replaced with $staging_version" >&2
