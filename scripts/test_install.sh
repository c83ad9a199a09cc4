#!/usr/bin/env bash
# install suite: what `meson install` ships is usable as installed. Installs BUILD_DIR into a
# temp dir, then: the CLI runs with no LD_LIBRARY_PATH (its RPATH finds libkvjit) and kvjit.pc
# names the version; then the README's lines for a non-default prefix run as written (a fresh
# configure, build and install of the library and CLI into $HOME/.local, the README's C example
# built with pkg-config and run with no LD_LIBRARY_PATH). Needs NVRTC, no GPU.
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

# The README's non-default prefix, as a user follows it: its sh block after the "install-example"
# marker, run in a fresh HOME, in a copy of the source tree (the build and install lines) and in
# a dir holding the README's C example as prewarm.c (the rest). No LD_LIBRARY_PATH, no other help.
python3 - "$root/README.md" "$tmp" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def block(marker, lang):
    at = text.find(marker)
    m = re.search(r"```" + lang + r"\n(.*?)```", text[at:], re.S) if at >= 0 else None
    if not m:
        sys.exit(f"README.md: no ```{lang} block after {marker}")
    return m.group(1)
open(sys.argv[2] + "/prewarm.c", "w").write(block("<!-- c-example", "c"))
lines = block("<!-- install-example", "sh").splitlines()
cut = next(i for i, l in enumerate(lines) if l.startswith("# where prewarm.c is"))
open(sys.argv[2] + "/in-tree.sh", "w").write("\n".join(lines[:cut]) + "\n")
open(sys.argv[2] + "/in-project.sh", "w").write("\n".join(lines[cut:]) + "\n")
PY
mkdir "$tmp/home" "$tmp/src" "$tmp/project"
mv "$tmp/prewarm.c" "$tmp/project/"
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tmp/src" 2>/dev/null) ||
    fail "copying the source tree"
else
  (cd "$root" && tar --exclude='./build*' -cf - .) | tar -xf - -C "$tmp/src"
fi
clean_env=(env -i PATH=/usr/bin:/bin HOME="$tmp/home" KVJIT_CACHE_DIR="$tmp/cache" KVJIT_LOG=0)
(cd "$tmp/src" && "${clean_env[@]}" bash -euo pipefail "$tmp/in-tree.sh") >"$tmp/in-tree.log" 2>&1 ||
  { tail -20 "$tmp/in-tree.log" >&2; fail "the README's install lines"; }
echo "ok - README install lines: built and installed into \$HOME/.local"
(cd "$tmp/project" && "${clean_env[@]}" bash -euo pipefail "$tmp/in-project.sh") >"$tmp/example.out" 2>&1 ||
  { cat "$tmp/example.out" >&2; fail "the README's C example lines"; }
grep -q "kernels" "$tmp/example.out" || fail "the example printed: $(cat "$tmp/example.out")"
echo "ok - README C example built with pkg-config and run with no LD_LIBRARY_PATH: $(tail -1 "$tmp/example.out")"
