#!/usr/bin/env bash
# The main job with sensible defaults: build kvjit, prewarm the cubin cache with the
# store_kv_cache variants of a default model (Llama-3.1-8B: bf16 and fp8, tp 1/2/4/8, both index
# types, PDL auto; the fp8 cache both as plain fp8 rows and quantized from bf16 on store) for the
# local GPU's arch, or sm_90 where there is no GPU; check that every variant it built is cached;
# on a GPU, also store random K/V rows into a poisoned cache and verify every byte (the gpu
# suite's check harness, store_kv_cache's cases).
# usage: scripts/main.sh [extra `kvjit prewarm` flags, e.g. --arch sm_90,sm_100 --model llama-3.1-70b]
# KVJIT_BUILD_DIR: the build dir to set up and use (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KVJIT_BUILD_DIR:-build}
echo "main: installing what is missing and building $build (scripts/setup.sh)"
# Only what the build and the GPU checks need: the test suites' tools (nginx, procps) are not.
SETUP_TEST_TOOLS=0 scripts/setup.sh "$build"
kvjit=$build/src/kvjit
"$kvjit" info
# A GPU here decides whether the bytes are verified; --arch only says what to build.
gpu=0
if "$kvjit" info 2>/dev/null | grep -q '^gpu [0-9]'; then gpu=1; fi
arch_flags=()
if [ "$gpu" = 0 ]; then
  case " $* " in *" --arch"*) ;; *) arch_flags=(--arch sm_90) ;; esac
fi
"$kvjit" prewarm "${arch_flags[@]}" "$@"
# What this run built, looked up the way a server would: exit 1 (and a line each) if any misses.
"$kvjit" cache check "${arch_flags[@]}" "$@"
if [ "$gpu" = 1 ]; then
  echo "main: GPU present: storing and verifying every byte"
  "$build"/tests/check_gpu --op store_kv_cache
else
  echo "main: no GPU here: compiled only (copy the cache dir to a GPU machine and point KVJIT_CACHE_PATH at it)"
fi
