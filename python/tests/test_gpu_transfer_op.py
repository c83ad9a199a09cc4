"""torch.ops.kvjit.transfer_kv on a GPU (skipped without torch, a CUDA device or a driver):
eagerly in every direction between CUDA and pinned host tensors, under
torch.compile(fullgraph=True) with no graph break (the op and kvjit.transfer_kv), inside
torch.cuda.graph capture and replay, and refusing unpinned host memory before anything runs.
Every destination is poisoned first and compared byte for byte with PyTorch's indexing, rows
outside the target included; bad ids are skipped and counted.
"""

from _support import need_gpu, parametrize, raises, skip

import kvjit


def setup():
    torch = need_gpu()
    kvjit.register_torch_ops()
    return torch


def random_rows(torch, shape, dtype, where="device"):
    t = torch.randint(0, 256, shape[:-1] + (shape[-1] * torch.empty(0, dtype=dtype).element_size(),),
                      dtype=torch.uint8).view(dtype)
    return t.pin_memory() if where == "host" else t.cuda()


def values(torch, shape, dtype):
    """Random finite values (doubling them is exact), where a test computes with the rows."""
    return (torch.randn(shape) * 4).to(dtype).cuda()


def poisoned(torch, shape, dtype, where="device"):
    size = torch.empty(0, dtype=dtype).element_size()
    t = torch.full(shape[:-1] + (shape[-1] * size,), 0xA5, dtype=torch.uint8).view(dtype)
    return t.pin_memory() if where == "host" else t.cuda()


def expect(torch, dst, src, si, di, src_slots=None, dst_slots=None):
    """PyTorch's indexing over the kept pairs, on the bytes, on the CPU."""
    want = dst.cpu().clone()
    flat = want.view(torch.uint8).reshape(want.shape[0], -1)
    rows = src.cpu().contiguous().view(torch.uint8).reshape(src.shape[0], -1)
    s, d = si.cpu().long(), di.cpu().long()
    ns = src.shape[0] if src_slots is None else src_slots
    nd = dst.shape[0] if dst_slots is None else dst_slots
    keep = (s >= 0) & (d >= 0) & (s < ns) & (d < nd)
    flat[d[keep]] = rows[s[keep]]
    return want


def same_bytes(torch, got, want, what):
    torch.cuda.synchronize()
    a, b = got.cpu().contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
    bad = (a != b).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} bytes differ, first at {bad[0].tolist()}"


@parametrize("src_where, dst_where", [("device", "device"), ("device", "host"), ("host", "device"),
                                      ("host", "host")])
@parametrize("dtype, heads, dim, index", [("bfloat16", 8, 128, "int64"), ("float16", 1, 576, "int32"),
                                          ("float8_e4m3fn", 4, 64, "int64")])
def test_every_direction_matches_indexing(src_where, dst_where, dtype, heads, dim, index):
    torch = setup()
    dt, it = getattr(torch, dtype), getattr(torch, index)
    slots, batch = 3000, 1537
    sk, sv = random_rows(torch, (slots, heads, dim), dt, src_where), random_rows(torch, (slots, heads, dim), dt,
                                                                                 src_where)
    dk, dv = poisoned(torch, (slots, heads, dim), dt, dst_where), poisoned(torch, (slots, heads, dim), dt, dst_where)
    si = torch.randint(0, slots, (batch,), device="cuda").to(it)
    di = torch.randperm(slots, device="cuda")[:batch].to(it)
    si[::97] = -1
    di[5::101] = slots + 3  # past the destination: skipped and counted
    want_k, want_v = expect(torch, dk, sk, si, di), expect(torch, dv, sv, si, di)
    kvjit.transfer_kv_oob_count(reset=True)
    # host -> host: the ids are CUDA tensors, so the dispatcher still picks the CUDA kernel
    torch.ops.kvjit.transfer_kv(sk, sv, dk, dv, si, di)
    same_bytes(torch, dk, want_k, f"dst_k {src_where}->{dst_where}")
    same_bytes(torch, dv, want_v, f"dst_v {src_where}->{dst_where}")
    assert kvjit.transfer_kv_oob_count(reset=True) == int(((si >= 0) & (di >= slots)).sum())


def test_k_only_paged_and_limits():
    torch = setup()
    src = random_rows(torch, (500, 576), torch.bfloat16)
    dst = poisoned(torch, (40, 16, 576), torch.bfloat16, "host")  # 640 slots, paged, pinned
    si = torch.randint(0, 500, (300,), device="cuda")
    di = torch.randperm(640, device="cuda")[:300]
    want = expect(torch, dst.view(640, 576), src, si, di, src_slots=400, dst_slots=600)
    torch.ops.kvjit.transfer_kv(src, None, dst, None, si, di, src_num_slots=400, dst_num_slots=600)
    same_bytes(torch, dst.view(640, 576), want, "paged K-only dst")


def test_unpinned_host_memory_is_refused_before_launching():
    torch = setup()
    sk = random_rows(torch, (64, 8, 64), torch.float16)
    pageable = torch.zeros(64, 8, 64, dtype=torch.float16)
    si = torch.arange(8, device="cuda")
    with raises(RuntimeError, match="kvjit ValueError: dst_k: a CPU tensor must be pinned"):
        torch.ops.kvjit.transfer_kv(sk, None, pageable, None, si, si)
    assert int(pageable.view(torch.uint8).sum()) == 0
    host_ids = torch.arange(8)  # the kernel reads the ids too
    with raises(RuntimeError, match="kvjit ValueError: src_indices: a CPU tensor must be pinned"):
        torch.ops.kvjit.transfer_kv(sk, None, sk.clone(), None, host_ids, si)


def test_compile_fullgraph_no_graph_break():
    torch = setup()
    import torch._dynamo

    slots, batch = 1024, 64

    def offload(sk, sv, dk, dv, si, di):
        kvjit.transfer_kv(sk, sv, dk, dv, si, di)  # the friendly entry point, traced into the op
        torch.ops.kvjit.transfer_kv(sk * 2, None, dk, None, si, di + 1, dst_num_slots=slots - 1)
        return dk.float().sum()

    def fresh():
        return (poisoned(torch, (slots, 8, 128), torch.bfloat16), poisoned(torch, (slots, 8, 128), torch.bfloat16))

    sk, sv = values(torch, (slots, 8, 128), torch.bfloat16), values(torch, (slots, 8, 128), torch.bfloat16)
    si, di = torch.randperm(slots, device="cuda")[:batch], torch.randperm(slots - 2, device="cuda")[:batch]
    torch._dynamo.reset()
    explained = torch._dynamo.explain(offload)(sk, sv, *fresh(), si, di)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    compiled = torch.compile(offload, fullgraph=True)
    for round_ in range(3):
        si, di = torch.randperm(slots, device="cuda")[:batch], torch.randperm(slots - 2, device="cuda")[:batch]
        dk, dv = fresh()
        want_k = expect(torch, expect(torch, dk, sk, si, di), sk * 2, si, di + 1, dst_slots=slots - 1)
        want_v = expect(torch, dv, sv, si, di)
        compiled(sk, sv, dk, dv, si, di)
        same_bytes(torch, dk, want_k, f"dst_k under torch.compile, round {round_}")
        same_bytes(torch, dv, want_v, f"dst_v under torch.compile, round {round_}")


def test_cuda_graph_capture_and_replay_device_to_host():
    torch = setup()
    slots, batch = 2048, 512
    sk, sv = random_rows(torch, (slots, 8, 64), torch.float16), random_rows(torch, (slots, 8, 64), torch.float16)
    dk, dv = poisoned(torch, (slots, 8, 64), torch.float16, "host"), poisoned(torch, (slots, 8, 64), torch.float16,
                                                                              "host")
    si = torch.randint(0, slots, (batch,), device="cuda")
    di = torch.randperm(slots, device="cuda")[:batch]
    kvjit.transfer_kv_prepare(sk, sv, dk, dv, si, di, batch=0)  # every size class loaded before capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on the side stream, as torch recommends before capture
        torch.ops.kvjit.transfer_kv(sk, sv, dk, dv, si, di)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops.kvjit.transfer_kv(sk, sv, dk, dv, si, di)
    for round_ in range(3):
        sk.copy_(random_rows(torch, sk.shape, sk.dtype))
        si.copy_(torch.randint(0, slots, (batch,), device="cuda"))
        di.copy_(torch.randperm(slots, device="cuda")[:batch])
        want_k, want_v = expect(torch, dk, sk, si, di), expect(torch, dv, sv, si, di)
        graph.replay()
        same_bytes(torch, dk, want_k, f"dst_k after replay {round_}")
        same_bytes(torch, dv, want_v, f"dst_v after replay {round_}")


def test_second_gpu_mismatch_is_named():
    torch = setup()
    if torch.cuda.device_count() < 2:
        skip("one GPU")
    a = random_rows(torch, (16, 64), torch.float16)
    b = poisoned(torch, (16, 64), torch.float16).to("cuda:1")
    ids = torch.arange(4, device="cuda")
    with raises(RuntimeError, match="kvjit ValueError: dst_k: on cuda:1, the transfer runs on cuda:0"):
        torch.ops.kvjit.transfer_kv(a, None, b, None, ids, ids)
