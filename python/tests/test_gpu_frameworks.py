"""kvjit's ops on other frameworks' arrays, eagerly, every byte compared (issue 27): a CuPy array
(read through __cuda_array_interface__, on CuPy's current stream) and a JAX array (read through
__dlpack__). Each framework runs in a child process of its own (JAX takes the GPU's memory as it
starts unless told not to). Skipped without the framework or a GPU."""

import os
import subprocess
import sys

from _support import skip

HERE = os.path.dirname(os.path.abspath(__file__))

CUPY = r'''
import cupy as cp
import kvjit
B, H, D, SLOTS = 16, 8, 128, 64
cp.random.seed(0)
k = cp.random.standard_normal((B, H, D), dtype=cp.float32).astype(cp.float16)
v = cp.random.standard_normal((B, H * D), dtype=cp.float32).astype(cp.float16)
kc = cp.full((SLOTS, H, D), 7, dtype=cp.float16)
vc = cp.full((SLOTS, H * D), 7, dtype=cp.float16)
loc = cp.random.permutation(SLOTS)[:B].astype(cp.int64)
want_k, want_v = kc.copy(), vc.copy()
want_k[loc] = k
want_v[loc] = v
stream = cp.cuda.Stream(non_blocking=True)
with stream:  # kvjit launches on CuPy's current stream (the array interface's)
    kvjit.store_kv_cache(k, v, kc, vc, loc)
    stream.synchronize()
assert cp.array_equal(kc.view(cp.uint16), want_k.view(cp.uint16)), "k_cache"
assert cp.array_equal(vc.view(cp.uint16), want_v.view(cp.uint16)), "v_cache"
dst = cp.zeros((32, H, D), dtype=cp.float16)
src_ids, dst_ids = loc[:8], cp.arange(8, dtype=cp.int64) * 3
kvjit.transfer_kv(kc, None, dst, None, src_ids, dst_ids)
cp.cuda.runtime.deviceSynchronize()
want = cp.zeros_like(dst)
want[dst_ids] = kc[src_ids]
assert cp.array_equal(dst.view(cp.uint16), want.view(cp.uint16)), "transfer dst"
print("cupy ok")
'''

JAX = r'''
import ctypes
import numpy as np
import jax, jax.numpy as jnp
import kvjit
B, H, D, SLOTS = 16, 8, 128, 64
rng = np.random.default_rng(0)
k_np = rng.standard_normal((B, H, D)).astype(np.float16)
loc_np = rng.permutation(SLOTS)[:B].astype(np.int32)
gpu = jax.devices("gpu")[0]
k = jax.device_put(k_np, gpu)
kc = jax.device_put(np.full((SLOTS, H, D), 7, dtype=np.float16), gpu)
loc = jax.device_put(loc_np, gpu)
for a in (k, kc, loc):
    a.block_until_ready()
kvjit.store_kv_cache(k, None, kc, None, loc)  # K only, int32 slots, the legacy default stream
assert ctypes.CDLL("libcuda.so.1").cuCtxSynchronize() == 0
want = np.full((SLOTS, H, D), 7, dtype=np.float16)
want[loc_np] = k_np
got = np.asarray(kc)
assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), "k_cache"
print("jax ok")
'''


def run_child(code, module, extra_env=None):
    env = dict(os.environ)
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.dirname(HERE)] + ([env["PYTHONPATH"]] if env.get(
        "PYTHONPATH") else []))
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True, timeout=300)
    if probe.returncode != 0:
        skip(f"no {module}")
    if not __import__("_support").has_driver():
        skip("no GPU")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    return r


def test_cupy_arrays_store_and_transfer():
    r = run_child(CUPY, "cupy")
    assert r.returncode == 0 and "cupy ok" in r.stdout, r.stdout + r.stderr


def test_jax_arrays_store():
    r = run_child(JAX, "jax", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    assert r.returncode == 0 and "jax ok" in r.stdout, r.stdout + r.stderr
