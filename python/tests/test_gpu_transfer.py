"""transfer_kv through the binding on a GPU with PyTorch (skips without torch, a device or a
driver): every direction between CUDA and pinned host tensors against torch's own indexing,
poisoned destinations, bad ids skipped and counted, all layers through pointer tables, and a
host-side transfer captured in a CUDA graph and replayed; conversions on the way against torch's
own (bit for bit) and every CTA budget.
"""

from _support import need_gpu, skip

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


def _bits(torch, t):
    """A tensor's raw bits (int view of its element size), NaNs made one canonical pattern."""
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]
    bits = t.contiguous().view(view).clone()
    if t.dtype.is_floating_point:
        canon = {1: 0x7F, 2: 0x7FFF, 4: 0x7FFFFFFF}[t.element_size()]
        bits[torch.isnan(t.float())] = canon
    return bits


def test_convert_on_the_way_matches_torch():
    """fp8 -> f16/bf16/f32 on a load as (x.float() * scale).to(dst) and f16/bf16/f32 -> fp8 on an
    offload as (x.float() / scale).clamp(-max, max).to(fp8), per tensor, per head and without a
    scale, bit for bit (every NaN counted as one NaN), both directions over the host link."""
    torch = need_gpu()
    if not hasattr(torch, "float8_e4m3fn"):
        skip("this torch has no float8 dtypes")
    torch.manual_seed(11)
    fp8s = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}
    floats = (torch.float16, torch.bfloat16, torch.float32)
    slots, batch, heads, dim = 700, 333, 8, 64
    for name, (fp8, fmax) in sorted(fp8s.items()):
        for wide in floats:
            for scale_kind in ("none", "tensor", "head"):
                if scale_kind == "none":
                    scale = None
                elif scale_kind == "tensor":
                    scale = torch.tensor([0.37], device="cuda")
                else:
                    scale = torch.rand(heads, device="cuda") * 4 + 0.01
                si = torch.randperm(slots, device="cuda")[:batch]
                di = torch.randperm(slots, device="cuda")[:batch]
                # load: pinned fp8 host cache -> device cache of `wide`
                src = torch.randint(0, 256, (slots, heads, dim), dtype=torch.uint8).view(fp8).pin_memory()
                dst = torch.zeros(slots, heads, dim, dtype=wide, device="cuda")
                kvjit.transfer_kv(src, None, dst, None, si, di, k_scale=scale)
                x = src.view(torch.uint8).cuda()[si].view(fp8).float()  # gathered as bytes
                if scale is not None:
                    x = x * (scale.view(1, -1, 1) if scale.numel() > 1 else scale)
                want = torch.zeros_like(dst)
                want[di] = x.to(wide)
                torch.cuda.synchronize()
                assert torch.equal(_bits(torch, dst), _bits(torch, want)), ("load", name, wide, scale_kind)
                # offload: device cache of `wide` -> pinned fp8 host cache
                rows = (torch.randn(slots, heads, dim, device="cuda") * 300).to(wide)
                rows.view(-1)[::97] = float("nan")
                out = torch.zeros(slots, heads, dim, dtype=torch.uint8).view(fp8).pin_memory()
                kvjit.transfer_kv(rows, None, out, None, si, di, k_scale=scale)
                y = rows[si].float()
                if scale is not None:
                    y = y / (scale.view(1, -1, 1) if scale.numel() > 1 else scale)
                want8 = torch.zeros(slots, heads, dim, dtype=torch.uint8, device="cuda")
                want8[di] = y.clamp(-fmax, fmax).to(fp8).view(torch.uint8)
                want8 = want8.view(fp8)
                torch.cuda.synchronize()
                assert torch.equal(_bits(torch, out.cuda()), _bits(torch, want8)), ("offload", name, wide, scale_kind)


def test_max_ctas_every_budget_moves_the_same_rows():
    """The CTA budget changes the grid, never the result: 1, 3, the default and every SM."""
    torch = need_gpu()
    slots, batch = 5000, 4097
    src = torch.randn(slots, 8, 128, device="cuda").to(torch.bfloat16)
    si = torch.randperm(slots, device="cuda")[:batch]
    di = torch.randperm(slots, device="cuda")[:batch]
    want = torch.zeros(slots, 8, 128, dtype=torch.bfloat16)
    want[di.cpu()] = src.cpu()[si.cpu()]
    for max_ctas in (1, 3, 0, -1):
        dst = torch.zeros(slots, 8, 128, dtype=torch.bfloat16).pin_memory()
        kvjit.transfer_kv(src, None, dst, None, si, di, max_ctas=max_ctas)
        torch.cuda.synchronize()
        assert torch.equal(dst, want), max_ctas
