#!/usr/bin/env python3
"""PyTorch peer of bench_ops' transfer_kv cells: dst[di] = src[si] for K and V as a runtime without a kernel
writes it, against kvjit.transfer_kv through the Python binding, in the same process on the same
tensors (random distinct slots on both sides, bf16 caches [slots, row]).

  d2d: dst.index_copy_(0, di, src.index_select(0, si))
  d2h: gather on the GPU, one copy into a pinned staging buffer, scatter on the CPU
  h2d: gather on the CPU into a pinned staging buffer, one copy to the GPU, scatter there

Each is timed eagerly (wall clock over many calls, synchronised at the end: the Python and launch
costs count, as in a serving loop) after its result was checked against the other.

usage: torch_transfer_peer.py [--csv FILE] [--md-append FILE] [--quick] [--deadline S]
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kvjit  # noqa: E402


def timed(fn, budget_s=0.5, max_calls=200):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = time.perf_counter() - t0
    calls = max(1, min(max_calls, int(budget_s / max(one, 1e-6))))
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def cell(direction, row, batch, slots):
    elems = row // 2
    dev = "cuda"

    def make(where):
        t = torch.randn(slots, elems, dtype=torch.float32).to(torch.bfloat16)
        return t.pin_memory() if where == "host" else t.to(dev)

    src_where = "host" if direction == "h2d" else "device"
    dst_where = "host" if direction == "d2h" else "device"
    sk, sv = make(src_where), make(src_where)
    dk, dv = make(dst_where), make(dst_where)
    si = torch.randperm(slots, device=dev)[:batch]
    di = torch.randperm(slots, device=dev)[:batch]
    si_cpu, di_cpu = si.cpu(), di.cpu()

    if direction == "d2d":
        def torch_fn():
            dk.index_copy_(0, di, sk.index_select(0, si))
            dv.index_copy_(0, di, sv.index_select(0, si))
    elif direction == "d2h":
        stage = torch.empty(2, batch, elems, dtype=torch.bfloat16).pin_memory()

        def torch_fn():
            stage[0].copy_(sk.index_select(0, si), non_blocking=True)
            stage[1].copy_(sv.index_select(0, si), non_blocking=True)
            torch.cuda.current_stream().synchronize()
            dk.index_copy_(0, di_cpu, stage[0])
            dv.index_copy_(0, di_cpu, stage[1])
    else:
        stage = torch.empty(2, batch, elems, dtype=torch.bfloat16).pin_memory()

        def torch_fn():
            torch.index_select(sk, 0, si_cpu, out=stage[0])
            torch.index_select(sv, 0, si_cpu, out=stage[1])
            staged = stage.to(dev, non_blocking=True)
            dk.index_copy_(0, di, staged[0])
            dv.index_copy_(0, di, staged[1])

    def kvjit_fn():
        kvjit.transfer_kv(sk, sv, dk, dv, si, di)

    # Both write the same rows: each result checked against the model first.
    want_k = dk.cpu().clone()
    want_k[di_cpu] = sk.cpu()[si_cpu]
    for fn in (torch_fn, kvjit_fn):
        dk.fill_(0)
        fn()
        torch.cuda.synchronize()
        if not torch.equal(dk.cpu()[di_cpu], want_k[di_cpu]):
            raise AssertionError(f"{direction} row {row} batch {batch}: {fn.__name__} wrote wrong rows")
    kvjit.transfer_kv_prepare(sk, sv, dk, dv, si, di)
    return timed(torch_fn), timed(kvjit_fn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv")
    ap.add_argument("--md-append")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--deadline", type=float, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_transfer_peer: no CUDA device")
        return 77
    start = time.perf_counter()
    rows = [2048, 16384] if not args.quick else [2048]
    batches = [64, 4096, 65536] if not args.quick else [4096]
    out = []
    for direction in ("d2d", "d2h", "h2d"):
        for row in rows:
            for batch in batches:
                if args.deadline and time.perf_counter() - start > args.deadline:
                    print(f"{direction} row {row} batch {batch}: skipped (deadline)")
                    continue
                t_torch, t_kvjit = cell(direction, row, batch, 2 * max(batches))
                gbps = 2 * batch * row / t_kvjit * 1e-3
                print(f"{direction} row {row:6d} batch {batch:6d}: torch {t_torch:10.1f} us, kvjit {t_kvjit:9.1f} us "
                      f"({gbps:.1f} GB/s), torch / kvjit {t_torch / t_kvjit:.2f}x", flush=True)
                out.append((direction, row, batch, t_torch, t_kvjit))
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("direction,row_bytes,batch,torch_us,kvjit_us\n")
            for r in out:
                f.write("%s,%d,%d,%.3f,%.3f\n" % r)
    if args.md_append:
        with open(args.md_append, "a") as f:
            f.write(f"\n## kvjit vs PyTorch indexing (eager, Python call included; torch {torch.__version__})\n\n"
                    "| dir | row B | batch | torch µs | kvjit µs | torch / kvjit |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
            for d, row, batch, tt, tk in out:
                f.write(f"| {d} | {row} | {batch} | {tt:.1f} | {tk:.1f} | {tt / tk:.2f}x |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
