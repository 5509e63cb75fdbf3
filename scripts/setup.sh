#!/usr/bin/env bash
# Installs what the *tests* need on a fresh Debian machine with the Rust toolchain: real servers
# and third-party lock clients. Building needs none of it (no protoc, no libclang: etcd's API is
# compiled by protox, SQLite is bundled). Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

# Real servers the driver tests start (never started as services: the tests run them) and
# third-party lock clients for interop tests (etcdctl; Apache Curator for Java, compiled by the
# ZooKeeper tests with the machine's javac). PostgreSQL and MariaDB for the SQL driver tests.
# memcached for its (unfenced) driver's tests.
# libfaketime (`faketime`) skews a client process's wall clock in the SQL clock-skew tests.
# tmux is the terminal of the `status --watch` test; Chromium and its WebDriver server drive the
# dashboard's page in the browser test.
packages=(
  redis-server memcached
  postgresql mariadb-server faketime
  etcd-server etcd-client
  zookeeper libzookeeper-java libcurator-recipes-java libcurator-framework-java libcurator-client-java
  tmux chromium chromium-driver
)
need_apt=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update
  apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${need_apt[@]}"
fi

# Third-party lock clients for interoperability tests (PyPI), in a venv of the project's own.
if [ ! -x .venv-interop/bin/python ] || ! .venv-interop/bin/python -c 'import redis, kazoo' 2>/dev/null; then
  python3 -m venv .venv-interop
  .venv-interop/bin/pip install --quiet 'redis>=5,<9' 'kazoo>=2.9,<3'
fi

for tool in cargo rustc; do
  command -v "$tool" >/dev/null || { echo "setup: $tool is missing; install the Rust toolchain (rustup)" >&2; exit 1; }
done
cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
