#!/usr/bin/env python3
"""PyTorch peer of bench_ops' quantizing store_kv_cache cells: what a runtime does without kvjit to fill an fp8 KV cache from bf16
rows (SGLang's path: divide by the scale, cast to fp8, store through indexing),

    k_cache[loc] = (k / k_scale).to(torch.float8_e4m3fn); v_cache[loc] = (v / v_scale).to(...)

against kvjit's fused store through its Python binding (python/kvjit), on the same tensors, per
launch sequence inside a CUDA graph (torch.cuda.CUDAGraph; events around each replay; the median
of the replays). Scales are 1-element fp32 CUDA tensors, as vLLM and SGLang keep them. Inputs
rotate through a pool and slots are slices of one random permutation, so no launch rewrites what
the one before wrote. Before timing, both write launch 0 and the caches are compared bit for bit
(values stay inside the fp8 range, where PyTorch's cast and kvjit's saturating one agree).

usage: PYTHONPATH=python KVJIT_LIB=build/src/libkvjit.so python3 bench/torch_fp8_peer.py [--md-append f.md]
       [--csv f.csv] [--quick]
"""
import argparse
import sys
import time

import torch

import kvjit
from torch_peer import report, time_graph  # the same graph timing and report as the plain store's peer

MIB = 1 << 20


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--md-append", help="append the table to this Markdown file")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="batches 1, 16, 65536 only")
    ap.add_argument("--csv", help="write every timing here (bf16 row bytes, batch, impl, µs; peer_rows.py reads it)")
    opt = ap.parse_args()
    t0 = time.monotonic()
    dev = torch.device("cuda")
    fp8 = torch.float8_e4m3fn
    print(f"torch_fp8_peer: torch {torch.__version__} on {torch.cuda.get_device_name(dev)}, "
          f"kvjit {kvjit.version()} from {kvjit.library_path()}")
    shapes = [(1, 128), (8, 128), (8, 512)]  # (KV heads, head dim): bf16 rows of 256, 2048, 8192 B
    batches = [1, 16, 65536] if opt.quick else [1, 16, 256, 4096, 65536]
    gen = torch.Generator(device=dev)
    gen.manual_seed(7)
    lines = ["", "## Quantize on store vs PyTorch (torch_fp8_peer.py, same process, CUDA graph, µs per store)", "",
             "bf16 K and V `[batch, heads, dim]` → fp8 e4m3 caches; PyTorch: `cache[loc] = (x / scale).to(fp8)` "
             "for K and V; kvjit: one `kvjit.store_kv_cache(..., k_scale=, v_scale=)` call.", "",
             "| heads × dim | bf16 row B | batch | PyTorch µs | kvjit µs | kvjit / PyTorch | check |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    failures = 0
    timings = []
    k_scale = torch.tensor([0.37], dtype=torch.float32, device=dev)
    v_scale = torch.tensor([1.9], dtype=torch.float32, device=dev)
    for heads, dim in shapes:
        row = heads * dim
        slots = (1 << 30) // row  # 1 GiB of fp8 cache per K and V
        k_cache = torch.empty((slots, heads, dim), dtype=fp8, device=dev)
        v_cache = torch.empty((slots, heads, dim), dtype=fp8, device=dev)
        k_cache.view(torch.uint8).random_(generator=gen)
        v_cache.view(torch.uint8).random_(generator=gen)
        perm = torch.randperm(slots, device=dev, generator=gen)
        pool_rows = max(65536, (256 * MIB) // (row * 2))
        k_pool = (torch.randn((pool_rows, heads, dim), device=dev, generator=gen) * 8).to(torch.bfloat16)
        v_pool = (torch.randn((pool_rows, heads, dim), device=dev, generator=gen) * 8).to(torch.bfloat16)
        for batch in batches:
            if batch > pool_rows or 2 * batch > slots:
                continue
            est_us = 1.0 + batch * row * 2 * 3 / 3.0e6
            n = int(min(128, max(4, 2000.0 / est_us)))
            n = max(1, min(n, slots // batch, pool_rows // batch))
            ks = [k_pool[(j * batch) % (pool_rows - batch + 1):][:batch] for j in range(n)]
            vs = [v_pool[(j * batch) % (pool_rows - batch + 1):][:batch] for j in range(n)]
            locs = [perm[j * batch:(j + 1) * batch] for j in range(n)]

            def torch_op(j):
                k_cache[locs[j]] = (ks[j] / k_scale).to(fp8)
                v_cache[locs[j]] = (vs[j] / v_scale).to(fp8)

            def kvjit_op(j):
                kvjit.store_kv_cache(ks[j], vs[j], k_cache, v_cache, locs[j], k_scale=k_scale, v_scale=v_scale)

            # Check: both write launch 0's rows; every byte equal.
            kvjit_op(0)
            torch.cuda.synchronize()
            got = (k_cache[locs[0]].view(torch.uint8).clone(), v_cache[locs[0]].view(torch.uint8).clone())
            torch_op(0)
            torch.cuda.synchronize()
            ok = torch.equal(got[0], k_cache[locs[0]].view(torch.uint8)) and \
                torch.equal(got[1], v_cache[locs[0]].view(torch.uint8))
            failures += not ok
            s_torch = time_graph(torch_op, n, opt.reps)  # (median, min, max)
            s_kvjit = time_graph(kvjit_op, n, opt.reps)
            t_torch, t_kvjit = s_torch[0], s_kvjit[0]
            for name, st in (("torch_div_cast_index_put", s_torch), ("kvjit_python", s_kvjit)):
                timings.append((row * 2, batch, name, n, opt.reps, st[0], st[1], st[2], "ok" if ok else "FAIL"))
            lines.append(f"| {heads} × {dim} | {row * 2} | {batch} | {t_torch:.2f} | {t_kvjit:.2f} | "
                         f"{t_kvjit / t_torch:.3f} | {'ok' if ok else 'FAIL'} |")
            print(lines[-1], flush=True)
        del k_cache, v_cache, k_pool, v_pool
        torch.cuda.empty_cache()
    lines.append(f"\nchecks failed: {failures}; {time.monotonic() - t0:.1f} s\n")
    if opt.csv:
        with open(opt.csv, "w") as f:
            f.write("row_bytes,batch,impl,launches,reps,us_median,us_min,us_max,check\n")
            for t in timings:
                f.write("%d,%d,%s,%d,%d,%.4f,%.4f,%.4f,%s\n" % t)
    report("\n".join(lines), opt.md_append)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
