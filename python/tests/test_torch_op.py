"""torch.ops.kvjit.store_kv_cache without a GPU (skipped without torch): the registration and
schema, the CPU path (the native module's host loop) against PyTorch indexing (poisoned caches,
every byte compared, rows outside the target untouched), the C kernel itself registered for CPU
under a test namespace (arguments, error classes and messages, batch 0 validated by the
library), torch.library.opcheck, and torch.compile(fullgraph=True) with no graph break.
"""

import sys

from _support import parametrize, raises, skip

import kvjit

try:
    import torch
except ImportError:
    torch = None


def need_torch():
    if torch is None:
        skip("no torch")
    kvjit.register_torch_ops()
    return torch


_test_ns = []


def c_kernel_op():
    """The C kernel, registered for CPU under kvjit_test (CPU tensors reach it; batch 0 only)."""
    from kvjit import _torch

    if not _test_ns:
        _test_ns.append(_torch.define(torch, "kvjit_test", cpu_path=False))
        _torch.register_kernels(torch, "kvjit_test", "CPU")
    return torch.ops.kvjit_test.store_kv_cache.default


def rows(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype in (torch.uint8, torch.int8):
        return torch.randint(0, 255, shape, generator=g).to(dtype)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


def poisoned(shape, dtype):
    """0xA5 in every byte: a store that writes the wrong row or too little shows."""
    size = torch.empty(0, dtype=dtype).element_size()
    return torch.full(tuple(shape[:-1]) + (shape[-1] * size,), 0xA5, dtype=torch.uint8).view(dtype)


def expect_store(cache, loc, src, num_slots=None, skip_slot=None):
    """What the cache must hold: PyTorch indexing over the kept ids, the rest as it was."""
    want = cache.clone()
    n = want.shape[0] if num_slots is None else num_slots
    flat = want.view(want.shape[0], -1) if want.dim() > 1 else want
    for i, slot in enumerate(loc.tolist()):
        if 0 <= slot < n and slot != skip_slot:
            flat[slot] = src[i].reshape(-1)
    return want


def same_bytes(got, want, what):
    a, b = got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
    bad = (a != b).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} bytes differ, first at {bad[0].tolist()}"


def test_registered_with_the_mutated_caches_declared():
    torch = need_torch()
    op = torch.ops.kvjit.store_kv_cache.default
    args = {a.name: a for a in op._schema.arguments}
    assert args["k_cache"].alias_info.is_write and args["v_cache"].alias_info.is_write
    assert not (args["k"].alias_info and args["k"].alias_info.is_write)
    assert len(op._schema.returns) == 0
    assert kvjit.register_torch_ops() is op  # idempotent


@parametrize("dtype", ["float16", "bfloat16", "float32", "uint8"])
def test_cpu_implementation_matches_indexing(dtype):
    torch = need_torch()
    dt = getattr(torch, dtype)
    k, v = rows((9, 4, 16), dt, 1), rows((9, 4, 16), dt, 2)
    kc, vc = poisoned((50, 4, 16), dt), poisoned((50, 4, 16), dt)
    loc = torch.tensor([3, -1, 7, 49, 0, 20, 50, 12, 11])  # -1 skipped, 50 past the cache: skipped
    want_k, want_v = expect_store(kc, loc, k), expect_store(vc, loc, v)
    torch.ops.kvjit.store_kv_cache(k, v, kc, vc, loc)
    same_bytes(kc, want_k, "k_cache")
    same_bytes(vc, want_v, "v_cache")


def test_cpu_paged_strided_k_only_and_skips():
    torch = need_torch()
    qkv = rows((6, 3 * 64), torch.bfloat16, 3)
    k = qkv[:, 64:128]  # rows 192 elements apart
    cache = poisoned((10, 4, 64), torch.bfloat16)  # paged: 10 pages x 4 slots
    loc = torch.tensor([5, 39, 0, 17, 18, 2], dtype=torch.int32)
    want = expect_store(cache.view(40, 64), loc, k, num_slots=30, skip_slot=2).view(10, 4, 64)
    kvjit.store_kv_cache(k, None, cache, None, loc, num_slots=30, skip_slot=2)
    same_bytes(cache, want, "paged K-only cache")


@parametrize("fp8, scale", [("float8_e4m3fn", "none"), ("float8_e4m3fn", "tensor"), ("float8_e5m2", "head")])
def test_cpu_quantizes_like_the_gpu_reference(fp8, scale):
    torch = need_torch()
    fdt = getattr(torch, fp8)
    fmax = torch.finfo(fdt).max
    k, v = rows((5, 4, 32), torch.bfloat16, 4) * 200, rows((5, 4, 32), torch.bfloat16, 5)
    k[0, 0, :4] = torch.tensor([float("nan"), float("inf"), -1e6, 0.0])
    kc, vc = poisoned((20, 4, 32), fdt), poisoned((20, 4, 32), fdt)
    loc = torch.tensor([1, 19, -1, 4, 8])
    ks = vs = None
    if scale == "tensor":
        ks, vs = torch.tensor([0.5]), torch.tensor([2.0])
    elif scale == "head":
        ks, vs = torch.tensor([0.5, 1.0, 2.0, 4.0]), torch.tensor([1.0, 3.0, 0.25, 8.0])

    def quantized(x, s):
        x = x.float()
        if s is not None:
            x = x / (s.view(1, -1, 1) if s.numel() > 1 else s)
        return x.clamp(-fmax, fmax).to(fdt)

    want_k, want_v = expect_store(kc, loc, quantized(k, ks)), expect_store(vc, loc, quantized(v, vs))
    kvjit.store_kv_cache(k, v, kc, vc, loc, k_scale=ks, v_scale=vs)
    same_fp8(kc, want_k, "k_cache")
    same_fp8(vc, want_v, "v_cache")


def same_fp8(got, want, what):
    """Bytes equal, except that any NaN matches any NaN (the GPU kernel writes 0x7f; PyTorch's
    CPU cast may set the sign bit): as test_gpu_fp8.py compares."""
    got_nan, want_nan = got.float().isnan(), want.float().isnan()
    assert torch.equal(got_nan, want_nan), f"{what}: NaN at different places"
    bad = ((got.view(torch.uint8) != want.view(torch.uint8)) & ~want_nan).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} bytes differ, first at {bad[0].tolist()}"


def test_cpu_implementation_refuses_what_the_kernel_refuses():
    torch = need_torch()
    k = rows((4, 2, 8), torch.float32, 6)
    kc = torch.zeros(16, 2, 8)
    loc = torch.arange(4)
    with raises(TypeError, match="^k_cache: dtype f16 differs from k's f32"):
        kvjit.store_kv_cache(k, k, kc.half(), kc, loc)
    with raises(ValueError, match="^v_cache: None while v is given"):
        kvjit.store_kv_cache(k, k, kc, None, loc)
    with raises(ValueError, match="^num_slots"):
        kvjit.store_kv_cache(k, k, kc, kc.clone(), loc, num_slots=2**64)
    with raises(TypeError, match="^indices: expected .*, got str"):
        kvjit.store_kv_cache(k, k, kc, kc.clone(), "0")
    with raises(ValueError, match="^k_cache: "):
        torch.ops.kvjit.store_kv_cache(k, None, kc[:, :, :4], None, loc)


KERNEL_BAD = [
    # (argument, error class, keyword overrides of the op's 13 arguments)
    ("k", "ValueError", {"k": "batch"}),  # rows on CPU: the kernel launches only on CUDA tensors
    ("k", "ValueError", {"k": "1d"}),
    ("k_cache", "TypeError", {"k_cache": "f16"}),
    ("k_cache", "ValueError", {"k_cache": "narrow"}),
    ("v_cache", "ValueError", {"v_cache": None}),
    ("indices", "TypeError", {"indices": "f32"}),
    ("indices", "ValueError", {"indices": "2d"}),
    ("num_slots", "ValueError", {"num_slots": 17}),
    ("num_slots", "ValueError", {"num_slots": 0}),
    ("skip_slot", "ValueError", {"skip_slot": 16}),
    ("split", "ValueError", {"split": -1}),
    ("pdl", "ValueError", {"pdl": 3}),
    ("cache_dtype", "ValueError", {"cache_dtype": 9}),
    ("layout", "ValueError", {"layout": 5}),
    ("k_scale", "ValueError", {"k_scale": "one"}),
]


def kernel_args(**over):
    empty = torch.zeros(0, 2, 8, dtype=torch.bfloat16)
    cache = torch.zeros(16, 2, 8, dtype=torch.bfloat16)
    values = {
        "batch": torch.zeros(3, 2, 8, dtype=torch.bfloat16), "1d": torch.zeros(0, dtype=torch.bfloat16),
        "f16": cache.half(), "narrow": cache[:, :, :4], "f32": torch.zeros(0), "2d": torch.zeros(0, 1, dtype=torch.int64),
        "one": torch.ones(1),
    }
    a = dict(k=empty, v=empty, k_cache=cache, v_cache=cache.clone(), indices=torch.zeros(0, dtype=torch.int64),
             num_slots=-1, skip_slot=-1, split=0, pdl=0, k_scale=None, v_scale=None, cache_dtype=0, layout=0)
    for name, value in over.items():
        a[name] = values.get(value, value) if isinstance(value, str) else value
    if over.get("k") == "batch":
        a["v"], a["indices"] = a["k"], torch.zeros(3, dtype=torch.int64)
    return a


@parametrize("arg, cls, over", KERNEL_BAD)
def test_c_kernel_names_the_bad_argument(arg, cls, over):
    need_torch()
    op = c_kernel_op()
    with raises(RuntimeError, match=rf"kvjit {cls}: {arg}: "):
        op(**kernel_args(**over))


def test_c_kernel_validates_batch_0_in_the_library():
    need_torch()
    op = c_kernel_op()
    op(**kernel_args())  # every layout rule passed, then kvjit_store_kv_cache validated and did nothing
    op(**kernel_args(v=None, v_cache=None))
    # The library's own check after the kernel's: split 3 does not divide a 16-element row.
    with raises(RuntimeError, match="kvjit ERR_INVALID_ARGUMENT: .*split"):
        op(**kernel_args(split=3))


def test_c_kernel_refuses_ints_past_64_bits():
    need_torch()
    op = c_kernel_op()
    with raises(RuntimeError, match="num_slots"):
        op(**kernel_args(num_slots=2**64 + 5))


# (k dtype, k_cache dtype, the message every path gives): a dtype kvjit has no rule for is still
# named, the same way through the extension, the C kernel, the CPU implementation and ctypes.
DTYPE_NAMES = [
    ("int16", "float8_e4m3fn", "k: dtype i16 cannot be stored into an fp8_e4m3 cache"),
    ("float64", "float8_e5m2", "k: dtype f64 cannot be stored into an fp8_e5m2 cache"),
    ("bool", "float8_e4m3fn", "k: dtype bool cannot be stored into an fp8_e4m3 cache"),
    ("complex64", "float8_e4m3fn", "k: dtype complex64 cannot be stored into an fp8_e4m3 cache"),
    ("float16", "int16", "k_cache: dtype i16 differs from k's f16"),
    ("float16", "uint16", "k_cache: dtype u16 differs from k's f16"),
    ("bfloat16", "complex32", "k_cache: dtype complex32 differs from k's bf16"),
    ("float16", "float8_e4m3fnuz", "k_cache: dtype float8_e4m3fnuz differs from k's f16"),
]


@parametrize("k_dtype, cache_dtype, message", DTYPE_NAMES)
def test_a_bad_dtype_is_named_alike_on_every_path(k_dtype, cache_dtype, message):
    """One rule in C, one message: kvjit.store_kv_cache and the op on CPU tensors (the native
    module) raise it; the C kernel reports it through the dispatcher as a RuntimeError."""
    need_torch()
    if getattr(torch, cache_dtype, None) is None:
        skip(f"torch.{cache_dtype} is missing")
    k = torch.zeros(0, 2, 8, dtype=getattr(torch, k_dtype))
    kc = torch.zeros(16, 2, 8, dtype=getattr(torch, cache_dtype))
    loc = torch.zeros(0, dtype=torch.int64)
    for name, store in [("kvjit.store_kv_cache", lambda: kvjit.store_kv_cache(k, None, kc, None, loc)),
                        ("the CPU path", lambda: torch.ops.kvjit.store_kv_cache(k, None, kc, None, loc))]:
        with raises(TypeError) as e:
            store()
        assert str(e.value).startswith(message), f"{name}: {e.value}"
    with raises(RuntimeError, match=f"kvjit TypeError: {message}"):
        c_kernel_op()(k, None, kc, None, loc)


def test_an_empty_store_is_validated_alike():
    """Batch 0 reads and writes nothing wherever the tensors are: kvjit.store_kv_cache and the op
    on CPU tensors run the library's own checks on it."""
    need_torch()
    args = kernel_args(split=3)  # 3 does not divide a 16-element row: the library refuses
    for name, call in [("kvjit.store_kv_cache", lambda: kvjit.store_kv_cache(
                            args["k"], args["v"], args["k_cache"], args["v_cache"], args["indices"], split=3)),
                       ("the CPU implementation", lambda: torch.ops.kvjit.store_kv_cache.default(**args))]:
        with raises(kvjit.InvalidArgumentError, match="split"):
            call()
    kvjit.store_kv_cache(args["k"], args["v"], args["k_cache"], args["v_cache"], args["indices"])


def test_the_keywords_are_normalised_once():
    """Every spelling of the keywords reaches the same request; what is wrong names itself."""
    need_torch()
    a = kernel_args()
    k, v, kc, vc, loc = a["k"], a["v"], a["k_cache"], a["v_cache"], a["indices"]
    for kw in [dict(), dict(num_slots=16, skip_slot=3), dict(split=0, pdl="on"), dict(pdl=False), dict(pdl=None),
               dict(num_slots=None, skip_slot=None, k_scale=None, v_scale=None, cache_dtype=None),
               dict(stream=0), dict(context=kvjit.default_context())]:
        kvjit.store_kv_cache(k, v, kc, vc, loc, **kw)
    for kw, exc, arg in [(dict(pdl=1), ValueError, "pdl"), (dict(num_slots=True), TypeError, "num_slots"),
                         (dict(split=None), TypeError, "split"), (dict(skip_slot=2**64), ValueError, "skip_slot"),
                         (dict(cache_dtype="fp8"), ValueError, "cache_dtype"),
                         (dict(context="ctx"), TypeError, "context")]:
        with raises(exc, match=f"^{arg}: "):
            kvjit.store_kv_cache(k, v, kc, vc, loc, **kw)
    with raises(TypeError, match="unexpected keyword argument 'slots'"):
        kvjit.store_kv_cache(k, v, kc, vc, loc, slots=3)
    # Rows on CPU: the native module's host loop stores them
    rows_k, cache = rows((3, 2, 8), torch.float32, 11), poisoned((16, 2, 8), torch.float32)
    want = expect_store(cache, torch.tensor([4, 9, 1]), rows_k)
    kvjit.store_kv_cache(rows_k, None, cache, None, torch.tensor([4, 9, 1]))
    same_bytes(cache, want, "k_cache through the CPU path")


def test_the_op_is_there_whatever_the_import_order():
    """Issue 25: `import kvjit, torch` then torch.ops.kvjit.store_kv_cache works when kvjit is
    installed (torch runs its "torch.backends" entry points at import); a source tree has none,
    so there `import torch` first or kvjit.register_torch_ops()."""
    import os
    import subprocess

    if not os.environ.get("KVJIT_TEST_INSTALLED"):
        skip("the entry point exists in an installed package only (KVJIT_TEST_INSTALLED=1)")
    code = "import kvjit, torch\nprint(torch.ops.kvjit.store_kv_cache.default is not None)\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and "No module named 'torch'" in r.stderr:
        skip("no torch")
    assert r.returncode == 0 and r.stdout.split() == ["True"], (r.stdout, r.stderr)


def test_opcheck():
    torch = need_torch()
    if not hasattr(torch.library, "opcheck"):
        skip("torch.library.opcheck is missing (torch < 2.4)")
    op = torch.ops.kvjit.store_kv_cache.default
    k, v = rows((4, 2, 8), torch.float32, 7), rows((4, 2, 8), torch.float32, 8)
    loc = torch.tensor([3, -1, 7, 15])
    torch.library.opcheck(op, (k, v, torch.zeros(16, 2, 8), torch.zeros(16, 2, 8), loc))
    torch.library.opcheck(op, (k, None, torch.zeros(16, 16), None, loc))
    # fp8 in a uint8 cache (opcheck's own comparison cannot read float8 tensors on CPU)
    u8 = torch.zeros(16, 2, 8, dtype=torch.uint8)
    torch.library.opcheck(op, (k, v, u8, u8.clone(), loc), {"k_scale": torch.tensor([0.5]),
                                                             "v_scale": torch.tensor([2.0]), "cache_dtype": 4})


def test_compile_fullgraph_has_no_graph_break():
    torch = need_torch()
    import torch._dynamo

    def step(k, v, kc, vc, loc):
        kvjit.store_kv_cache(k * 2, v, kc, vc, loc)  # the friendly entry point, traced into the op
        torch.ops.kvjit.store_kv_cache(k, None, kc, None, loc + 1, num_slots=15)
        return kc.sum() + vc.sum()

    k, v = rows((4, 2, 8), torch.float32, 9), rows((4, 2, 8), torch.float32, 10)
    loc = torch.tensor([3, -1, 7, 12])
    torch._dynamo.reset()
    explained = torch._dynamo.explain(step)(k, v, torch.zeros(16, 2, 8), torch.zeros(16, 2, 8), loc)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    eager_kc, eager_vc = poisoned((16, 2, 8), torch.float32), poisoned((16, 2, 8), torch.float32)
    step(k, v, eager_kc, eager_vc, loc)
    compiled = torch.compile(step, fullgraph=True)
    for _ in range(2):  # the second call runs the compiled graph as it is
        kc, vc = poisoned((16, 2, 8), torch.float32), poisoned((16, 2, 8), torch.float32)
        compiled(k, v, kc, vc, loc)
        same_bytes(kc, eager_kc, "k_cache under torch.compile")
        same_bytes(vc, eager_vc, "v_cache under torch.compile")


def test_kvjit_does_not_import_torch_itself():
    import subprocess

    code = "import sys, kvjit; print('torch' in sys.modules)"
    env = dict(__import__("os").environ)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                       cwd=__import__("os").path.dirname(__import__("os").path.dirname(kvjit.__file__)))
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
