#!/usr/bin/env python3
"""Per-event instructions by function from two callgrind dumps of runs of different length
(docs/benchmarks.md, issue 27): (dump 2 - dump 1) / (events 2 - events 1). Used on the dumps
of scripts/profile-cluster-node.sh:

    scripts/callgrind-per-event.py DIR              # inclusive, top 40 functions
    scripts/callgrind-per-event.py DIR --self       # exclusive, top 40 functions
    scripts/callgrind-per-event.py DIR --groups     # exclusive, summed by crate/part
    scripts/callgrind-per-event.py DIR --calls RE   # calls per event of the functions matching RE
    scripts/callgrind-per-event.py DIR --callers RE # the same, by caller
    scripts/callgrind-per-event.py DIR --bench SHORT LONG
        # the whole program's instructions per event; first counts the events of the two
        # `locksmith bench --json` runs DIR/bench-SHORT.json and DIR/bench-LONG.json (8x1
        # acquisitions when the run has them, else uncontended cycles) into DIR/cycles

DIR holds callgrind.out.1, callgrind.out.2 and `cycles` ("N1 N2", events of the two runs).
scripts/profile-cluster-node.sh and scripts/profile-grant-path.sh call the --bench form."""
import json, re, subprocess, sys

GROUPS = [
    ("malloc/free/realloc", r"^(malloc|free|realloc|calloc|_int_|__rustc::__r|__rust_|cfree|tcache|arena|alloc::alloc|unlink_chunk|malloc_consolidate)"),
    ("memcpy/memmove/memset/memcmp", r"^(__mem|memcpy|memmove|memset|memcmp|bcmp)"),
    ("ring (SHA-256, HMAC: node proofs)", r"^(ring|<ring|ring_core)"),
    ("locksmith_proto (node proofs' text)", r"locksmith_proto"),
    ("formatting (core::fmt, alloc::fmt)", r"^(core::fmt|alloc::fmt|<core::fmt|<alloc::string::String as core::fmt|<u8 as core::fmt|<&T as core::fmt|<u64 as core::fmt|<u128 as core::fmt)"),
    ("openraft", r"openraft"),
    ("our store (locksmith_raft::store)", r"locksmith_raft::store|<locksmith_raft::store"),
    ("our network (locksmith_raft::network)", r"locksmith_raft::network|<locksmith_raft::network"),
    ("locksmith_raft, other", r"locksmith_raft"),
    ("lock server (locksmith_server, locksmith_core)", r"locksmith_server|locksmith_core"),
    ("postcard / serde", r"postcard|serde"),
    ("h2 / hyper / tonic / http / tower / prost", r"\bh2::|<h2::|hyper|tonic|http|tower|prost|bytes::|<bytes::"),
    ("tracing", r"tracing"),
    ("tokio", r"tokio|mio::"),
    ("libc syscall wrappers / futex / pthread", r"^(pthread|__lll|futex|syscall|epoll|__GI|write|writev|read|pread|pwrite|recv|send|fdatasync|clock_gettime|__vdso|__libc)"),
]

def raw(path):
    """Self cost and calls received per function, read from the dump itself (callgrind_annotate
    3.19 prints these Rust programs' costs as inclusive either way)."""
    names, self_cost, calls_in, edges = {}, {}, {}, {}
    fn, after_calls, callee = None, False, None
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if line.startswith(("fn=", "cfn=", "cfni=")):
            key, _, rest = line.partition("=")
            m = re.match(r"\((\d+)\)(?: (.*))?", rest)
            name = rest
            if m:
                if m.group(2) is not None:
                    names[m.group(1)] = m.group(2)
                name = names.get(m.group(1), m.group(1))
            if key == "fn":
                fn = name
            else:
                callee = name
            continue
        if line.startswith("calls="):
            n = int(line[6:].split()[0])
            calls_in[callee] = calls_in.get(callee, 0) + n
            edges[(fn, callee)] = edges.get((fn, callee), 0) + n
            after_calls = True
            continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            if after_calls:
                after_calls = False
                continue
            parts = line.split()
            if len(parts) >= 2 and fn is not None:
                self_cost[fn] = self_cost.get(fn, 0) + int(parts[1])
    return self_cost, calls_in, edges


def table(path, inclusive):
    if not inclusive:
        return raw(path)[0]
    args = ["callgrind_annotate", "--threshold=100", f"--inclusive={'yes' if inclusive else 'no'}", path]
    text = subprocess.run(args, capture_output=True, text=True).stdout
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)$", line)
        if m and "PROGRAM TOTALS" not in m.group(2):
            name = re.sub(r"^[^:]*:", "", m.group(2), count=1)
            name = re.sub(r" \[[^\]]*\]$", "", name)
            rows[name] = rows.get(name, 0) + int(m.group(1).replace(",", ""))
    return rows

def bench_events(path):
    """Events of one `locksmith bench --json` run of one backend and one round."""
    j = json.load(open(path))
    r = j["backends"][0]["rounds"][0]
    return sum(r.get("contended_acquisitions") or []) or r["cycles_per_sec"] * j["duration_ms"] / 1000


def program_total(path):
    text = subprocess.run(["callgrind_annotate", path], capture_output=True, text=True).stdout
    return int(re.search(r"([\d,]+) .*PROGRAM TOTALS", text).group(1).replace(",", ""))


def main():
    d = sys.argv[1]
    if "--bench" in sys.argv:
        i = sys.argv.index("--bench")
        short, long = sys.argv[i + 1], sys.argv[i + 2]
        n1, n2 = bench_events(f"{d}/bench-{short}.json"), bench_events(f"{d}/bench-{long}.json")
        open(f"{d}/cycles", "w").write(f"{n1} {n2}\n")
        t1, t2 = program_total(f"{d}/callgrind.out.1"), program_total(f"{d}/callgrind.out.2")
        print(f"{(t2 - t1) / (n2 - n1):,.0f} instructions per event ({n1:.0f} and {n2:.0f} events; dumps in {d})")
        return
    n1, n2 = (float(x) for x in open(f"{d}/cycles").read().split())
    p1, p2 = f"{d}/callgrind.out.1", f"{d}/callgrind.out.2"
    if "--callers" in sys.argv:
        pat = re.compile(sys.argv[sys.argv.index("--callers") + 1])
        a, b = ({k: v for k, v in raw(p)[2].items() if pat.search(k[1])} for p in (p1, p2))
        rows = {k: (b.get(k, 0) - a.get(k, 0)) / (n2 - n1) for k in set(a) | set(b)}
        for (caller, callee), v in sorted(rows.items(), key=lambda kv: -kv[1]):
            if abs(v) >= 0.5:
                print(f"{v:10.1f}  {caller[:110]} -> {callee[:40]}")
        return
    if "--calls" in sys.argv:
        pat = re.compile(sys.argv[sys.argv.index("--calls") + 1])
        a, b = ({k: v for k, v in raw(p)[1].items() if pat.search(k)} for p in (p1, p2))
        for k in sorted(set(a) | set(b)):
            print(f"{(b.get(k, 0) - a.get(k, 0)) / (n2 - n1):10.1f}  {k[:150]}")
        return
    inclusive = "--self" not in sys.argv and "--groups" not in sys.argv
    a, b = table(p1, inclusive), table(p2, inclusive)
    per = {k: (b.get(k, 0) - a.get(k, 0)) / (n2 - n1) for k in set(a) | set(b)}
    if "--groups" in sys.argv:
        sums = {}
        for name, v in per.items():
            g = next((g for g, r in GROUPS if re.search(r, name)), "other")
            sums[g] = sums.get(g, 0) + v
        total = sum(sums.values())
        for g, v in sorted(sums.items(), key=lambda kv: -kv[1]):
            print(f"{v:12,.0f}  {100 * v / total:5.1f} %  {g}")
        print(f"{total:12,.0f}  total")
        return
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 40
    for name, v in sorted(per.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{v:12,.0f}  {name[:150]}")

if __name__ == "__main__":
    main()
