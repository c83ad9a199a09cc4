#!/usr/bin/env bash
# bench/peers/vllm/fetch.sh refuses what is not vLLM 0.33.0's source release (issue 29's peer):
# a wrong argument count (exit 2), a missing file and a file of another sha256 (exit 1, naming
# it), and creates nothing then. No network: the download path is not taken.
# usage: test_peer_fetch.sh FETCH_SH
set -u
fetch=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvjit-peer-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() { # expect RC PATTERN -- command...
  local rc=$1 pattern=$2
  shift 3
  local out
  out=$("$@" 2>&1)
  local got=$?
  if [ "$got" != "$rc" ] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> exit $got (want $rc), output: $out"
    fail=1
  else
    echo "ok: $* -> exit $got"
  fi
}
expect 2 "usage:" -- bash "$fetch"
expect 2 "usage:" -- bash "$fetch" a b c
expect 1 "no such file" -- bash "$fetch" "$tmp/dest" "$tmp/missing.tar.gz"
printf 'not vllm\n' > "$tmp/fake.tar.gz"
expect 1 "sha256 .*, expected f4c33c25" -- bash "$fetch" "$tmp/dest" "$tmp/fake.tar.gz"
if [ -e "$tmp/dest" ]; then
  echo "FAIL: a refused fetch left files in $tmp/dest"
  fail=1
fi
[ "$fail" = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
