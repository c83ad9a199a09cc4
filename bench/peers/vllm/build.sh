#!/usr/bin/env bash
# Build vLLM's cache ops (its release's csrc/cache_kernels.cu, fetched into DIR by fetch.sh) with
# our binding (binding.cpp) into DIR/vllm_peer.so, a torch op library (torch.ops.vllm_peer.*) that
# bench/bench_layouts.py loads. Flags as vLLM's build gives this file: C++17, -DUSE_CUDA, -DENABLE_FP8,
# --expt-relaxed-constexpr, -O3, one real arch (default sm_90, the H200), cudart static, -lcuda.
#
# usage: bash bench/peers/vllm/build.sh DIR [ARCH]
#   TORCH_DIR: torch's package folder (default: the one `python3 -c "import torch"` finds);
#   it needs only include/ and lib/, so a build machine without a GPU can build from an unpacked
#   wheel. NVCC: the compiler (default nvcc on PATH, else $CUDA_HOME/bin/nvcc, /usr/local/cuda).
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 DIR [ARCH]" >&2
  exit 2
fi
dir=$(cd "$1" && pwd)
arch=${2:-90}
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$dir/csrc/cache_kernels.cu" ]; then
  echo "build: $dir/csrc/cache_kernels.cu is missing: run bench/peers/vllm/fetch.sh $1 first" >&2
  exit 1
fi
torch_dir=${TORCH_DIR:-$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')}
nvcc=${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}
cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
cxx=${CXX:-g++}
obj=$(mktemp -d "${TMPDIR:-/tmp}/vllm-peer.XXXXXX")
trap 'rm -rf "$obj"' EXIT
includes=(-DUSE_CUDA -I"$torch_dir/include" -I"$dir/csrc" -I"$cuda_home/include")

start=$SECONDS
"$nvcc" -c -std=c++17 -O3 -Xcompiler -fPIC -gencode "arch=compute_$arch,code=sm_$arch" -DENABLE_FP8 \
  --expt-relaxed-constexpr "${includes[@]}" -o "$obj/cache_kernels.o" "$dir/csrc/cache_kernels.cu" &
kernels=$!
"$cxx" -c -std=c++17 -O2 -fPIC "${includes[@]}" -o "$obj/binding.o" "$here/binding.cpp"
wait "$kernels"
"$nvcc" -shared -cudart static -o "$dir/vllm_peer.so.tmp" "$obj/cache_kernels.o" "$obj/binding.o" \
  -L"$torch_dir/lib" -ltorch_cpu -ltorch_cuda -lc10 -Xlinker -rpath -Xlinker "$torch_dir/lib" \
  -L"$cuda_home/lib64/stubs" -lcuda  # swap_blocks_batch calls cuGetProcAddress, as vLLM links it
mv "$dir/vllm_peer.so.tmp" "$dir/vllm_peer.so"
printf 'sm_%s nvcc %s torch %s in %d s\n' "$arch" "$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')" \
  "$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$torch_dir/version.py")" $((SECONDS - start)) > "$dir/BUILD"
echo "build: $dir/vllm_peer.so ($(cat "$dir/BUILD"))"
