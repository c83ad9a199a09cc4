#!/usr/bin/env bash
# The Python binding's whole suite on a GPU machine (CPU tests, GPU tests against PyTorch, fp8,
# the torch op eagerly / under torch.compile / in CUDA graphs, CuPy and JAX arrays), then the per-call overhead, the
# binding benchmark (bench/bench_binding.py) and the wheel (pip install .) tested as installed. Run from the repo root with
# the library already built in BUILD_DIR (default build-gpu) and a python3 that has torch;
# pytest is used when installed, else python/tests/run.py's built-in runner.
# usage: bash python/tests/run_gpu.sh [BUILD_DIR]
# exit: the test run's (0 pass, 77 everything skipped, 1 a failure).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
lib="$PWD/$build/src/libkvjit.so"
if [ ! -e "$lib" ]; then
  echo "run_gpu: $lib is missing: build it first (meson setup $build && ninja -C $build)" >&2
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvjit-py-gpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export KVJIT_LIB="$lib" KVJIT_LOG=0 KVJIT_CACHE_DIR="$tmp/cache"
unset KVJIT_CACHE_PATH KVJIT_MANIFEST

echo "== environment"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
python3 - <<'PY'
import sys
print("python", sys.version.split()[0])
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
          "devices", torch.cuda.device_count())
except ImportError as e:
    print("torch: not importable (GPU tests will skip):", e)
try:
    import pytest
    print("pytest", pytest.__version__)
except ImportError:
    print("pytest: not installed (built-in runner)")
PY

echo "== tests"
start=$SECONDS
python3 python/tests/run.py -v python/tests
status=$?
echo "tests: exit $status in $((SECONDS - start)) s"

echo "== per-call overhead"
python3 python/tests/bench_overhead.py || echo "bench_overhead: failed"

echo "== binding benchmark (every way into kvjit, three processes)"
python3 bench/bench_binding.py --build "$build" --md "$tmp/binding.md" || echo "bench_binding: failed"
if [ -n "${OUT:-}" ] && [ -f "$tmp/binding.md" ]; then cp "$tmp/binding.md" "$OUT/binding.md"; fi

echo "== pip install (the wheel), then the suite against the installed package"
# The GPU machine is offline: KVJIT_WHEEL names a wheel built elsewhere (what users install);
# without it, pip install . builds one without isolation, with meson-python already installed
# (carried as wheels: meson-python, pyproject-metadata; meson and ninja are there).
wheel_source=.
[ -n "${KVJIT_WHEEL:-}" ] && wheel_source=$KVJIT_WHEEL
if [ -n "${KVJIT_WHEEL:-}" ] || python3 -c "import mesonpy" 2>/dev/null; then
  echo "installing $wheel_source"
  if python3 -m pip install -q --no-deps --no-build-isolation --no-index --target "$tmp/site" "$wheel_source"; then
    (cd "$tmp" && env -u KVJIT_LIB PYTHONPATH="$tmp/site" python3 -c \
      "import kvjit, torch; from kvjit import _ops; print('installed:', kvjit.__version__, kvjit.library_path(), 'native:', _ops.native().__file__, 'op after kvjit then torch:', torch.ops.kvjit.store_kv_cache.default)")
    env -u KVJIT_LIB KVJIT_TEST_INSTALLED=1 PYTHONPATH="$tmp/site" python3 python/tests/run.py \
      python/tests/test_api.py python/tests/test_gpu_torch_op.py python/tests/test_torch_op.py | tail -1
  else
    echo "pip install $wheel_source: failed"
  fi
else
  echo "no meson-python here (carry its wheel): install check skipped"
fi
if [ -f "$tmp/binding.md" ]; then
  echo "== binding table (bench/bench_binding.py, above), with both readings of the targets"
  cat "$tmp/binding.md"
fi
echo "run_gpu: tests exit $status (0 pass, 77 all skipped, 1 failure)"
exit $status
