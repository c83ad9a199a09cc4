#!/usr/bin/env bash
# install suite: what `meson install` ships is usable as installed. Installs BUILD_DIR into a
# temp prefix, then: the CLI runs with no LD_LIBRARY_PATH (its RPATH finds libkvjit), kvjit.pc
# names the version, and the README's C example (the ```c block after the "c-example" marker)
# builds with `pkg-config --cflags --libs kvjit` alone and runs. Needs NVRTC, no GPU.
# usage: bash scripts/test_install.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: test_install.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvjit-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "not ok - $*" >&2; exit 1; }
command -v pkg-config >/dev/null || { echo "pkg-config is missing: skipped"; exit 77; }

meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/dest" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "meson install"; }
prefix=$(meson introspect "$build" --buildoptions | python3 -c \
  'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
inst="$tmp/dest$prefix"
pc=$(find "$inst" -name kvjit.pc | head -1)
[ -n "$pc" ] || fail "no kvjit.pc installed under $inst"
version=$(meson introspect "$build" --projectinfo | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$tmp/dest"
[ "$(pkg-config --modversion kvjit)" = "$version" ] || fail "kvjit.pc version $(pkg-config --modversion kvjit), meson says $version"
echo "ok - kvjit.pc $version"

# The CLI, with nothing in the environment pointing at the library.
env -i PATH=/usr/bin:/bin HOME="$tmp" "$inst/bin/kvjit" --version >"$tmp/cli.out" 2>&1 ||
  { cat "$tmp/cli.out" >&2; fail "installed kvjit --version"; }
grep -q "$version" "$tmp/cli.out" || fail "installed kvjit --version printed: $(cat "$tmp/cli.out")"
echo "ok - installed CLI runs without LD_LIBRARY_PATH"

# The README's C example, built against the installed library with pkg-config alone.
python3 - "$root/README.md" "$tmp/example.c" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
at = text.find("<!-- c-example")
m = re.search(r"```c\n(.*?)```", text[at:], re.S) if at >= 0 else None
if not m:
    sys.exit("README.md: no ```c block after the c-example marker")
open(sys.argv[2], "w").write(m.group(1))
PY
# shellcheck disable=SC2046 # pkg-config's flags are words
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/example" "$tmp/example.c" $(pkg-config --cflags --libs kvjit) ||
  fail "the README's C example does not build with pkg-config --cflags --libs kvjit"
echo "ok - README C example builds with pkg-config alone"
libdir=$(dirname "$(dirname "$pc")") # the pc file sits in libdir/pkgconfig
env -i PATH=/usr/bin:/bin HOME="$tmp" KVJIT_CACHE_DIR="$tmp/cache" KVJIT_LOG=0 LD_LIBRARY_PATH="$libdir" \
  "$tmp/example" >"$tmp/example.out" 2>&1 || { cat "$tmp/example.out" >&2; fail "the README's C example failed"; }
grep -q "kernels" "$tmp/example.out" || fail "the example printed: $(cat "$tmp/example.out")"
echo "ok - README C example runs: $(tail -1 "$tmp/example.out")"
