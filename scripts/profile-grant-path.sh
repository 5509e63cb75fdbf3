#!/usr/bin/env bash
# Instructions per acquisition on the native single node's grant path (docs/benchmarks.md,
# issue 27): the server runs under callgrind; two `locksmith bench` runs of different length go
# through it, the counters zeroed before and dumped after each; the difference of the two dumps
# over the difference in acquisitions cancels sessions, warm-up and teardown.
#
#   scripts/profile-grant-path.sh SERVER-locksmith CLIENT-locksmith [contended|uncontended] [SHORT LONG]
#
# Prints the instructions per event; the dumps stay in $OUT (default /tmp/grant-path) for
# callgrind_annotate --inclusive=yes. With SIDE=client the server runs as it is and each of the
# two bench runs (the client) runs under callgrind instead, dumped whole: the difference of the
# two totals over the difference in events again cancels start, sessions and teardown.
# Needs valgrind. Ends the server it starts, by PID.
set -euo pipefail
server=$1 client=$2 workload=${3:-contended} short=${4:-4s} long=${5:-12s}
out=${OUT:-/tmp/grant-path}
mkdir -p "$out"
rm -f "$out"/callgrind.out*
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
side=${SIDE:-server}
grind=(valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out")
[ "$side" = client ] && grind=()
LOCKSMITH_LOG=warn "${grind[@]}" \
    "$server" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" > "$out/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 120); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.5; done
url="locksmith://127.0.0.1:$port"
"$client" bench --backend "$url" --workloads "$workload" --duration 2s > /dev/null
i=0
for d in "$short" "$long"; do
    i=$((i + 1))
    if [ "$side" = client ]; then
        valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out.$i" \
            "$client" bench --backend "$url" --workloads "$workload" --duration "$d" --json > "$out/bench-$d.json" 2> /dev/null
        continue
    fi
    callgrind_control -z "$pid" > /dev/null 2>&1
    "$client" bench --backend "$url" --workloads "$workload" --duration "$d" --json > "$out/bench-$d.json"
    callgrind_control -d "$pid" > /dev/null 2>&1
done
python3 "$(dirname "$0")/callgrind-per-event.py" "$out" --bench "$short" "$long"
