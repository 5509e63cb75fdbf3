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
cargo test --workspace --no-fail-fast "$@" || rust_status=$?

# The Python package (bindings/python): built into a venv of its own with `maturin develop`
# (debug, the same target dir and lock file as the workspace: bindings/python is a member), then
# its pytest suite against real servers (started by locksmith-test-servers, built above).
python_status=0
bash scripts/test-python.sh || python_status=$?

if [ "$rust_status" -ne 0 ] || [ "$python_status" -ne 0 ]; then
  echo "test: cargo test exit $rust_status, pytest exit $python_status" >&2
  exit 1
fi
