"""torch.ops.kvjit.store_kv_cache on a GPU (skipped without torch, a CUDA device or a driver):
eagerly (the op, and kvjit.store_kv_cache's extension path), under torch.compile(fullgraph=True)
with no graph break, and inside torch.cuda.graph capture and replay, on the current stream.
Every cache is poisoned first, filled from random rows, and compared byte for byte with
PyTorch's indexing, rows outside the target included.
"""

import threading

from _support import need_gpu, parametrize, raises, skip

import kvjit


def random_rows(torch, shape, dtype, seed=None):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed if seed is not None else torch.randint(0, 2**31, ()).item())
    if dtype.is_floating_point and torch.empty(0, dtype=dtype).element_size() > 1:
        return (torch.randn(shape, device="cuda", generator=g) * 4).to(dtype)
    return torch.randint(0, 256, shape, device="cuda", generator=g, dtype=torch.uint8).view(dtype)


def poisoned(torch, shape, dtype):
    size = torch.empty(0, dtype=dtype).element_size()
    return torch.full(tuple(shape[:-1]) + (shape[-1] * size,), 0xA5, dtype=torch.uint8, device="cuda").view(dtype)


def expect(torch, cache, loc, src, num_slots=None, skip_slot=None):
    """PyTorch's indexing over the ids kvjit keeps (0 <= id < num_slots, id != skip_slot), done
    on the bytes (index_put has no fp8 kernel everywhere)."""
    want = cache.clone()
    flat = want.view(torch.uint8).view(want.shape[0], -1)
    rows = src.contiguous().view(torch.uint8).reshape(src.shape[0], -1)
    n = want.shape[0] if num_slots is None else num_slots
    keep = (loc >= 0) & (loc < n)
    if skip_slot is not None:
        keep &= loc != skip_slot
    flat[loc[keep].long()] = rows[keep]
    return want


def same_bytes(torch, got, want, what):
    torch.cuda.synchronize()
    a, b = got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
    bad = (a != b).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} bytes differ, first at {bad[0].tolist()}"


def unique_slots(torch, slots, batch):
    return torch.randperm(slots, device="cuda")[:batch]


def setup():
    torch = need_gpu()
    kvjit.register_torch_ops()
    return torch


@parametrize("dtype, index", [("bfloat16", "int64"), ("float16", "int32"), ("float32", "int64"),
                              ("float8_e4m3fn", "int32")])
@parametrize("batch", [1, 16, 1000])
def test_op_eager_matches_indexing(dtype, index, batch):
    torch = setup()
    dt = getattr(torch, dtype)
    heads, dim, slots = 8, 128, 4096
    k, v = random_rows(torch, (batch, heads, dim), dt), random_rows(torch, (batch, heads, dim), dt)
    kc, vc = poisoned(torch, (slots, heads, dim), dt), poisoned(torch, (slots, heads, dim), dt)
    loc = unique_slots(torch, slots, batch).to(getattr(torch, index))
    if batch > 1:
        loc[0] = -1       # padding: skipped
        loc[1] = slots + 5  # past the cache: skipped and counted
    want_k, want_v = expect(torch, kc, loc, k), expect(torch, vc, loc, v)
    kvjit.oob_count(reset=True)
    torch.ops.kvjit.store_kv_cache(k, v, kc, vc, loc)
    same_bytes(torch, kc, want_k, "k_cache (op)")
    same_bytes(torch, vc, want_v, "v_cache (op)")
    assert kvjit.oob_count(reset=True) == (1 if batch > 1 else 0)
    # The friendly entry point (the extension in eager) writes the same bytes.
    kc2, vc2 = poisoned(torch, kc.shape, dt), poisoned(torch, vc.shape, dt)
    kvjit.store_kv_cache(k, v, kc2, vc2, loc)
    same_bytes(torch, kc2, want_k, "k_cache (kvjit.store_kv_cache)")
    same_bytes(torch, vc2, want_v, "v_cache (kvjit.store_kv_cache)")


def test_op_paged_strided_k_only_skip_slot():
    torch = setup()
    batch, heads, dim = 40, 4, 64
    qkv = random_rows(torch, (batch, 3 * heads * dim), torch.bfloat16)
    k = qkv[:, heads * dim:2 * heads * dim].view(batch, heads, dim)  # token stride 3 rows
    cache = poisoned(torch, (64, 16, heads, dim), torch.bfloat16)  # 64 pages x 16 slots
    loc = unique_slots(torch, 1024, batch)
    loc[3] = 7
    want = expect(torch, cache.view(1024, heads, dim), loc, k, num_slots=1000, skip_slot=7).view(cache.shape)
    torch.ops.kvjit.store_kv_cache(k, None, cache, None, loc, num_slots=1000, skip_slot=7)
    same_bytes(torch, cache, want, "paged K-only cache")


@parametrize("fp8, scale", [("float8_e4m3fn", "tensor"), ("float8_e5m2", "head"), ("float8_e4m3fn", "none")])
def test_op_quantizes_on_store(fp8, scale):
    torch = setup()
    fdt = getattr(torch, fp8)
    fmax = torch.finfo(fdt).max
    batch, heads, dim, slots = 33, 8, 128, 512
    k = random_rows(torch, (batch, heads, dim), torch.bfloat16) * 60
    v = random_rows(torch, (batch, heads, dim), torch.bfloat16)
    kc, vc = poisoned(torch, (slots, heads, dim), fdt), poisoned(torch, (slots, heads, dim), fdt)
    loc = unique_slots(torch, slots, batch)
    ks = vs = None
    if scale == "tensor":
        ks, vs = torch.tensor([0.37], device="cuda"), torch.tensor([1.9], device="cuda")
    elif scale == "head":
        ks = torch.rand(heads, device="cuda") + 0.1
        vs = torch.rand(heads, device="cuda") + 0.1

    def q(x, s):
        x = x.float()
        if s is not None:
            x = x / (s.view(1, -1, 1) if s.numel() > 1 else s)
        return x.clamp(-fmax, fmax).to(fdt)

    want_k, want_v = expect(torch, kc, loc, q(k, ks)), expect(torch, vc, loc, q(v, vs))
    torch.ops.kvjit.store_kv_cache(k, v, kc, vc, loc, k_scale=ks, v_scale=vs)
    same_bytes(torch, kc, want_k, "fp8 k_cache")
    same_bytes(torch, vc, want_v, "fp8 v_cache")


def test_compile_fullgraph_no_graph_break():
    torch = setup()
    import torch._dynamo

    batch, heads, dim, slots = 16, 8, 128, 2048

    def layer(kv, kc, vc, loc):
        kvjit.store_kv_cache(kv[:, 0], kv[:, 1], kc, vc, loc)  # the friendly entry point, traced
        torch.ops.kvjit.store_kv_cache(kv[:, 1] * 2, None, kc, None, loc + 1)  # an input Inductor computes
        return kc[loc].float().sum()

    def fresh():
        return poisoned(torch, (slots, heads, dim), torch.bfloat16), poisoned(torch, (slots, heads, dim),
                                                                               torch.bfloat16)

    kv = random_rows(torch, (batch, 2, heads, dim), torch.bfloat16)
    loc = unique_slots(torch, slots - 1, batch)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(layer)(kv, *fresh(), loc)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    compiled = torch.compile(layer, fullgraph=True)
    for round_ in range(3):
        kv = random_rows(torch, (batch, 2, heads, dim), torch.bfloat16)
        loc = unique_slots(torch, slots - 1, batch)
        kc, vc = fresh()
        want_k = expect(torch, expect(torch, kc, loc, kv[:, 0]), loc + 1, kv[:, 1] * 2)  # x2 is exact in bf16
        want_v = expect(torch, vc, loc, kv[:, 1])
        compiled(kv, kc, vc, loc)
        same_bytes(torch, kc, want_k, f"k_cache under torch.compile, round {round_}")
        same_bytes(torch, vc, want_v, f"v_cache under torch.compile, round {round_}")


def test_cuda_graph_capture_and_replay():
    torch = setup()
    batch, heads, dim, slots = 48, 8, 128, 512
    k, v = random_rows(torch, (batch, heads, dim), torch.bfloat16), random_rows(torch, (batch, heads, dim),
                                                                                torch.bfloat16)
    kc, vc = poisoned(torch, (slots, heads, dim), torch.bfloat16), poisoned(torch, (slots, heads, dim), torch.bfloat16)
    latent = poisoned(torch, (slots, heads * dim), torch.bfloat16)
    loc = unique_slots(torch, slots, batch)
    kvjit.prepare(k, v, kc, vc, loc, batch=0)  # every size class loaded before capture
    kvjit.prepare(k, None, latent, None, loc)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the side stream, as torch recommends before capture
        torch.ops.kvjit.store_kv_cache(k, v, kc, vc, loc)
        kvjit.store_kv_cache(k, None, latent, None, loc)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops.kvjit.store_kv_cache(k, v, kc, vc, loc)  # the op: a node on the capture stream
        kvjit.store_kv_cache(k, None, latent, None, loc)  # the extension path: another node
    for round_ in range(3):
        k.copy_(random_rows(torch, k.shape, k.dtype))
        v.copy_(random_rows(torch, v.shape, v.dtype))
        loc.copy_(unique_slots(torch, slots, batch))
        want_k, want_v = expect(torch, kc, loc, k), expect(torch, vc, loc, v)
        want_latent = expect(torch, latent, loc, k)
        graph.replay()
        same_bytes(torch, kc, want_k, f"k_cache after replay {round_}")
        same_bytes(torch, vc, want_v, f"v_cache after replay {round_}")
        same_bytes(torch, latent, want_latent, f"K-only cache after replay {round_}")


@parametrize("way", ["op", "friendly"])
def test_launches_on_the_current_stream(way):
    torch = setup()
    if not hasattr(torch.cuda, "_sleep"):
        skip("torch.cuda._sleep is missing")
    batch, width, slots = 64, 1024, 100
    src_k, src_v = random_rows(torch, (batch, width), torch.bfloat16), random_rows(torch, (batch, width),
                                                                                   torch.bfloat16)
    k, v = torch.zeros_like(src_k), torch.zeros_like(src_v)
    kc, vc = poisoned(torch, (slots, width), torch.bfloat16), poisoned(torch, (slots, width), torch.bfloat16)
    loc = unique_slots(torch, slots, batch)
    want_k, want_v = expect(torch, kc, loc, src_k), expect(torch, vc, loc, src_v)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # the rows are written late: a store elsewhere reads zeros
        k.copy_(src_k)
        v.copy_(src_v)
        if way == "op":
            torch.ops.kvjit.store_kv_cache(k, v, kc, vc, loc)
        else:
            kvjit.store_kv_cache(k, v, kc, vc, loc)
    same_bytes(torch, kc, want_k, "k_cache on a side stream")
    same_bytes(torch, vc, want_v, "v_cache on a side stream")


def test_op_from_a_thread_without_a_context():
    torch = setup()
    batch, width, slots = 77, 256, 120
    k, v = random_rows(torch, (batch, width), torch.float32), random_rows(torch, (batch, width), torch.float32)
    kc, vc = poisoned(torch, (slots, width), torch.float32), poisoned(torch, (slots, width), torch.float32)
    loc = unique_slots(torch, slots, batch)
    want_k, want_v = expect(torch, kc, loc, k), expect(torch, vc, loc, v)
    torch.cuda.synchronize()
    errors = []

    def work():
        try:
            torch.ops.kvjit.store_kv_cache(k, v, kc, vc, loc)
            torch.cuda.synchronize()
        except BaseException as e:  # reported on the main thread
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    same_bytes(torch, kc, want_k, "k_cache from a thread")
    same_bytes(torch, vc, want_v, "v_cache from a thread")


def test_op_on_a_second_gpu():
    torch = setup()
    if torch.cuda.device_count() < 2:
        skip("one GPU")
    k = random_rows(torch, (16, 1024), torch.bfloat16).to("cuda:1")
    kc = poisoned(torch, (64, 1024), torch.bfloat16).to("cuda:1")
    loc = torch.randperm(64, device="cuda:1")[:16]
    want = expect(torch, kc, loc, k)
    torch.ops.kvjit.store_kv_cache(k, None, kc, None, loc)  # current device is 0: the kernel guards
    kvjit.store_kv_cache(k, None, kc, None, loc)
    same_bytes(torch, kc, want, "cache on cuda:1")


def test_op_errors_before_launching():
    torch = setup()
    k = random_rows(torch, (4, 8, 64), torch.float16)
    cache = poisoned(torch, (16, 8, 64), torch.float16)
    loc = torch.arange(4, device="cuda")
    before = cache.clone()
    op = torch.ops.kvjit.store_kv_cache
    with raises(RuntimeError, match="kvjit ValueError: k: must be a CUDA tensor"):
        op(k.cpu(), k, cache, cache, loc)
    with raises(RuntimeError, match="kvjit ValueError: indices: must be a CUDA tensor"):
        op(k, k, cache, cache, loc.cpu())
    with raises(RuntimeError, match="kvjit TypeError: k_cache: dtype bf16 differs"):
        op(k, k, cache.bfloat16(), cache, loc)
    with raises(RuntimeError, match="kvjit ERR_INVALID_ARGUMENT: .*split"):
        op(k, k, cache, cache, loc, split=3)
    with raises(ValueError, match="^k: must be a CUDA tensor"):
        kvjit.store_kv_cache(k.cpu(), k, cache, cache, loc)
    with raises(kvjit.InvalidArgumentError, match="^split"):
        kvjit.store_kv_cache(k, k, cache, cache, loc, split=3)
    same_bytes(torch, cache, before, "cache after refused calls")


def test_the_native_module_reads_torch_tensors_itself():
    """Eager stores go through kvjit._C (the DLPack exchange API), not the dispatcher."""
    torch = setup()
    from kvjit import _ops

    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        skip("this torch has no DLPack exchange API (torch < 2.10)")
    k = random_rows(torch, (4, 256), torch.bfloat16)
    kc = poisoned(torch, (8, 256), torch.bfloat16)
    loc = torch.arange(4, device="cuda")
    assert _ops.native().store_kv_cache_op(k, None, kc, None, loc, -1, -1, 0, 0, None, None, 0, 0) is None
    same_bytes(torch, kc, expect(torch, poisoned(torch, (8, 256), torch.bfloat16), loc, k), "native store")
