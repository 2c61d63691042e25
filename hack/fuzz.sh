#!/usr/bin/env bash
# Fuzzes every parser berth runs on untrusted bytes: each target of fuzz/
# (cargo-fuzz, libFuzzer) for SECONDS (default 10), on the stable toolchain
# (`--sanitizer none`; debug assertions and overflow checks on).
#
#   bash hack/fuzz.sh [SECONDS] [TARGET...]
#
# Installs cargo-fuzz from crates.io when it is missing (once, ~2 min).
# BERTH_FUZZ_OCI=0 leaves out the berth-oci-image targets (oci_*: image
# references, manifests/indexes/configs/image records, layers), whose first
# build pulls in the registry client and its TLS (some minutes more). The
# build goes to BERTH_FUZZ_TARGET_DIR (default /var/tmp/berth-fuzz-target),
# kept between runs. Inputs the fuzzer finds are kept in fuzz/corpus/TARGET
# (not in git); fuzz/seeds/TARGET are the starting inputs in git
# (fuzz/seeds/make.py writes the binary ones), fuzz/dicts/TARGET.dict the
# tokens libFuzzer splices in. BERTH_FUZZ_JOBS targets run at a time (one
# per CPU). A crash stops nothing else: every target runs, then the crashing
# inputs are printed in hex, each to become a unit test, and the script
# fails.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-10}
shift || true
cargo_fuzz_version=0.13.2
target_dir=${BERTH_FUZZ_TARGET_DIR:-/var/tmp/berth-fuzz-target}

took() {
  local s=$((SECONDS - $1))
  printf '%dm%02ds' $((s / 60)) $((s % 60))
}

if ! cargo fuzz --version 2>/dev/null | grep -qF "$cargo_fuzz_version"; then
  start=$SECONDS
  # In a temp dir of its own: CARGO_TARGET_DIR is berth's.
  # A debug build: a fifth of the CPU of a release one, and cargo-fuzz only
  # drives cargo and the fuzzers.
  env -u CARGO_TARGET_DIR cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --debug
  echo "fuzz: cargo-fuzz install $(took "$start")"
fi

cd fuzz
features=()
if [[ ${BERTH_FUZZ_OCI:-1} == 0 ]]; then
  features=(--no-default-features)
fi
build=(-s none --debug-assertions --target-dir "$target_dir" "${features[@]}")
# BERTH_FUZZ_DEV=1: the targets unoptimized (`--dev`): less CPU to build,
# fewer runs a second; hack/test.sh's short runs take it.
if [[ ${BERTH_FUZZ_DEV:-0} == 1 ]]; then
  build+=(--dev)
fi

targets=("$@")
if [[ ${#targets[@]} == 0 ]]; then
  while read -r t; do
    if [[ $t == oci_* && ${BERTH_FUZZ_OCI:-1} == 0 ]]; then
      continue
    fi
    targets+=("$t")
  done < <(cargo fuzz list)
fi

start=$SECONDS
cargo fuzz build "${build[@]}"
echo "fuzz: build $(took "$start")"

# One target: its corpus cut down when it grew past 2000 inputs, then the
# fuzzing; its output in $target_dir/fuzz-TARGET.log.
fuzz_one() {
  local t=$1 opts=()
  mkdir -p "corpus/$t" "seeds/$t"
  if [[ -f dicts/$t.dict ]]; then
    opts+=(-dict="dicts/$t.dict")
  fi
  case $t in
    # A layer needs room for a few tar entries (512-byte headers).
    oci_layer | oci_archive) opts+=(-max_len=16384) ;;
  esac
  # The corpus only grows between runs (and replaying it comes out of the
  # SECONDS): past 2000 inputs it is cut down to those that add coverage.
  if (($(find "corpus/$t" -type f | wc -l) > 2000)); then
    rm -rf "corpus/$t.merged"
    mkdir "corpus/$t.merged"
    if cargo fuzz run "${build[@]}" "$t" "corpus/$t.merged" "corpus/$t" -- \
        -merge=1 -timeout=10 -rss_limit_mb=2048 "${opts[@]}" \
        >"$target_dir/fuzz-$t-merge.log" 2>&1; then
      rm -rf "corpus/$t"
      mv "corpus/$t.merged" "corpus/$t"
    else
      rm -rf "corpus/$t.merged"
    fi
  fi
  cargo fuzz run "${build[@]}" "$t" "corpus/$t" "seeds/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 "${opts[@]}" \
    >"$target_dir/fuzz-$t.log" 2>&1
}

# BERTH_FUZZ_JOBS targets at a time (the number of CPUs): each fuzzer is one
# process on one core.
jobs=${BERTH_FUZZ_JOBS:-$(nproc)}
declare -A running=()
failed=()
# Waits for one target to finish and reports it.
reap() {
  local pid rc=0 t
  wait -n -p pid "${!running[@]}" || rc=$?
  t=${running[$pid]}
  unset "running[$pid]"
  if ((rc != 0)); then
    failed+=("$t")
    tail -n 40 "$target_dir/fuzz-$t.log"
  else
    grep -E '^Done ' "$target_dir/fuzz-$t.log" | sed "s/^/fuzz: $t: /" || true
  fi
}
started=$(date +%s)
for t in "${targets[@]}"; do
  while ((${#running[@]} >= jobs)); do
    reap
  done
  echo "fuzz: $t for ${seconds}s"
  fuzz_one "$t" &
  running[$!]=$t
done
while ((${#running[@]} > 0)); do
  reap
done
echo "fuzz: ${#targets[@]} targets in $(($(date +%s) - started))s"

if [[ ${#failed[@]} != 0 ]]; then
  for t in "${failed[@]}"; do
    for f in artifacts/"$t"/*; do
      [[ -f $f ]] || continue
      echo "fuzz: $t: $f"
      od -An -tx1 -v "$f" | tr -d ' \n' | head -c 4096
      echo
    done
  done
  echo "fuzz: crashes in ${failed[*]}"
  exit 1
fi
