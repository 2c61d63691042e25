#!/usr/bin/env bash
# Builds berth and runs it in the foreground with its embedded defaults
# (socket /run/berth/berth.sock, root /var/lib/berth, state /run/berth).
# Extra arguments are passed to berth, e.g. `hack/run.sh --log-level debug`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash hack/install-deps.sh
cargo build --release --locked
# The shim runs once per container: a static build keeps it under 2 MiB RSS.
cargo rustc --release --locked -p berth-shim --bin berth-shim --no-default-features \
  -- -C target-feature=+crt-static
bin=${CARGO_TARGET_DIR:-target}/release
# The host's prerequisites first: stop here, saying what to fix, when one is missing.
"$bin/berth" check "$@"
exec "$bin/berth" "$@"
