#!/usr/bin/env bash
# Thread hand-offs per uncontended cycle on the native single node (docs/benchmarks.md, issue
# 27): context switches of the server (every thread's voluntary + nonvoluntary switches in
# /proc/PID/task/*/status, read before and after) and of the bench client (`perf stat -e
# context-switches`), and with STRACE=1 the server's system calls (`strace -c -f`), each
# divided by the cycles the bench ran.
#
#   scripts/measure-hops.sh SERVER-locksmith CLIENT-locksmith [DURATION] [WORKLOAD]
#
# Needs perf (and strace with STRACE=1; the context switches are then strace's, not worth
# quoting). Ends the server it starts, by PID.
set -euo pipefail
server=$1 client=$2 duration=${3:-3s} workload=${4:-uncontended}
out=${OUT:-/tmp/hops}
mkdir -p "$out"
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ "${STRACE:-0}" = 1 ]; then
    LOCKSMITH_LOG=warn strace -f -c -o "$out/strace.txt" \
        "$server" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" > "$out/server.log" 2>&1 &
else
    LOCKSMITH_LOG=warn "$server" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" > "$out/server.log" 2>&1 &
fi
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 120); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.25; done
url="locksmith://127.0.0.1:$port"
# A warm-up run, except under strace, which counts from the server's start.
[ "${STRACE:-0}" = 1 ] || "$client" bench --backend "$url" --workloads "$workload" --duration 1s > /dev/null
# Under strace the server is strace's child: its own threads are counted through pgrep.
spid=$(pgrep -P $pid || echo $pid)
switches() { cat /proc/"$spid"/task/*/status | awk '/ctxt_switches/ { n += $2 } END { print n }'; }
s0=$(switches)
perf stat -x, -e context-switches -o "$out/perf.txt" \
    "$client" bench --backend "$url" --workloads "$workload" --duration "$duration" --json > "$out/bench.json"
s1=$(switches)
# The server itself (under strace, strace's child) stops; strace then writes its summary.
kill -INT "$spid"; wait $pid 2>/dev/null || true
trap 'rm -rf "$dir"' EXIT
python3 - "$out" "$s0" "$s1" "${STRACE:-0}" <<'PY'
import json, sys
out, s0, s1, strace = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
j = json.load(open(f"{out}/bench.json"))
r = j["backends"][0]["rounds"][0]
n = sum(r.get("contended_acquisitions") or []) or r["cycles_per_sec"] * j["duration_ms"] / 1000
client = next(int(float(l.split(",")[0])) for l in open(f"{out}/perf.txt") if "context-switches" in l)
print(f"{n:.0f} events, cycle p50 {r['cycle_p50_us']} µs; per event: server context switches "
      f"{(s1 - s0) / n:.2f}, client context switches {client / n:.2f}")
if strace:
    # The whole server run over the events of the one bench run, its warm-up cycles included.
    n += j.get("warmup_cycles", 0) if "contended_acquisitions" not in r or not r["contended_acquisitions"] else 0
    for line in open(f"{out}/strace.txt"):
        f = line.split()
        if len(f) >= 5 and f[3].isdigit() and f[-1] not in ("total", "syscall"):
            calls = int(f[3])
            if calls / n >= 0.05:
                print(f"  {f[-1]:<16} {calls / n:6.2f}")
PY
