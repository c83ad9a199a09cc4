#!/usr/bin/env python3
"""PyTorch peer of bench_ops' store_kv_cache cells: the runtime fallback `k_cache[loc] = k; v_cache[loc] = v` against
kvjit_store_kv_cache called through ctypes in the same process, on the same tensors.

Both are timed per launch inside a CUDA graph of many back-to-back stores (torch.cuda.CUDAGraph,
events around each replay) and eagerly on the current stream (Python call cost included for both).
Inputs rotate through 512 MiB pools, slots are a random permutation of a 2 GiB cache per K and V
(never zeros: random bytes), and each implementation's output is checked before it is timed.

usage: torch_peer.py --lib build/src/libkvjit.so --csv torch.csv [--md-append store.md] [--quick]
       (the library path may also come from $KVJIT_LIB)
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

import torch

GIB = 1 << 30
MIB = 1 << 20
IDX_CAP = 4 << 20
TARGET_LOOP_US = 3000.0
MIN_LAUNCHES, MAX_LAUNCHES = 8, 320

KVJIT_INDEX_INT64 = 2
KVJIT_PDL_AUTO = 0
KVJIT_NO_SKIP_SLOT = -1
# The args struct's ctypes mirror is the Python binding's (python/kvjit), not a second copy.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kvjit._lib import STORE_KV_ARGS_VERSION, StoreKvArgs  # noqa: E402


class Kvjit:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.kvjit_context_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        L.kvjit_context_create.restype = ctypes.c_int
        L.kvjit_context_destroy.argtypes = [ctypes.c_void_p]
        L.kvjit_context_destroy.restype = None
        for name in ("kvjit_store_kv_cache", "kvjit_store_kv_cache_prepare"):
            fn = getattr(L, name)
            fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(StoreKvArgs)]
            fn.restype = ctypes.c_int
        L.kvjit_last_error.restype = ctypes.c_char_p
        L.kvjit_status_name.argtypes = [ctypes.c_int]
        L.kvjit_status_name.restype = ctypes.c_char_p
        L.kvjit_version_string.restype = ctypes.c_char_p
        self.ctx = ctypes.c_void_p()
        self.check(L.kvjit_context_create(ctypes.byref(self.ctx), None), "kvjit_context_create")
        self.store = L.kvjit_store_kv_cache
        self.version = L.kvjit_version_string().decode()

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.kvjit_status_name(status).decode()}: "
                               f"{self.lib.kvjit_last_error().decode()}")

    def args(self, k, v, kc, vc, idx, batch, row, num_slots, stream):
        a = StoreKvArgs()
        a.version = STORE_KV_ARGS_VERSION
        a.k, a.v, a.k_cache, a.v_cache, a.indices = k, v, kc, vc, idx
        a.index_type = KVJIT_INDEX_INT64
        a.index_stride = 1
        a.batch = batch
        a.k_row_bytes = a.v_row_bytes = row
        a.num_slots = num_slots
        a.skip_slot = KVJIT_NO_SKIP_SLOT
        a.split = 0
        a.pdl = KVJIT_PDL_AUTO
        a.stream = stream
        return a


def summarize(values):
    values = sorted(values)
    return statistics.median(values), values[0], values[-1]


def report(text, md_append):
    """Print a finished Markdown table and append it to the report file, if there is one."""
    print(text)
    if md_append:
        with open(md_append, "a") as md:
            md.write(text)


def time_graph(op, n, reps):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside capture, as torch requires
        for j in range(min(n, 3)):
            op(j)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for j in range(n):
            op(j)
    g.replay()
    g.replay()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    ev[0].record()
    for r in range(reps):
        g.replay()
        ev[r + 1].record()
    torch.cuda.synchronize()
    us = [ev[r].elapsed_time(ev[r + 1]) * 1000.0 / n for r in range(reps)]
    del g
    return summarize(us)


def time_stream(op, n, reps):
    for j in range(n):
        op(j)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    ev[0].record()
    for r in range(reps):
        for j in range(n):
            op(j)
        ev[r + 1].record()
    torch.cuda.synchronize()
    return summarize([ev[r].elapsed_time(ev[r + 1]) * 1000.0 / n for r in range(reps)])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("KVJIT_LIB", "build-gpu/src/libkvjit.so"))
    ap.add_argument("--csv", default="torch.csv")
    ap.add_argument("--md-append", help="append a kvjit/PyTorch table to this Markdown file")
    ap.add_argument("--quick", action="store_true", help="rows 128,1024,8192 x batch 1,128,65536")
    ap.add_argument("--rows", default="128,256,512,1024,2048,4096,8192")
    ap.add_argument("--batches", default="1,16,128,1024,8192,65536")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--cache-gib", type=float, default=2.0)
    ap.add_argument("--deadline", type=float, default=0.0, help="seconds; later cells are skipped")
    opt = ap.parse_args()
    rows = [int(x) for x in opt.rows.split(",")]
    batches = [int(x) for x in opt.batches.split(",")]
    if opt.quick:
        rows, batches = [128, 1024, 8192], [1, 128, 65536]
    t_start = time.monotonic()

    torch.cuda.init()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(f"torch_peer: torch {torch.__version__} (CUDA {torch.version.cuda}) on {props.name}")
    kv = None
    try:
        kv = Kvjit(opt.lib)
        print(f"torch_peer: kvjit {kv.version} from {opt.lib}")
    except (OSError, RuntimeError) as e:
        print(f"torch_peer: kvjit unavailable ({e}); timing PyTorch only", file=sys.stderr)

    cache_bytes = int(opt.cache_gib * GIB) // MIB * MIB
    pool_bytes = max(512 * MIB, max(rows) * max(batches))
    k_pool = torch.empty(pool_bytes, dtype=torch.uint8, device=dev)
    v_pool = torch.empty(pool_bytes, dtype=torch.uint8, device=dev)
    k_cache = torch.empty(cache_bytes, dtype=torch.uint8, device=dev)
    v_cache = torch.empty(cache_bytes, dtype=torch.uint8, device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)
    for t in (k_pool, v_pool, k_cache, v_cache):  # random bytes: never time on zeros
        t.view(torch.int32).random_(generator=gen)
    torch.cuda.synchronize()

    out = open(opt.csv, "w")
    out.write("impl,row_bytes,batch,index,pdl,mode,launches,reps,us_median,us_min,us_max,"
              "bytes_per_launch,tbps_median,check\n")
    results = {}
    failures = 0
    skipped = 0
    for row in rows:
        if row % 2:
            print(f"torch_peer: row {row} is not a whole number of bf16 elements; skipped", file=sys.stderr)
            continue
        num_slots = cache_bytes // row
        n_idx = min(num_slots, IDX_CAP)
        perm = torch.randperm(num_slots, device=dev, generator=gen)[:n_idx].contiguous()
        kc = k_cache[: num_slots * row].view(torch.bfloat16).view(num_slots, row // 2)
        vc = v_cache[: num_slots * row].view(torch.bfloat16).view(num_slots, row // 2)
        for batch in batches:
            if opt.deadline and time.monotonic() - t_start > opt.deadline:
                skipped += 1
                continue
            if batch > n_idx:
                continue
            nbytes = 4 * batch * row
            est = max(1.0, nbytes / 3.0e6)
            n = int(min(MAX_LAUNCHES, max(MIN_LAUNCHES, TARGET_LOOP_US / est)))
            in_sets = max(1, min(n, pool_bytes // (batch * row)))
            idx_sets = max(1, min(n, n_idx // batch))
            ks, vs, ids = [], [], []
            for j in range(n):
                off = (j % in_sets) * batch * row
                ks.append(k_pool[off: off + batch * row].view(torch.bfloat16).view(batch, row // 2))
                vs.append(v_pool[off: off + batch * row].view(torch.bfloat16).view(batch, row // 2))
                s = j % idx_sets
                ids.append(perm[s * batch: (s + 1) * batch])

            def torch_op(j):
                kc[ids[j]] = ks[j]
                vc[ids[j]] = vs[j]

            impls = [("torch_index_put", torch_op)]
            if kv is not None:
                stream = torch.cuda.current_stream().cuda_stream
                pre = [kv.args(ks[j].data_ptr(), vs[j].data_ptr(), kc.data_ptr(), vc.data_ptr(), ids[j].data_ptr(),
                               batch, row, num_slots, stream) for j in range(n)]
                try:
                    kv.check(kv.lib.kvjit_store_kv_cache_prepare(kv.ctx, ctypes.byref(pre[0])), "prepare")
                except RuntimeError as e:
                    print(f"torch_peer: kvjit row {row} batch {batch}: {e}", file=sys.stderr)
                    failures += 1
                else:
                    def kvjit_op(j, pre=pre, kv=kv):
                        # The stream that is current now: the capture stream inside torch.cuda.graph.
                        a = pre[j]
                        a.stream = torch.cuda.current_stream().cuda_stream
                        st = kv.store(kv.ctx, ctypes.byref(a))
                        if st:
                            kv.check(st, "kvjit_store_kv_cache")
                    impls.append(("kvjit_ctypes", kvjit_op))

            for name, op in impls:
                # Check: poison the targets of launch 0, run it once, compare every byte.
                kc[ids[0]] = torch.full((1,), -1.5, dtype=torch.bfloat16, device=dev)
                vc[ids[0]] = torch.full((1,), -1.5, dtype=torch.bfloat16, device=dev)
                op(0)
                torch.cuda.synchronize()
                ok = torch.equal(kc[ids[0]].view(torch.int16), ks[0].view(torch.int16)) and \
                    torch.equal(vc[ids[0]].view(torch.int16), vs[0].view(torch.int16))
                if not ok:
                    failures += 1
                    print(f"torch_peer: CHECK FAILED {name} row {row} batch {batch}", file=sys.stderr)
                for mode, timer in (("graph", time_graph), ("stream", time_stream)):
                    try:
                        med, lo, hi = timer(op, n, opt.reps)
                    except RuntimeError as e:
                        print(f"torch_peer: {name} {mode} row {row} batch {batch}: {e}", file=sys.stderr)
                        failures += 1
                        continue
                    tb = nbytes / med * 1e-6
                    results[(name, row, batch, mode)] = (med, tb)
                    pdl = "auto" if name == "kvjit_ctypes" else "-"
                    out.write(f"{name},{row},{batch},int64,{pdl},{mode},{n},{opt.reps},{med:.4f},{lo:.4f},{hi:.4f},"
                              f"{nbytes},{tb:.4f},{'ok' if ok else 'FAIL'}\n")
                    out.flush()
        print(f"  row {row} done at {time.monotonic() - t_start:.1f} s", flush=True)
    out.close()

    lines = ["", "## kvjit vs the PyTorch fallback (torch_peer.py, same process, int64 indices, bf16 views)", "",
             "`k_cache[loc] = k; v_cache[loc] = v` (two index_put launches) against one kvjit_store_kv_cache call "
             "through ctypes (PDL auto). Stream mode includes each side's Python call cost.", "",
             "| row B | batch | PyTorch graph µs | kvjit graph µs | kvjit/PyTorch (graph) | PyTorch TB/s | "
             "kvjit TB/s | PyTorch stream µs | kvjit stream µs | kvjit/PyTorch (stream) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        for batch in batches:
            tg = results.get(("torch_index_put", row, batch, "graph"))
            kg = results.get(("kvjit_ctypes", row, batch, "graph"))
            ts = results.get(("torch_index_put", row, batch, "stream"))
            ks_ = results.get(("kvjit_ctypes", row, batch, "stream"))
            if not tg:
                continue

            def f(x, i=0):
                return f"{x[i]:.3f}" if x else "-"

            def ratio(a, b):
                return f"{a[0] / b[0]:.3f}" if a and b else "-"
            lines.append(f"| {row} | {batch} | {f(tg)} | {f(kg)} | {ratio(kg, tg)} | {f(tg, 1)} | {f(kg, 1)} | "
                         f"{f(ts)} | {f(ks_)} | {ratio(ks_, ts)} |")
    lines.append(f"\nchecks/launches failed: {failures}; cells skipped by the deadline: {skipped}\n")
    report("\n".join(lines), opt.md_append)
    if kv is not None:
        torch.cuda.synchronize()
        kv.lib.kvjit_context_destroy(kv.ctx)
    print(f"torch_peer: total {time.monotonic() - t_start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
