#!/usr/bin/env bash
# Builds berth's test images from Debian's busybox-static and our own files
# and pushes them to the registry at ADDR (started by hack/registry.sh):
#
#   hack/build-test-images.sh ADDR [--auth USER:PASS]
#
# Images (all under ADDR/):
#   berth-test/busybox:latest, e2e-test-images/busybox:1.29-2,
#   library/busybox:latest   busybox-static + applet symlinks, passwd/group
#                             with root and app (1000); Docker schema 2
#   berth-test/layers:latest  3 layers: busybox, an uncompressed layer (hard
#                             link, symlink, FIFO, xattr), whiteouts + opaque dir
#   berth-test/user-uid:latest, berth-test/user-name:latest   User 1000 / app
#   berth-test/zstd:latest    a zstd-compressed layer
#   berth-test/multi:latest   OCI index: linux/amd64 + linux/arm64/v8
#   berth-test/lie:bigger, berth-test/lie:smaller   manifests lying about sizes
#
# Deterministic and idempotent: the same digests every run; blobs the
# registry has are not sent again. Prints ADDR/repo:tag@digest per image.
# BERTH_TEST_IMAGES_BIN: the builder, built already (hack/test.sh: the one
# `cargo test --workspace` builds with the workspace's features, where
# `cargo run -p berth-oci-image` would build dependencies again).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 1 ]]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
if [[ -n ${BERTH_TEST_IMAGES_BIN:-} ]]; then
  exec "$BERTH_TEST_IMAGES_BIN" "$@"
fi
exec cargo run --quiet --locked -p berth-oci-image --example build_test_images -- "$@"
