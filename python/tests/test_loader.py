"""The generic loader from Python: the issue's four kernels, build-only Binaries and their logs,
targets, canonical names, header keying; on a GPU (torch) the kernels launched and checked."""

import ctypes
import os
import subprocess
import sys

from _support import need_gpu, raises, tempdir

import kvjit

FOUR = r"""
#include <cuda_bf16.h>
template <int N, typename T> __global__ void scale(T *x, T s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < N) x[i] *= s; }
extern "C" __global__ void to_bf16(__nv_bfloat16 *y, const float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = __float2bfloat16(x[i]); }
extern "C" __global__ void __launch_bounds__(256) block_sum(float *out, const float *in) {
  extern __shared__ float tile[];
  tile[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x]; __syncthreads();
  for (unsigned s = blockDim.x / 2; s; s /= 2) {
    if (threadIdx.x < s) tile[threadIdx.x] += tile[threadIdx.x + s]; __syncthreads(); }
  if (threadIdx.x == 0) out[blockIdx.x] = tile[0]; }
"""
NAMES = ["scale<256, float>", "to_bf16", "block_sum"]


def test_four_kernels_build_without_a_gpu():
    with tempdir() as d, kvjit.Context(d, log=False) as ctx:
        prog = kvjit.Program(FOUR, kernels=NAMES, name="four.cu", context=ctx)
        b = prog.build(arch="sm_90")
        assert b.origin == "compile" and b.kind == "cubin" and b.target == 90 and b.target_name == "sm_90"
        assert b.code[:4] == b"\x7fELF" and len(b.key) == 32
        assert b.kernels == ["scale<256,float>", "to_bf16", "block_sum"]
        assert b.lowered[0] == "_Z5scaleILi256EfEvPT0_S0_" and b.lowered[1:] == ["to_bf16", "block_sum"]
        again = kvjit.Program(FOUR, kernels=["scale< 256 ,float >", "to_bf16", "block_sum"], name="four.cu",
                              context=ctx).build(90)
        assert again.origin == "memory" and again.key == b.key  # whitespace does not matter
        ptx = prog.build(arch="compute_90")
        assert ptx.kind == "ptx" and b".target sm_90" in ptx.code and ptx.key != b.key
        assert ptx.target == 90 | kvjit.TARGET_PTX


def test_misses_explain_themselves():
    """A build that misses names the nearest entry's difference (issue 25): explain_misses() lists
    it, stats() counts it by cause."""
    with tempdir() as d:
        with kvjit.Context(d, log=False) as warm:
            kvjit.Program(FOUR, kernels=NAMES, name="four.cu", options=["-DTILE=1"], context=warm).build(90)
        with kvjit.Context(d, log=False) as ctx:
            kvjit.Program(FOUR, kernels=NAMES, name="four.cu", options=["-DTILE=2"], context=ctx).build(90)
            (miss,) = kvjit.explain_misses(ctx)
            assert miss["cause"] == "options" and len(miss["key"]) == 32
            assert "program four.cu for sm_90" in miss["message"] and "other compile options" in miss["message"]
            stats = kvjit.stats(ctx)
            assert stats["misses_options"] == 1 and stats["misses_cold"] == 0 and stats["compiles"] == 1


def test_a_syntax_error_keeps_its_log_on_every_path():
    with tempdir() as d, kvjit.Context(d, log=False) as ctx:
        src = 'extern "C" __global__ void broken(int *x) {\n  x[0] = nope;\n  x[1] = nope_too;\n}\n'
        prog = kvjit.Program(src, kernels=["broken"], name="broken.cu", context=ctx)
        for call in (lambda: prog.compile(arch=90), lambda: prog.build(arch=90), lambda: prog.compile(arch=90)):
            with raises(kvjit.CompileError) as e:
                call()
            assert "broken.cu(2): error" in e.value.log and "broken.cu(3): error" in e.value.log
            assert "nope" in e.value.message
        assert ctx.stats()["compile_failures"] == 1  # remembered: 3 calls, 1 NVRTC run
        bad_name = kvjit.Program(FOUR, kernels=["to_bf16", "scale<256, flot>"], context=ctx)
        with raises(kvjit.CompileError, match=r'kernels\[1\] "scale<256, flot>"') as e:
            bad_name.build(90)
        assert "__nv_name_map" not in e.value.log


def test_targets():
    assert kvjit.parse_target("sm_90a") == 90 | kvjit.TARGET_ARCH_SPECIFIC
    assert kvjit.parse_target("sm_100f") == 100 | kvjit.TARGET_FAMILY
    assert kvjit.parse_target("compute_90") == 90 | kvjit.TARGET_PTX
    assert kvjit.target_name(kvjit.parse_target("compute_100f")) == "compute_100f"
    with raises(kvjit.InvalidArgumentError, match="kvjit_parse_target"):
        kvjit.parse_arch("sm_90a")  # ops build plain sm_XY: no silent sm_90
    with raises(kvjit.InvalidArgumentError, match="target"):
        kvjit.parse_target("sm_90x")
    with tempdir() as d, kvjit.Context(d, log=False) as ctx:
        prog = kvjit.Program(FOUR, kernels=NAMES, context=ctx)
        keys = {prog.build(t).key for t in ("sm_90", "sm_90a", "compute_90", "sm_100f")}
        assert len(keys) == 4
        with raises(kvjit.Error, match="builds sm_XY for XY in") as e:
            prog.build("sm_90f")
        assert e.value.name == "ERR_UNSUPPORTED"


def test_include_dir_headers_are_keyed_by_content():
    with tempdir() as d, kvjit.Context(os.path.join(d, "cache"), log=False) as ctx:
        inc = os.path.join(d, "inc")
        os.makedirs(inc)
        with open(os.path.join(inc, "val.h"), "w") as f:
            f.write("#define VAL 1\n")
        src = '#include "val.h"\nextern "C" __global__ void k(int *x) { *x = VAL; }\n'
        first = kvjit.Program(src, kernels=["k"], options=["-I" + inc], context=ctx).build(90)
        with open(os.path.join(inc, "val.h"), "w") as f:
            f.write("#define VAL 22\n")
        second = kvjit.Program(src, kernels=["k"], options=["-I" + inc], context=ctx).build(90)
        assert second.origin == "compile" and second.key != first.key


def test_a_process_without_nvrtc():
    code = ("import kvjit\n"
            "try:\n    kvjit.nvrtc_version()\nexcept kvjit.Error as e:\n    print(e.name, e.message)\n")
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(kvjit.__file__)))
    env = dict(os.environ, KVJIT_NVRTC="/nonexistent", KVJIT_LIB=kvjit.library_path(), PYTHONPATH=package_root)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ERR_NO_NVRTC") and "/nonexistent" in r.stdout


def test_gpu_four_kernels_launch():
    torch = need_gpu()
    prog = kvjit.Program(FOUR, kernels=NAMES)
    x = torch.arange(300, dtype=torch.float32, device="cuda")
    want = x.clone()
    want[:256] *= 3
    prog.kernel("scale<256,float>").launch(2, 256, [x, ctypes.c_float(3.0)])
    bf = torch.empty(300, dtype=torch.bfloat16, device="cuda")
    prog.kernel("to_bf16").launch(2, 256, [bf, x, ctypes.c_int(300)])
    torch.cuda.synchronize()
    assert torch.equal(x, want) and torch.equal(bf, x.to(torch.bfloat16))
    with raises(kvjit.InvalidArgumentError, match="takes 3 parameters"):
        prog.kernel("to_bf16").launch(2, 256, [bf, x])  # one argument short: refused, not launched
    block_sum = prog.kernel("block_sum")
    assert block_sum.num_params == 2 and block_sum.get_attribute("max_threads_per_block") == 256
    inp = torch.rand(8 * 256, device="cuda")
    out = torch.full((8,), float("nan"), device="cuda")
    block_sum.launch(8, 256, [out, inp], shared_bytes=256 * 4)
    torch.cuda.synchronize()
    assert torch.allclose(out, inp.view(8, 256).sum(1), rtol=1e-5)


def _example():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "loader.py")
    spec = importlib.util.spec_from_file_location("kvjit_example_loader", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_python_example_builds():
    example = _example()
    with tempdir() as d, kvjit.Context(d, log=False) as ctx:
        example.build_for_the_fleet(context=ctx)
        assert ctx.stats()["compiles"] == 4


def test_gpu_readme_python_example_launches():
    torch = need_gpu()
    x = torch.arange(512, dtype=torch.float32, device="cuda")
    _example().scale_on_the_gpu(x, 0.5)
    torch.cuda.synchronize()
    assert torch.equal(x, torch.arange(512, dtype=torch.float32, device="cuda") * 0.5)
