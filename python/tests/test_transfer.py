"""transfer_kv through the binding without a GPU: the kvjit_transfer_kv_args it packs from tensors
(layouts, strides, K only, tables), argument errors naming the argument, batch 0, the library's
own validation, and prewarm of manifest lines of either op into a temp cache. The GPU half is
test_gpu_transfer.py.
"""

import os

from _support import FakeCAI, has_driver, raises, skip, tempdir

import kvjit
from kvjit import _lib, _ops

B, SLOTS, H, D = 16, 1000, 8, 128
SK, SV, DK, DV, SI, DI = 0x10000000, 0x20000000, 0x30000000, 0x40000000, 0x50000000, 0x60000000
FIELDS = ("version src_k src_v dst_k dst_v src_indices dst_indices index_type src_index_stride dst_index_stride "
          "batch k_row_bytes v_row_bytes src_k_stride src_v_stride dst_k_stride dst_v_stride src_num_slots "
          "dst_num_slots num_layers src dst split pdl stream src_dtype dst_dtype scale_kind k_scale v_scale num_heads "
          "max_ctas src_k_layout src_v_layout dst_k_layout dst_v_layout").split()


def tensors(batch=B, typestr="<f2", dst_slots=SLOTS, **over):
    t = {
        "src_k": FakeCAI((SLOTS, H, D), typestr, SK),
        "src_v": FakeCAI((SLOTS, H, D), typestr, SV),
        "dst_k": FakeCAI((dst_slots, H, D), typestr, DK),
        "dst_v": FakeCAI((dst_slots, H, D), typestr, DV),
        "src_indices": FakeCAI((batch,), "<i8", SI),
        "dst_indices": FakeCAI((batch,), "<i8", DI),
    }
    t.update(over)
    return t


def order(t):
    return (t["src_k"], t["src_v"], t["dst_k"], t["dst_v"], t["src_indices"], t["dst_indices"])


def packed(t, **kw):
    opts = dict(batch=None, src_num_slots=None, dst_num_slots=None, split=0, pdl="auto", row_elements=None,
                stream=None)
    opts.update(kw)
    args = _ops.transfer_kv_args(*order(t), **opts)
    return dict(zip(FIELDS, _lib.TRANSFER_KV_PACKER.unpack(args)))


def test_packer_matches_the_c_struct():
    # 264 bytes on LP64: the size kvjit.h's kvjit_transfer_kv_args (version 2) has.
    assert _lib.TRANSFER_KV_PACKER.size == 264


def test_plain_layout():
    s = packed(tensors())
    assert (s["version"], s["src_k"], s["dst_v"], s["src_indices"], s["dst_indices"]) == (2, SK, DV, SI, DI)
    assert (s["src_dtype"], s["dst_dtype"], s["scale_kind"], s["k_scale"], s["max_ctas"]) == (0, 0, 0, 0, 0)
    assert s["k_row_bytes"] == s["v_row_bytes"] == s["src_k_stride"] == s["dst_v_stride"] == H * D * 2
    assert (s["index_type"], s["src_index_stride"], s["batch"]) == (_lib.INDEX_INT64, 1, B)
    assert (s["src_num_slots"], s["dst_num_slots"], s["num_layers"]) == (SLOTS, SLOTS, 0)
    assert (s["src"], s["dst"], s["split"], s["pdl"]) == (_lib.LOCATION_DEVICE, _lib.LOCATION_DEVICE, 0, _lib.PDL_AUTO)


def test_strided_paged_and_k_only():
    row = H * D
    t = tensors(src_k=FakeCAI((40, 25, H, D), "<f2", SK),  # paged source
                dst_k=FakeCAI((SLOTS, row), "<f2", DK, strides=(2 * row * 2, 2)),  # every other slot
                src_indices=FakeCAI((B,), "<i4", SI, strides=(8,)),
                dst_indices=FakeCAI((B,), "<i4", DI))
    s = packed(t, row_elements=row, src_num_slots=900, split=4, pdl="off")
    assert (s["src_k_stride"], s["dst_k_stride"]) == (row * 2, 2 * row * 2)
    assert (s["index_type"], s["src_index_stride"], s["dst_index_stride"]) == (_lib.INDEX_INT32, 2, 1)
    assert (s["src_num_slots"], s["split"], s["pdl"]) == (900, 4, _lib.PDL_OFF)
    s = packed(tensors(src_v=None, dst_v=None))
    assert s["src_v"] == 0 and s["dst_v"] == 0 and s["v_row_bytes"] == 0
    # asymmetric rows; raw bytes on one side
    t = tensors(src_v=FakeCAI((SLOTS, 512), "<f2", SV), dst_v=FakeCAI((SLOTS, 1024), "|u1", DV))
    s = packed(t)
    assert (s["k_row_bytes"], s["v_row_bytes"]) == (H * D * 2, 1024)


def test_bad_arguments_name_themselves():
    cases = [
        ("src_v", ValueError, dict(src_v=None)),
        ("dst_k", TypeError, dict(dst_k=FakeCAI((SLOTS, H, D), "<f4", DK))),
        ("dst_k", ValueError, dict(dst_k=FakeCAI((SLOTS, 7), "<f2", DK))),
        ("dst_indices", ValueError, dict(dst_indices=FakeCAI((B + 1,), "<i8", DI))),
        ("dst_indices", TypeError, dict(dst_indices=FakeCAI((B,), "<i4", DI))),
        ("src_indices", TypeError, dict(src_indices=FakeCAI((B,), "<f4", SI), dst_indices=FakeCAI((B,), "<f4", DI))),
        ("src_indices", ValueError, dict(src_indices=FakeCAI((B, 2), "<i8", SI))),
        ("src_k", TypeError, dict(src_k=[1, 2, 3])),
    ]
    for name, exc, over in cases:
        with raises(exc, match=f"^{name}"):
            packed(tensors(**over))
    for name, kw in (("split", dict(split=-1)), ("pdl", dict(pdl="maybe")), ("src_num_slots", dict(src_num_slots=0)),
                     ("dst_num_slots", dict(dst_num_slots=SLOTS + 1)), ("row_elements", dict(row_elements=0))):
        with raises(ValueError, match=f"^{name}"):
            packed(tensors(), **kw)


def test_max_ctas_and_scales():
    """The CTA budget reaches the args (its range is the native rule's); scales need a conversion
    (an fp8 side; numpy's typestrs have no fp8, so the conversions themselves are the GPU tests')."""
    assert packed(tensors(), max_ctas=3)["max_ctas"] == 3
    assert packed(tensors(), max_ctas=-1)["max_ctas"] == -1
    with raises(ValueError, match="^max_ctas: must be 0"):
        packed(tensors(), max_ctas=-2)
    with raises(TypeError, match="^max_ctas"):
        packed(tensors(), max_ctas="all")
    scale = FakeCAI((1,), "<f4", 0x70000000)
    with raises(ValueError, match="^k_scale: scales need a conversion"):
        packed(tensors(), k_scale=scale, v_scale=scale)
    with raises(TypeError, match="^dst_k: dtype f32 differs from src_k.s f16 .*fp8 and float16"):
        packed(tensors(dst_k=FakeCAI((SLOTS, H, D), "<f4", DK), dst_v=FakeCAI((SLOTS, H, D), "<f4", DV)))


def test_batch_0_reaches_the_library_and_launches_nothing():
    t = tensors(batch=0)
    kvjit.transfer_kv(*order(t))  # KVJIT_OK after the library's validation
    with raises(kvjit.Error, match="split"):
        kvjit.transfer_kv(*order(t), split=3)  # the library's rule: 3 does not divide the rows


def test_valid_arguments_reach_the_driver():
    if has_driver():
        skip("a driver is there: a transfer with fake pointers would launch")
    with raises(kvjit.Error) as e:
        kvjit.transfer_kv(*order(tensors()))
    assert e.value.name == "ERR_NO_DRIVER"
    with raises(kvjit.Error) as e:
        kvjit.transfer_kv_all_layers(
            FakeCAI((4,), "<i8", SK), FakeCAI((4,), "<i8", SV), FakeCAI((4,), "<i8", DK), FakeCAI((4,), "<i8", DV),
            FakeCAI((B,), "<i8", SI), FakeCAI((B,), "<i8", DI), k_row_bytes=2048, src_num_slots=SLOTS,
            dst_num_slots=SLOTS, src="device", dst="host")
    assert e.value.name == "ERR_NO_DRIVER"
    with raises(ValueError, match="^dst"):
        kvjit.transfer_kv_all_layers(
            FakeCAI((4,), "<i8", SK), None, FakeCAI((4,), "<i8", DK), None, FakeCAI((B,), "<i8", SI),
            FakeCAI((B,), "<i8", DI), k_row_bytes=2048, src_num_slots=SLOTS, dst_num_slots=SLOTS, dst="disk")
    with raises(ValueError, match="^dst_k_ptrs"):
        kvjit.transfer_kv_all_layers(
            FakeCAI((4,), "<i8", SK), None, FakeCAI((3,), "<i8", DK), None, FakeCAI((B,), "<i8", SI),
            FakeCAI((B,), "<i8", DI), k_row_bytes=2048, src_num_slots=SLOTS, dst_num_slots=SLOTS)


def test_prewarm_lines_of_both_ops():
    with tempdir() as d:
        ctx = kvjit.Context(cache_dir=os.path.join(d, "cache"))
        try:
            got = kvjit.prewarm_line("transfer_kv arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 src=device "
                                     "dst=host layers=table pdl=auto split=0 vec=16", context=ctx)
            assert got["compiled"] >= 1 and got["cached"] == 0
            again = kvjit.prewarm_line("transfer_kv arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 "
                                       "src=device dst=host layers=table pdl=auto split=0 vec=16", context=ctx)
            assert again == {"compiled": 0, "cached": got["compiled"]}
            got = kvjit.prewarm_line("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto "
                                     "split=0 vec=16", context=ctx)
            assert got["compiled"] >= 1
            with raises(kvjit.Error, match="src"):
                kvjit.prewarm_line("transfer_kv arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 src=gpu "
                                   "dst=host layers=one pdl=auto split=0 vec=16", context=ctx)
            with raises(ValueError, match="^line"):
                kvjit.prewarm_line("transfer_kv\0", context=ctx)
        finally:
            ctx.close()
