"""The binding and other clients of the same locks: the Rust CLI (`locksmith run`) on the
native server, redis-py's `Lock` on Redis — 0 overlaps."""

import json
import os
import subprocess
import sys
import threading
import time

import redis

import locksmith
from conftest import HELPER, LOCKSMITH_BIN, _require


def test_a_python_holder_and_locksmith_run_never_overlap(servers, name, tmp_path):
    _require(LOCKSMITH_BIN, "cargo build -p locksmith-cli")
    url = servers.url("native")
    marker, log = str(tmp_path / "inside"), str(tmp_path / "tokens")
    # The CLI's critical section: the same marker-file proof and token log as the Python worker.
    critical = (
        f'set -C; if ! : > {marker} 2>/dev/null; then echo overlap >> {log}; fi; '
        f'echo "$LOCKSMITH_TOKEN" >> {log}; sleep 0.005; rm -f {marker}'
    )
    python = subprocess.Popen([sys.executable, str(HELPER), "worker", url, name, "15", marker, log], stdout=subprocess.PIPE, text=True)
    for _ in range(15):
        run = subprocess.run(
            [str(LOCKSMITH_BIN), "run", name, "--backend", url, "--ttl", "5s", "--timeout", "60s", "-q", "--", "sh", "-c", critical],
            capture_output=True, text=True, timeout=90,
        )
        assert run.returncode == 0, run.stderr
    out, _ = python.communicate(timeout=120)
    assert json.loads(out.strip().splitlines()[-1])["overlaps"] == 0
    lines = open(log).read().split()
    assert "overlap" not in lines
    tokens = [int(t) for t in lines]
    assert len(tokens) == 30 and tokens == sorted(tokens) and len(set(tokens)) == 30


def test_redis_py_lock_and_the_binding_exclude_each_other_on_one_redis_lock(servers, name):
    url = servers.url("redis")
    host, port = url.removeprefix("redis://").split("/")[0].split(":")
    r = redis.Redis(host=host, port=int(port))
    inside, overlaps, done = [0], [0], []
    mutex = threading.Lock()

    def enter():
        with mutex:
            inside[0] += 1
            if inside[0] > 1:
                overlaps[0] += 1

    def leave():
        with mutex:
            inside[0] -= 1

    def redis_py():
        for _ in range(40):
            with r.lock(name, timeout=5, blocking_timeout=30, sleep=0.001):
                enter()
                time.sleep(0.002)
                leave()
        done.append("redis-py")

    def binding():
        client = locksmith.connect(url, ttl=5.0)
        for _ in range(40):
            with client.lock(name, timeout=30):
                enter()
                time.sleep(0.002)
                leave()
        done.append("binding")

    threads = [threading.Thread(target=f) for f in (redis_py, binding, redis_py, binding)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(done) == ["binding", "binding", "redis-py", "redis-py"]
    assert overlaps[0] == 0
