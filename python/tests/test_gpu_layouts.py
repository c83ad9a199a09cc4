"""Issue 29 on a GPU: kvjit.store_kv_cache on the caches serving runtimes pass, their layout read
from the tensors, every byte of every cache compared with torch's own indexing of the same views.

The layouts (python/tests/cache_layouts.py): vLLM's NHD, HND and FlashAttention's packed caches
(the last two as the NHD-shaped views with permuted strides vLLM passes), the older chunked K and
transposed V (layout="vllm_paged"), MLA's kv_c + k_pe into one row, and SGLang-style flat slots
with strided heads. bf16 rows; fp8 e4m3 with per-tensor and per-head scales; int32 and int64 ids
with padding (-1) and out-of-range ids (skipped and counted); a CUDA graph replayed with new
ids and rows; and, for every layout, the whole storage compared, so nothing outside the target
rows may change. Then transfer_kv between a device pool and SGLang's pinned host layouts
(page_first_direct, page_head) passed as per-layer views, both directions. Skips without torch or
a CUDA device.
"""

from _support import need_gpu, parametrize

import kvjit
from cache_layouts import LAYOUTS, fp8_rows

SLOTS, BATCH = 1024, 77
NAMES = sorted(LAYOUTS)


def layout_of(name):
    return LAYOUTS[name](slots=SLOTS)


def poison(torch, store):
    for t in store.values():
        t.view(torch.uint8).random_(0, 256)


def ids(torch, index, batch=BATCH):
    """Distinct random slots, with padding (-1) and out-of-range ids among them."""
    loc = torch.randperm(SLOTS, device="cuda")[:batch]
    loc[::9] = -1
    loc[4::13] = SLOTS + 3
    return loc.to({"i32": torch.int32, "i64": torch.int64}[index])


def expect(torch, layout, store, k, v, loc):
    """The storage after the store, by torch's indexing."""
    want = {n: t.clone() for n, t in store.items()}
    layout.reference(torch, layout.views(want), k, v, loc.long())
    return want


def compare(torch, store, want, what):
    for n, t in store.items():
        got, exp = t.view(torch.uint8).flatten(), want[n].view(torch.uint8).flatten()
        if not torch.equal(got, exp):
            bad = (got != exp).nonzero()
            raise AssertionError(f"{what}: {n}: {len(bad)} bytes differ, first at byte {int(bad[0])}")


@parametrize("name", NAMES)
@parametrize("index", ["i32", "i64"])
def test_bf16_rows_into_every_layout(name, index):
    torch = need_gpu()
    layout = layout_of(name)
    store = layout.storage(torch, torch.bfloat16)
    poison(torch, store)
    k, v = (t[0] for t in layout.inputs(torch, 1, BATCH, torch.bfloat16))
    loc = ids(torch, index)
    want = expect(torch, layout, store, k, v, loc)
    kvjit.oob_count(reset=True)
    kvjit.store_kv_cache(k, v, *layout.views(store), loc, **layout.kvjit_keywords)
    torch.cuda.synchronize()
    compare(torch, store, want, f"{name} bf16 {index}")
    assert kvjit.oob_count(reset=True) == int((loc.long() >= SLOTS).sum())


@parametrize("name", ["nhd", "hnd", "fa", "chunked", "sglang"])
@parametrize("per_head", [False, True])
def test_fp8_scales_into_every_layout(name, per_head):
    torch = need_gpu()
    layout = layout_of(name)
    store = layout.storage(torch, torch.uint8)
    poison(torch, store)
    k, v = (t[0] * 40 for t in layout.inputs(torch, 1, BATCH, torch.bfloat16))
    heads = layout.h
    k_scale = torch.rand(heads if per_head else 1, device="cuda") + 0.05
    v_scale = torch.rand(heads if per_head else 1, device="cuda") + 0.05
    loc = ids(torch, "i64")
    want = expect(torch, layout, store, fp8_rows(torch, k, k_scale, heads), fp8_rows(torch, v, v_scale, heads), loc)
    kvjit.store_kv_cache(k, v, *layout.views(store), loc, k_scale=k_scale, v_scale=v_scale, cache_dtype="fp8_e4m3",
                         **layout.kvjit_keywords)
    torch.cuda.synchronize()
    compare(torch, store, want, f"{name} fp8 {'per head' if per_head else 'per tensor'}")


@parametrize("name", ["hnd", "fa", "chunked"])
def test_graph_replay_on_strided_layouts(name):
    torch = need_gpu()
    layout = layout_of(name)
    store = layout.storage(torch, torch.bfloat16)
    poison(torch, store)
    k, v = (t[0] for t in layout.inputs(torch, 1, BATCH, torch.bfloat16))
    loc = ids(torch, "i64")
    views = layout.views(store)
    kvjit.prepare(k, v, *views, loc, batch=0, **layout.kvjit_keywords)
    kvjit.store_kv_cache(k, v, *views, loc, **layout.kvjit_keywords)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kvjit.store_kv_cache(k, v, *views, loc, **layout.kvjit_keywords)
    for _ in range(3):
        k.copy_(torch.randn_like(k))
        v.copy_(torch.randn_like(v))
        loc.copy_(ids(torch, "i64"))
        want = expect(torch, layout, store, k, v, loc)
        graph.replay()
        torch.cuda.synchronize()
        compare(torch, store, want, f"{name} after replay")


def test_one_block_one_head_and_padded_pages():
    """Odd extents: H = 1 and a single block (size-1 dims with arbitrary strides), and pages
    padded apart (slot dims that do not flatten but rows that are contiguous)."""
    torch = need_gpu()
    for layout in (LAYOUTS["hnd"](heads=1, dim=64, block=16, slots=16), LAYOUTS["fa"](heads=2, dim=96, block=1,
                                                                                        slots=64)):
        store = layout.storage(torch, torch.float16)
        poison(torch, store)
        k, v = (t[0] for t in layout.inputs(torch, 1, 9, torch.float16))
        loc = torch.randperm(layout.slots, device="cuda")[:9]
        want = expect(torch, layout, store, k, v, loc)
        kvjit.store_kv_cache(k, v, *layout.views(store), loc)
        torch.cuda.synchronize()
        compare(torch, store, want, f"{layout.name} h={layout.h} block={layout.block}")
    padded = torch.empty((64, 17, 4, 32), dtype=torch.bfloat16, device="cuda")
    padded.view(torch.uint8).random_(0, 256)
    cache = padded[:, :16]  # [pages, 16 of 17 rows, H, D]: pages one row apart from each other's end
    k = torch.randn((40, 4, 32), device="cuda").to(torch.bfloat16)
    loc = torch.randperm(64 * 16, device="cuda")[:40]
    want = padded.clone()
    want[:, :16][loc // 16, loc % 16] = k
    kvjit.store_kv_cache(k, None, cache, None, loc)
    torch.cuda.synchronize()
    assert torch.equal(padded.view(torch.uint8), want.view(torch.uint8))


@parametrize("name", ["fa", "chunked"])
def test_the_torch_op_reads_the_same_layouts(name):
    """torch.ops.kvjit.store_kv_cache (what torch.compile traces) runs the same rules: layout=1 is
    'vllm_paged'."""
    torch = need_gpu()
    op = kvjit.register_torch_ops()
    layout = layout_of(name)
    store = layout.storage(torch, torch.bfloat16)
    poison(torch, store)
    k, v = (t[0] for t in layout.inputs(torch, 1, BATCH, torch.bfloat16))
    loc = ids(torch, "i64")
    want = expect(torch, layout, store, k, v, loc)
    op(k, v, *layout.views(store), loc, layout=1 if layout.kvjit_keywords else 0)
    torch.cuda.synchronize()
    compare(torch, store, want, f"{name} through the torch op")


@parametrize("host_layout", ["page_first_direct", "page_head"])
def test_transfer_with_sglang_host_layouts_from_views(host_layout):
    """transfer_kv between a device pool [size, H, D] and one layer of SGLang's pinned host layouts,
    the host side passed as the per-layer view (its layout read from the tensor), both directions,
    every byte of the host storage and the pool compared with torch's indexing."""
    torch = need_gpu()
    layers, pages, page, heads, dim, layer = 3, 32, 16, 8, 64, 1
    size = pages * page
    if host_layout == "page_first_direct":
        host = torch.empty((2, pages, layers, page, heads, dim), dtype=torch.bfloat16).pin_memory()
        view_k, view_v = host[0, :, layer], host[1, :, layer]
    else:
        host = torch.empty((2, pages, heads, page, layers, dim), dtype=torch.bfloat16).pin_memory()
        view_k, view_v = host[0, :, :, :, layer].transpose(1, 2), host[1, :, :, :, layer].transpose(1, 2)
    pool_k = torch.randn((size, heads, dim), device="cuda").to(torch.bfloat16)
    pool_v = torch.randn((size, heads, dim), device="cuda").to(torch.bfloat16)
    src = torch.randperm(size, device="cuda")[:100]
    dst = torch.randperm(size, device="cuda")[:100]
    host.view(torch.uint8).random_(0, 256)
    want = host.clone()
    hd = dst.cpu()
    want_k = want[0, :, layer] if host_layout == "page_first_direct" else want[0, :, :, :, layer].transpose(1, 2)
    want_v = want[1, :, layer] if host_layout == "page_first_direct" else want[1, :, :, :, layer].transpose(1, 2)
    want_k[hd // page, hd % page] = pool_k[src].cpu()
    want_v[hd // page, hd % page] = pool_v[src].cpu()
    kvjit.transfer_kv(pool_k, pool_v, view_k, view_v, src, dst)  # offload
    torch.cuda.synchronize()
    assert torch.equal(host.view(torch.uint8), want.view(torch.uint8)), f"{host_layout} offload"
    back_k, back_v = torch.zeros_like(pool_k), torch.zeros_like(pool_v)
    kvjit.transfer_kv(view_k, view_v, back_k, back_v, dst, src)  # load it back
    torch.cuda.synchronize()
    want_back = torch.zeros_like(pool_k)
    want_back[src] = pool_k[src]
    assert torch.equal(back_k.view(torch.uint8), want_back.view(torch.uint8)), f"{host_layout} load"
    want_back[src] = pool_v[src]
    assert torch.equal(back_v.view(torch.uint8), want_back.view(torch.uint8)), f"{host_layout} load V"
