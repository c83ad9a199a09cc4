#!/usr/bin/env python3
"""The bench driver's rows (bench_ops: OUT/OP.csv) and the rows of everything beside it, in one schema.

  ops_rows.py torch OUT [--store torch.csv] [--fp8 torch_fp8.csv] [--transfer torch_transfer.csv]
      Append the PyTorch peers' rows (torch_peer.py, torch_fp8_peer.py --csv, torch_transfer_peer.py
      --csv) to OUT/store_kv_cache.csv and OUT/transfer_kv.csv, on the driver's cells, so that one
      table holds kvjit, its peers and its bounds per cell.
  ops_rows.py compare NEW.csv... [--store s.csv] [--hot h.csv] [--fp8 f.csv] [--transfer t.csv]
                                 [--layers tl.csv] [--tolerance 0.03]
      The old benches' rows (bench_store, its --hot-inputs run, bench_fp8, bench_transfer and its
      --layers run) against the driver's, cell by cell: every old cell must be in the new rows
      (exit 1 when one is missing), and where both ran in one run, new / old of the median,
      device time (graph rounds, long stream rounds) apart from host-bound timings (the host cost,
      short cells on a stream: the process's launch rate); --strict fails on device timings
      beyond the tolerance.
  ops_rows.py old-cells (LIST.txt | --run BENCH_OPS)
      Every cell the old benches' default grids (and the PyTorch peers) measured, against
      `bench_ops --list` (no GPU needed): exit 1 when the driver lacks one. The unit suite runs it.

A key is (section, impl, op, cell, mode); cell is the driver's own columns joined by commas.
"""
import argparse
import csv
import math
import os
import sys

STORE_COLS = ("row_bytes", "batch", "index", "pdl", "dtype", "inputs", "layout")
TRANSFER_COLS = ("direction", "row_bytes", "batch", "layers")
SCHEMA_TAIL = ("mode", "launches", "reps", "us_median", "us_min", "us_max", "bytes_per_launch", "tbps_median",
               "check")
STORE_ROWS = (128, 256, 512, 1024, 2048, 4096, 8192)


def store_cell(row, batch, index="int64", pdl="on", dtype="bytes", inputs="dram", layout="flat"):
    return ",".join(str(x) for x in (row, batch, index, pdl, dtype, inputs, layout))


def transfer_cell(direction, row, batch, layers=1):
    return ",".join(str(x) for x in (direction, row, batch, layers))


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ---- the old benches' rows as the driver's keys ----------------------------------------------------------------

def old_store(rows, inputs):
    """bench_store's CSV (the grid, its bounds, the host cost)."""
    for r in rows:
        sec, impl, split = r["section"], r["impl"], r["split"]
        if sec == "store":
            cell = store_cell(r["row_bytes"], r["batch"], r["index"], r["pdl"], "bytes", inputs)
            name = impl if impl != "kvjit" else {"auto": "kvjit", "auto_again": "kvjit_auto_again"}.get(
                split, "kvjit_split" + split)
            yield ("cell", name, "store_kv_cache", cell, r["mode"]), r
        elif sec == "bound" and impl in ("copy_same_size", "kvjit_consecutive_slots"):
            yield ("bound", impl, "store_kv_cache", store_cell(r["row_bytes"], r["batch"]), "graph"), r
        elif sec == "bound" and impl == "empty_kernel":
            yield ("bound", "empty_kernel_pdl" if r["pdl"] == "on" else "empty_kernel", "store_kv_cache", "",
                   r["mode"]), r
        elif sec == "bound" and impl == "memcpy_dtod":
            yield ("bound", impl, "store_kv_cache", "", "stream"), r
        elif sec == "host":
            # The host cost does not depend on where the inputs come from: the driver's dram cell.
            yield ("host", impl, "store_kv_cache", store_cell(r["row_bytes"], 1, "int64", r["pdl"]), "cpu"), r


FP8_IMPLS = {"fused/tensor": ("kvjit", ""), "fused/head": ("kvjit", "/head"), "unfused x3": ("unfused_x3", ""),
             "plain fp8": ("plain_fp8", ""), "plain bf16": ("plain_bf16", "")}


def old_fp8(rows):
    """bench_fp8's CSV: elems, bf16_row_bytes, batch, impl, us_per_store (graph)."""
    for r in rows:
        name, scale = FP8_IMPLS[r["impl"]]
        cell = store_cell(r["bf16_row_bytes"], r["batch"], dtype="bf16>fp8_e4m3" + scale)
        yield ("cell", name, "store_kv_cache", cell, "graph"), dict(r, us_median=r["us_per_store"])


TRANSFER_IMPLS = {"ref_sglang_q2": "ref_quota2", "ref_sglang_full": "ref_quota_full"}


def old_transfer(rows):
    """bench_transfer's CSV (eager launches on a stream): its cells and its bounds."""
    for r in rows:
        if r["section"] == "transfer":
            impl = TRANSFER_IMPLS.get(r["impl"], r["impl"])
            sec = "bound" if impl == "kvjit_consecutive_slots" else "cell"
            yield (sec, impl, "transfer_kv", transfer_cell(r["direction"], r["row_bytes"], r["batch"], r["layers"]),
                   "stream"), r
        elif r["section"] == "bound":
            yield ("bound", r["impl"], "transfer_kv", "", "stream"), dict(r, us_median="")


def new_rows(paths):
    out = {}
    for path in paths:
        op = os.path.basename(path).rsplit(".", 1)[0]
        rows = read(path)
        if rows and "section" not in rows[0]:
            print(f"ops_rows: {path} has no header (a run cut short): left out", file=sys.stderr)
            continue
        for r in rows:
            cols = STORE_COLS if op == "store_kv_cache" else TRANSFER_COLS
            cell = ",".join(r[c] for c in cols) if r[cols[0]] else ""
            out[(r["section"], r["impl"], op, cell, r["mode"])] = r
    return out


def compare(opt):
    new = new_rows(opt.new)
    old = []
    for path, fn in ((opt.store, lambda rs: old_store(rs, "dram")), (opt.hot, lambda rs: old_store(rs, "hot")),
                     (opt.fp8, old_fp8), (opt.transfer, old_transfer), (opt.layers, old_transfer)):
        if path:
            old += list(fn(read(path)))
    missing, ratios, slow = [], [], []  # slow: device timings beyond the tolerance
    for key, r in old:
        if key not in new:
            missing.append(key)
            continue
        try:
            before, after = float(r["us_median"]), float(new[key]["us_median"])
        except (KeyError, ValueError):
            continue  # a bound measured at another size: present, not compared
        if before > 0 and after > 0:
            ratios.append((after / before, key, before, after))
    print(f"old cells: {len(old)}; in the new rows: {len(old) - len(missing)}; missing: {len(missing)}")
    for key in missing:
        print("  MISSING", " ".join(key))
    # Device time: graph rounds, and stream rounds of cells long enough that the launch rate does
    # not set them. Host-bound: the host cost and short cells on a stream, which measure how fast
    # this process's CPU issues launches (kvjit's call and a raw cuLaunchKernelEx move together),
    # and the per-row copies (2 cuMemcpyAsync per item and layer: the host's API call rate at any
    # size; the old bench's own medians moved 30 % between two runs, 10.5 -> 7.3 ms).
    def host_bound(key, before):
        return key[4] == "cpu" or (key[4] == "stream" and (before < 20.0 or key[1] == "memcpy_per_row"))
    for label, pick in (("device time (graph; stream >= 20 µs)", lambda x: not host_bound(x[1], x[2])),
                        ("host-bound (cpu; stream < 20 µs; per-row copies)", lambda x: host_bound(x[1], x[2]))):
        part = [x for x in ratios if pick(x)]
        if not part:
            continue
        geo = math.exp(sum(math.log(x[0]) for x in part) / len(part))
        beyond = [x for x in part if abs(x[0] - 1) > opt.tolerance]
        if not label.startswith("host"):
            slow += beyond
        print(f"{label}: {len(part)} timings, geo-mean new/old {geo:.4f}; beyond {opt.tolerance:.0%}: {len(beyond)}")
    print("\n| section | impl | op | cell | mode | old µs | new µs | new/old |\n"
          "| --- | --- | --- | --- | --- | ---: | ---: | ---: |")
    for ratio, key, before, after in sorted(ratios, key=lambda x: (host_bound(x[1], x[2]), x[1])):
        mark = " **" if abs(ratio - 1) > opt.tolerance else ""
        print(f"| {' | '.join(key)} | {before:.3f} | {after:.3f} | {ratio:.3f}{mark} |")
    return 1 if missing or (opt.strict and slow) else 0


# ---- the PyTorch peers' rows --------------------------------------------------------------------------------------

def schema_row(section, impl, cols, mode, launches, reps, med, lo, hi, nbytes, check):
    tb = nbytes / (med * 1e-6) / 1e12 if med > 0 and nbytes > 0 else 0.0
    return [section, impl, "auto", *cols, mode, launches, reps, f"{med:.4f}", f"{lo:.4f}", f"{hi:.4f}",
            f"{nbytes:.0f}", f"{tb:.4f}", check]


def torch_rows(opt):
    store, transfer = [], []
    if opt.store and os.path.exists(opt.store):
        for r in read(opt.store):  # torch_peer.py: bf16 rows viewed as bytes, int64 ids
            # PyTorch has no PDL, kvjit_ctypes runs PDL automatic: both sit beside the PDL-on cell.
            cols = store_cell(r["row_bytes"], r["batch"], r["index"]).split(",")
            store.append(schema_row("cell", r["impl"], cols, r["mode"], r["launches"], r["reps"], float(r["us_median"]),
                                    float(r["us_min"]), float(r["us_max"]), float(r["bytes_per_launch"]), r["check"]))
    if opt.fp8 and os.path.exists(opt.fp8):
        for r in read(opt.fp8):  # torch_fp8_peer.py --csv: per-tensor scale, int64 ids, graph
            row, batch = int(r["row_bytes"]), int(r["batch"])
            cols = store_cell(row, batch, dtype="bf16>fp8_e4m3").split(",")
            store.append(schema_row("cell", r["impl"], cols, "graph", r["launches"], r["reps"], float(r["us_median"]),
                                    float(r["us_min"]), float(r["us_max"]), 2.0 * batch * (row + row // 2), r["check"]))
    if opt.transfer and os.path.exists(opt.transfer):
        for r in read(opt.transfer):  # torch_transfer_peer.py: eager, the Python call included
            cols = transfer_cell(r["direction"], r["row_bytes"], r["batch"]).split(",")
            nbytes = 4.0 * int(r["batch"]) * int(r["row_bytes"])
            for impl, key in (("torch_index_copy", "torch_us"), ("kvjit_python", "kvjit_us")):
                us = float(r[key])
                transfer.append(schema_row("cell", impl, cols, "python", 1, 1, us, us, us, nbytes, "ok"))
    for name, rows in (("store_kv_cache", store), ("transfer_kv", transfer)):
        path = os.path.join(opt.out, name + ".csv")
        if not rows:
            continue
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            print(f"ops_rows: {path} missing or empty: {len(rows)} PyTorch rows not merged", file=sys.stderr)
            continue
        with open(path, "a", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
        print(f"ops_rows: {len(rows)} PyTorch rows appended to {path}")
    return 0


# ---- the old grids against bench_ops --list ------------------------------------------------------------------------

def old_grid():
    """(op, cell, impl) of every cell the old benches measured with their defaults, as run_gpu.sh ran them."""
    out = []
    # bench_store (the default grid, splits on) and its host cost
    for index in ("int32", "int64"):
        for pdl in ("on", "off"):
            for row in STORE_ROWS:
                for batch in (1, 16, 128, 1024, 8192, 65536):
                    cell = store_cell(row, batch, index, pdl)
                    out += [("store_kv_cache", cell, i) for i in ("kvjit", "ref_reimpl", "kvjit_auto_again")]
                    out += [("store_kv_cache", cell, f"kvjit_split{s}") for s in (1, 2, 4, 8, 16) if row % s == 0]
    for row in STORE_ROWS:
        for i in ("copy_same_size", "kvjit_consecutive_slots"):
            out.append(("store_kv_cache", store_cell(row, 65536), i))
    for pdl in ("on", "off"):
        for i in ("kvjit_call", "raw_cuLaunchKernelEx"):
            out.append(("store_kv_cache", store_cell(1024, 1, "int64", pdl), i))
    # bench_store --hot-inputs --batches 1,16 --index 64 --pdl on
    for row in STORE_ROWS:
        for batch in (1, 16):
            cell = store_cell(row, batch, inputs="hot")
            out += [("store_kv_cache", cell, i) for i in ("kvjit", "ref_reimpl", "kvjit_auto_again")]
            out += [("store_kv_cache", cell, f"kvjit_split{s}") for s in (1, 2, 4, 8, 16) if row % s == 0]
    # bench_fp8: bf16 rows of 64..4096 elements x batch 1..65536
    for elems in (64, 128, 512, 1024, 2048, 4096):
        for batch in (1, 16, 256, 4096, 65536):
            for impl, (name, scale) in FP8_IMPLS.items():
                out.append(("store_kv_cache", store_cell(2 * elems, batch, dtype="bf16>fp8_e4m3" + scale), name))
    # bench_transfer (d2d, d2h, h2d; over the host link also all SMs) and --layers 8 --rows 2048,4096
    # --batches 1024,4096,16384
    for d in ("d2d", "d2h", "h2d"):
        for row in (512, 2048, 4096, 16384):
            for batch in (64, 1024, 4096, 16384, 65536):
                cell = transfer_cell(d, row, batch)
                out += [("transfer_kv", cell, i) for i in ("kvjit", "kvjit_consecutive_slots", "ref_quota2",
                                                             "ref_quota_full")]
                if d != "d2d":
                    out.append(("transfer_kv", cell, "kvjit_all_sms"))
                if batch <= 16384:
                    out.append(("transfer_kv", cell, "memcpy_per_row"))
        for row in (2048, 4096):
            for batch in (1024, 4096, 16384):
                cell = transfer_cell(d, row, batch, 8)
                out += [("transfer_kv", cell, i) for i in ("kvjit", "kvjit_consecutive_slots", "ref_quota2",
                                                             "ref_quota_full")]
                if d != "d2d":
                    out.append(("transfer_kv", cell, "kvjit_all_sms"))
                if batch * 8 <= 16384:
                    out.append(("transfer_kv", cell, "memcpy_per_row"))
    return out


def torch_grid():
    """The cells the PyTorch peers time: each must be one of the driver's, so their rows join its table."""
    out = [("store_kv_cache", store_cell(row, batch)) for row in STORE_ROWS for batch in (1, 16, 128, 1024, 8192, 65536)]
    out += [("store_kv_cache", store_cell(row, batch, dtype="bf16>fp8_e4m3")) for row in (256, 2048, 8192)
            for batch in (1, 16, 256, 4096, 65536)]
    out += [("transfer_kv", transfer_cell(d, row, batch)) for d in ("d2d", "d2h", "h2d") for row in (2048, 16384)
            for batch in (64, 4096, 65536)]
    return out


def old_cells(opt):
    listed = {}
    if opt.run:
        import subprocess
        lines = subprocess.run([opt.run, "--list"], check=True, capture_output=True, text=True).stdout.splitlines()
    else:
        with open(opt.list) as f:
            lines = f.read().splitlines()
    for line in lines:
        op, cell, impls = (p.strip() for p in line.split(":", 2))
        listed[(op, cell)] = set(impls.split())
    missing = [x for x in old_grid() if x[2] not in listed.get(x[:2], ())]
    missing += [(op, cell, "(the cell, for PyTorch's rows)") for op, cell in torch_grid() if (op, cell) not in listed]
    print(f"old cells: {len(old_grid())} + {len(torch_grid())} PyTorch cells; bench_ops cells: {len(listed)}, "
          f"timings: {sum(len(v) for v in listed.values())}; missing: {len(missing)}")
    for m in missing:
        print("  MISSING", *m)
    return 1 if missing else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch")
    t.add_argument("out")
    t.add_argument("--store")
    t.add_argument("--fp8")
    t.add_argument("--transfer")
    c = sub.add_parser("compare")
    c.add_argument("new", nargs="+")
    for name in ("store", "hot", "fp8", "transfer", "layers"):
        c.add_argument("--" + name)
    c.add_argument("--tolerance", type=float, default=0.03)
    c.add_argument("--strict", action="store_true")
    o = sub.add_parser("old-cells")
    o.add_argument("list", nargs="?")
    o.add_argument("--run", help="bench_ops to run with --list")
    opt = ap.parse_args()
    return {"torch": torch_rows, "compare": compare, "old-cells": old_cells}[opt.cmd](opt)


if __name__ == "__main__":
    sys.exit(main())
