#!/usr/bin/env bash
# Instructions per uncontended cycle on one node of a 3-node cluster (docs/benchmarks.md,
# issue 27, "CPU per replicated entry, by function"): the shape of profile-grant-path.sh. One
# node runs under callgrind, as the leader or as a follower; two `locksmith bench` runs of
# different length go through the cluster, the node's counters zeroed before and dumped after
# each; the difference of the two dumps over the difference in cycles cancels sessions, warm-up
# and teardown.
#
#   scripts/profile-cluster-node.sh SERVER-locksmith CLIENT-locksmith [leader|follower] [SHORT LONG]
#
# Roles come from the timings: every node gets a long heartbeat (also the deadline of each
# replication call, so the slowed node never times one out) and the node meant to lead the
# shortest election timeout, so it stands first and no one else ever stands. For `follower`,
# the other follower is stopped (SIGSTOP) once the cluster is warm, so that every entry needs
# the profiled follower's answer to commit: without that the fast follower makes the quorum,
# the slowed one lags, and it gets entries in batches, which a real follower does not.
#
# Prints the instructions per cycle; the dumps stay in $OUT (default /tmp/cluster-node-ROLE) for
# scripts/callgrind-per-event.py or callgrind_annotate. Needs valgrind. Ends every process it
# starts, by PID.
set -euo pipefail
server=$1 client=$2 role=${3:-leader} short=${4:-4s} long=${5:-12s}
out=${OUT:-/tmp/cluster-node-$role}
mkdir -p "$out"
rm -f "$out"/callgrind.out*
dir=$(mktemp -d)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ports=("" "$(free_port)" "$(free_port)" "$(free_port)")
peers="1=127.0.0.1:${ports[1]},2=127.0.0.1:${ports[2]},3=127.0.0.1:${ports[3]}"
(umask 077; head -c 32 /dev/urandom | base64 > "$dir/cluster.secret")
# Node 1 leads; the profiled node is 1 (leader) or 3 (follower); node 2 is the other follower.
profiled=1
[ "$role" = follower ] && profiled=3
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
for id in 1 2 3; do
    election=20s..30s
    [ "$id" = 1 ] && election=3s..4s
    grind=()
    [ "$id" = "$profiled" ] && grind=(valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out")
    LOCKSMITH_LOG=warn "${grind[@]}" "$server" serve --listen "127.0.0.1:${ports[$id]}" \
        --data-dir "$dir/data-$id" --node-id "$id" --peers "$peers" \
        --cluster-secret-file "$dir/cluster.secret" --heartbeat 1s --election-timeout "$election" \
        > "$out/node-$id.log" 2>&1 &
    pids[id]=$!
done
for id in 1 2 3; do
    for _ in $(seq 1 240); do (echo > "/dev/tcp/127.0.0.1/${ports[$id]}") 2>/dev/null && break; sleep 0.5; done
done
url="locksmith://127.0.0.1:${ports[1]},127.0.0.1:${ports[2]},127.0.0.1:${ports[3]}"
# Warm-up: waits out the first election (the bench retries until a leader answers).
"$client" bench --backend "$url" --workloads uncontended --duration 3s > /dev/null
if [ "$role" = follower ]; then
    kill -STOP "${pids[2]}"
    "$client" bench --backend "$url" --workloads uncontended --duration 2s > /dev/null
fi
i=0
for d in "$short" "$long"; do
    i=$((i + 1))
    callgrind_control -z "${pids[$profiled]}" > /dev/null 2>&1
    "$client" bench --backend "$url" --workloads uncontended --duration "$d" --json > "$out/bench-$d.json"
    callgrind_control -d "${pids[$profiled]}" > /dev/null 2>&1
done
python3 "$(dirname "$0")/callgrind-per-event.py" "$out" --bench "$short" "$long"
