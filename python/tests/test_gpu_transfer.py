"""transfer_kv through the binding on a GPU with PyTorch (skips without torch, a device or a
driver): every direction between CUDA and pinned host tensors against torch's own indexing,
poisoned destinations, bad ids skipped and counted, all layers through pointer tables, and a
host-side transfer captured in a CUDA graph and replayed.
"""

from _support import need_gpu

import kvjit


def _caches(torch, where, slots, heads, dim, dtype, layers=1):
    out = []
    for _ in range(layers):
        t = torch.randn(slots, heads, dim, dtype=torch.float32).to(dtype)
        out.append(t.pin_memory() if where == "host" else t.cuda())
    return out


def _reference(torch, dst, src, si, di, src_slots, dst_slots):
    want = dst.cpu().clone()
    s, d = si.cpu(), di.cpu()
    ok = (s >= 0) & (d >= 0) & (s < src_slots) & (d < dst_slots)
    want[d[ok]] = src.cpu()[s[ok]]
    return want


def test_every_direction_matches_torch_indexing():
    torch = need_gpu()
    torch.manual_seed(7)
    for src_where in ("device", "host"):
        for dst_where in ("device", "host"):
            for dtype, heads, dim in ((torch.bfloat16, 8, 128), (torch.float16, 1, 576), (torch.float32, 4, 64)):
                slots, batch = 3000, 1537
                (sk,), (sv,) = _caches(torch, src_where, slots, heads, dim, dtype), _caches(torch, src_where, slots,
                                                                                         heads, dim, dtype)
                (dk,), (dv,) = _caches(torch, dst_where, slots, heads, dim, dtype), _caches(torch, dst_where, slots,
                                                                                         heads, dim, dtype)
                si = torch.randint(0, slots, (batch,), device="cuda")
                di = torch.randperm(slots, device="cuda")[:batch]
                si[::97] = -1
                di[5::101] = slots + 3  # past the destination: skipped and counted
                want_k = _reference(torch, dk, sk, si, di, slots, slots)
                want_v = _reference(torch, dv, sv, si, di, slots, slots)
                kvjit.transfer_kv_oob_count(reset=True)
                kvjit.transfer_kv(sk, sv, dk, dv, si, di)
                torch.cuda.synchronize()
                assert torch.equal(dk.cpu(), want_k), (src_where, dst_where, dtype)
                assert torch.equal(dv.cpu(), want_v), (src_where, dst_where, dtype)
                bad = int(((si >= 0) & (di >= slots)).sum())
                assert kvjit.transfer_kv_oob_count(reset=True) == bad


def test_all_layers_through_pointer_tables():
    torch = need_gpu()
    layers, slots, batch = 6, 1024, 300
    src_k = _caches(torch, "device", slots, 8, 128, torch.bfloat16, layers)
    src_v = _caches(torch, "device", slots, 8, 128, torch.bfloat16, layers)
    dst_k = _caches(torch, "host", slots, 8, 128, torch.bfloat16, layers)
    dst_v = _caches(torch, "host", slots, 8, 128, torch.bfloat16, layers)

    def table(ts):
        return torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64, device="cuda")

    si = torch.randint(0, slots, (batch,), device="cuda")
    di = torch.randperm(slots, device="cuda")[:batch]
    want = [_reference(torch, d, s, si, di, slots, slots) for d, s in zip(dst_k + dst_v, src_k + src_v)]
    kvjit.transfer_kv_all_layers(table(src_k), table(src_v), table(dst_k), table(dst_v), si, di,
                                 k_row_bytes=8 * 128 * 2, src_num_slots=slots, dst_num_slots=slots, src="device",
                                 dst="host")
    torch.cuda.synchronize()
    for got, w in zip(dst_k + dst_v, want):
        assert torch.equal(got, w)


def test_graph_capture_of_a_device_to_host_transfer():
    torch = need_gpu()
    slots, batch = 2048, 512
    (sk,), (sv,) = _caches(torch, "device", slots, 8, 64, torch.float16), _caches(torch, "device", slots, 8, 64,
                                                                                 torch.float16)
    (dk,), (dv,) = _caches(torch, "host", slots, 8, 64, torch.float16), _caches(torch, "host", slots, 8, 64,
                                                                               torch.float16)
    si = torch.randint(0, slots, (batch,), device="cuda")
    di = torch.randperm(slots, device="cuda")[:batch]
    kvjit.transfer_kv_prepare(sk, sv, dk, dv, si, di)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            kvjit.transfer_kv(sk, sv, dk, dv, si, di)
    for _ in range(3):
        sk.copy_(torch.randn_like(sk, dtype=torch.float32).to(torch.float16))
        si.copy_(torch.randint(0, slots, (batch,), device="cuda"))
        di.copy_(torch.randperm(slots, device="cuda")[:batch])
        want = _reference(torch, dk, sk, si, di, slots, slots)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(dk, want)
