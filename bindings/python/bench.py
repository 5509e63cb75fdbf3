"""The binding against the Rust client and redis-py's Lock, on the same servers, in one run.

    python bench.py [--duration 3] [--target-dir ../../target/release]

Starts a native server (`locksmith serve`) and a Redis through `locksmith-test-servers` (as the
tests do), then on each: the binding's uncontended cycle (lock + unlock, one client, one thread)
and its 8x1 hand-off (8 threads, each with a client of its own, on one lock), `locksmith bench`
(the Rust client) with the same workloads, and on Redis redis-py's `Lock` (its default 0.1 s
polling sleep, and 1 ms). Build everything in release first:

    cargo build --release -p locksmith-cli -p locksmith-testkit
    pip install ./bindings/python         # or: maturin develop --release

Figures of one run on one machine: compare within a run only. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, List

import locksmith

HERE = Path(__file__).resolve().parent


def percentile(sorted_us: List[float], p: float) -> float:
    return sorted_us[min(len(sorted_us) - 1, int(len(sorted_us) * p))]


def cycle(take: Callable[[], Callable[[], None]], seconds: float) -> Dict[str, float]:
    """Latency of take-then-release in a loop (after 200 warm-up cycles)."""
    for _ in range(200):
        take()()
    lat: List[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        take()()
        lat.append((time.perf_counter() - t) * 1e6)
    lat.sort()
    return {"p50_us": percentile(lat, 0.5), "p99_us": percentile(lat, 0.99), "per_sec": len(lat) / seconds}


def handoff(make_taker: Callable[[], Callable[[], Callable[[], None]]], threads: int, seconds: float) -> Dict[str, float]:
    """Acquisitions per second of `threads` threads handing one lock around; fairness is the
    least over the most acquisitions of one thread."""
    counts = [0] * threads
    stop = threading.Event()
    start = threading.Barrier(threads + 1)

    def run(i: int) -> None:
        take = make_taker()
        start.wait()
        while not stop.is_set():
            take()()
            counts[i] += 1

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    return {"acq_per_sec": sum(counts) / seconds, "fairness": min(counts) / max(max(counts), 1)}


def binding_taker(url: str, name: str) -> Callable[[], Callable[[], None]]:
    client = locksmith.connect(url, ttl=10.0)

    def take() -> Callable[[], None]:
        g = client.lock(name)
        return g.unlock

    return take


def redis_py_taker(url: str, name: str, sleep: float) -> Callable[[], Callable[[], None]]:
    import redis

    host, port = url.removeprefix("redis://").split("/")[0].split(":")
    r = redis.Redis(host=host, port=int(port))

    def take() -> Callable[[], None]:
        lock = r.lock(name, timeout=10, sleep=sleep)
        lock.acquire(blocking=True)
        return lock.release

    return take


def rust_bench(bin_: Path, url: str, seconds: float) -> Dict[str, float]:
    out = subprocess.run(
        [str(bin_), "bench", "--backend", url, "--workloads", "uncontended,contended", "--clients", "8",
         "--duration", f"{seconds}s", "--json"],
        capture_output=True, text=True, check=True,
    ).stdout
    m = json.loads(out)["backends"][0]["median"]
    return {"p50_us": m["cycle_p50_us"], "p99_us": m["cycle_p99_us"], "per_sec": m["cycles_per_sec"],
            "acq_per_sec": m["contended_acq_per_sec"], "fairness": m["fairness"]}


def start_server(target: Path, kind: str) -> "tuple[subprocess.Popen, str]":
    args = [str(target / "locksmith-test-servers"), kind] + ([str(target / "locksmith")] if kind == "native" else [])
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per measurement")
    ap.add_argument("--target-dir", type=Path, default=HERE.parent.parent / "target" / "release")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = ap.parse_args()
    servers = {k: start_server(a.target_dir, k) for k in ("native", "redis")}
    rows = []
    try:
        for kind, (_, url) in servers.items():
            name = f"bench/{uuid.uuid4().hex[:8]}"
            c = cycle(binding_taker(url, name + "/c"), a.duration)
            h = handoff(lambda: binding_taker(url, name + "/h"), 8, a.duration)
            rows.append({"backend": kind, "client": "Python binding", **c, **h})
            rows.append({"backend": kind, "client": "Rust (locksmith bench)", **rust_bench(a.target_dir / "locksmith", url, a.duration)})
            if kind == "redis":
                for sleep in (0.1, 0.001):
                    c = cycle(redis_py_taker(url, name + "/rc", sleep), a.duration)
                    h = handoff(lambda: redis_py_taker(url, name + f"/rh{sleep}", sleep), 8, a.duration)
                    rows.append({"backend": kind, "client": f"redis-py Lock (sleep={sleep})", **c, **h})
    finally:
        for p, _ in servers.values():
            p.stdin.close()
            p.wait(timeout=30)
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print("| backend | client | cycle p50 µs | cycle p99 µs | cycles/s | 8×1 hand-off acq/s | fairness |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['backend']} | {r['client']} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['per_sec']:.0f} | "
              f"{r['acq_per_sec']:.0f} | {r['fairness']:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
