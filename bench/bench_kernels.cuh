/*
 * Helper kernels of the benchmarks: random fill, poisoning and checking of target rows, and the
 * empty kernels that give the launch floor. Compiled at run time through kvjit's own loader.
 */

__device__ __forceinline__ unsigned bench_hash(unsigned long long x) {
  /* splitmix64 finaliser: every word of the buffer is an independent-looking random value. */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (unsigned)x;
}

/* words[i] = random(seed, i), never a run of zeros. */
extern "C" __global__ void bench_fill_random(unsigned *words, unsigned long long count, unsigned long long seed) {
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step)
    words[i] = bench_hash(seed * 0x100000001b3ull + i) | 1u;
}

/* Overwrite the cache rows that a store of `batch` items through `indices` targets. */
template <typename T>
__global__ void bench_poison_rows(unsigned *cache, long long row_words, const T *indices, unsigned batch,
                                  unsigned pattern) {
  const unsigned long long total = (unsigned long long)batch * row_words;
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const unsigned long long item = i / row_words, word = i % row_words;
    cache[(unsigned long long)indices[item] * row_words + word] = pattern;
  }
}

/* Count the words of target rows that differ from their source rows. */
template <typename T>
__global__ void bench_check_rows(const unsigned *src, const unsigned *cache, long long row_words, const T *indices,
                                 unsigned batch, unsigned long long *bad) {
  const unsigned long long total = (unsigned long long)batch * row_words;
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long mine = 0;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const unsigned long long item = i / row_words, word = i % row_words;
    mine += src[i] != cache[(unsigned long long)indices[item] * row_words + word];
  }
  if (mine) atomicAdd(bad, mine);
}

extern "C" __global__ void bench_empty(void) {}

/* The floor of a PDL launch: let the next grid be scheduled, wait on the previous one (the order
 * kvjit's store uses: triggering first is the faster chain). */
extern "C" __global__ void bench_empty_pdl(void) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
