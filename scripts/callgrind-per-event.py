#!/usr/bin/env python3
"""Per-event instructions by function from two callgrind dumps of runs of different length
(docs/benchmarks.md, issue 27): (dump 2 - dump 1) / (events 2 - events 1), inclusive or
self, with the calls per event. Used on the dumps of scripts/profile-cluster-node.sh:

    scripts/callgrind-per-event.py DIR [--self] [--top N] [--grep REGEX]

DIR holds callgrind.out.1, callgrind.out.2 and `cycles` ("N1 N2")."""
import re, subprocess, sys

def table(path, inclusive):
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

def calls(path):
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=yes", "--tree=caller", path],
                          capture_output=True, text=True).stdout
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*[\d,]+ \([ \d.]+%\)\s+<\s+(.*) \(([\d,]+)x\)", line)
        if m:
            name = re.sub(r"^[^:]*:", "", m.group(1), count=1)
            out.setdefault("callers", {})
        m2 = re.match(r"\s*[\d,]+ \([ \d.]+%\)\s+\*\s+(.*)$", line)
    return out

def main():
    d = sys.argv[1]
    inclusive = "--self" not in sys.argv
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 40
    pat = re.compile(sys.argv[sys.argv.index("--grep") + 1]) if "--grep" in sys.argv else None
    n1, n2 = (float(x) for x in open(f"{d}/cycles").read().split())
    a, b = table(f"{d}/callgrind.out.1", inclusive), table(f"{d}/callgrind.out.2", inclusive)
    per = {k: (b.get(k, 0) - a.get(k, 0)) / (n2 - n1) for k in set(a) | set(b)}
    rows = sorted(per.items(), key=lambda kv: -kv[1])
    if pat:
        rows = [r for r in rows if pat.search(r[0])]
    for name, v in rows[:top]:
        print(f"{v:12,.0f}  {name[:150]}")

main()
