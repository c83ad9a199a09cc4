#!/usr/bin/env bash
# vLLM's own cache kernels as a benchmark peer (issue 29): fetch vLLM 0.33.0's source release from
# PyPI (or take a local copy of it), check its sha256, and extract only the files that
# csrc/cache_kernels.cu needs into DEST (a git-ignored folder, e.g. .peers/vllm). Nothing of vLLM is
# committed to kvjit: we build it as a peer (vLLM is Apache-2.0; its LICENSE is extracted beside it).
#
# usage: bash bench/peers/vllm/fetch.sh DEST [SDIST]
#   SDIST: a local vllm-0.33.0.tar.gz (default: downloaded from PyPI with curl)
# Then: bash bench/peers/vllm/build.sh DEST   (DEST/vllm_peer.so, loaded by bench/bench_layouts.py)
set -euo pipefail

version=0.33.0
sha256=f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112
url=https://files.pythonhosted.org/packages/f7/25/aa5684e9c59d6fc75f78926b7f15e8d9adc7de2d9e6e7575b80776ad8169/vllm-$version.tar.gz

# What cache_kernels.cu includes, transitively (its quoted #includes, CUDA and ROCm branches both:
# the preprocessor picks). Checked after extraction: a missing file stops the fetch.
files=(
  csrc/cache_kernels.cu
  csrc/concat_mla_q.cuh
  csrc/core/cuda_compat.h
  csrc/core/utils.hpp
  csrc/core/vec_dtypes/dtype_bfloat16.cuh
  csrc/core/vec_dtypes/dtype_float16.cuh
  csrc/core/vec_dtypes/dtype_float32.cuh
  csrc/core/vec_dtypes/dtype_fp8.cuh
  csrc/core/vec_dtypes/dtype_generic.cuh
  csrc/core/vec_dtypes/vec_dtypes.h
  csrc/cuda_vec_utils.cuh
  csrc/dispatch_utils.h
  csrc/nvfp4_ds_mla_cache.h
  csrc/quantization/vectorization.cuh
  csrc/quantization/vectorization_utils.cuh
  csrc/quantization/w8a8/fp8/amd/quant_utils.cuh
  csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh
  csrc/torch_utils.h
  LICENSE
)

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 DEST [SDIST]" >&2
  exit 2
fi
dest=$1
sdist=${2:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vllm-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ -z "$sdist" ]; then
  echo "fetch: downloading vllm $version's source release"
  curl -sSfL --retry 3 -o "$tmp/vllm.tar.gz" "$url"
  sdist=$tmp/vllm.tar.gz
elif [ ! -f "$sdist" ]; then
  echo "fetch: $sdist: no such file" >&2
  exit 1
fi
got=$(sha256sum "$sdist" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
  echo "fetch: $sdist: sha256 $got, expected $sha256 (vllm-$version.tar.gz)" >&2
  exit 1
fi

mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
members=()
for f in "${files[@]}"; do members+=("vllm-$version/$f"); done
tar -xzf "$sdist" -C "$tmp" "${members[@]}"
rm -rf "$dest/csrc"
for f in "${files[@]}"; do
  mkdir -p "$(dirname "$dest/$f")"
  cp "$tmp/vllm-$version/$f" "$dest/$f"
done
# The closure above is what this release's cache_kernels.cu includes; say so if a quoted include
# now points at a file we did not take (a newer release), rather than failing later in nvcc.
missing=0
while IFS= read -r line; do
  src=${line%%:*}
  inc=${line#*:}
  dir=$(dirname "$src")
  if [ ! -f "$dest/$dir/$inc" ] && [ ! -f "$dest/csrc/$inc" ]; then
    echo "fetch: $src includes \"$inc\", which was not extracted" >&2
    missing=1
  fi
done < <(cd "$dest" && grep -o '#[[:space:]]*include[[:space:]]*"[^"]*"' "${files[@]:0:18}" |
           sed -E 's/^([^:]*):#[[:space:]]*include[[:space:]]*"([^"]*)"/\1:\2/')
[ "$missing" = 0 ] || exit 1
printf 'vllm %s\nsdist sha256 %s\nfiles %d\n' "$version" "$sha256" "${#files[@]}" > "$dest/SOURCE"
echo "fetch: vllm $version: ${#files[@]} files in $dest"
