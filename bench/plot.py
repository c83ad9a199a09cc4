#!/usr/bin/env python3
"""Plot bench_ops' store_kv_cache.csv (or an old bench_store CSV of bench/results/): achieved bandwidth vs batch, one panel per row size, kvjit against the
reference (reimplemented) per launch in a CUDA graph, with the cuMemcpyDtoD line; PyTorch's
fallback too when torch_peer.py's CSV is given.

usage: plot.py store.csv store.png [--torch torch.csv] [--title TEXT] [--index int64] [--pdl on]
"""
import argparse
import csv
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("png")
    ap.add_argument("--torch", help="torch_peer.py CSV")
    ap.add_argument("--title", default="")
    ap.add_argument("--index", default="int64")
    ap.add_argument("--pdl", default="on")
    ap.add_argument("--mode", default="graph", choices=["graph", "stream"])
    ap.add_argument("--log", action="store_true", help="log bandwidth axis (default linear)")
    opt = ap.parse_args()

    rows = read(opt.csv)
    memcpy = [float(r["tbps_median"]) for r in rows if r["section"] == "bound" and r["impl"] == "memcpy_dtod"]
    # bench_store's CSV ("store" rows) or bench_ops' (store_kv_cache.csv: "cell" rows, plain copies only)
    store = [r for r in rows if r["section"] in ("store", "cell") and r["mode"] == opt.mode
             and r["index"] == opt.index and r["pdl"] == opt.pdl and r["check"] == "ok"
             and r.get("dtype", "bytes") == "bytes" and r.get("inputs", "dram") == "dram"
             and r.get("layout", "flat") == "flat"]
    series = {
        "kvjit (automatic)": [r for r in store if r["impl"] == "kvjit" and r["split"] == "auto"],
        "reference (reimplemented)": [r for r in store if r["impl"] == "ref_reimpl"],
    }
    # PyTorch's rows: in the driver's CSV once bench/peer_rows.py merged them, or a torch_peer.py CSV.
    torch_rows = [r for r in store if r["impl"] == "torch_index_put"]
    if torch_rows:
        series["PyTorch index_put (int64)"] = torch_rows
    elif opt.torch:
        try:
            t = read(opt.torch)
            series["PyTorch index_put (int64)"] = [
                r for r in t if r["impl"] == "torch_index_put" and r["mode"] == opt.mode and r["check"] == "ok"]
        except OSError as e:
            print(f"plot: {e}; PyTorch left out", file=sys.stderr)
    sizes = sorted({int(r["row_bytes"]) for r in store})
    if not sizes:
        print("plot: no store rows to plot", file=sys.stderr)
        return 1

    cols = 4
    nrows = math.ceil(len(sizes) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.4 * nrows), squeeze=False)
    styles = {"kvjit (automatic)": ("tab:blue", "o"), "reference (reimplemented)": ("tab:orange", "s")}
    for ax, size in zip(axes.flat, sizes):
        for label, data in series.items():
            pts = sorted((int(r["batch"]), float(r["tbps_median"])) for r in data if int(r["row_bytes"]) == size)
            if not pts:
                continue
            color, marker = styles.get(label, ("tab:green", "^"))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=label)
        if memcpy:
            ax.axhline(memcpy[0], color="gray", linestyle="--", label=f"cuMemcpyDtoD {memcpy[0]:.2f} TB/s")
        ax.set_xscale("log", base=2)
        if opt.log:
            ax.set_yscale("log")
        ax.set_title(f"row {size} B")
        ax.set_xlabel("batch (tokens)")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("TB/s (K+V read + written)")
    spare = list(axes.flat)[len(sizes):]
    if spare:
        # Decode-sized stores are about latency, not bandwidth: microseconds per launch vs row size.
        ax = spare[0]
        spare = spare[1:]
        for label, data in series.items():
            color, marker = styles.get(label, ("tab:green", "^"))
            for batch, ls in ((1, "-"), (16, ":")):
                pts = sorted((int(r["row_bytes"]), float(r["us_median"])) for r in data if int(r["batch"]) == batch)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, linestyle=ls,
                            label=f"{label.split(' ')[0]} batch {batch}")
        # bench_store: "empty_kernel" with a pdl column; bench_ops: "empty_kernel_pdl" for PDL on
        floor = [float(r["us_median"]) for r in rows if r["section"] == "bound" and r["mode"] == opt.mode and (
                 (r["impl"] == "empty_kernel" and r["pdl"] == opt.pdl) or
                 (r["impl"] == "empty_kernel" + ("_pdl" if opt.pdl == "on" else "") and not r["pdl"]))]
        if floor:
            ax.axhline(floor[0], color="gray", linestyle="--", label=f"empty kernel {floor[0]:.2f} µs")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title("µs per launch, batch 1 and 16 (dotted)")
        ax.set_xlabel("row bytes")
        ax.set_ylabel("µs")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
    for ax in spare:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.93), fontsize=9, frameon=False,
               ncol=len(labels))
    title = f"store_kv_cache bandwidth per launch ({opt.mode}, {opt.index} indices, PDL {opt.pdl})"
    fig.suptitle(title + (f"\n{opt.title}" if opt.title else ""))
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(opt.png, dpi=110)
    print(f"plot: wrote {opt.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
