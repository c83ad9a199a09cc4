"""Hostile DLPack producers (issue 24): a capsule whose ndim, shape, strides or byte offset lie is
refused with a ValueError naming the argument, before any size is used; run in a child process
that must not crash. No GPU needed: every case fails in the native module's reader."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r'''
import kvjit
from _support import FakeCAI, FakeDLPack

B, H, D = 4, 8, 128
rest = [FakeCAI((B, H, D), "<f2", 0x20000000), FakeCAI((100, H, D), "<f2", 0x30000000),
        FakeCAI((100, H, D), "<f2", 0x40000000), FakeCAI((B,), "<i8", 0x50000000)]
BF16 = (4, 16)
cases = [
    ("k", "ndim", FakeDLPack((B, H, D), *BF16, 0x10000000, ndim=2**31 - 1)),
    ("k", "ndim", FakeDLPack((B, H, D), *BF16, 0x10000000, ndim=-1)),
    ("k", "stride", FakeDLPack((B, H, D), *BF16, 0x10000000, strides=(2**62, D, 1))),
    ("k", "stride", FakeDLPack((B, H, D), *BF16, 0x10000000, strides=(-2**63, D, 1))),
    ("k", "byte_offset", FakeDLPack((B, H, D), *BF16, 0x10000000, byte_offset=2**64 - 1)),
    ("k", "negative", FakeDLPack((B, -H, D), *BF16, 0x10000000)),
    ("k", "larger than 2^62", FakeDLPack((2**40, 2**40, D), *BF16, 0x10000000)),
]
for name, words, bad in cases:
    try:
        kvjit.store_kv_cache(bad, *rest)
    except ValueError as e:
        assert str(e).startswith(name + ": ") and words in str(e), str(e)
    else:
        raise AssertionError(f"no error for {words}")
# the same through transfer_kv and as a cache
try:
    kvjit.transfer_kv(FakeDLPack((100, H, D), *BF16, 0x1000, ndim=2**31 - 1), None, rest[1], None, rest[3], rest[3])
except ValueError as e:
    assert str(e).startswith("src_k: "), str(e)
else:
    raise AssertionError("transfer_kv took a lying capsule")
print("hostile dlpack ok")
'''


def test_lying_dlpack_capsules_raise_value_error_in_a_child():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.dirname(HERE)] + ([env["PYTHONPATH"]] if env.get(
        "PYTHONPATH") else []))
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "hostile dlpack ok" in r.stdout, f"exit {r.returncode}: {r.stdout}{r.stderr}"
