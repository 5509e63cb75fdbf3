#!/usr/bin/env bash
# Installs what the tests need and runs every test of the workspace.
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
cargo test --workspace --no-fail-fast "$@"
