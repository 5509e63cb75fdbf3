#!/usr/bin/env bash
# Installs what building and testing locksmith needs on a fresh Debian machine with the Rust
# toolchain. Idempotent; safe to re-run.
set -euo pipefail

need_apt=()
# Add Debian packages here as backends land, e.g. redis-server etcd-server zookeeper.
packages=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update
  apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${need_apt[@]}"
fi

for tool in cargo rustc; do
  command -v "$tool" >/dev/null || { echo "setup: $tool is missing; install the Rust toolchain (rustup)" >&2; exit 1; }
done
cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
