#!/usr/bin/env bash
# The whole test suite: installs what the tests need (as root), then runs
# formatting and lint checks and every unit and integration test.
# Set BERTH_SKIP_LINT=1 to skip fmt and clippy.
set -euo pipefail
cd "$(dirname "$0")/.."

bash hack/install-deps.sh

if [[ ${BERTH_SKIP_LINT:-0} != 1 ]]; then
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets --locked -- -D warnings
fi

cargo test --workspace --locked -- --test-threads "${BERTH_TEST_THREADS:-4}"
