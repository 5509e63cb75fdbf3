"""The contract's properties (DESIGN.md §2) from Python, on every backend, with real servers
and real processes: exclusion with increasing tokens, timeout, try-lock, cancel leaves nothing,
the loss signal of a paused holder, owner-checked release."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import locksmith
from conftest import HELPER


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HELPER), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_exclusion_across_processes_with_increasing_tokens(shared_url, name, tmp_path):
    marker, log = str(tmp_path / "inside"), str(tmp_path / "tokens")
    workers = [spawn("worker", shared_url, name, "12", marker, log) for _ in range(3)]
    reports = []
    for w in workers:
        out, _ = w.communicate(timeout=120)
        assert w.returncode == 0, out
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["overlaps"] for r in reports) == 0
    tokens = [int(t) for t in open(log).read().split()]
    assert len(tokens) == 36
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), "tokens increase in grant order"


def test_timeout_and_try_lock(url, name):
    a, b = locksmith.connect(url, ttl=2.0), locksmith.connect(url, ttl=2.0)
    held = a.lock(name, timeout=10)
    assert b.try_lock(name) is None
    started = time.monotonic()
    with pytest.raises(locksmith.LockTimeout):
        b.lock(name, timeout=0.5)
    assert 0.4 < time.monotonic() - started < 5
    # As in the conformance suite: the timed-out wait is withdrawn in the background; once it
    # is gone, a release frees the lock for a third client (not handed to the withdrawn waiter,
    # and on etcd b's own session answers no-wait attempts busy until its cleanup has ended).
    assert wait_for(lambda: not a.status(name).waiters), a.status(name)  # None: not counted (SQL)
    assert held.unlock()
    c = locksmith.connect(url, ttl=2.0)
    got = c.try_lock(name)
    assert got is not None and got.token > held.token
    got.unlock()
    a.close(), b.close(), c.close()


def test_a_given_up_wait_leaves_no_waiter(waiter_url, name):
    a, b = locksmith.connect(waiter_url, ttl=2.0), locksmith.connect(waiter_url, ttl=2.0)
    held = a.lock(name, timeout=10)
    for _ in range(3):
        with pytest.raises(locksmith.LockTimeout):
            b.lock(name, timeout=0.3)
    assert wait_for(lambda: a.status(name).waiters == 0), a.status(name)
    held.unlock()
    a.close(), b.close()


def test_the_loss_signal_of_a_paused_holder_fires_before_anyone_else_is_granted(shared_url, name):
    holder = spawn("hold", shared_url, name, "1.0")
    try:
        first = json.loads(holder.stdout.readline())
        os.kill(holder.pid, signal.SIGSTOP)
        client = locksmith.connect(shared_url, ttl=2.0)
        guard = client.lock(name, timeout=30)
        granted_by = time.time()
        assert guard.token > first["token"]
        os.kill(holder.pid, signal.SIGCONT)
        holder.stdin.write("report\n")
        holder.stdin.flush()
        report = json.loads(holder.stdout.readline())
        assert report["lost"] and not report["held"], "the paused holder learns of its loss on resuming"
        assert report["valid_until"] <= granted_by, "it stopped being safe before the next grant"
        assert report["unlock"] is False, "its release is refused: the hold is not its own"
        # Owner-checked: the stale holder's release left the new holder's hold alone.
        assert guard.is_held()
        assert client.status(name).holder.token == guard.token
        assert guard.unlock()
        client.close()
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()
