"""Issue 29: the layout comes from the tensors. Without a GPU: vLLM's and SGLang's cache views as
fake device tensors (__cuda_array_interface__, made-up pointers) become the kvjit_layout the
binding passes (kvjit._ops.store_kv_args: nothing launched), and what cannot be read is refused
naming the argument. The shapes are written from vLLM's csrc/cache_kernels.cu and its attention
backends (NHD [blocks, block_size, H, D]; HND and FlashAttention's [blocks, H, block_size, 2*D]
passed as transpose(1, 2) views; the older K [blocks, H, D/x, block_size, x] and V [blocks, H, D,
block_size]; MLA [blocks, block_size, 512 + 64]) and SGLang's MHA pool ([size, H, D]).
"""

from _support import FakeCAI, FakeDLPack, raises

import kvjit
from kvjit import _lib, _ops

B, H, D, BLOCKS, BS = 16, 8, 128, 256, 16
K, V, KC, VC, LOC = 0x10000000, 0x20000000, 0x30000000, 0x40000000, 0x50000000


def contiguous(shape, item):
    strides, step = [], item
    for s in reversed(shape):
        strides.append(step)
        step *= s
    return tuple(reversed(strides))


def cache(shape, ptr, typestr="<f2", order=None, offset=0):
    """A view of a contiguous ``shape`` (bytes strides), its dims permuted by ``order`` (torch's
    permute), starting ``offset`` bytes in; the last dim narrowed by the caller through shape."""
    item = int(typestr[2:])
    strides = contiguous(shape, item)
    if order is not None:
        shape, strides = tuple(shape[i] for i in order), tuple(strides[i] for i in order)
    return shape, strides, ptr + offset, typestr


def fake(view, last=None):
    shape, strides, ptr, typestr = view
    if last is not None:
        shape = shape[:-1] + (last,)
    return FakeCAI(shape, typestr, ptr, strides=strides)


def args(k_cache, v_cache, k_shape=(B, H, D), v_shape=(B, H, D), typestr="<f2", **kw):
    k = FakeCAI(k_shape, typestr, K)
    v = FakeCAI(v_shape, typestr, V) if v_shape is not None else None
    return _ops.store_kv_args(k, v, k_cache, v_cache, FakeCAI((B,), "<i8", LOC), **kw)


def test_nhd_and_sglang_stay_flat():
    s = args(fake(cache((BLOCKS, BS, H, D), KC)), fake(cache((BLOCKS, BS, H, D), VC)))
    assert (s.k_layout, s.v_layout, s.k_cache_stride, s.num_slots) == (None, None, H * D * 2, BLOCKS * BS)
    s = args(FakeCAI((4096, H, D), "<f2", KC), FakeCAI((4096, H, D), "<f2", VC))
    assert (s.k_layout, s.k_cache_stride, s.num_slots) == (None, H * D * 2, 4096)


def test_hnd_view():
    hnd = (0, 2, 1, 3)  # [blocks, H, block_size, D].transpose(1, 2)
    s = args(fake(cache((BLOCKS, H, BS, D), KC, order=hnd)), fake(cache((BLOCKS, H, BS, D), VC, order=hnd)))
    for lay in (s.k_layout, s.v_layout):
        assert (lay.page_size, lay.page_stride, lay.slot_stride, lay.element_bytes) == (BS, H * BS * D * 2, D * 2, 2)
        assert lay.row() == [(H, BS * D * 2), (D, 2)]
    assert (s.k_cache_stride, s.num_slots, s.k_cache, s.v_cache) == (0, BLOCKS * BS, KC, VC)


def test_flashattention_packed_view():
    both = cache((BLOCKS, H, BS, 2 * D), KC, order=(0, 2, 1, 3))
    k_view = fake(both, last=D)
    v_view = fake((both[0], both[1], both[2] + D * 2, both[3]), last=D)
    s = args(k_view, v_view)
    assert (s.k_cache, s.v_cache) == (KC, KC + D * 2)
    for lay in (s.k_layout, s.v_layout):
        assert (lay.page_size, lay.page_stride, lay.slot_stride) == (BS, H * BS * 4 * D, 4 * D)
        assert lay.row() == [(H, BS * 4 * D), (D, 2)]


def test_chunked_layout_needs_the_keyword_for_v():
    x = 8  # 16 bytes of bf16
    kc = FakeCAI((BLOCKS, H, D // x, BS, x), "<f2", KC)
    vc = FakeCAI((BLOCKS, H, D, BS), "<f2", VC)
    s = args(kc, vc, layout="vllm_paged")
    assert (s.k_layout.page_size, s.k_layout.page_stride, s.k_layout.slot_stride) == (BS, H * D * BS * 2, x * 2)
    assert s.k_layout.row() == [(H, D * BS * 2), (D // x, BS * x * 2), (x, 2)]
    assert (s.v_layout.page_size, s.v_layout.page_stride, s.v_layout.slot_stride) == (BS, H * D * BS * 2, 2)
    assert s.v_layout.row() == [(H, D * BS * 2), (D, BS * 2)]
    # shape alone: a 4-D V reads as NHD, so a 5-D K with a V asks for the keyword
    with raises(ValueError, match="^v_cache: .*layout='vllm_paged'"):
        args(kc, vc)
    # K alone is unambiguous
    s = args(kc, None, v_shape=None)
    assert s.k_layout.num_row_dims == 3 and s.v_layout is None
    # fp8: x = 16 one-byte elements, per-tensor scales
    one = FakeCAI((1,), "<f4", 0x60000000)
    s = args(FakeCAI((BLOCKS, H, D // 16, BS, 16), "|u1", KC), FakeCAI((BLOCKS, H, D, BS), "|u1", VC),
             layout="vllm_paged", cache_dtype="fp8_e4m3", k_scale=one, v_scale=one)
    assert s.k_layout.element_bytes == 1 and s.k_layout.slot_stride == 16 and s.v_layout.row()[1] == (D, BS)


def test_mla_concat_stays_flat():
    full = cache((64, 64, 576), KC)
    s = args(fake(full, last=512), fake((full[0], full[1], full[2] + 1024, full[3]), last=64),
             k_shape=(B, 512), v_shape=(B, 64))
    assert (s.k_layout, s.v_layout) == (None, None)
    assert (s.k_cache_stride, s.v_cache_stride, s.v_cache, s.num_slots) == (1152, 1152, KC + 1024, 64 * 64)


def test_per_head_scales_on_a_strided_cache():
    hnd = (0, 2, 1, 3)
    scales = FakeCAI((H,), "<f4", 0x60000000)
    s = args(fake(cache((BLOCKS, H, BS, D), KC, "|u1", order=hnd)), fake(cache((BLOCKS, H, BS, D), VC, "|u1",
                                                                             order=hnd)),
             typestr="<f2", cache_dtype="fp8_e4m3", k_scale=scales, v_scale=scales)
    assert s.num_heads == H and s.k_layout.row() == [(H, BS * D), (D, 1)] and s.k_layout.element_bytes == 1


def test_refusals_name_the_argument():
    nhd = FakeCAI((BLOCKS, BS, H, D), "<f2", VC)
    # a broadcast (expanded) cache: its slots would share bytes
    with raises(ValueError, match="^k_cache: dim 0 .*stride 0"):
        args(FakeCAI((BLOCKS, BS, H, D), "<f2", KC, strides=(0, H * D * 2, D * 2, 2)), nhd)
    # extents that do not make the row
    with raises(ValueError, match="^k_cache: no trailing dims"):
        args(fake(cache((BLOCKS, H, BS, D // 2), KC, order=(0, 2, 1, 3))), nhd)
    # a chunk that does not divide the head
    with raises(ValueError, match="^k_cache: no trailing dims"):
        args(FakeCAI((BLOCKS, H, 15, BS, 8), "<f2", KC), FakeCAI((BLOCKS, H, D, BS), "<f2", VC),
             layout="vllm_paged")
    # the keyword reads only that layout, and takes only known names
    with raises(ValueError, match=r"^k_cache: layout='vllm_paged' reads it as vLLM's \[blocks, H, D/x"):
        args(FakeCAI((BLOCKS, BS, H, D), "<f2", KC), nhd, layout="vllm_paged")
    with raises(ValueError, match="^layout: expected None, 'auto' or 'vllm_paged'"):
        args(FakeCAI((BLOCKS, BS, H, D), "<f2", KC), nhd, layout="hnd")
    with raises(ValueError, match="^layout: "):
        kvjit.store_kv_cache(FakeCAI((B, H, D), "<f2", K), FakeCAI((B, H, D), "<f2", V),
                             FakeCAI((BLOCKS, BS, H, D), "<f2", KC), nhd, FakeCAI((B,), "<i8", LOC), layout=1)
    # slot dims that neither flatten nor make (pages, page_size)
    odd = fake(cache((4, 8, BS, D), KC, order=(1, 2, 0, 3)))
    with raises(ValueError, match=r"^k_cache: the slot dims .*nor make \(pages, page_size\)"):
        args(odd, None, k_shape=(B, D), v_shape=None)


def test_cpu_tensors_take_flat_caches_only():
    """The CPU path is a plain host loop over flat rows; a strided cache there is refused, naming it,
    before any byte is touched (the layout's address rule lives in the library, for CUDA)."""
    bf16, i64 = (4, 16), (0, 64)  # DLPack (code, bits)
    k = FakeDLPack((B, H, D), *bf16, K, device_type=1)
    hnd = FakeDLPack((BLOCKS, BS, H, D), *bf16, KC, strides=(H * BS * D, D, BS * D, 1), device_type=1)
    with raises(ValueError, match="^k_cache: a strided cache .* CUDA tensors only"):
        kvjit.store_kv_cache(k, None, hnd, None, FakeDLPack((B,), *i64, LOC, device_type=1))


def layout_offsets(torch, args, side, base, rows, row_elems, item):
    """Element offsets (from ``base``, in elements of ``item`` bytes) of every element of the rows
    at slots ``rows``, as the args' layout (or flat stride) addresses them."""
    lay = getattr(args, f"{side}_layout")
    ptr = getattr(args, f"{side}_cache")
    e = torch.arange(row_elems)
    if lay is None:
        byte = rows[:, None] * getattr(args, f"{side}_cache_stride") + e[None, :] * item
    else:
        if lay.page_size > 1:
            byte = (rows // lay.page_size) * lay.page_stride + (rows % lay.page_size) * lay.slot_stride
        else:  # flat slots: p = 0, q = s
            byte = rows * lay.slot_stride
        byte = byte[:, None].expand(-1, row_elems).clone()
        rest = e.clone()
        for extent, stride in reversed(lay.row()):
            byte += (rest % extent) * stride
            rest //= extent
    return (byte + (ptr - base)) // item


def test_layouts_address_what_torch_indexes():
    """On CPU torch tensors (no GPU needed): the layout inferred from each runtime's views puts every
    element exactly where torch's indexing of the same views puts it."""
    try:
        import torch
    except ImportError:
        from _support import skip
        skip("no torch")
    from cache_layouts import LAYOUTS

    for name, cls in sorted(LAYOUTS.items()):
        layout = cls(slots=256, device="cpu")
        store = layout.storage(torch, torch.float32)
        for t in store.values():
            t.zero_()
        k, v = (t[0] for t in layout.inputs(torch, 1, 40, torch.float32))
        loc = torch.randperm(layout.slots)[:40]
        layout.reference(torch, layout.views(store), k, v, loc)
        args = _ops.store_kv_args(k, v, *layout.views(store), loc, **layout.kvjit_keywords)
        for side, rows in (("k", k), ("v", v)):
            storage = store["kv"] if "kv" in store else store[side]
            offsets = layout_offsets(torch, args, side, storage.data_ptr(), loc, rows[0].numel(), 4)
            got = storage.flatten()[offsets]
            assert torch.equal(got, rows.reshape(len(loc), -1)), f"{name} {side}"


# ---- transfer_kv: SGLang's host layouts, sliced per layer, read by the same rule -----------------


def sglang_host_views(torch, layers=4, pages=16, page=8, heads=4, dim=32, layer=1):
    """SGLang's four host layouts (its memory_pool_host.py), K's view of one layer as [slots, H, D]
    or [pages, page_size, H, D] (page_head's as its transpose(1, 2)), and the storage."""
    out = {}
    size = pages * page
    t = torch.zeros((2, layers, size, heads, dim))
    out["layer_first"] = (t, t[0, layer])
    t = torch.zeros((2, size, layers, heads, dim))
    out["page_first"] = (t, t[0, :, layer])
    t = torch.zeros((2, pages, layers, page, heads, dim))
    out["page_first_direct"] = (t, t[0, :, layer])
    t = torch.zeros((2, pages, heads, page, layers, dim))
    out["page_head"] = (t, t[0, :, :, :, layer].transpose(1, 2))
    return out


def test_transfer_reads_sglang_host_layouts_from_the_views():
    """Both directions between a device-style pool [size, H, D] and each host layout's per-layer
    view: the rows are [H, D] whichever side is paged, and the inferred layout (or flat stride)
    addresses each element where torch's indexing of the view puts it."""
    try:
        import torch
    except ImportError:
        from _support import skip
        skip("no torch")
    heads, dim, pages, page = 4, 32, 16, 8
    pool = torch.arange(pages * page * heads * dim, dtype=torch.float32).reshape(pages * page, heads, dim)
    loc = torch.randperm(pages * page)[:20]
    for name, (storage, view) in sglang_host_views(torch, heads=heads, dim=dim, pages=pages, page=page).items():
        for direction in ("offload", "load"):
            src, dst = (pool, view) if direction == "offload" else (view, pool)
            packed, lay = _ops.transfer_kv_args(src, None, dst, None, loc, loc, layouts=True)
            host, host_side = (view, "dst_k") if direction == "offload" else (view, "src_k")
            args = _lib.TRANSFER_KV_PACKER.unpack(packed)
            assert args[11] == heads * dim * 4, (name, direction)  # k_row_bytes: [H, D] rows
            layout = lay[host_side]
            if name in ("layer_first", "page_first"):
                assert layout is None, (name, direction)  # flat slots: today's stride
                continue
            assert layout is not None and layout.page_size == page, (name, direction)
            # every element of the chosen slots, by the layout, against torch's own indexing
            rows = loc
            byte = (rows // page) * layout.page_stride + (rows % page) * layout.slot_stride
            e = torch.arange(heads * dim)
            off = byte[:, None].clone().expand(-1, heads * dim).clone()
            rest = e.clone()
            for extent, stride in reversed(layout.row()):
                off += (rest % extent) * stride
                rest //= extent
            base = host.data_ptr() - storage.data_ptr()
            storage.zero_()
            host.reshape(-1)  # views stay views; write through torch's indexing of the view
            if host.dim() == 4:
                host[loc // page, loc % page] = pool[loc]
            flat = storage.flatten()
            got = flat[(off + base) // 4]
            assert torch.equal(got, pool[loc].reshape(len(loc), -1)), (name, direction)


def test_transfer_refusals_for_views():
    kc = FakeCAI((4096, H, D), "<f2", KC)
    five = FakeCAI((16, H, 16, BS, 8), "|u1", VC)
    with raises(ValueError, match=r"^dst_k: expected \[slots, H, D\]"):
        _ops.transfer_kv_args(kc, None, five, None, FakeCAI((B,), "<i8", LOC), FakeCAI((B,), "<i8", LOC))
    expanded = FakeCAI((256, BS, H, D), "<f2", VC, strides=(0, H * D * 2, D * 2, 2))
    with raises(ValueError, match="^dst_k: dim 0 .*stride 0"):
        _ops.transfer_kv_args(kc, None, expanded, None, FakeCAI((B,), "<i8", LOC), FakeCAI((B,), "<i8", LOC))
