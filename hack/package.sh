#!/usr/bin/env bash
# Builds the Debian package TARGET/debian/berth_VERSION-1_ARCH.deb with
# cargo-deb (installed from crates.io when missing): the release berth, the
# static berth-shim, the systemd unit (packaging/debian/berth.service), a
# commented default /etc/berth/config.toml, the man page and shell
# completions (the last three printed by the built berth itself).
#
#   bash hack/package.sh        # build the .deb, print its path
#   bash hack/package.sh test   # build it, then install it with dpkg, run the
#                               # installed berth (--version, config show with
#                               # a drop-in, check), verify the unit with
#                               # systemd-analyze, purge it, and check that the
#                               # machine is as it was
#
# Run as root for `test`; it exits 77 (skipped) when a berth package or
# /etc/berth is already there. TARGET is $CARGO_TARGET_DIR, else ./target.
# BERTH_PACKAGE_PROFILE=dev packages the debug build already made (the one the
# test suite ran, dynamic shim included) instead of the release build:
# hack/test.sh tests the packaging that way without a release build of its
# own; the package to ship is the release one (the default).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-build}
target=${CARGO_TARGET_DIR:-$PWD/target}
export CARGO_TARGET_DIR=$target

log() { echo "package.sh: $*" >&2; }

# Debian tools the build and the test use; installed only when missing.
need_apt=()
command -v dpkg-shlibdeps >/dev/null || need_apt+=(dpkg-dev)
command -v systemd-analyze >/dev/null || need_apt+=(systemd)
if ((${#need_apt[@]})); then
  log "installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi
if ! cargo deb --version >/dev/null 2>&1; then
  log "installing cargo-deb from crates.io (once)"
  cargo install --locked cargo-deb --version 3.8.0
fi

profile=${BERTH_PACKAGE_PROFILE:-release}
case $profile in
  release)
    out=$target/release
    # The release build is shared with hack/run.sh: cargo rebuilds nothing
    # that is up to date.
    cargo build --release --locked -p berth
    # The shim runs once per container: static, as hack/run.sh builds it.
    cargo rustc --release --locked -p berth-shim --bin berth-shim --no-default-features \
      -- -C target-feature=+crt-static
    ;;
  dev)
    # The debug binaries as the caller built them (hack/test.sh: its test
    # build; a `cargo build` here would resolve features for fewer packages
    # than `cargo test --workspace` and build much again), staged where
    # cargo-deb looks for a profile's build (it packages only release-like
    # profiles; nothing is built for this name).
    for bin in berth berth-shim; do
      [[ -x $target/debug/$bin ]] || { log "no $target/debug/$bin: build the workspace first"; exit 1; }
    done
    out=$target/package-from-debug
    mkdir -p "$out"
    cp "$target/debug/berth" "$target/debug/berth-shim" "$out/"
    profile=package-from-debug
    ;;
  *) log "BERTH_PACKAGE_PROFILE: release or dev, not $profile"; exit 2 ;;
esac

# cargo-deb reads the assets' target/release/ paths as the profile's dir.
gen=$out/package
mkdir -p "$gen"
berth=$out/berth
"$berth" config default-commented >"$gen/config.toml"
"$berth" man | gzip -9n >"$gen/berth.8.gz"
"$berth" completions bash >"$gen/berth.bash"
"$berth" completions zsh >"$gen/_berth"
"$berth" completions fish >"$gen/berth.fish"

mkdir -p "$target/debian"
# The debug build's package is for the test: packed fast.
fast=()
[[ $profile == release ]] || fast=(--fast)
deb=$(cargo deb --no-build --locked --profile "$profile" "${fast[@]}" -p berth --output "$target/debian/" | tail -n 1)
[[ -f $deb ]] || { log "cargo deb printed no package path (got: $deb)"; exit 1; }
log "built $deb"
[[ $mode == test ]] || { echo "$deb"; exit 0; }

# ---- test: install, run, verify, purge ----
if [[ $(id -u) -ne 0 ]]; then
  log "test: run as root (it uses dpkg)"
  exit 1
fi
if dpkg-query -W -f='${Status}' berth 2>/dev/null | grep -q installed || [[ -e /etc/berth ]]; then
  log "test: skipped: a berth package or /etc/berth is already on this machine, and this test must not touch it"
  exit 77
fi

started=$SECONDS
snapshot() {
  # Everything the package or its maintainer scripts may create.
  { find /etc/berth /etc/systemd/system /var/lib/systemd/deb-systemd-helper-enabled \
    /var/lib/systemd/deb-systemd-helper-masked /usr/bin/berth /usr/bin/berth-shim \
    /usr/share/doc/berth /usr/share/man/man8/berth.8.gz /lib/systemd/system/berth.service \
    /usr/lib/systemd/system/berth.service 2>/dev/null || true; } | sort
  dpkg-query -W -f='${Package} ${Status}\n' berth 2>/dev/null || true
}
before=$(mktemp)
after=$(mktemp)
snapshot >"$before"
dropin=/etc/berth/config.d/50-package-test.toml
cleanup() {
  rm -f "$dropin" /etc/berth/config.d/60-package-test-bad.toml
  rmdir /etc/berth/config.d 2>/dev/null || true
  dpkg --purge berth >/dev/null 2>&1 || true
  rm -f "$before" "$after"
}
trap cleanup EXIT

fail() { log "test: FAILED: $*"; exit 1; }

dpkg -i "$deb" >/dev/null
expected=$("$berth" --version)
out=$(/usr/bin/berth --version)
[[ $out == "$expected" && $out == berth\ * ]] || fail "berth --version said: $out"
# The manual beside README (its links are relative: docs/NAME.md).
for page in docs/*.md; do
  cmp -s "$page" "/usr/share/doc/berth/$page" || fail "the package's /usr/share/doc/berth/$page is not $page"
done

# The installed config is all comments: the defaults, and nothing set by it.
out=$(/usr/bin/berth config show)
grep -qx 'socket = "/run/berth/berth.sock"' <<<"$out" || fail "config show without drop-ins: $out"
grep -q 'File read: /etc/berth/config.toml' <<<"$out" || fail "config show did not read /etc/berth/config.toml: $out"

# A drop-in wins over the main file, and config show names it.
mkdir -p /etc/berth/config.d
printf 'log_level = "debug"\n[cni]\ntimeout_secs = 30\n' >"$dropin"
out=$(/usr/bin/berth config show)
grep -qx 'log_level = "debug"' <<<"$out" || fail "drop-in not applied: $out"
grep -qx "#   cni.timeout_secs  <-  $dropin" <<<"$out" || fail "config show does not name the drop-in: $out"

# A bad key in a drop-in names the file and the key.
printf '[runtime]\nno_such_key = 1\n' >/etc/berth/config.d/60-package-test-bad.toml
if out=$(/usr/bin/berth config show 2>&1); then fail "a bad drop-in was accepted"; fi
if ! grep -q '60-package-test-bad.toml' <<<"$out" || ! grep -q 'no_such_key' <<<"$out"; then
  fail "the error does not name the file and the key: $out"
fi
rm -f /etc/berth/config.d/60-package-test-bad.toml

# The host check, from the installed paths (it finds /usr/bin/berth-shim).
out=$(/usr/bin/berth check) || fail "berth check: $out"
grep -q '^ok  *berth-shim  */usr/bin/berth-shim$' <<<"$out" || fail "berth check did not find the installed shim: $out"

# The unit: systemd-analyze checks it (and that ExecStart and the man page exist).
unit=$(dpkg -L berth | grep '/systemd/system/berth\.service$')
# It exits 0 on a directive it cannot parse ("…, ignoring"): any output fails.
out=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify $unit: $out"
[[ -z $out ]] || fail "systemd-analyze verify $unit: $out"
grep -q '^KillMode=process$' "$unit" || fail "the unit does not keep shims on stop"

# Completions and the man page are installed and well formed.
bash -n /usr/share/bash-completion/completions/berth || fail "bash completion"
zcat /usr/share/man/man8/berth.8.gz | grep -q '^\.TH berth 8' || fail "man page"

rm -f "$dropin"
rmdir /etc/berth/config.d
dpkg --purge berth >/dev/null
snapshot >"$after"
diff -u "$before" "$after" || fail "purging did not leave the machine as it was"
log "test: ok: installed, ran, verified and purged $(basename "$deb") in $((SECONDS - started))s"
