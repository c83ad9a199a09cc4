#!/usr/bin/env bash
# The main job with sensible defaults: build kvjit, prewarm the cubin cache with the
# store_kv_cache variants of a default model (Llama-3.1-8B: bf16 and fp8, tp 1/2/4/8, both index
# types, PDL auto; the fp8 cache both as plain fp8 rows and quantized from bf16 on store) for the
# local GPU's arch, or sm_90 where there is no GPU; on a GPU, also store random K/V rows into a
# poisoned cache and verify every byte (the gpu suite's check harness, store_kv_cache's cases).
# usage: scripts/main.sh [extra `kvjit prewarm` flags, e.g. --arch sm_90,sm_100 --model llama-3.1-70b]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build >/dev/null
kvjit=build/src/kvjit
"$kvjit" info
arch_flags=()
if ! "$kvjit" info 2>/dev/null | grep -q '^gpu [0-9]'; then
  case " $* " in *" --arch"*) ;; *) arch_flags=(--arch sm_90) ;; esac
fi
"$kvjit" prewarm "${arch_flags[@]}" "$@"
"$kvjit" cache ls | tail -n 3
if [ ${#arch_flags[@]} -eq 0 ]; then
  echo "main: GPU present: storing and verifying every byte"
  build/tests/check_gpu --op store_kv_cache
else
  echo "main: no GPU here: compiled only (copy the cache dir to a GPU machine and point KVJIT_CACHE_PATH at it)"
fi
