#!/usr/bin/env python3
"""Host cost of one store_kv_cache call through each way into kvjit from Python, in one process.

Every candidate stores the same tensors (decode size: batch 16, 8 x 128 bf16 rows, int64 slot
ids, a 4096-slot cache) in an eager loop of --calls calls; launches queue on torch's current
stream and one sync follows each loop, so what is timed is host time per call. Rounds alternate
the candidates (--repeats rounds); the table gives the best and the median round.

  the bound:     kvjit_store_kv_cache in a C loop, prepared args (kvjit's own call)
  candidates:    ctypes with prepared args; the ctypes binding (Python checks + pack);
                 torch.ops.kvjit.store_kv_cache (stable-ABI kernel) as OpOverload and as packet;
                 kvjit's CPython extension over PyTorch's DLPack exchange API, alone and behind
                 kvjit.store_kv_cache (the friendly entry point, which uses it in eager and the
                 op under torch.compile); tvm-ffi's C ABI (when apache-tvm-ffi is installed)
  yardsticks:    a registered no-op custom op with a Python implementation (SGLang's way of
                 registering its store), PyTorch's k_cache[loc] = k; v_cache[loc] = v

Targets (issue 18): the torch op <= the C call + 1.0 us, and <= 0.6 x the registered no-op op.

Without a GPU (CPU mode) the tensors are CPU tensors with batch 0, the op's C kernel is
registered for CPU under the namespace kvjit_bench, and every call goes through all of its
argument handling and the library's validation but launches nothing: the relative costs, not a
result of record.

usage: python3 bench/bench_binding.py [--build BUILD_DIR] [--calls N] [--repeats N] [--md F] [--csv F]
"""

import argparse
import ctypes
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=None, help="meson build dir (default: build-gpu, else build)")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--md", help="write the table as Markdown here")
    p.add_argument("--csv", help="write every round's numbers here")
    return p.parse_args()


def find_build(arg):
    for d in ([arg] if arg else ["build-gpu", "build"]):
        path = d if os.path.isabs(d) else os.path.join(ROOT, d)
        if os.path.exists(os.path.join(path, "src")):
            return path
    sys.exit(f"bench_binding: no build dir ({arg or 'build-gpu or build'}); build with meson first")


def setup_kvjit(build):
    """The source tree's package over this build's library (unless KVJIT_LIB says otherwise)."""
    os.environ.setdefault("KVJIT_LIB", os.path.join(build, "src", "libkvjit.so"))
    os.environ.setdefault("KVJIT_LOG", "0")
    sys.path.insert(0, os.path.join(ROOT, "python"))


def time_loop(fn, calls, sync):
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - start
    sync()
    return host / calls * 1e6


def define_noop(torch, key):
    """kvjit_bench::noop, registered as SGLang registers its ops (a FRAGMENT library, a Python
    implementation on the device's dispatch key, a fake implementation): the yardstick."""
    lib = torch.library.Library("kvjit_bench", "FRAGMENT")
    lib.define("noop(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor indices) -> ()")

    def noop(k, v, k_cache, v_cache, indices):
        return None

    lib.impl("noop", noop, key)
    lib._register_fake("noop", noop)
    return lib


def main():
    args = parse_args()
    build = find_build(args.build)
    setup_kvjit(build)
    import torch

    import kvjit
    from kvjit import _store, _torch_op

    gpu = torch.cuda.is_available()
    try:
        kvjit.driver_version()
    except kvjit.Error:
        gpu = False
    dev = "cuda" if gpu else "cpu"
    batch = 16 if gpu else 0
    h, d, slots = 8, 128, 4096
    g = torch.Generator(device="cpu").manual_seed(0)
    k = torch.randn(batch, h, d, generator=g).bfloat16().to(dev)
    v = torch.randn(batch, h, d, generator=g).bfloat16().to(dev)
    kc = torch.zeros(slots, h, d, dtype=torch.bfloat16, device=dev)
    vc = torch.zeros(slots, h, d, dtype=torch.bfloat16, device=dev)
    loc = torch.randperm(slots, generator=g)[:batch].to(dev)
    sync = torch.cuda.synchronize if gpu else (lambda: None)

    ctx = kvjit.default_context()
    lib = ctx._lib
    kvjit.register_torch_ops()
    keep = [define_noop(torch, "CUDA" if gpu else "CPU")]
    if gpu:
        kvjit.prepare(k, v, kc, vc, loc, batch=0)
        op_default = torch.ops.kvjit.store_kv_cache.default
        op_packet = torch.ops.kvjit.store_kv_cache
    else:
        # The C kernel on CPU tensors (batch 0: validated, nothing launched) under its own namespace.
        keep.append(_torch_op.define(torch, "kvjit_bench"))
        _torch_op.register_kernel(torch, "kvjit_bench", "CPU")
        op_default = torch.ops.kvjit_bench.store_kv_cache.default
        op_packet = torch.ops.kvjit_bench.store_kv_cache
    if gpu:
        packed, _, _ = _store.build_args(k, v, kc, vc, loc, None, None, None, 0, "auto", None, None, None, None,
                                         lib.store_args_version)
    else:
        packed = bytes(_torch_op.request_args(k, v, kc, vc, loc, -1, -1, 0, 0, None, None, 0))
    handle = ctx._handle
    store = lib.store
    noop = torch.ops.kvjit_bench.noop

    candidates = []  # (name, kind, fn or None, C-loop flag)
    candidates.append(("kvjit_store_kv_cache in a C loop, prepared args", "bound", None))
    candidates.append(("ctypes, prepared args: lib.store(ctx, args)", "candidate", lambda: store(handle, packed)))
    candidates.append(("ctypes binding: checks + pack + call (before issue 18)", "candidate",
                       (lambda: _store.store_kv_cache(k, v, kc, vc, loc)) if gpu else None))
    candidates.append(("torch op: torch.ops.kvjit.store_kv_cache.default", "op",
                       lambda: op_default(k, v, kc, vc, loc)))
    candidates.append(("torch op: torch.ops.kvjit.store_kv_cache (packet)", "candidate",
                       lambda: op_packet(k, v, kc, vc, loc)))
    candidates.append(("kvjit.store_kv_cache (friendly: the extension in eager)", "shipped",
                       (lambda: kvjit.store_kv_cache(k, v, kc, vc, loc)) if gpu else None))
    fast = _torch_op.fast_store
    if fast is not None:
        candidates.append(("kvjit's extension: METH_FASTCALL + DLPack exchange API", "ext",
                           lambda: fast(k, v, kc, vc, loc, -1, -1, 0, 0, None, None, 0)))
    else:
        print("(kvjit's extension: not loaded: no _kvjit_ext beside libkvjit, or a torch without "
              "__dlpack_c_exchange_api__)")
    binding_so = os.path.join(build, "bench", "libkvjit_bench_binding.so")
    cbench = ctypes.CDLL(binding_so)
    cbench.kvjit_bench_store_loop.restype = ctypes.c_double
    cbench.kvjit_bench_store_loop.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_long,
                                              ctypes.POINTER(ctypes.c_int)]
    try:
        import tvm_ffi

        libtvm = os.path.join(os.path.dirname(tvm_ffi.__file__), "lib", "libtvm_ffi.so")
        if cbench.kvjit_bench_tvm_init(libtvm.encode(), ctypes.c_void_p(handle)) != 0:
            raise ImportError(f"{libtvm}: TVMFFIEnvGetStream not found")
        tvm_store = tvm_ffi.load_module(binding_so).store_kv_cache
        candidates.append((f"tvm-ffi {tvm_ffi.__version__} C ABI (__tvm_ffi_store_kv_cache)", "candidate",
                           lambda: tvm_store(k, v, kc, vc, loc)))
    except ImportError as e:
        print(f"(tvm-ffi candidate: not available: {e})")
    candidates.append(("yardstick: registered no-op op, Python impl (SGLang-style)", "noop",
                       lambda: noop(k, v, kc, vc, loc)))
    candidates.append(("PyTorch: k_cache[loc] = k; v_cache[loc] = v", "peer",
                       (lambda: (kc.__setitem__(loc, k), vc.__setitem__(loc, v))) if gpu else None))
    candidates.append(("an empty Python call (for scale)", "scale", lambda: None))
    candidates = [c for c in candidates if c[1] == "bound" or c[2] is not None]

    status = ctypes.c_int()
    for name, kind, fn in candidates:  # warm-up, and a failure shows before any timing
        if fn is None:
            cbench.kvjit_bench_store_loop(ctypes.c_void_p(handle), packed, 200, ctypes.byref(status))
            if status.value:
                sys.exit(f"bench_binding: kvjit_store_kv_cache failed: {lib.error(status.value)}")
        else:
            for _ in range(200):
                fn()
    sync()

    rounds = {name: [] for name, _, _ in candidates}
    for _ in range(args.repeats):
        for name, kind, fn in candidates:
            if fn is None:
                sync()
                us = cbench.kvjit_bench_store_loop(ctypes.c_void_p(handle), packed, args.calls,
                                                   ctypes.byref(status)) / 1e3
                sync()
            else:
                us = time_loop(fn, args.calls, sync)
            rounds[name].append(us)

    if gpu:  # every candidate stored the same rows: check them once
        assert torch.equal(kc[loc], k) and torch.equal(vc[loc], v), "a candidate stored wrong bytes"

    best = {name: min(r) for name, r in rounds.items()}
    c_call = next(best[n] for n, kind, _ in candidates if kind == "bound")
    op_us = next(best[n] for n, kind, _ in candidates if kind == "op")
    noop_us = next(best[n] for n, kind, _ in candidates if kind == "noop")
    where = (f"{torch.cuda.get_device_name()}, batch {batch}, {h}x{d} bf16, int64 slots" if gpu
             else "CPU mode (no GPU): batch 0, CPU tensors, nothing launched; relative costs only")
    lines = [f"Host cost per call, eager loop of {args.calls} calls x {args.repeats} rounds (best / median round); "
             f"{where}; torch {torch.__version__}, Python {sys.version.split()[0]}, kvjit {kvjit.version()}", "",
             "| way into kvjit | best us | median us | - C call us | / no-op op |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, kind, _ in candidates:
        b, m = best[name], statistics.median(rounds[name])
        lines.append(f"| {name} | {b:.2f} | {m:.2f} | {b - c_call:+.2f} | {b / noop_us:.2f} |")
    verdict = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    lines.append("")
    shipped = [(n, best[n]) for n, kind, _ in candidates if kind == "shipped"] or \
        [(n, best[n]) for n, kind, _ in candidates if kind == "ext"]
    for label, us in [("torch op", op_us)] + [(f"eager path ({n})", u) for n, u in shipped[:1]]:
        lines += [f"- {label} - C call: {us - c_call:+.2f} us (target <= +1.00): {verdict(us <= c_call + 1.0)}",
                  f"- {label} / registered no-op op: {us / noop_us:.2f} (target <= 0.60): "
                  f"{verdict(us <= 0.6 * noop_us)}"]
    if not gpu:
        lines.append("- CPU mode: no launch in any candidate; rerun on a GPU for the numbers of record")
    text = "\n".join(lines)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("candidate,round,us_per_call\n")
            for name, r in rounds.items():
                for i, us in enumerate(r):
                    f.write(f"\"{name}\",{i},{us:.4f}\n")


if __name__ == "__main__":
    main()
