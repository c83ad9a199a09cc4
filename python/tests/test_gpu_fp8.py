"""Quantize on store (fp8 caches) on a GPU, bit-exact against PyTorch:

    want = (x.float() / s).clamp(-fmax, fmax).to(torch.float8_e4m3fn)   # or float8_e5m2

(clamping first makes PyTorch's cast saturate like kvjit's; s is a 1-element or [H, 1] fp32
tensor, or absent). NaN matches NaN whatever its sign bit; every other byte must be equal.
Sources fp16/bf16/fp32, caches float8_e4m3fn / float8_e5m2 or uint8 with cache_dtype=, scales
none / per tensor / per head, special values (NaN, +-inf, huge, tiny, -0), several batch sizes and
widths, every split for one shape, K only, and CUDA graph replay with scales changed between
replays. Skips without torch, a CUDA device or torch's float8 dtypes.
"""

from _support import need_gpu, parametrize, raises, skip

import kvjit

FMAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}


def need_fp8():
    torch = need_gpu()
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "float8_e5m2"):
        skip("this torch has no float8 dtypes")
    return torch


def fp8_dtype(torch, name):
    return {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[name]


def src_dtype(torch, name):
    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[name]


def values(torch, shape, dtype, spread=300.0):
    """Random values across the fp8 range plus specials: NaN, +-inf, huge, tiny, +-0."""
    x = torch.randn(shape, dtype=torch.float32, device="cuda") * spread
    flat = x.view(-1)
    n = flat.numel()
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 70000.0, -70000.0, 449.0,
                             464.0, 465.0, 1e-3, -1e-3, 2.0 ** -10, 2.0 ** -17, 0.0, -0.0], device="cuda")
    idx = torch.randperm(n, device="cuda")[:min(n, 4 * len(specials))]
    flat[idx] = specials.repeat(4)[:len(idx)]
    return x.to(dtype)


def quantize(torch, x, scale, heads, fp8, fmax):
    """The PyTorch reference of one row block [B, ...]."""
    xf = x.float()
    if scale is not None:
        if scale.numel() == 1:
            xf = xf / scale
        else:
            shape = xf.shape
            xf = (xf.reshape(shape[0], heads, -1) / scale.view(heads, 1)).reshape(shape)
    return xf.clamp(-fmax, fmax).to(fp8)


def reference_store(torch, cache_u8, loc, q):
    ref = cache_u8.clone()
    ref[loc.long()] = q.view(torch.uint8).reshape((q.shape[0],) + tuple(ref.shape[1:]))
    return ref


def check(torch, got_u8, want_u8, fp8, what):
    """Bytes equal, except that any NaN matches any NaN."""
    got_nan = got_u8.view(fp8).float().isnan()
    want_nan = want_u8.view(fp8).float().isnan()
    if not torch.equal(got_nan, want_nan):
        raise AssertionError(f"{what}: NaN at {int((got_nan != want_nan).sum())} places where the other has none")
    same = (got_u8 == want_u8) | want_nan
    if not bool(same.all()):
        bad = (~same).nonzero()
        first = tuple(int(i) for i in bad[0])
        raise AssertionError(f"{what}: {len(bad)} bytes differ, first at {first}: got {int(got_u8[first])} "
                             f"want {int(want_u8[first])}")


def fp8_case(torch, batch, heads, dim, src, cache, scale_kind, *, uint8_cache=False, split=0, k_only=False,
             index=None):
    dtype = src_dtype(torch, src)
    fp8 = fp8_dtype(torch, cache)
    fmax = FMAX[cache]
    slots = batch + batch // 4 + 3
    k = values(torch, (batch, heads, dim), dtype)
    v = None if k_only else values(torch, (batch, heads, dim), dtype)
    raw = [torch.randint(0, 256, (slots, heads, dim), dtype=torch.uint8, device="cuda") for _ in range(2)]
    k_cache_u8, v_cache_u8 = raw
    if uint8_cache:
        k_cache, v_cache, kw = k_cache_u8, v_cache_u8, {"cache_dtype": cache}
    else:
        k_cache, v_cache, kw = k_cache_u8.view(fp8), v_cache_u8.view(fp8), {}
    if k_only:
        v_cache = None
    k_scale = v_scale = None
    if scale_kind == "tensor":
        k_scale = torch.tensor([0.37], dtype=torch.float32, device="cuda")
        v_scale = torch.tensor([1.7], dtype=torch.float32, device="cuda")
    elif scale_kind == "head":
        k_scale = torch.rand(heads, dtype=torch.float32, device="cuda") + 0.2
        v_scale = (torch.rand(heads, 1, dtype=torch.float32, device="cuda") + 0.2) * 3
    if k_only:
        v_scale = None
    loc = torch.randperm(slots, device="cuda")[:batch]
    if index is not None:
        loc = loc.to(index)
    want_k = reference_store(torch, k_cache_u8, loc, quantize(torch, k, k_scale, heads, fp8, fmax))
    want_v = None if k_only else reference_store(torch, v_cache_u8, loc, quantize(torch, v, v_scale, heads, fp8, fmax))
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc, k_scale=k_scale, v_scale=v_scale, split=split, **kw)
    torch.cuda.synchronize()
    label = f"{src}->{cache} scale {scale_kind} batch {batch} [{heads}, {dim}] split {split}"
    check(torch, k_cache_u8, want_k, fp8, f"k_cache ({label})")
    if not k_only:
        check(torch, v_cache_u8, want_v, fp8, f"v_cache ({label})")


@parametrize("src", ["f16", "bf16", "f32"])
@parametrize("cache", ["fp8_e4m3", "fp8_e5m2"])
@parametrize("scale_kind", ["none", "tensor", "head"])
def test_quantize_matches_torch(src, cache, scale_kind):
    torch = need_fp8()
    for batch in (1, 33, 4097):
        fp8_case(torch, batch, 8, 128, src, cache, scale_kind)


@parametrize("cache", ["fp8_e4m3", "fp8_e5m2"])
def test_uint8_cache_with_cache_dtype(cache):
    torch = need_fp8()
    for batch, heads, dim in ((5, 8, 128), (300, 4, 100), (17, 1, 576)):
        fp8_case(torch, batch, heads, dim, "bf16", cache, "head" if heads > 1 else "tensor", uint8_cache=True,
                 index=torch.int32)


def test_widths_and_k_only():
    torch = need_fp8()
    for heads, dim in ((1, 64), (2, 48), (4, 98), (8, 100), (8, 256), (16, 64)):
        fp8_case(torch, 129, heads, dim, "f16", "fp8_e4m3", "head")
        fp8_case(torch, 16, heads, dim, "f32", "fp8_e5m2", "tensor", k_only=True)


def test_every_split_quantizing():
    torch = need_fp8()
    heads, dim = 8, 128
    row_bytes = heads * dim * 2  # splits count source (bf16) bytes
    for split in [0] + [d for d in range(1, row_bytes + 1) if row_bytes % d == 0]:
        if split and (row_bytes // split) % 2:
            # slices of an odd number of bytes would cut a bf16 element: refused before launching
            with raises(kvjit.InvalidArgumentError, match="^split"):
                fp8_case(torch, 70, heads, dim, "bf16", "fp8_e4m3", "head", split=split)
            continue
        fp8_case(torch, 70, heads, dim, "bf16", "fp8_e4m3", "head", split=split)


def test_graph_replay_reads_new_scales():
    torch = need_fp8()
    batch, heads, dim, slots = 64, 8, 128, 200
    fp8 = torch.float8_e4m3fn
    k = values(torch, (batch, heads, dim), torch.bfloat16)
    v = values(torch, (batch, heads, dim), torch.bfloat16)
    k_cache = torch.zeros((slots, heads, dim), dtype=torch.uint8, device="cuda").view(fp8)
    v_cache = torch.zeros((slots, heads, dim), dtype=torch.uint8, device="cuda").view(fp8)
    k_scale = torch.full((heads,), 0.5, dtype=torch.float32, device="cuda")
    v_scale = torch.full((heads,), 2.0, dtype=torch.float32, device="cuda")
    loc = torch.randperm(slots, device="cuda")[:batch]
    kw = dict(k_scale=k_scale, v_scale=v_scale)
    kvjit.prepare(k, v, k_cache, v_cache, loc, batch=0, **kw)
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc, **kw)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kvjit.store_kv_cache(k, v, k_cache, v_cache, loc, **kw)
    for step in range(3):
        k_scale.copy_(torch.rand(heads, device="cuda") + 0.1)
        v_scale.fill_(0.25 * (step + 1))
        k.copy_(values(torch, k.shape, k.dtype))
        want_k = reference_store(torch, k_cache.view(torch.uint8), loc, quantize(torch, k, k_scale, heads, fp8, 448.0))
        want_v = reference_store(torch, v_cache.view(torch.uint8), loc, quantize(torch, v, v_scale, heads, fp8, 448.0))
        graph.replay()
        torch.cuda.synchronize()
        check(torch, k_cache.view(torch.uint8), want_k, fp8, f"k_cache after replay {step}")
        check(torch, v_cache.view(torch.uint8), want_v, fp8, f"v_cache after replay {step}")


def test_fp8_arguments():
    torch = need_fp8()
    k = values(torch, (4, 8, 64), torch.float16)
    cache = torch.zeros((16, 8, 64), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    loc = torch.arange(4, device="cuda")
    one = torch.ones(1, device="cuda")
    with raises(TypeError, match="^k_scale: dtype"):
        kvjit.store_kv_cache(k, k, cache, cache, loc, k_scale=one.half(), v_scale=one)
    with raises(ValueError, match="^k_scale: must be a CUDA tensor"):
        kvjit.store_kv_cache(k, k, cache, cache, loc, k_scale=one.cpu(), v_scale=one)
    with raises(ValueError, match="^k_scale: 3 scales"):
        kvjit.store_kv_cache(k, k, cache, cache, loc, k_scale=torch.ones(3, device="cuda"),
                             v_scale=torch.ones(3, device="cuda"))
    with raises(ValueError, match="^v_scale"):
        kvjit.store_kv_cache(k, k, cache, cache, loc, k_scale=one)
    with raises(TypeError, match="^v_cache: dtype"):
        kvjit.store_kv_cache(k, k, cache, cache.view(torch.float8_e5m2), loc)
    with raises(TypeError, match="^k: dtype i16"):
        kvjit.store_kv_cache(k.view(torch.int16), k, cache, cache, loc)
    wide = torch.zeros((16, 8, 128), dtype=torch.uint8, device="cuda")  # fp16 rows as raw bytes
    with raises(ValueError, match="^k_scale: scales need an fp8 cache"):
        kvjit.store_kv_cache(k, k, wide, wide, loc, k_scale=one, v_scale=one)
    # fp8 rows into an fp8 cache of the same kind: a plain byte copy
    rows = torch.randint(0, 256, (4, 8, 64), dtype=torch.uint8, device="cuda")
    kvjit.store_kv_cache(rows.view(torch.float8_e4m3fn), None, cache, None, loc)
    torch.cuda.synchronize()
    assert torch.equal(cache.view(torch.uint8)[:4], rows)
