#!/usr/bin/env python3
"""Markdown of one bench_ops CSV (OUT/OP.csv, PyTorch's rows merged by ops_rows.py torch): the
bounds, the host cost, a summary per implementation against kvjit, then per cell kvjit, its peers
and its bounds side by side.

usage: ops_table.py OUT/OP.csv [--md OUT/OP.md] [--title TEXT]
"""
import argparse
import csv
import math
import os
import sys

TAIL = ("mode", "launches", "reps", "us_median", "us_min", "us_max", "bytes_per_launch", "tbps_median", "check")


def targets(op, timed, cell, us, bounds):
    """The ops' targets from their issues, on this run's cells (worst cell of each)."""
    out = ["", "## Targets", ""]
    kv = [r for r in timed if r["impl"] == "kvjit" and r["check"] == "ok"]
    if op == "store_kv_cache":
        # Issue 3, per launch in a graph, int64 ids and PDL on, plain copies from DRAM.
        mine = [r for r in kv if r["mode"] == "graph" and r["index"] == "int64" and r["pdl"] == "on"
                and r["dtype"] == "bytes" and r["inputs"] == "dram"]
        rules = (("batch <= 16, rows <= 2048 B: µs", lambda r: int(r["batch"]) <= 16 and int(r["row_bytes"]) <= 2048,
                  us, 0.65, True),
                 ("batch <= 16, rows 8192 B: µs", lambda r: int(r["batch"]) <= 16 and r["row_bytes"] == "8192", us,
                  0.9, True),
                 ("batch 65536, rows >= 512 B: TB/s", lambda r: r["batch"] == "65536" and int(r["row_bytes"]) >= 512,
                  lambda r: float(r["tbps_median"]), 4.0, False),
                 ("batch 65536, rows 128 B: TB/s", lambda r: r["batch"] == "65536" and r["row_bytes"] == "128",
                  lambda r: float(r["tbps_median"]), 3.2, False))
        for what, pick, value, limit, at_most in rules:
            vals = [(value(r), cell(r)) for r in mine if pick(r)]
            if vals:
                v, c = max(vals) if at_most else min(vals)
                met = v <= limit if at_most else v >= limit
                out.append(f"- {what}: worst {v:.3f} ({c}), target {'<=' if at_most else '>='} {limit}: "
                           f"{'met' if met else 'NOT met'}")
    if op == "transfer_kv":
        # Issue 17, eager launches on a stream (bench_transfer's timing).
        link = {d: bounds.get((b, "stream")) for d, b in (("d2h", "memcpy_dtoh_pinned"), ("h2d", "memcpy_htod_pinned"))}
        for d, b in link.items():
            if not b:
                continue
            rate = float(b["bytes_per_launch"]) / us(b)  # bytes per µs one way
            vals = [((float(r["bytes_per_launch"]) / 2 / us(r)) / rate, cell(r)) for r in kv
                    if r["mode"] == "stream" and r["direction"] == d and int(r["row_bytes"]) >= 4096
                    and int(r["batch"]) >= 4096 and us(r) > 0]
            if vals:
                v, c = min(vals)
                out.append(f"- {d}, rows >= 4 KiB, batches >= 4096: worst {100 * v:.1f} % of the link ({c}), "
                           f"target >= 90 %: {'met' if v >= 0.9 else 'NOT met'}")
        seq = {cell(r): us(r) for r in timed if r["impl"] == "kvjit_consecutive_slots" and r["mode"] == "stream"}
        for r in kv:
            if r["mode"] == "stream" and r["direction"] == "d2d" and r["batch"] == "65536" and seq.get(cell(r)):
                v = seq[cell(r)] / us(r)
                out.append(f"- d2d {cell(r)}: {100 * v:.1f} % of the consecutive-slot copy, target >= 95 %: "
                           f"{'met' if v >= 0.95 else 'NOT met'}")
        # Issue 29: over the host link the default plan (few CTAs) keeps >= 97 % of the all-SM plan's bandwidth.
        alls = {cell(r): us(r) for r in timed if r["impl"] == "kvjit_all_sms" and r["mode"] == "stream"}
        for d in ("d2h", "h2d"):
            vals = [(alls[cell(r)] / us(r), cell(r)) for r in kv if r["mode"] == "stream" and r["direction"] == d
                    and int(r["batch"]) >= 1024 and us(r) > 0 and alls.get(cell(r))]
            if vals:
                v, c = min(vals)
                out.append(f"- {d}, batches >= 1024: the default plan's worst cell at {100 * v:.1f} % of the all-SM "
                           f"plan's bandwidth ({c}), target >= 97 %: {'met' if v >= 0.97 else 'NOT met'}")
        refs = [(us(k), us(r)) for k in kv for r in timed if r["impl"].startswith("ref_") and r["mode"] == k["mode"]
                and cell(r) == cell(k) and us(r) > 0 and k["mode"] == "stream"]
        out.append(f"- cells where kvjit is slower than the reference (either quota, stream): "
                   f"{sum(a > b for a, b in refs)} of {len(refs)} (target 0)")
    return out if len(out) > 3 else []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--md")
    ap.add_argument("--title", default="")
    opt = ap.parse_args()
    op = os.path.basename(opt.csv).rsplit(".", 1)[0]
    with open(opt.csv, newline="") as f:
        reader = csv.DictReader(f)
        cols = [c for c in reader.fieldnames[3:] if c not in TAIL]
        rows = list(reader)
    cell = lambda r: ",".join(r[c] for c in cols)  # noqa: E731
    us = lambda r: float(r["us_median"] or 0)  # noqa: E731
    out = [f"# {op}{' on ' + opt.title if opt.title else ''}", "",
           "bench_ops: per launch in a CUDA graph (inputs rotating) and as eager calls on a stream, µs per launch, "
           "median of the rounds; peers on the same buffers and ids; `python`: one eager Python call, wall time.", ""]

    bounds = {(r["impl"], r["mode"]): r for r in rows if r["section"] == "bound" and not r[cols[0]]}
    out += ["## Bounds", "", "| bound | mode | µs | rate |", "| --- | --- | ---: | ---: |"]
    for (impl, mode), r in bounds.items():
        rate = float(r["tbps_median"])
        rate_s = f"{rate:.3f} TB/s" if rate > 0.5 else f"{rate * 1e3:.1f} GB/s" if rate > 0 else ""
        out.append(f"| {impl} | {mode} | {us(r):.3f} | {rate_s} |")
    dtod = bounds.get(("memcpy_dtod", "stream"))
    memcpy_tbps = float(dtod["tbps_median"]) if dtod else 0.0

    # The rows of record (mode cpu); the other modes' spread is in OUT/OP_host.csv (bench_host_cost.h).
    host = [r for r in rows if r["section"] == "host" and r["mode"] == "cpu"]
    if host:
        out += ["", "## Host cost of one eager call (ns)", "",
                "The whole call against a raw `cuLaunchKernelEx` of the kernel, grid and arguments it launched "
                "(issue 17's target: <= 1.03).", "", f"| {' | '.join(cols)} | call | raw launch | call / raw |",
                "|" + " --- |" * (len(cols) + 3)]
        by_cell = {}
        for r in host:
            by_cell.setdefault(cell(r), {})[r["impl"]] = us(r) * 1e3
        for c, v in by_cell.items():
            call, raw = v.get("kvjit_call", 0), v.get("raw_cuLaunchKernelEx", 0)
            out.append(f"| {c.replace(',', ' | ')} | {call:.0f} | {raw:.0f} | {call / raw if raw else 0:.3f} |")

    timed = [r for r in rows if r["section"] in ("cell", "bound") and r[cols[0]]]
    kvjit = {(cell(r), r["mode"]): us(r) for r in timed if r["impl"] == "kvjit"}
    impls = []
    for r in timed:
        if r["impl"] != "kvjit" and r["impl"] not in impls:
            impls.append(r["impl"])
    out += ["", "## kvjit against each peer and bound", "",
            "kvjit / other over the cells both timed in that mode (< 1: kvjit is faster).", "",
            "| impl | mode | cells | geo-mean kvjit / impl | cells where kvjit is slower |",
            "| --- | --- | ---: | ---: | ---: |"]
    for impl in impls:
        for mode in ("graph", "stream", "python"):
            kmode = "stream" if mode == "python" else mode  # a Python call against kvjit's eager C call
            pairs = [(kvjit[(cell(r), kmode)], us(r)) for r in timed if r["impl"] == impl and r["mode"] == mode
                     and kvjit.get((cell(r), kmode), 0) > 0 and us(r) > 0]
            if not pairs:
                continue
            geo = math.exp(sum(math.log(a / b) for a, b in pairs) / len(pairs))
            out.append(f"| {impl} | {mode} | {len(pairs)} | {geo:.3f} | {sum(a > b for a, b in pairs)} |")
    splits = {}
    for r in timed:
        if r["impl"].startswith("kvjit_split") and r["mode"] == "graph":
            best = splits.get(cell(r))
            if best is None or us(r) < best[0]:
                splits[cell(r)] = (us(r), r["impl"][len("kvjit_split"):])
    again = {cell(r): us(r) for r in timed if r["impl"] == "kvjit_auto_again" and r["mode"] == "graph"}
    worse = [c for c in splits if c in again and splits[c][0] > 0 and again[c] / splits[c][0] > 1.02]
    if splits:
        out += ["", f"Automatic split more than 2 % slower than the best fixed split (graph, timed in the same pass): "
                f"{len(worse)} of {len(again)} cells" + (": " + "; ".join(worse[:12]) if worse else "") + "."]

    out += targets(op, timed, cell, us, bounds)

    out += ["", "## Cells", "", f"| {' | '.join(cols)} | impl | check | graph µs | TB/s | of memcpy | kvjit / impl | "
            "eager µs |", "|" + " --- |" * (len(cols) + 7)]
    by_cell = {}
    for r in timed:
        by_cell.setdefault(cell(r), {}).setdefault(r["impl"], {})[r["mode"]] = r
    for c, per in by_cell.items():
        for impl, modes in per.items():
            g, e = modes.get("graph"), modes.get("stream") or modes.get("python")
            gu = us(g) if g else 0
            tb = float(g["tbps_median"]) if g else 0
            k = kvjit.get((c, "graph")) if g else kvjit.get((c, "stream"))
            base = gu if g else us(e) if e else 0
            vs = f"{k / base:.3f}" if impl != "kvjit" and k and base else ""
            check = (g or e)["check"]
            out.append(f"| {c.replace(',', ' | ')} | {impl} | {check} | {gu:.3f} | {tb:.3f} | "
                       f"{tb / memcpy_tbps if memcpy_tbps else 0:.3f} | {vs} | {us(e) if e else 0:.3f} |")
    text = "\n".join(out) + "\n"
    if opt.md:
        with open(opt.md, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
