"""Child processes of the tests (run as `python helper.py MODE ...`): other holders of the same
locks, so that exclusion, pauses and interop are tested across real processes."""

import json
import os
import sys
import time

import locksmith


def worker(url: str, name: str, cycles: int, marker: str, log: str) -> None:
    """`cycles` times: take the lock, prove nobody else is inside (an exclusive marker file),
    append the token to `log`, leave."""
    client = locksmith.connect(url, ttl=5.0)
    overlaps = 0
    for _ in range(cycles):
        with client.lock(name, timeout=60) as guard:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                overlaps += 1
                fd = None
            with open(log, "a") as f:
                f.write(f"{guard.token}\n")
            time.sleep(0.002)
            if fd is not None:
                os.close(fd)
                os.unlink(marker)
    print(json.dumps({"overlaps": overlaps}), flush=True)


def hold(url: str, name: str, ttl: str) -> None:
    """Take the lock, say so, then (on a line of stdin) report what the guard saw and unlock."""
    client = locksmith.connect(url, ttl=float(ttl))
    guard = client.lock(name, timeout=30)
    print(json.dumps({"token": guard.token, "session": guard.session_id}), flush=True)
    sys.stdin.readline()
    lost = guard.lost.wait(10)
    report = {"lost": lost, "held": guard.is_held(), "valid_until": guard.valid_until()}
    report["unlock"] = guard.unlock()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    {"worker": lambda a: worker(a[0], a[1], int(a[2]), a[3], a[4]), "hold": lambda a: hold(*a)}[sys.argv[1]](sys.argv[2:])
