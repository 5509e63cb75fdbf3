"""Real servers for the Python tests, started the way the Rust tests start them: by
`locksmith-test-servers` (crates/locksmith-testkit), one process per kind of server, on loopback
with a free port and a temp dir, stopped when the session ends (its stdin closes; then the server
is killed by PID). A server that cannot start fails the tests that need it, naming the setup
command — nothing is skipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TARGET = Path(os.environ.get("LOCKSMITH_TARGET_DIR", ROOT / "target" / "debug"))
SERVERS_BIN = TARGET / "locksmith-test-servers"
LOCKSMITH_BIN = TARGET / "locksmith"
HELPER = Path(__file__).resolve().parent / "helper.py"

# Every backend of the contract tests; memory:// lives in one process, so the tests across
# processes use the others.
BACKENDS = ["memory", "sqlite", "native", "redis", "etcd", "zk", "postgres"]
SHARED_BACKENDS = [b for b in BACKENDS if b != "memory"]
# Backends whose status counts waiters (the SQL backends' waiters poll and are not seen).
WAITER_BACKENDS = ["memory", "native", "redis", "etcd", "zk"]


def _require(path: Path, build: str) -> None:
    if not path.exists():
        pytest.fail(f"{path} is missing; build it with: {build} (scripts/test.sh does)", pytrace=False)


class Servers:
    """Servers started on first use, one per kind, for the whole session."""

    def __init__(self) -> None:
        self._procs: dict[str, subprocess.Popen] = {}
        self._urls: dict[str, str] = {}
        self._lock = threading.Lock()

    def url(self, kind: str) -> str:
        with self._lock:
            if kind not in self._urls:
                self._urls[kind] = self._start(kind)
            return self._urls[kind]

    def _start(self, kind: str) -> str:
        self._procs[kind], url = start_server(kind)
        return url

    def stop(self) -> None:
        for p in self._procs.values():
            stop_server(p)


def start_server(kind: str) -> tuple[subprocess.Popen, str]:
    """`locksmith-test-servers KIND`: its process and the URL it printed."""
    _require(SERVERS_BIN, "cargo build -p locksmith-testkit --bin locksmith-test-servers")
    args = [str(SERVERS_BIN), kind]
    if kind in ("native", "cluster"):
        _require(LOCKSMITH_BIN, "cargo build -p locksmith-cli")
        args.append(str(LOCKSMITH_BIN))
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    if not line:
        err = p.stderr.read() if p.wait(timeout=30) is not None else ""
        pytest.fail(f"the {kind} test server did not start: {err.strip()}", pytrace=False)
    return p, line


def stop_server(p: subprocess.Popen) -> None:
    """Closes its stdin (it kills its servers by PID and exits); SIGKILL if it hangs."""
    try:
        p.stdin.close()
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()


@pytest.fixture(scope="session")
def servers():
    s = Servers()
    yield s
    s.stop()


class Cluster:
    """A 3-node native cluster of this test alone (`locksmith-test-servers cluster`)."""

    def __init__(self) -> None:
        self._proc, self.url = start_server("cluster")

    def _command(self, line: str) -> str:
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        answer = self._proc.stdout.readline().strip()
        if not answer.isdigit():
            err = self._proc.stderr.read() if self._proc.poll() is not None else ""
            pytest.fail(f"the cluster's {line!r} answered {answer!r}: {err.strip()}", pytrace=False)
        return answer

    def kill_leader(self) -> int:
        """`kill -9` of the node that leads now; its id."""
        return int(self._command("kill-leader"))

    def leader(self) -> int:
        """The id of the node that leads now (waits up to 20 s for one)."""
        return int(self._command("leader"))

    def stop(self) -> None:
        stop_server(self._proc)


@pytest.fixture
def cluster():
    """A fresh 3-node native cluster (its nodes get killed), stopped after the test."""
    c = Cluster()
    yield c
    c.stop()


def backend_url(kind: str, servers: Servers, tmp_path_factory) -> str:
    if kind == "memory":
        return f"memory://py-{uuid.uuid4().hex}"
    if kind == "sqlite":
        return f"sqlite://{tmp_path_factory.mktemp('sqlite')}/locks.db"
    return servers.url(kind)


@pytest.fixture(params=BACKENDS)
def url(request, servers, tmp_path_factory) -> str:
    """The URL of each backend in turn."""
    return backend_url(request.param, servers, tmp_path_factory)


@pytest.fixture(params=SHARED_BACKENDS)
def shared_url(request, servers, tmp_path_factory) -> str:
    """The URL of each backend that several processes can share."""
    return backend_url(request.param, servers, tmp_path_factory)


@pytest.fixture(params=WAITER_BACKENDS)
def waiter_url(request, servers, tmp_path_factory) -> str:
    """The URL of each backend whose status shows waiters."""
    return backend_url(request.param, servers, tmp_path_factory)


@pytest.fixture
def name(request) -> str:
    """A lock name of this test alone."""
    return f"py/{request.node.originalname}/{uuid.uuid4().hex[:12]}"
