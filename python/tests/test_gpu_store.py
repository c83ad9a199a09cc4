"""store_kv_cache on a GPU with PyTorch, checked byte for byte against `k_cache[loc] = k`.

The reference's matrix, sampled: all 30 batch sizes for bf16 rows of 1024 elements; every row width
(64..1024 elements and the 96/98/100 tails) x fp16/bf16/fp32/fp8-as-uint8 x int32/int64 for one
batch of each size class; every split for three widths. Then K only, asymmetric rows, strided
inputs, interleaved and paged caches, padding / skip / out-of-range ids with the counter, the
current stream, CUDA graph capture and replay, other threads, a second GPU, bad arguments, and the
generic loader. Caches are poisoned with random bytes, so untouched rows are checked too.
Skips without torch or a CUDA device.
"""

import ctypes
import threading

from _support import LOADER_SRC, need_gpu, parametrize, raises, skip

import kvjit

BATCHES = [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 1023,
           1024, 2047, 4096, 8191, 16399]
WIDTHS = [64, 96, 98, 100, 128, 256, 512, 1024]  # elements per row
DTYPES = ["f16", "bf16", "f32", "fp8"]


def dtype_of(torch, name):
    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "fp8": torch.uint8,
            "i32": torch.int32, "i64": torch.int64}[name]


def random_rows(torch, shape, dtype, device="cuda"):
    """Random values of @p dtype (uint8: random bytes, as fp8 data would be)."""
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, dtype=torch.uint8, device=device)
    return torch.randn(shape, dtype=torch.float32, device=device).to(dtype)


def poisoned(torch, shape, dtype, device="cuda"):
    """A cache full of random bytes (NaN patterns included)."""
    size = torch.empty((), dtype=dtype).element_size()
    numel = 1
    for s in shape:
        numel *= s
    raw = torch.randint(0, 256, (numel * size,), dtype=torch.uint8, device=device)
    return raw.view(dtype).view(shape)


def _bytes(t):
    import torch

    return t.contiguous().view(torch.uint8)


def check(got, want, what):
    if not _bytes(got).equal(_bytes(want)):
        g, w = _bytes(got).flatten(), _bytes(want).flatten()
        bad = (g != w).nonzero()
        first = int(bad[0]) if len(bad) else -1
        raise AssertionError(f"{what}: {len(bad)} bytes differ, first at byte {first}")


def reference_store(cache, loc, rows, num_slots=None, skip_slot=None):
    """cache[loc] = rows, skipping ids < 0, == skip_slot and >= num_slots (kvjit's rules)."""
    ref = cache.clone()
    loc = loc.long()
    keep = loc >= 0
    if num_slots is not None:
        keep &= loc < num_slots
    if skip_slot is not None:
        keep &= loc != skip_slot
    ref[loc[keep]] = rows[keep]
    return ref


def store_case(torch, batch, width, dtype_name, index_name, split=0, heads=None, pdl="auto", k_only=False):
    dtype = dtype_of(torch, dtype_name)
    slots = batch + batch // 4 + 3
    shape = (batch, heads, width // heads) if heads else (batch, width)
    cache_shape = (slots,) + shape[1:]
    k = random_rows(torch, shape, dtype)
    v = None if k_only else random_rows(torch, shape, dtype)
    k_cache = poisoned(torch, cache_shape, dtype)
    v_cache = None if k_only else poisoned(torch, cache_shape, dtype)
    loc = torch.randperm(slots, device="cuda")[:batch].to(dtype_of(torch, index_name))
    want_k = reference_store(k_cache, loc, k)
    want_v = None if k_only else reference_store(v_cache, loc, v)
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc, split=split, pdl=pdl)
    torch.cuda.synchronize()
    label = f"batch {batch} width {width} {dtype_name} {index_name} split {split}"
    check(k_cache, want_k, f"k_cache ({label})")
    if not k_only:
        check(v_cache, want_v, f"v_cache ({label})")


# ---- the reference's matrix --------------------------------------------------------------------


def test_every_batch_size_bf16():
    torch = need_gpu()
    for i, batch in enumerate(BATCHES):
        store_case(torch, batch, 1024, "bf16", "i64" if i % 2 else "i32", heads=8)


@parametrize("dtype", DTYPES)
def test_every_width_and_index_type(dtype):
    torch = need_gpu()
    for width in WIDTHS:
        for batch in (1, 129, 4097):  # one per size class
            for index in ("i32", "i64"):
                heads = 2 if width % 2 == 0 and batch == 129 else None  # [B, H, D] and [B, H*D]
                store_case(torch, batch, width, dtype, index, heads=heads)


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@parametrize("width", [64, 98, 1024])
def test_every_split(width):
    torch = need_gpu()
    row_bytes = width * 2
    for split in [0] + divisors(row_bytes):
        for batch in (3, 300):
            store_case(torch, batch, width, "bf16", "i64", split=split)


@parametrize("pdl", ["auto", "on", "off"])
def test_pdl_modes(pdl):
    torch = need_gpu()
    major, _ = torch.cuda.get_device_capability()
    if pdl == "on" and major < 9:
        with raises(kvjit.Error, match="sm_90"):
            store_case(torch, 16, 1024, "bf16", "i64", pdl=pdl)
        return
    for batch in (1, 16, 5000):
        store_case(torch, batch, 1024, "bf16", "i64", pdl=pdl)


# ---- layouts -----------------------------------------------------------------------------------


def test_k_only_and_asymmetric_rows():
    torch = need_gpu()
    for batch in (1, 17, 1000):
        store_case(torch, batch, 576, "bf16", "i64", k_only=True)  # MLA: one latent row
    batch, slots = 100, 160
    k = random_rows(torch, (batch, 576), torch.bfloat16)
    v = random_rows(torch, (batch, 4, 128), torch.bfloat16)
    k_cache = poisoned(torch, (slots, 576), torch.bfloat16)
    v_cache = poisoned(torch, (slots, 4, 128), torch.bfloat16)
    loc = torch.randperm(slots, device="cuda")[:batch]
    want_k, want_v = reference_store(k_cache, loc, k), reference_store(v_cache, loc, v)
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc)
    torch.cuda.synchronize()
    check(k_cache, want_k, "k_cache")
    check(v_cache, want_v, "v_cache")


def test_strided_inputs_and_interleaved_cache():
    torch = need_gpu()
    batch, heads, dim, slots = 333, 8, 128, 700  # slots >= 2 * batch: loc takes every other of 2 * batch ids
    row = heads * dim
    # k and v are column blocks of a fused qkv projection: token stride 3 rows
    qkv = random_rows(torch, (batch, 3 * row), torch.float16)
    k = qkv[:, row:2 * row].view(batch, heads, dim)
    v = qkv[:, 2 * row:]
    # K and V interleaved per slot: [slots, 2, H, D]
    kv = poisoned(torch, (slots, 2, heads, dim), torch.float16)
    k_cache, v_cache = kv[:, 0], kv[:, 1]
    # every other id of a longer int32 list
    loc = torch.randperm(slots, device="cuda")[:2 * batch].to(torch.int32)[::2]
    assert not k.is_contiguous() and not k_cache.is_contiguous() and not loc.is_contiguous()
    want = kv.clone()
    want[:, 0] = reference_store(k_cache, loc, k)
    want[:, 1] = reference_store(v_cache, loc, v.view(batch, heads, dim))
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc)
    torch.cuda.synchronize()
    check(kv, want, "interleaved cache")
    # every other token
    k2, v2 = random_rows(torch, (2 * batch, row), torch.float16)[::2], random_rows(torch, (2 * batch, row),
                                                                                   torch.float16)[::2]
    loc2 = torch.randperm(slots, device="cuda")[:batch]
    want = kv.clone()
    want[:, 0] = reference_store(k_cache, loc2, k2.view(batch, heads, dim))
    want[:, 1] = reference_store(v_cache, loc2, v2.view(batch, heads, dim))
    kvjit.store_kv_cache(k2, v2, k_cache, v_cache, loc2)
    torch.cuda.synchronize()
    check(kv, want, "every other token")


def test_paged_cache_and_num_slots():
    torch = need_gpu()
    pages, page_size, heads, dim, batch = 64, 16, 4, 64, 200
    k = random_rows(torch, (batch, heads, dim), torch.bfloat16)
    v = random_rows(torch, (batch, heads, dim), torch.bfloat16)
    k_cache = poisoned(torch, (pages, page_size, heads, dim), torch.bfloat16)
    v_cache = poisoned(torch, (pages, page_size, heads * dim), torch.bfloat16)
    slots = pages * page_size
    loc = torch.randperm(slots, device="cuda")[:batch]
    want_k = reference_store(k_cache.view(slots, heads, dim), loc, k).view(k_cache.shape)
    want_v = reference_store(v_cache.view(slots, heads * dim), loc, v.view(batch, -1)).view(v_cache.shape)
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc)
    torch.cuda.synchronize()
    check(k_cache, want_k, "paged k_cache")
    check(v_cache, want_v, "paged v_cache")
    # num_slots below the cache's size: ids past it are skipped (and counted)
    kvjit.oob_count(reset=True)
    loc = torch.randperm(slots, device="cuda")[:batch]
    limit = slots // 2
    want_k = reference_store(k_cache.view(slots, heads, dim), loc, k, num_slots=limit).view(k_cache.shape)
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc, num_slots=limit)
    torch.cuda.synchronize()
    check(k_cache, want_k, "num_slots")
    assert kvjit.oob_count(reset=True) == int((loc >= limit).sum())


def test_padding_skip_slot_and_out_of_range_ids():
    torch = need_gpu()
    batch, width, slots = 1000, 512, 1300
    for index in ("i32", "i64"):
        k = random_rows(torch, (batch, width), torch.float16)
        v = random_rows(torch, (batch, width), torch.float16)
        k_cache, v_cache = poisoned(torch, (slots, width), torch.float16), poisoned(torch, (slots, width),
                                                                                     torch.float16)
        loc = torch.randperm(slots, device="cuda")[:batch]
        loc[::7] = -1  # padding
        loc[3::11] = slots + 5  # out of range (duplicates: all skipped)
        skip_slot = int(loc[5])
        loc = loc.to(dtype_of(torch, index))
        expected_oob = int((loc.long() >= slots).sum())
        kvjit.oob_count(reset=True)
        want_k = reference_store(k_cache, loc, k, num_slots=slots, skip_slot=skip_slot)
        want_v = reference_store(v_cache, loc, v, num_slots=slots, skip_slot=skip_slot)
        kvjit.store_kv_cache(k, v, k_cache, v_cache, loc, skip_slot=skip_slot)
        torch.cuda.synchronize()
        check(k_cache, want_k, f"k_cache ({index})")
        check(v_cache, want_v, f"v_cache ({index})")
        assert kvjit.oob_count() == expected_oob
        assert kvjit.oob_count(reset=True) == expected_oob
        assert kvjit.oob_count() == 0


def test_empty_batch():
    torch = need_gpu()
    k = torch.empty((0, 8, 128), dtype=torch.float16, device="cuda")
    cache = poisoned(torch, (10, 8, 128), torch.float16)
    before = cache.clone()
    kvjit.store_kv_cache(k, k, cache, cache, torch.empty(0, dtype=torch.int64, device="cuda"))
    torch.cuda.synchronize()
    check(cache, before, "cache after an empty batch")


# ---- streams, graphs, threads, devices ----------------------------------------------------------


def test_launches_on_the_current_torch_stream():
    torch = need_gpu()
    if not hasattr(torch.cuda, "_sleep"):
        skip("torch.cuda._sleep is missing")
    batch, width, slots = 64, 1024, 100
    src_k = random_rows(torch, (batch, width), torch.bfloat16)
    src_v = random_rows(torch, (batch, width), torch.bfloat16)
    k, v = torch.zeros_like(src_k), torch.zeros_like(src_v)
    k_cache, v_cache = poisoned(torch, (slots, width), torch.bfloat16), poisoned(torch, (slots, width),
                                                                                  torch.bfloat16)
    loc = torch.randperm(slots, device="cuda")[:batch]
    want_k, want_v = reference_store(k_cache, loc, src_k), reference_store(v_cache, loc, src_v)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        # The side stream is busy for a while before k and v are written: a store launched
        # anywhere else (e.g. the legacy stream) would read the zeros.
        torch.cuda._sleep(100_000_000)
        k.copy_(src_k)
        v.copy_(src_v)
        kvjit.store_kv_cache(k, v, k_cache, v_cache, loc)
    torch.cuda.synchronize()
    check(k_cache, want_k, "k_cache on a side stream")
    check(v_cache, want_v, "v_cache on a side stream")


def test_cuda_graph_capture_and_replay():
    torch = need_gpu()
    batch, heads, dim, slots = 48, 8, 128, 256
    k = random_rows(torch, (batch, heads, dim), torch.bfloat16)
    v = random_rows(torch, (batch, heads, dim), torch.bfloat16)
    k_cache = poisoned(torch, (slots, heads, dim), torch.bfloat16)
    v_cache = poisoned(torch, (slots, heads, dim), torch.bfloat16)
    latent_cache = poisoned(torch, (slots, heads * dim), torch.bfloat16)
    loc = torch.randperm(slots, device="cuda")[:batch]
    # Load before capture (every size class), then one eager launch (lazy loading stays out).
    kvjit.prepare(k, v, k_cache, v_cache, loc, batch=0)
    kvjit.prepare(k, None, latent_cache, None, loc)
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc)
    kvjit.store_kv_cache(k, None, latent_cache, None, loc)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kvjit.store_kv_cache(k, v, k_cache, v_cache, loc)
        kvjit.store_kv_cache(k, None, latent_cache, None, loc)  # a second node: K only, 2-D cache
    for _ in range(3):
        k.copy_(random_rows(torch, k.shape, k.dtype))
        v.copy_(random_rows(torch, v.shape, v.dtype))
        loc.copy_(torch.randperm(slots, device="cuda")[:batch])
        want_k = reference_store(k_cache, loc, k)
        want_v = reference_store(v_cache, loc, v)
        want_latent = reference_store(latent_cache, loc, k.view(batch, -1))
        graph.replay()
        torch.cuda.synchronize()
        check(k_cache, want_k, "k_cache after replay")
        check(v_cache, want_v, "v_cache after replay")
        check(latent_cache, want_latent, "K-only cache after replay")


def test_store_from_another_thread():
    torch = need_gpu()
    errors = []
    batch, width, slots = 77, 256, 120
    k = random_rows(torch, (batch, width), torch.float32)
    v = random_rows(torch, (batch, width), torch.float32)
    k_cache, v_cache = poisoned(torch, (slots, width), torch.float32), poisoned(torch, (slots, width),
                                                                                 torch.float32)
    loc = torch.randperm(slots, device="cuda")[:batch]
    want_k, want_v = reference_store(k_cache, loc, k), reference_store(v_cache, loc, v)
    torch.cuda.synchronize()

    def work():
        try:
            # A fresh thread may have no current CUDA context: the binding gives it the device's.
            kvjit.store_kv_cache(k, v, k_cache, v_cache, loc)
            torch.cuda.synchronize()
        except BaseException as e:  # reported on the main thread
            errors.append(e)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    check(k_cache, want_k, "k_cache from a thread")
    check(v_cache, want_v, "v_cache from a thread")


def test_second_gpu():
    torch = need_gpu()
    if torch.cuda.device_count() < 2:
        skip("one GPU")
    dev = torch.device("cuda", 1)
    batch, width, slots = 100, 1024, 300
    k = random_rows(torch, (batch, width), torch.bfloat16, dev)
    v = random_rows(torch, (batch, width), torch.bfloat16, dev)
    k_cache, v_cache = poisoned(torch, (slots, width), torch.bfloat16, dev), poisoned(torch, (slots, width),
                                                                                       torch.bfloat16, dev)
    loc = torch.randperm(slots, device=dev)[:batch]
    want_k, want_v = reference_store(k_cache, loc, k), reference_store(v_cache, loc, v)
    assert torch.cuda.current_device() == 0
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc)  # the binding switches to cuda:1 for the call
    assert torch.cuda.current_device() == 0
    torch.cuda.synchronize(dev)
    check(k_cache, want_k, "k_cache on cuda:1")
    check(v_cache, want_v, "v_cache on cuda:1")
    with raises(ValueError, match="^k_cache: on cuda:0"):
        kvjit.store_kv_cache(k, v, k_cache.to("cuda:0"), v_cache, loc)


# ---- bad arguments -----------------------------------------------------------------------------


def test_bad_arguments_raise_before_launching():
    torch = need_gpu()
    k = random_rows(torch, (4, 8, 64), torch.float16)
    cache = poisoned(torch, (16, 8, 64), torch.float16)
    loc = torch.arange(4, device="cuda")
    before = cache.clone()
    with raises(ValueError, match="^k: must be a CUDA tensor"):
        kvjit.store_kv_cache(k.cpu(), k, cache, cache, loc)
    with raises(ValueError, match="^indices: must be a CUDA tensor"):
        kvjit.store_kv_cache(k, k, cache, cache, loc.cpu())
    with raises(TypeError, match="^k_cache: dtype bf16 differs"):
        kvjit.store_kv_cache(k, k, cache.to(torch.bfloat16), cache, loc)
    with raises(ValueError, match="^k: each token's"):
        kvjit.store_kv_cache(random_rows(torch, (4, 8, 128), torch.float16)[:, :, :64], k, cache, cache, loc)
    with raises(ValueError, match="^k: each token's"):
        kvjit.store_kv_cache(k.transpose(1, 2).contiguous().transpose(1, 2), k, cache, cache, loc)
    with raises(TypeError, match="^indices: dtype"):
        kvjit.store_kv_cache(k, k, cache, cache, loc.float())
    with raises(ValueError, match="^indices: 3 slot ids for 4"):
        kvjit.store_kv_cache(k, k, cache, cache, loc[:3])
    with raises(ValueError, match="^k_cache: no trailing dims"):
        kvjit.store_kv_cache(k, k, cache[:, :, :32], cache, loc)
    with raises(ValueError, match="^num_slots"):
        kvjit.store_kv_cache(k, k, cache, cache, loc, num_slots=17)
    with raises(kvjit.InvalidArgumentError, match="^split"):
        kvjit.store_kv_cache(k, k, cache, cache, loc, split=3)
    with raises(ValueError, match="^k: token stride"):
        kvjit.store_kv_cache(k[:1].expand(4, 8, 64), k, cache, cache, loc)
    torch.cuda.synchronize()
    check(cache, before, "cache after refused calls")


# ---- the generic loader ------------------------------------------------------------------------


def test_program_load_and_launch():
    torch = need_gpu()
    prog = kvjit.Program(LOADER_SRC, kernels=["scale<256, float>", "fill"], options=["-std=c++17"],
                         name="py_scale.cu")
    n = 1000
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    prog.kernel("scale<256, float>").launch((n + 255) // 256, 256, [x, ctypes.c_float(2.5), ctypes.c_int(n)])
    ints = torch.zeros(n, dtype=torch.int32, device="cuda")
    prog.kernel("fill").launch([(n + 127) // 128], (128, 1, 1), [ints, ctypes.c_int(7), ctypes.c_int(n)])
    torch.cuda.synchronize()
    assert torch.equal(x, torch.arange(n, dtype=torch.float32, device="cuda") * 2.5)
    assert bool((ints == 7).all())
    major, minor = torch.cuda.get_device_capability()
    assert prog.arch == major * 10 + minor or prog.arch < 0  # negative: PTX for a GPU newer than NVRTC
    assert len(prog.key) == 32
    assert prog.kernel("fill") is prog.kernel("fill") and prog.kernel(index=1).name == "fill"
    # the same program from another Program object: the context's memory table
    again = kvjit.Program(LOADER_SRC, kernels=["scale<256, float>", "fill"], options=["-std=c++17"],
                          name="py_scale.cu")
    assert again.load() == "memory"
    # an explicit stream and a raw pointer argument
    side = torch.cuda.Stream()
    prog.kernel("fill").launch(8, 128, [ctypes.c_void_p(ints.data_ptr()), ctypes.c_int(3), ctypes.c_int(n)],
                               stream=side)
    side.synchronize()
    assert bool((ints == 3).all())


def test_program_compile_error_has_the_log():
    need_gpu()
    prog = kvjit.Program("__global__ void broken(int *x) { x[0] = undefined_name; }", kernels=["broken"],
                         name="py_broken.cu")
    with raises(kvjit.CompileError) as e:
        prog.kernel("broken")
    assert "undefined_name" in e.value.log and "py_broken.cu" in e.value.message
