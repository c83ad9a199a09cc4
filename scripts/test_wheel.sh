#!/usr/bin/env bash
# wheel suite: `pip install .` makes a real package. In a fresh venv (meson-python and its
# pure-Python dependencies from PyPI; meson's build needs the system's ninja and toolkit):
# the wheel builds offline (--no-build-isolation --no-index), is a platform wheel holding
# libkvjit, its native module kvjit._C, py.typed and the CLI, installs, and from another directory with
# no environment set imports kvjit (library inside the package, versions equal) and runs `kvjit`.
# exit: 0 pass, 77 skip (no venv or no meson-python to be had), 1 fail.
# usage: bash scripts/test_wheel.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvjit-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "not ok - $*" >&2; exit 1; }
python=${PYTHON:-python3}

"$python" -m venv "$tmp/venv" >/dev/null 2>&1 || { echo "no venv module for $python: skipped"; exit 77; }
pip=("$tmp/venv/bin/python" -m pip --disable-pip-version-check -q)
if ! "${pip[@]}" install "meson-python>=0.15" >"$tmp/pip.log" 2>&1; then
  tail -3 "$tmp/pip.log"
  echo "meson-python could not be installed from the package index: skipped"
  exit 77
fi
echo "ok - fresh venv with $("$tmp/venv/bin/python" -m pip list 2>/dev/null | grep -i '^meson-python' | tr -s ' ')"

# Offline, given the build requirements: what the GPU machine (no network) does too.
(cd "$root" && "${pip[@]}" wheel --no-build-isolation --no-index --no-deps -w "$tmp/dist" .) >"$tmp/build.log" 2>&1 ||
  { tail -30 "$tmp/build.log" >&2; fail "pip wheel --no-build-isolation --no-index ."; }
wheel=$(ls "$tmp"/dist/kvjit-*.whl)
case "$wheel" in *-any.whl) fail "$(basename "$wheel") is tagged any but holds ELF files" ;; esac
echo "ok - built $(basename "$wheel")"
"$tmp/venv/bin/python" - "$wheel" <<'PY' || fail "wheel contents"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = ["kvjit/__init__.py", "kvjit/_version.py", "kvjit/libkvjit.so", "kvjit/kvjit", "kvjit/py.typed",
        "kvjit/_C.pyi"]
missing = [n for n in need if n not in names]
if not any(n.startswith("kvjit/_C.") and n.endswith(".so") for n in names):
    missing.append("kvjit/_C*.so")
if any("libkvjit_torch" in n or "_kvjit_ext" in n for n in names):
    missing.append("(no old glue: libkvjit_torch.so / _kvjit_ext are gone)")
entry = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
if not entry or "kvjit._torch:autoload" not in zipfile.ZipFile(sys.argv[1]).read(entry[0]).decode():
    missing.append("the torch.backends entry point")
if missing:
    sys.exit(f"missing from the wheel: {missing}")
if any(".so." in n for n in names):
    sys.exit("soname links copied into the wheel: " + str([n for n in names if ".so." in n]))
PY
echo "ok - the wheel holds the package, libkvjit, kvjit._C, its types, the torch entry point and the CLI"
"${pip[@]}" install --no-index --no-deps "$wheel" || fail "pip install of the wheel"

# Another directory, no environment: nothing points at the library.
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
env -i PATH=/usr/bin:/bin HOME="$tmp" "$tmp/venv/bin/python" - "$tmp/venv" <<'PY' || fail "import kvjit from the installed wheel"
import os, subprocess, sys
import kvjit
site = os.path.dirname(kvjit.__file__)
assert site.startswith(sys.argv[1]), f"kvjit imported from {site}, not the venv"
assert os.path.dirname(kvjit.library_path()) == site, kvjit.library_path()
assert kvjit.version() == kvjit.__version__, (kvjit.version(), kvjit.__version__)
assert kvjit.device_count() >= 0
from kvjit import _ops
assert os.path.dirname(_ops.native().__file__) == site, _ops.native().__file__  # the native module loads
print(f"ok - import kvjit {kvjit.__version__} from elsewhere: library {kvjit.library_path()}")
PY
env -i PATH=/usr/bin:/bin HOME="$tmp" "$tmp/venv/bin/kvjit" --version >"$tmp/cli.out" 2>&1 ||
  { cat "$tmp/cli.out" >&2; fail "the kvjit entry point"; }
echo "ok - the kvjit command: $(head -1 "$tmp/cli.out")"
