#!/usr/bin/env bash
# Installs what the tests need and runs every test of the workspace, then the Python package's.
#
# The native server and memory:// need nothing but the Rust toolchain (the .proto is compiled by
# protox, in Rust). Backends that need real servers (Redis, etcd, ZooKeeper, PostgreSQL,
# MariaDB) add their Debian packages to scripts/setup.sh, which this script runs first.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

# One target dir, debug builds, every crate's unit, integration and doc tests; examples are
# compiled as part of `cargo test`.
cargo build --workspace --all-targets
rust_status=0
log=$(mktemp)
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log" || rust_status=$?

# A test binary that failed is run once more, on its own: on this 2-core machine a few
# timing-bound tests (a ZooKeeper JVM slow to give its first session, a 1 s lease renewed under
# the whole suite's load) fail now and then under load alone. A failure that repeats fails the
# run; one that passes the second time is named here as FLAKY, to be fixed, never hidden.
if [ "$rust_status" -ne 0 ] && [ $# -eq 0 ]; then
  mapfile -t reruns < <(grep -aoE 'to rerun pass `[^`]+`' "$log" | sed -E 's/^to rerun pass `(.*)`$/\1/' | sort -u)
  if [ ${#reruns[@]} -gt 0 ]; then
    rust_status=0
    for args in "${reruns[@]}"; do
      echo "test: running again on its own: cargo test $args" >&2
      # shellcheck disable=SC2086 # the rerun arguments are words cargo printed
      if cargo test $args; then
        echo "test: FLAKY (failed under the suite's load, passed alone): cargo test $args" >&2
      else
        rust_status=1
      fi
    done
  fi
fi
rm -f "$log"

# The Python package (bindings/python): built into a venv of its own with `maturin develop`
# (debug, the same target dir and lock file as the workspace: bindings/python is a member), then
# its pytest suite against real servers (started by locksmith-test-servers, built above).
python_status=0
bash scripts/test-python.sh || python_status=$?

if [ "$rust_status" -ne 0 ] || [ "$python_status" -ne 0 ]; then
  echo "test: cargo test exit $rust_status, pytest exit $python_status" >&2
  exit 1
fi
