"""torch.ops.kvjit.transfer_kv without a GPU (skipped without torch): the schema, the CPU path
(the native module's host loop) against PyTorch indexing (poisoned destinations, every byte compared, rows
outside the target untouched), the C kernel registered for CPU under a test namespace (each bad
argument's class and message, an empty transfer validated by the library), opcheck, and
torch.compile(fullgraph=True) with no graph break, through the op and through kvjit.transfer_kv.
"""

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
    """The C kernel, registered for CPU under kvjit_ttest (CPU tensors reach it; batch 0 only)."""
    from kvjit import _torch

    if not _test_ns:
        _test_ns.append(_torch.define(torch, "kvjit_ttest", cpu_path=False))
        _torch.register_kernels(torch, "kvjit_ttest", "CPU")
    return torch.ops.kvjit_ttest.transfer_kv.default


def rows(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype in (torch.uint8, torch.int8):
        return torch.randint(0, 255, shape, generator=g).to(dtype)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


def poisoned(shape, dtype):
    size = torch.empty(0, dtype=dtype).element_size()
    return torch.full(tuple(shape[:-1]) + (shape[-1] * size,), 0xA5, dtype=torch.uint8).view(dtype)


def expect(dst, src, src_loc, dst_loc, src_slots=None, dst_slots=None):
    """dst[d] = src[s] for the kept pairs (0 <= s < src slots, 0 <= d < dst slots), bytes; the
    caches viewed as [slots, row]."""
    want = dst.clone()
    flat = want.view(torch.uint8).reshape(want.shape[0], -1) if want.dim() > 1 else want
    src_rows = src.contiguous().view(torch.uint8).reshape(src.shape[0], -1)
    ns = src.shape[0] if src_slots is None else src_slots
    nd = dst.shape[0] if dst_slots is None else dst_slots
    for s, d in zip(src_loc.tolist(), dst_loc.tolist()):
        if 0 <= s < ns and 0 <= d < nd:
            flat[d] = src_rows[s]
    return want


def same_bytes(got, want, what):
    a, b = got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
    bad = (a != b).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} bytes differ, first at {bad[0].tolist()}"


def test_the_op_is_registered_with_its_schema():
    need_torch()
    op = torch.ops.kvjit.transfer_kv.default
    schema = str(op._schema)
    assert "Tensor(a!) dst_k" in schema and "Tensor(b!)? dst_v" in schema, schema
    assert "int row_elements=-1" in schema, schema


@parametrize("dtype, index", [("bfloat16", "int64"), ("float32", "int32"), ("uint8", "int64")])
@parametrize("k_only", [False, True])
def test_cpu_implementation_matches_indexing(dtype, index, k_only):
    need_torch()
    dt, it = getattr(torch, dtype), getattr(torch, index)
    src_k, src_v = rows((40, 2, 8), dt, 1), rows((40, 2, 8), dt, 2)
    dst_k, dst_v = poisoned((30, 2, 8), dt), poisoned((30, 2, 8), dt)
    src_loc = torch.tensor([3, 39, -1, 7, 40, 12, 0], dtype=it)   # -1 and 40 (past the source) skipped
    dst_loc = torch.tensor([0, 29, 5, -2, 6, 30, 11], dtype=it)   # -2 and 30 (past the destination) skipped
    want_k = expect(dst_k, src_k, src_loc, dst_loc)
    want_v = expect(dst_v, src_v, src_loc, dst_loc)
    if k_only:
        torch.ops.kvjit.transfer_kv(src_k, None, dst_k, None, src_loc, dst_loc)
    else:
        torch.ops.kvjit.transfer_kv(src_k, src_v, dst_k, dst_v, src_loc, dst_loc)
        same_bytes(dst_v, want_v, "dst_v")
    same_bytes(dst_k, want_k, "dst_k")


def test_cpu_implementation_layouts_and_limits():
    need_torch()
    # a paged destination [pages, page_size, H, D] from a [slots, H*D] source; num_slots limits
    src = rows((50, 16), torch.float16, 3)
    dst = poisoned((4, 8, 2, 8), torch.float16)  # 32 slots of 16 elements
    src_loc = torch.tensor([1, 2, 45, 4])
    dst_loc = torch.tensor([31, 0, 9, 20])
    want = expect(dst.view(32, 16), src, src_loc, dst_loc, src_slots=40, dst_slots=21)
    torch.ops.kvjit.transfer_kv(src, None, dst, None, src_loc, dst_loc, src_num_slots=40, dst_num_slots=21)
    same_bytes(dst.view(32, 16), want, "paged dst_k")
    # row_elements: rows of 8 elements; a destination whose slots hold 3 cannot take them
    src2, dst2 = rows((10, 8), torch.float32, 4), poisoned((10, 2, 8), torch.float32)
    with raises(ValueError, match="^dst_k: no trailing dims"):
        torch.ops.kvjit.transfer_kv(src2, None, dst2[:, :, :3], None, torch.tensor([1]), torch.tensor([2]),
                                    row_elements=8)


BAD = [
    # (argument, error class, overrides of the op's arguments)
    ("dst_k", "TypeError", {"dst_k": "f16"}),
    ("src_k", "ValueError", {"src_k": "1d"}),
    ("dst_k", "ValueError", {"dst_k": "narrow"}),
    ("src_v", "ValueError", {"src_v": None}),
    ("dst_v", "ValueError", {"dst_v": None}),
    ("dst_v", "TypeError", {"dst_v": "f16"}),
    ("src_indices", "TypeError", {"src_indices": "f32", "dst_indices": "f32"}),
    ("src_indices", "ValueError", {"src_indices": "2d"}),
    ("dst_indices", "ValueError", {"dst_indices": "three"}),
    ("dst_indices", "TypeError", {"dst_indices": "i32"}),
    ("src_num_slots", "ValueError", {"src_num_slots": 17}),
    ("dst_num_slots", "ValueError", {"dst_num_slots": 0}),
    ("split", "ValueError", {"split": -1}),
    ("pdl", "ValueError", {"pdl": 3}),
    ("row_elements", "ValueError", {"row_elements": 0}),
]


def op_args(**over):
    empty = torch.zeros(0, dtype=torch.int64)
    cache = torch.zeros(16, 2, 8, dtype=torch.bfloat16)
    values = {"f16": torch.zeros(16, 2, 8, dtype=torch.float16), "1d": torch.zeros(16, dtype=torch.bfloat16),
              "narrow": cache[:, :, :4], "f32": torch.zeros(0), "2d": torch.zeros(0, 1, dtype=torch.int64),
              "three": torch.zeros(3, dtype=torch.int64), "i32": torch.zeros(0, dtype=torch.int32)}
    a = dict(src_k=cache, src_v=cache.clone(), dst_k=cache.clone(), dst_v=cache.clone(), src_indices=empty,
             dst_indices=empty.clone(), src_num_slots=-1, dst_num_slots=-1, split=0, pdl=0, row_elements=-1)
    for name, value in over.items():
        a[name] = values.get(value, value) if isinstance(value, str) else value
    return a


@parametrize("arg, cls, over", BAD)
def test_bad_arguments_name_themselves(arg, cls, over):
    """The C kernel and the CPU path read the same rules: the same class and message."""
    need_torch()
    with raises(RuntimeError, match=rf"kvjit {cls}: {arg}: ") as e:
        c_kernel_op()(**op_args(**over))
    with raises({"TypeError": TypeError, "ValueError": ValueError}[cls]) as cpu:
        torch.ops.kvjit.transfer_kv.default(**op_args(**over))
    assert f"kvjit {cls}: {cpu.value}" in str(e.value), (str(cpu.value), str(e.value))


def test_an_empty_transfer_is_validated_by_the_library():
    need_torch()
    c_kernel_op()(**op_args())
    c_kernel_op()(**op_args(src_v=None, dst_v=None))
    with raises(RuntimeError, match="kvjit ERR_INVALID_ARGUMENT: .*split"):
        c_kernel_op()(**op_args(split=3))  # 3 does not divide a 32-byte row
    with raises(kvjit.InvalidArgumentError, match="split"):
        torch.ops.kvjit.transfer_kv.default(**op_args(split=3))


def test_opcheck():
    need_torch()
    if not hasattr(torch.library, "opcheck"):
        skip("torch.library.opcheck is missing (torch < 2.4)")
    op = torch.ops.kvjit.transfer_kv.default
    src_loc, dst_loc = torch.tensor([3, -1, 7, 15]), torch.tensor([0, 5, 9, 2])
    torch.library.opcheck(op, (rows((16, 2, 8), torch.float32, 5), rows((16, 2, 8), torch.float32, 6),
                               torch.zeros(12, 2, 8), torch.zeros(12, 2, 8), src_loc, dst_loc))
    torch.library.opcheck(op, (rows((16, 16), torch.float32, 7), None, torch.zeros(12, 16), None, src_loc, dst_loc),
                          {"dst_num_slots": 10})


def test_compile_fullgraph_has_no_graph_break():
    need_torch()
    import torch._dynamo

    def step(src_k, src_v, dst_k, dst_v, src_loc, dst_loc):
        kvjit.transfer_kv(src_k * 2, src_v, dst_k, dst_v, src_loc, dst_loc)  # the friendly entry point
        torch.ops.kvjit.transfer_kv(src_k, None, dst_k, None, src_loc + 1, dst_loc, dst_num_slots=15)
        return dst_k.sum() + dst_v.sum()

    src_k, src_v = rows((20, 2, 8), torch.float32, 8), rows((20, 2, 8), torch.float32, 9)
    src_loc, dst_loc = torch.tensor([3, -1, 7, 12]), torch.tensor([1, 4, 14, 9])
    torch._dynamo.reset()
    explained = torch._dynamo.explain(step)(src_k, src_v, torch.zeros(16, 2, 8), torch.zeros(16, 2, 8), src_loc,
                                            dst_loc)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    # The op's own eager calls make the reference.
    eager_k, eager_v = poisoned((16, 2, 8), torch.float32), poisoned((16, 2, 8), torch.float32)
    torch.ops.kvjit.transfer_kv(src_k * 2, src_v, eager_k, eager_v, src_loc, dst_loc)
    torch.ops.kvjit.transfer_kv(src_k, None, eager_k, None, src_loc + 1, dst_loc, dst_num_slots=15)
    want_k = expect(expect(poisoned((16, 2, 8), torch.float32), src_k * 2, src_loc, dst_loc), src_k, src_loc + 1,
                    dst_loc, dst_slots=15)
    same_bytes(eager_k, want_k, "dst_k in eager")
    compiled = torch.compile(step, fullgraph=True)
    for _ in range(2):
        dk, dv = poisoned((16, 2, 8), torch.float32), poisoned((16, 2, 8), torch.float32)
        compiled(src_k, src_v, dk, dv, src_loc, dst_loc)
        same_bytes(dk, eager_k, "dst_k under torch.compile")
        same_bytes(dv, eager_v, "dst_v under torch.compile")
