#!/usr/bin/env python3
"""Host cost of one store_kv_cache call through each way into kvjit from Python.

Every candidate stores the same tensors (decode size: batch 16, 8 x 128 bf16 rows, int64 slot
ids, a 4096-slot cache) in an eager loop of --calls calls; launches queue on torch's current
stream and one sync follows each loop, so what is timed is host time per call. Within a process,
rounds alternate the candidates (--repeats rounds), and every candidate's loop is paired with a
loop of its own C call right beside it (the order flipping every round), so that both see the
same host state; --rounds processes run one after another (a host's state drifts from one
process to the next: one process is not a measurement), each pinned to one CPU (--cpu; by
default one on the GPU's NUMA node), so that neither a migration nor a remote node lands in one
candidate's loop and not in its C call's. A candidate's cost in a process is the median over
rounds of its loop less its paired C loop; the table gives every process's cost and the median
over processes. With --old TREE, the old door's own bench (TREE/bench/bench_binding.py over
TREE/--old-build) runs in a process of its own beside each of this door's, pinned alike, the
order flipping every round, and the key rows are compared (its rounds have no pairs: there a
cost is each round's loop less the same round's C loop, the median over rounds).

  the bound:     kvjit_store_kv_cache in a C loop, prepared args (kvjit's own call)
  candidates:    ctypes with prepared args; torch.ops.kvjit.store_kv_cache (stable-ABI kernel)
                 as OpOverload and as packet; kvjit.store_kv_cache (the friendly entry point:
                 kvjit._C's keyword C function in eager, the op under torch.compile) and
                 kvjit._C's raw op-argument call; the same store behind
                 tvm-ffi's C ABI (when apache-tvm-ffi is installed), the door kvjit would be
                 built on instead (issue 27); kvjit.transfer_kv against its own C loop
  yardsticks:    a registered no-op custom op with a Python implementation (SGLang's way of
                 registering its store); the dispatch floor: a no-op C kernel registered under
                 the op's own schema through the same stable ABI (what any torch.ops call of
                 this schema pays); PyTorch's k_cache[loc] = k; v_cache[loc] = v

Targets (issue 18), read as the issue means them: a binding's cost is its host time over
kvjit's own C call (launch excluded, since every candidate launches the same kernel), and that
must be <= 1.0 us and <= 0.6 x the registered no-op op's cost. Both readings are printed for
the torch op and for kvjit.store_kv_cache, and the op's cost is split into the dispatch floor
and kvjit's work inside the op.

Without a GPU (CPU mode) the tensors are CPU tensors with batch 0, the op's C kernel and the
floor are registered for CPU under the namespace kvjit_bench, and every call goes through all of
its argument handling and the library's validation but launches nothing: the relative costs, not
a result of record.

usage: python3 bench/bench_binding.py [--build BUILD_DIR] [--calls N] [--repeats N] [--rounds N] [--deadline S]
                                     [--cpu auto|none|N] [--old TREE [--old-build DIR]] [--md F] [--csv F]
"""

import argparse
import csv
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=None, help="meson build dir (default: build-gpu, else build)")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--rounds", type=int, default=5, help="processes, each --repeats rounds (default 5)")
    p.add_argument("--cpu", default="auto", help="the CPU every process is pinned to: auto (one on the GPU's NUMA "
                   "node), none (no pinning) or a CPU number (default auto)")
    p.add_argument("--old", help="another tree (e.g. the old door's) whose bench/bench_binding.py runs in "
                   "alternation with this one, one process each per round")
    p.add_argument("--old-build", default="build-old", help="its build dir (relative to --old; default build-old)")
    p.add_argument("--round-timeout", type=float, default=120, help="seconds one process may take (default 120)")
    p.add_argument("--deadline", type=float, default=0, help="start no process that would end after this many "
                   "seconds (judged by the longest so far) and report the processes that ran (default: no limit)")
    p.add_argument("--md", help="write the table as Markdown here")
    p.add_argument("--csv", help="write every round's numbers here")
    p.add_argument("--child", help=argparse.SUPPRESS)  # one process's numbers, as JSON, into this file
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


def define_floor(torch, build, ns, key):
    """ns::store_noop: the op's schema, a C kernel that does nothing, the op's stable ABI."""
    from kvjit import _torch

    lib = torch.library.Library(ns, "FRAGMENT")
    lib.define(_torch.STORE_SCHEMA.replace("store_kv_cache(", "store_noop(", 1))
    torch.library.register_fake(f"{ns}::store_noop", _torch._store_fake, lib=lib)
    binding = ctypes.CDLL(os.path.join(build, "bench", "libkvjit_bench_binding.so"))
    register = getattr(binding, "kvjit_bench_register_store_noop", None)
    libtorch = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    if register is None or register(libtorch.encode(), ns.encode(), key.encode(), b"store_noop") != 0:
        return lib, None
    return lib, getattr(torch.ops, ns).store_noop.default


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


def measure(args):
    """One process's rounds: every candidate, --repeats rounds alternated, each of --calls calls."""
    build = find_build(args.build)
    setup_kvjit(build)
    import torch

    import kvjit
    from kvjit import _ops, _torch

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
        keep.append(_torch.define(torch, "kvjit_bench", cpu_path=False))
        _torch.register_kernels(torch, "kvjit_bench", "CPU")
        op_default = torch.ops.kvjit_bench.store_kv_cache.default
        op_packet = torch.ops.kvjit_bench.store_kv_cache
    packed = bytes(_ops.store_kv_args(k, v, kc, vc, loc))
    handle = ctx._handle
    store = lib.cdll.kvjit_store_kv_cache
    store.argtypes, store.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int
    noop = torch.ops.kvjit_bench.noop

    candidates = []  # (name, kind, fn or None, C-loop flag)
    candidates.append(("kvjit_store_kv_cache in a C loop, prepared args", "bound", None))
    candidates.append(("ctypes, prepared args: lib.store(ctx, args)", "candidate", lambda: store(handle, packed)))
    candidates.append(("torch op: torch.ops.kvjit.store_kv_cache.default", "op",
                       lambda: op_default(k, v, kc, vc, loc)))
    candidates.append(("torch op: torch.ops.kvjit.store_kv_cache (packet)", "candidate",
                       lambda: op_packet(k, v, kc, vc, loc)))
    floor_lib, floor = define_floor(torch, build, "kvjit_bench", "CUDA" if gpu else "CPU")
    keep.append(floor_lib)
    if floor is not None:
        candidates.append(("dispatch floor: no-op C kernel, the op's schema and stable ABI", "floor",
                           lambda: floor(k, v, kc, vc, loc)))
    else:
        print("(dispatch floor: not registered: libkvjit_bench_binding built without C++, or an old torch)")
    friendly = kvjit.store_kv_cache
    candidates.append(("kvjit.store_kv_cache (kvjit._C's keyword C function)", "shipped",
                       lambda: friendly(k, v, kc, vc, loc)))
    native = _ops.native()
    candidates.append(("kvjit._C.store_kv_cache_op, the op's 13 arguments (METH_FASTCALL + DLPack)", "ext",
                       lambda: native.store_kv_cache_op(k, v, kc, vc, loc, -1, -1, 0, 0, None, None, 0, 0)))
    binding_so = os.path.join(build, "bench", "libkvjit_bench_binding.so")
    cbench = ctypes.CDLL(binding_so)
    cbench.kvjit_bench_store_loop.restype = ctypes.c_double
    cbench.kvjit_bench_store_loop.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_long,
                                              ctypes.POINTER(ctypes.c_int)]
    cbench.kvjit_bench_transfer_loop.restype = ctypes.c_double
    cbench.kvjit_bench_transfer_loop.argtypes = cbench.kvjit_bench_store_loop.argtypes
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
    # transfer_kv, device to device: kc's rows at loc into another cache at dst_loc.
    dst_k = torch.zeros_like(kc)
    dst_v = torch.zeros_like(vc)
    dst_loc = torch.randperm(slots, generator=g)[:batch].to(dev)
    tpacked = _ops.transfer_kv_args(kc, vc, dst_k, dst_v, loc, dst_loc)
    if gpu:
        kvjit.transfer_kv_prepare(kc, vc, dst_k, dst_v, loc, dst_loc, batch=0)
    candidates.append(("kvjit_transfer_kv in a C loop, prepared args", "tbound", None))
    candidates.append(("kvjit.transfer_kv (kvjit._C's keyword C function)", "tshipped",
                       lambda: kvjit.transfer_kv(kc, vc, dst_k, dst_v, loc, dst_loc)))
    candidates.append(("kvjit._C.transfer_kv_op, the op's 14 arguments", "text",
                       lambda: native.transfer_kv_op(kc, vc, dst_k, dst_v, loc, dst_loc, -1, -1, 0, 0, -1, None, None,
                                                     0)))
    top = torch.ops.kvjit.transfer_kv.default if gpu else None
    candidates.append(("torch op: torch.ops.kvjit.transfer_kv.default", "top",
                       (lambda: top(kc, vc, dst_k, dst_v, loc, dst_loc)) if gpu else None))
    candidates.append(("yardstick: registered no-op op, Python impl (SGLang-style)", "noop",
                       lambda: noop(k, v, kc, vc, loc)))
    candidates.append(("PyTorch: k_cache[loc] = k; v_cache[loc] = v", "peer",
                       (lambda: (kc.__setitem__(loc, k), vc.__setitem__(loc, v))) if gpu else None))
    candidates.append(("an empty Python call (for scale)", "scale", lambda: None))
    candidates = [c for c in candidates if c[1] in ("bound", "tbound") or c[2] is not None]

    status = ctypes.c_int()

    def c_loop(kind, calls):
        if kind == "bound":
            return cbench.kvjit_bench_store_loop(ctypes.c_void_p(handle), packed, calls, ctypes.byref(status)) / 1e3
        return cbench.kvjit_bench_transfer_loop(ctypes.c_void_p(handle), tpacked, calls, ctypes.byref(status)) / 1e3

    for name, kind, fn in candidates:  # warm-up, and a failure shows before any timing
        if fn is None:
            c_loop(kind, 200)
            if status.value:
                sys.exit(f"bench_binding: {name} failed: {lib.error(status.value)}")
        else:
            for _ in range(200):
                fn()
    sync()

    # Every candidate's loop beside a loop of its own C call (store or transfer), C first in even
    # rounds and second in odd ones: a pair sees one host state, and neither order is favoured.
    bound_name = {kind: name for name, kind, fn in candidates if fn is None}
    rounds = {name: [] for name, _, _ in candidates}
    paired = {name: [] for name, _, fn in candidates if fn is not None}

    def c_block(kind):
        sync()
        us = c_loop(kind, args.calls)
        sync()
        rounds[bound_name[kind]].append(us)
        return us

    for r in range(args.repeats):
        for name, kind, fn in candidates:
            if fn is None:
                continue
            bound = "tbound" if kind in TRANSFER_KINDS else "bound"
            c_us = c_block(bound) if r % 2 == 0 else None
            us = time_loop(fn, args.calls, sync)
            if c_us is None:
                c_us = c_block(bound)
            rounds[name].append(us)
            paired[name].append(us - c_us)

    if gpu:  # every candidate stored the same rows: check them once
        assert torch.equal(kc[loc], k) and torch.equal(vc[loc], v), "a candidate stored wrong bytes"
        assert torch.equal(dst_k[dst_loc], k) and torch.equal(dst_v[dst_loc], v), "a transfer moved wrong bytes"

    where = (f"{torch.cuda.get_device_name()}, batch {batch}, {h}x{d} bf16, int64 slots" if gpu
             else "CPU mode (no GPU): batch 0, CPU tensors, nothing launched; relative costs only")
    return {"where": where, "gpu": gpu, "versions": f"torch {torch.__version__}, Python {sys.version.split()[0]}, "
            f"kvjit {kvjit.version()}", "candidates": [[name, kind] for name, kind, _ in candidates],
            "rounds": rounds, "paired": paired}


# ---- rounds: one process each, alternated with the old door's when --old is given ----------------


def pick_cpu(spec):
    """The CPU the processes run on: a number, None for "none", or (auto) the last CPU this process
    may use on the NUMA node of GPU 0 (nvidia-smi's bus id -> the device's local_cpulist in sysfs);
    any allowed CPU when that cannot be read (no GPU, no sysfs)."""
    allowed = sorted(os.sched_getaffinity(0))
    if spec == "none":
        return None
    if spec != "auto":
        if int(spec) not in allowed:
            sys.exit(f"bench_binding: --cpu {spec}: not among this process's CPUs {allowed}")
        return int(spec)
    local = set()
    try:
        bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        domain, rest = bus.split(":", 1)  # 00000000:18:00.0 -> 0000:18:00.0
        with open(f"/sys/bus/pci/devices/{domain[-4:]}:{rest}".lower() + "/local_cpulist") as f:
            for part in f.read().strip().split(","):
                low, _, high = part.partition("-")
                local.update(range(int(low), int(high or low) + 1))
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return max(set(allowed) & local or set(allowed))


def pinned_to(cpu):
    """A child's preexec_fn: the whole process (every thread it starts) on @p cpu."""
    return None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))


def run_child(args, out_json, cpu):
    """One round: this bench in a fresh process (torch, CUDA and kvjit set up anew)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", out_json, "--build", args.build_dir,
           "--calls", str(args.calls), "--repeats", str(args.repeats)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.round_timeout, preexec_fn=pinned_to(cpu))
    if r.returncode != 0 or not os.path.exists(out_json):
        print(f"(a round of this door failed, exit {r.returncode}: {(r.stdout + r.stderr).strip()[-600:]})")
        return None
    with open(out_json) as f:
        data = json.load(f)
    for line in r.stdout.splitlines():
        if line.startswith("(") and line not in NOTES:
            NOTES.append(line)
    return data


NOTES = []  # the children's "(... not available ...)" lines, once each


def run_old(args, out_csv, cache_dir, cpu):
    """One round of the old door: its own tree's bench_binding.py over its own build and library."""
    tree = os.path.abspath(args.old)
    build = args.old_build if os.path.isabs(args.old_build) else os.path.join(tree, args.old_build)
    env = dict(os.environ, KVJIT_LIB=os.path.join(build, "src", "libkvjit.so"), KVJIT_CACHE_DIR=cache_dir)
    cmd = [sys.executable, os.path.join(tree, "bench", "bench_binding.py"), "--build", build, "--calls",
           str(args.calls), "--repeats", str(args.repeats), "--csv", out_csv]
    r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=args.round_timeout,
                       preexec_fn=pinned_to(cpu))
    if r.returncode != 0 or not os.path.exists(out_csv):
        print(f"(a round of the old door failed, exit {r.returncode}: {(r.stdout + r.stderr).strip()[-600:]})")
        return None
    rounds = {}
    with open(out_csv) as f:
        for row in csv.DictReader(f):
            rounds.setdefault(row["candidate"], []).append(float(row["us_per_call"]))
    return rounds


def old_kind(name):
    """The old bench's rows by name (it writes no kinds): those both benches have."""
    for prefix, kind in (("kvjit_store_kv_cache in a C loop", "bound"), ("torch op: torch.ops.kvjit.store_kv_cache."
                         "default", "op"), ("dispatch floor", "floor"), ("kvjit.store_kv_cache (", "shipped"),
                         ("kvjit's extension, the op's", "ext"), ("yardstick", "noop")):
        if name.startswith(prefix):
            return kind
    return None


TRANSFER_KINDS = ("tbound", "tshipped", "text", "top")


def round_costs(run, paired, name, bound):
    """A candidate's cost in each round of one process: its loop less its paired C loop, or (the
    old door's bench, which has no pairs) less the same round's C loop."""
    if paired is not None and name in paired:
        return paired[name]
    return [us - c_us for us, c_us in zip(run[name], run[bound])]


def stats(runs, names_kinds, paired_runs=None):
    """Per candidate: every process's median round, their median, the best call, and the cost:
    in each process the median over rounds of (its loop - its C call's loop, store or transfer),
    then the median over processes."""
    bound_of = {}
    for name, kind in names_kinds:
        bound_of.setdefault(kind, name)
    out = {}
    for name, kind in names_kinds:
        if not all(name in run for run in runs):
            continue
        meds = [statistics.median(run[name]) for run in runs]
        bound = bound_of.get("tbound" if kind in TRANSFER_KINDS else "bound")
        paired = paired_runs or [None] * len(runs)
        costs = ([statistics.median(round_costs(run, p, name, bound)) for run, p in zip(runs, paired)]
                 if bound and name != bound else [0.0] * len(runs) if bound else [])
        out[name] = {"kind": kind, "meds": meds, "median": statistics.median(meds),
                     "best": min(min(run[name]) for run in runs),
                     "cost": statistics.median(costs) if costs else None, "costs": costs}
    return out


def report(args, data, runs, paired_runs, old_runs):
    names_kinds = [tuple(c) for c in data["candidates"]]
    st = stats(runs, names_kinds, paired_runs)
    by_kind = {}
    for name, kind in names_kinds:
        if name in st:
            by_kind.setdefault(kind, st[name])
    c_call, op, noop = by_kind["bound"], by_kind["op"], by_kind["noop"]
    noop_us = noop["median"]
    fmt = lambda values: " / ".join(f"{v:.2f}" for v in values)  # noqa: E731
    lines = [f"Host cost per call, eager loop of {args.calls} calls x {args.repeats} rounds in each of {len(runs)} "
             f"processes{' alternated with the old door' if old_runs else ''}, {args.pinned}; {data['where']}; "
             f"{data['versions']}",
             "median: the median of the processes' medians; - C call: in each process the median over rounds of the "
             "candidate's loop less the loop of its own C call (store or transfer) run beside it, the median over "
             "processes", "",
             "| way into kvjit | best us | median us | - C call us | (- C call) / no-op op | "
             "each process's median us | each process's - C call us |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for name, kind in names_kinds:
        if name not in st:
            continue
        s = st[name]
        over = "" if kind in ("noop", "floor", "scale") else f"{s['cost'] / noop_us:.2f}"
        lines.append(f"| {name} | {s['best']:.2f} | {s['median']:.2f} | {s['cost']:+.2f} | {over} | {fmt(s['meds'])} | "
                     f"{fmt(s['costs'])} |")
    verdict = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    lines += ["", f"Targets (issue 18): a binding's cost is its time over kvjit's C call ({c_call['median']:.2f} us); "
              f"the yardstick, a registered no-op op with a Python implementation, costs {noop_us:.2f} us."]
    readings = [("torch op (.default)", op["cost"])]
    if "shipped" in by_kind:
        readings.append(("kvjit.store_kv_cache (eager)", by_kind["shipped"]["cost"]))
    for label, cost in readings:
        lines += [f"- {label}: cost {cost:+.2f} us; <= C call + 1.00 us: {verdict(cost <= 1.0)}; "
                  f"<= 0.6 x no-op op ({0.6 * noop_us:.2f} us): {cost / noop_us:.2f} x, {verdict(cost <= 0.6 * noop_us)}"]
    if "floor" in by_kind:
        floor_us = by_kind["floor"]["median"]
        lines.append(f"- the torch op's cost split: dispatch floor {floor_us:.2f} us (a no-op C kernel under the "
                     f"op's schema: any torch.ops call of it pays this) + kvjit's work inside the op "
                     f"{op['cost'] - floor_us:+.2f} us (reading the tensors, the layout rules, stream and "
                     f"device; the C call itself excluded)")
        lines.append(f"- the floor alone is {floor_us / noop_us:.2f} x the no-op op and {floor_us:.2f} us over "
                     f"nothing: no kernel behind torch.ops can meet either target; in eager, "
                     f"kvjit.store_kv_cache does not go through the dispatcher")
    store_cost, transfer_cost = by_kind["shipped"]["cost"], by_kind["tshipped"]["cost"]
    lines += ["", "Targets (issue 27), each op against its own C call in the same process:",
              f"- kvjit.store_kv_cache (eager): {store_cost:+.2f} us (by process {fmt(by_kind['shipped']['costs'])}); "
              f"<= C call + 0.70 us: {verdict(store_cost <= 0.70)}",
              f"- kvjit.transfer_kv (eager): {transfer_cost:+.2f} us (by process "
              f"{fmt(by_kind['tshipped']['costs'])}); <= C call + 1.00 us: {verdict(transfer_cost <= 1.00)}",
              f"- torch.ops.kvjit.store_kv_cache.default: {op['cost']:+.2f} us (by process {fmt(op['costs'])})"]
    tvm = next((st[n] for n, _ in names_kinds if n.startswith("tvm-ffi") and n in st), None)
    if tvm is not None:
        ours = by_kind["ext"]["median"]
        lines.append(f"- the door's foundation: tvm-ffi {tvm['cost']:+.2f} us vs kvjit._C {by_kind['ext']['cost']:+.2f} "
                     f"us (the same reading, rules and call behind each): tvm-ffi is {tvm['median'] - ours:+.2f} us; "
                     f"adopt it when within 0.30 us of kvjit._C: {'yes' if tvm['median'] - ours <= 0.30 else 'no'}")
    if old_runs:
        lines += compare_old(args, st, by_kind, old_runs, fmt)
    if not data["gpu"]:
        lines.append("- CPU mode: no launch in any candidate; rerun on a GPU for the numbers of record")
    return "\n".join(lines)


def compare_old(args, st, by_kind, old_runs, fmt):
    """This door against the old one, key rows, each against its own C call in its own process."""
    names = set.intersection(*(set(run) for run in old_runs))
    old_st = stats(old_runs, [(n, old_kind(n)) for n in sorted(names) if old_kind(n)])
    old = {s["kind"]: s for s in old_st.values()}
    rows = [("C call (kvjit_store_kv_cache in a C loop)", "bound", "median"),
            ("kvjit.store_kv_cache - C call", "shipped", "cost"), ("the op-argument call - C call", "ext", "cost"),
            ("torch.ops.kvjit.store_kv_cache.default - C call", "op", "cost"), ("dispatch floor", "floor", "median"),
            ("yardstick (no-op op, Python impl)", "noop", "median")]
    lines = ["", f"Against the old door ({args.old}, its own bench over {args.old_build}), processes alternated "
             f"(the order flips every round); each door against its own C call in its own process:", "",
             "| us | this door, by process | median | old door, by process | median | this - old |",
             "| --- | --- | ---: | --- | ---: | ---: |"]
    series = {}
    for label, kind, field in rows:
        if kind not in by_kind or kind not in old:
            continue
        mine, theirs = by_kind[kind], old[kind]
        a = mine["costs"] if field == "cost" else mine["meds"]
        b = theirs["costs"] if field == "cost" else theirs["meds"]
        series[kind] = (a, b)
        lines.append(f"| {label} | {fmt(a)} | {statistics.median(a):.2f} | {fmt(b)} | {statistics.median(b):.2f} | "
                     f"{statistics.median(a) - statistics.median(b):+.2f} |")
    derived = [("the op's own work (op - C call - floor)", "op", "floor", lambda x, y: x - y)]
    # A host's state moves a whole process (a no-op op 2.7 us in one, 5.2 in the next on one H200 host):
    # each cost as a multiple of something timed in the same process cancels most of it.
    derived += [("torch op - C call, per no-op op (the yardstick) of its process", "op", "noop", lambda x, y: x / y),
                ("kvjit.store_kv_cache - C call, per C call of its process", "shipped", "bound", lambda x, y: x / y)]
    for label, kind, other, f in derived:
        if kind in series and other in series:
            a = [f(x, y) for x, y in zip(series[kind][0], series[other][0])]
            b = [f(x, y) for x, y in zip(series[kind][1], series[other][1])]
            lines.append(f"| {label} | {fmt(a)} | {statistics.median(a):.2f} | {fmt(b)} | {statistics.median(b):.2f} | "
                         f"{statistics.median(a) - statistics.median(b):+.2f} |")
    return lines


def main():
    args = parse_args()
    if args.child:
        data = measure(args)
        with open(args.child, "w") as f:
            json.dump(data, f)
        return
    args.build_dir = find_build(args.build)
    if args.old and not os.path.exists(os.path.join(args.old, "bench", "bench_binding.py")):
        sys.exit(f"bench_binding: --old {args.old}: no bench/bench_binding.py there")
    cpu = pick_cpu(args.cpu)
    args.pinned = f"each pinned to CPU {cpu}" if cpu is not None else "not pinned"
    runs, paired_runs, old_runs, data = [], [], [], None
    start, longest = time.perf_counter(), 0.0
    with tempfile.TemporaryDirectory(prefix="bench_binding.") as tmp:
        old_cache = os.path.join(tmp, "old-cache")
        for r in range(args.rounds):
            order = ("new", "old") if r % 2 == 0 else ("old", "new")
            if args.deadline and time.perf_counter() - start + longest * (1 + bool(args.old)) > args.deadline:
                print(f"(--deadline {args.deadline:g} s: stopped after {r} processes of each door)")
                break
            for who in order:
                began = time.perf_counter()
                if who == "new":
                    got = run_child(args, os.path.join(tmp, f"new{r}.json"), cpu)
                    if got is not None:
                        data = data or got
                        runs.append(got["rounds"])
                        paired_runs.append(got["paired"])
                elif args.old:
                    got = run_old(args, os.path.join(tmp, f"old{r}.csv"), old_cache, cpu)
                    if got is not None:
                        old_runs.append(got)
                longest = max(longest, time.perf_counter() - began)
    if not runs:
        sys.exit("bench_binding: no round of this door finished")
    for note in NOTES:
        print(note)
    text = report(args, data, runs, paired_runs, old_runs)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    if args.csv:
        with open(args.csv, "w") as f:
            # A candidate's rounds, then (this door) each round's loop less its paired C loop; the C
            # calls' own rows hold every loop they ran, one beside each candidate's.
            f.write("door,process,candidate,round,us_per_call,minus_paired_c_us\n")
            for door, door_runs, pairs in (("this", runs, paired_runs), ("old", old_runs, [{}] * len(old_runs))):
                for p, (run, paired) in enumerate(zip(door_runs, pairs)):
                    for name, values in run.items():
                        minus = paired.get(name, [])
                        for i, us in enumerate(values):
                            less_c = f"{minus[i]:.4f}" if i < len(minus) else ""
                            f.write(f"{door},{p},\"{name}\",{i},{us:.4f},{less_c}\n")


if __name__ == "__main__":
    main()
