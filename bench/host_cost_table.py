#!/usr/bin/env python3
"""A compact table of bench_ops' host-cost spread (OUT/OP_host.csv, bench/bench_host_cost.h) over runs.

usage: host_cost_table.py LABEL=DIR [LABEL=DIR ...] [--op store_kv_cache]

Runs with one LABEL (e.g. main=run1 mine=run2 main=run3 ...) are pooled under it. Printed per cell
(row bytes, PDL) and mode: the call over the raw launch per run and the label's median; then per
label the paired differences (kind - raw launch in the same round, ns) of every kind, median over
its runs, and the call's cost over a launch through the kernel's CUfunction (call - raw_cuFunction,
from the same rounds): comparable between libraries that launch a CUkernel and one that launches
a CUfunction (whose captured node then names a CUfunction, so that its raw launch is one).
"""
import argparse
import csv
import os
import statistics
import sys


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="LABEL=DIR")
    ap.add_argument("--op", default="store_kv_cache")
    opt = ap.parse_args()
    runs = {}  # label -> [rows of one run]
    for arg in opt.runs:
        label, _, path = arg.partition("=")
        f = os.path.join(path, opt.op + "_host.csv")
        if not os.path.exists(f):
            print(f"{arg}: no {opt.op}_host.csv", file=sys.stderr)
            continue
        runs.setdefault(label, []).append(read(f))
    if not runs:
        return 1
    any_rows = next(iter(runs.values()))[0]
    cells = sorted({(r["row_bytes"], r["pdl"]) for r in any_rows}, key=lambda c: (int(c[0]), c[1]))
    modes = list(dict.fromkeys(r["mode"] for r in any_rows))
    kinds = list(dict.fromkeys(r["kind"] for r in any_rows))

    def value(rows, cell, mode, kind, col):
        for r in rows:
            if (r["row_bytes"], r["pdl"]) == cell and r["mode"] == mode and r["kind"] == kind:
                return float(r[col])
        return None

    print("call / raw launch (medians of each mode's samples), per run, then the label's median")
    print(f"{'row pdl':9} {'mode':17} " + " | ".join(f"{label:>{7 * len(rs) + 7}}" for label, rs in runs.items()))
    for cell in cells:
        for mode in modes:
            parts = []
            for label, rs in runs.items():
                ratios = []
                for rows in rs:
                    call, raw = value(rows, cell, mode, "kvjit_call", "ns_median"), value(
                        rows, cell, mode, "raw_cuLaunchKernelEx", "ns_median")
                    ratios.append(call / raw if call and raw else float("nan"))
                med = statistics.median(ratios)
                parts.append(" ".join(f"{x:6.3f}" for x in ratios) + f" ({med:5.3f})")
            print(f"{cell[0] + ' ' + cell[1]:9} {mode:17} " + " | ".join(parts))
    print("\npaired (kind - raw launch in the same round), ns, median over the label's runs; raw launch: its ns")
    short = {"kvjit_call": "call", "raw_cuLaunchKernelEx": "raw", "raw_cuCtxGetDevice_launch": "+ctxdev",
             "raw_cuFunction": "cuFunc", "raw_ctx_id_cuFunction": "+sctx+id cuF",
             "raw_stream_ctx_cuFunction": "+sctx cuF", "raw_stream_id_cuFunction": "+sid cuF"}
    print(f"{'label':6} {'row pdl':9} {'mode':17} " + " ".join(f"{short.get(k, k):>13}" for k in kinds) +
          f" {'call-cuFunc':>12} node")
    for label, rs in runs.items():
        for cell in cells:
            for mode in modes:
                vals = []
                for k in kinds:
                    col = "ns_median" if k == "raw_cuLaunchKernelEx" else "paired_ns"
                    xs = [value(rows, cell, mode, k, col) for rows in rs]
                    xs = [x for x in xs if x is not None]
                    vals.append(statistics.median(xs) if xs else float("nan"))
                over = [value(rows, cell, mode, "kvjit_call", "paired_ns") -
                        value(rows, cell, mode, "raw_cuFunction", "paired_ns") for rows in rs]
                nodes = {r["node"] for rows in rs for r in rows if (r["row_bytes"], r["pdl"]) == cell}
                print(f"{label:6} {cell[0] + ' ' + cell[1]:9} {mode:17} " + " ".join(f"{v:13.0f}" for v in vals) +
                      f" {statistics.median(over):12.0f} {'/'.join(sorted(nodes))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
