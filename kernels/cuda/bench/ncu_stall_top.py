"""ncu_stall_top.py: summarize `ncu --page source --csv --print-source sass` output.

Prints the stall-sample share by opcode and the 30 SASS instructions with the most warp-stall
samples (with the most sampled stall reasons), to see where a kernel waits.
usage: python3 ncu_stall_top.py SOURCE.csv
"""
import csv
import sys
from collections import defaultdict


def num(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    hdr_i = next(i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r))
    hdr = [c.strip() for c in rows[hdr_i]]
    data = rows[hdr_i + 1:]
    src = hdr.index("Source")
    addr = hdr.index("Address") if "Address" in hdr else None
    tot = next(i for i, c in enumerate(hdr) if c.startswith("Warp Stall Sampling (All"))
    reasons = [i for i, c in enumerate(hdr) if c.startswith("stall_") or "Stall" in c and i != tot
               and "Sampling" not in c]
    total = sum(num(r[tot]) for r in data if len(r) > tot) or 1.0
    by_op = defaultdict(float)
    for r in data:
        if len(r) <= tot:
            continue
        op = r[src].strip().split()[0] if r[src].strip() else "?"
        if op.startswith("@"):
            op = r[src].strip().split()[1]
        by_op[op.split(".")[0]] += num(r[tot])
    print(f"{len(data)} SASS lines, {total:.0f} stall samples")
    print("share by opcode:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in
                                        sorted(by_op.items(), key=lambda kv: -kv[1])[:14]))
    top = sorted((r for r in data if len(r) > tot), key=lambda r: -num(r[tot]))[:30]
    for r in top:
        rs = sorted(((hdr[i], num(r[i])) for i in reasons if i < len(r)), key=lambda kv: -kv[1])[:3]
        where = r[addr] if addr is not None else ""
        print(f"{100 * num(r[tot]) / total:5.2f}% {where:>8} {r[src].strip()[:60]:<60} " +
              " ".join(f"{k}={v:.0f}" for k, v in rs if v > 0))


if __name__ == "__main__":
    main()
