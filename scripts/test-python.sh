#!/usr/bin/env bash
# The Python package's tests: a venv `.venv-py` with maturin, pytest and redis-py (for the
# interop test), `maturin develop` (a debug build into that venv), then pytest. Needs the
# workspace's debug binaries `locksmith` and `locksmith-test-servers` (scripts/test.sh builds
# them; alone: cargo build -p locksmith-cli -p locksmith-testkit). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-py
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import maturin, pytest, redis' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'maturin>=1.5,<2' 'pytest>=7,<10' 'redis>=5,<9'
fi
(cd bindings/python && VIRTUAL_ENV="$PWD/../../$venv" PATH="$PWD/../../$venv/bin:$PATH" maturin develop --quiet)

# pytest's exit codes: 0 all passed, 1 some failed, 2 interrupted, 3 internal error, 4 usage
# error, 5 no test collected — only 0 is a pass (5 would mean the suite silently ran nothing).
status=0
(cd bindings/python && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@") || status=$?
case "$status" in
  0) ;;
  5) echo "test-python: pytest collected no test" >&2; exit 1 ;;
  *) echo "test-python: pytest exit $status" >&2; exit "$status" ;;
esac
