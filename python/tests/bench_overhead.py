#!/usr/bin/env python3
"""Host-side cost of one kvjit.store_kv_cache call from Python (not a test).

Without a GPU: fake __cuda_array_interface__ tensors with batch 0, so the call goes through the
keywords, the native module's reading and rules and the library's validation, and returns before
any driver call; plus the parts alone. With torch and a GPU: real decode-sized stores (batch 16, 8 x 128 bf16) against
`k_cache[loc] = k; v_cache[loc] = v`, host time per call (launches queue; one sync at the end).

usage: KVJIT_LIB=build/src/libkvjit.so python3 python/tests/bench_overhead.py
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kvjit  # noqa: E402
from kvjit import _ops  # noqa: E402


class CAI:
    """A device tensor through __cuda_array_interface__ (a property, as CuPy and Numba have it)."""

    def __init__(self, shape, typestr, ptr):
        self._cai = {"shape": shape, "typestr": typestr, "data": (ptr, False), "strides": None, "version": 3,
                     "stream": None}

    @property
    def __cuda_array_interface__(self):
        return self._cai


def per_call_ns(fn, n):
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e9


def cpu_part():
    h, d = 8, 128
    k, v = CAI((0, h, d), "<f2", 0x10000000), CAI((0, h, d), "<f2", 0x20000000)
    kc, vc = CAI((4096, h, d), "<f2", 0x30000000), CAI((4096, h, d), "<f2", 0x40000000)
    loc = CAI((0,), "<i8", 0x50000000)
    native = _ops.native()
    n = 20000
    loop = per_call_ns(lambda: None, n)
    full = per_call_ns(lambda: kvjit.store_kv_cache(k, v, kc, vc, loc), n)
    raw = per_call_ns(lambda: native.store_kv_cache_op(k, v, kc, vc, loc, -1, -1, 0, 0, None, None, 0, 0), n)
    args = per_call_ns(lambda: native.store_kv_args(k, v, kc, vc, loc, -1, -1, 0, 0, None, None, 0, 0), n)
    print(f"CAI fakes, batch 0 (no launch), best of 5 x {n}:")
    print(f"  kvjit.store_kv_cache, whole call   {full:8.0f} ns")
    print(f"    kvjit._C.store_kv_cache (op args) {raw:8.0f} ns")
    print(f"    reading + rules alone            {args:8.0f} ns")
    print(f"  an empty Python call, for scale   {loop:8.0f} ns")


def gpu_part():
    try:
        import torch
    except ImportError:
        print("torch: not installed, no GPU timing")
        return
    if not torch.cuda.is_available():
        print("torch: no CUDA device, no GPU timing")
        return
    batch, h, d, slots = 16, 8, 128, 4096
    k = torch.randn(batch, h, d, device="cuda").bfloat16()
    v = torch.randn(batch, h, d, device="cuda").bfloat16()
    kc = torch.zeros(slots, h, d, device="cuda", dtype=torch.bfloat16)
    vc = torch.zeros(slots, h, d, device="cuda", dtype=torch.bfloat16)
    loc = torch.randperm(slots, device="cuda")[:batch]
    kvjit.prepare(k, v, kc, vc, loc, batch=0)

    def kv():
        kvjit.store_kv_cache(k, v, kc, vc, loc)

    def pt():
        kc[loc] = k
        vc[loc] = v

    n = 5000
    for name, fn in (("kvjit.store_kv_cache", kv), ("k_cache[loc] = k; v_cache[loc] = v", pt)):
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(n):
                fn()
            host = time.perf_counter() - start
            torch.cuda.synchronize()
            best = min(best, host / n)
        print(f"  {name:36s} {best * 1e6:7.2f} us host time per call")
    print(f"(torch {torch.__version__}, {torch.cuda.get_device_name()}, batch {batch}, {h}x{d} bf16)")


if __name__ == "__main__":
    print(f"libkvjit {kvjit.version()} at {kvjit.library_path()}, Python {sys.version.split()[0]}")
    cpu_part()
    gpu_part()
