"""The torch code path without torch or a GPU: a stand-in `torch` module (just what the binding
touches: Tensor's data_ptr/shape/stride/element_size/dtype/get_device, the current device and raw
stream of torch._C, torch.cuda.device) is put in sys.modules of a child process, so the binding
reads its tensors as torch tensors. Checks the packed arguments, the stream and device switching,
and that kvjit never imports torch by itself. Runs where there is no driver only for the parts
that would launch."""

import os
import subprocess
import sys
import textwrap

from _support import HERE

CHILD = textwrap.dedent(r'''
    import contextlib, sys, types

    log = []
    torch = types.ModuleType("torch")

    class dtype:
        def __init__(self, name, size):
            self.name, self.itemsize = name, size
        def __repr__(self):
            return "torch." + self.name

    for name, size in [("float16", 2), ("bfloat16", 2), ("float32", 4), ("float8_e4m3fn", 1),
                       ("float8_e5m2", 1), ("uint8", 1), ("int32", 4), ("int64", 8)]:
        setattr(torch, name, dtype(name, size))

    class Tensor:
        def __init__(self, shape, dt, ptr, strides=None, dev=0):
            self._shape, self.dtype, self._ptr, self._dev = tuple(shape), dt, ptr, dev
            if strides is None:
                strides, step = [], 1
                for s in reversed(shape):
                    strides.insert(0, step)
                    step *= s
            self._strides = tuple(strides)
        shape = property(lambda self: self._shape)
        device = property(lambda self: "cuda:%d" % self._dev if self._dev >= 0 else "cpu")
        def data_ptr(self): return self._ptr
        def stride(self): return self._strides
        def element_size(self): return self.dtype.itemsize
        def get_device(self): return self._dev

    class Parameter(Tensor):
        pass

    torch.Tensor = Tensor
    current = [0]
    torch._C = types.SimpleNamespace(_cuda_getDevice=lambda: current[0],
                                     _cuda_getCurrentRawStream=lambda dev: 0x5000 + dev)

    @contextlib.contextmanager
    def device(index):
        log.append(("enter", index))
        old, current[0] = current[0], index
        try:
            yield
        finally:
            current[0] = old
            log.append(("exit", index))

    torch.cuda = types.SimpleNamespace(device=device, current_device=lambda: current[0])
    sys.modules["torch"] = torch

    import kvjit
    from kvjit import _lib, _store

    def t(shape, dt, ptr, strides=None, dev=0, cls=Tensor):
        return cls(shape, dt, ptr, strides, dev)

    B, H, D = 16, 8, 128
    k = t((B, H, D), torch.bfloat16, 0x10000000, dev=1)
    v = t((B, H * D), torch.bfloat16, 0x20000000, strides=(3 * H * D, 1), dev=1)
    kc = t((64, 16, H, D), torch.bfloat16, 0x30000000, dev=1)   # paged
    vc = t((1024, H, D), torch.bfloat16, 0x40000000, dev=1)
    loc = t((B,), torch.int32, 0x50000000, dev=1, cls=Parameter)  # a subclass is a tensor too

    args, dev, is_torch = _store.build_args(k, v, kc, vc, loc, None, None, None, 0, "auto", None, None, None, None, 2)
    s = _lib.StoreKvArgs.from_buffer_copy(args)
    assert (dev, is_torch) == (1, True)
    assert s.stream == 0x5001, hex(s.stream)                       # torch's current stream of cuda:1
    assert (s.k_row_bytes, s.v_stride, s.k_cache_stride, s.num_slots) == (2048, 3 * 2048, 2048, 1024)
    assert (s.index_type, s.dtype, s.cache_dtype) == (_lib.INDEX_INT32, 0, 0)

    # quantizing: torch float8 caches, per-head scales
    f8 = lambda ptr: t((100, H, D), torch.float8_e4m3fn, ptr, dev=1)
    ks = t((H,), torch.float32, 0x60000000, dev=1)
    vs = t((H, 1), torch.float32, 0x60000100, dev=1)
    args, _, _ = _store.build_args(k, k, f8(0x30000000), f8(0x40000000), loc, None, None, None, 0, "on", ks, vs,
                                   None, None, 2)
    s = _lib.StoreKvArgs.from_buffer_copy(args)
    assert (s.dtype, s.cache_dtype, s.scale_kind, s.num_heads) == (_lib.DTYPE_BF16, _lib.DTYPE_FP8_E4M3,
                                                                   _lib.SCALE_PER_HEAD, H)
    assert (s.k_row_bytes, s.k_cache_stride, s.pdl) == (2048, 1024, _lib.PDL_ON)

    # a dtype the binding has no name for: its element size comes from the tensor
    torch.complex64 = dtype("complex64", 8)
    c64 = lambda shape, ptr: t(shape, torch.complex64, ptr, dev=1)
    args, _, _ = _store.build_args(c64((4, 64), 0x1000), None, c64((10, 64), 0x2000), None,
                                   t((4,), torch.int64, 0x3000, dev=1), None, None, None, 0, "auto", None, None,
                                   None, None, 2)
    assert _lib.StoreKvArgs.from_buffer_copy(args).k_row_bytes == 512

    # errors name the argument
    def fails(exc, prefix, *a, **kw):
        try:
            kvjit.store_kv_cache(*a, **kw)
        except exc as e:
            assert str(e).startswith(prefix), str(e)
        else:
            raise AssertionError("no error for " + prefix)

    fails(ValueError, "k: must be a CUDA tensor", t((B, H, D), torch.bfloat16, 1, dev=-1), v, kc, vc, loc)
    fails(ValueError, "v_cache: on cuda:0, k is on cuda:1", k, v, kc, t((1024, H, D), torch.bfloat16, 2, dev=0), loc)
    fails(TypeError, "k_cache: dtype f16 differs", k, v, t((1024, H, D), torch.float16, 2, dev=1), vc, loc)
    fails(TypeError, "k_scale: dtype must be float32", k, k, f8(0x30000000), f8(0x40000000), loc,
          k_scale=t((1,), torch.float16, 0x60000000, dev=1), v_scale=vs)

    # batch 0 reaches the library (validated, nothing launched) inside cuda:1's device guard
    empty = t((0, H, D), torch.bfloat16, 0, dev=1)
    log.clear()
    kvjit.store_kv_cache(empty, empty, kc, vc, t((0,), torch.int64, 0, dev=1))
    assert log == [("enter", 1), ("exit", 1)], log
    log.clear()
    current[0] = 1
    kvjit.store_kv_cache(empty, None, kc, None, t((0,), torch.int64, 0, dev=1))
    assert log == [], log  # already current: no switch

    if not __import__("_support").has_driver():
        try:
            kvjit.store_kv_cache(k, v, kc, vc, loc)
        except kvjit.Error as e:
            assert e.name == "ERR_NO_DRIVER", e
        else:
            raise AssertionError("a store without a driver succeeded")
    assert sys.modules["torch"] is torch
    print("fake torch ok")
''')


def test_torch_path_with_a_stand_in_module():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.dirname(HERE)] + ([env["PYTHONPATH"]] if env.get(
        "PYTHONPATH") else []))
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "fake torch ok" in r.stdout, r.stdout + r.stderr
