// kvjit transfer_kv's bulk path (the template's Bulk > 0; sm_90 and newer): rows move through
// shared memory by the Tensor Memory Accelerator's bulk copies instead of the lanes' loads and
// stores. Joined after kernel_src/transfer_kv.cuh (its kvjit_t_bulk() is declared there).
//
// Why: reading pinned host memory over PCIe, the lanes' loads reach ~49 GB/s on a 4 MiB copy
// whatever their number and bytes in flight, below the copy engine's ~52 (issue 29). A bulk copy
// is one instruction for a whole contiguous run, issued by one thread.
//
// Each warp is a pipeline of its own (no barrier across warps): its items are item gw, gw + W,
// gw + 2W, ... (gw: the warp's index in the grid, W: the warps of the grid), their slot ids loaded
// by its 32 lanes, a round of 32 items ahead of their copies. Lane 0 then issues, per piece (one
// slice of one K or V row), the bulk loads of the piece's source runs into its stage of the ring,
// counted in bytes on the stage's mbarrier; kAhead pieces later it waits for the stage, issues
// the bulk stores of the destination runs, and commits them as one bulk group; before a stage is
// loaded again, that stage's stores have read it (cp.async.bulk.wait_group.read). The slot ids'
// policy is the lanes' path's: a negative id skips the item, one past its cache (or a bad layer)
// skips it and is counted once; a bad source slot is never read.

// The ring: kStages stages per warp, each the widest slice rounded up to 128 bytes.
template <class C> struct kvjit_tb {
  static constexpr int kWarps = C::kBlock / 32;
  static constexpr int kStages = C::kBulk;
  static constexpr kvjit_i64 kStageBytes = ((C::kKSlice > C::kVSlice ? C::kKSlice : C::kVSlice) + 127) / 128 * 128;
  // Pieces loading while older ones are stored: a stage is loaded again 2 pieces after its
  // stores were issued, so the wait for them to have read it rarely waits.
  static constexpr int kAhead = kStages - 2;
  static_assert(kStages >= 3 && kWarps >= 1, "bulk ring");
};

__device__ __forceinline__ unsigned kvjit_tb_smem(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void kvjit_tb_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// Bytes of the contiguous run of a row's view from byte @p b to at most @p end.
template <class View, bool kLaid, kvjit_i64 kAtom>
__device__ __forceinline__ kvjit_i64 kvjit_tb_run(kvjit_i64 b, kvjit_i64 end) {
  if constexpr (!kLaid || View::kDims == 0) {
    return end - b;
  } else {
    const kvjit_i64 r = kAtom - b % kAtom;
    return r < end - b ? r : end - b;
  }
}

// Where a loaded piece goes: read back by lane 0 when it stores the piece.
struct kvjit_tb_piece {
  kvjit_i64 dst_slot;
  int kv, slice;
};

template <class C>
__device__ void kvjit_t_bulk(const kvjit_transfer_kv_params &p, const kvjit_t_layer_view &l) {
  typedef kvjit_tb<C> B;
  typedef typename C::SrcView SV;
  typedef typename C::DstView DV;
  constexpr bool kLaid = C::kLaidOut, kHasV = C::kVRowBytes > 0;
  constexpr kvjit_i64 kSrcAtom = C::kSrcAtom, kDstAtom = C::kDstAtom;
  extern __shared__ __align__(128) unsigned char kvjit_tb_ring[];
  __shared__ __align__(8) kvjit_u64 bars[B::kWarps][B::kStages];
  __shared__ kvjit_tb_piece pieces[B::kWarps][B::kStages];
  __shared__ kvjit_i64 slots[B::kWarps][2][32];

  const int warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
  const kvjit_u64 gw = (kvjit_u64)blockIdx.x * B::kWarps + warp, tw = (kvjit_u64)gridDim.x * B::kWarps;
  const kvjit_u64 batch = (kvjit_u64)p.batch;
  unsigned char *ring = kvjit_tb_ring + (kvjit_i64)warp * B::kStages * B::kStageBytes;
  if (lane == 0) {
    for (int s = 0; s < B::kStages; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(kvjit_tb_smem(&bars[warp][s])) : "memory");
    // The barriers' initialisation seen by the bulk copies' (async) proxy.
    asm volatile("fence.mbarrier_init.release.cluster;\n fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncwarp();

  kvjit_u64 issued = 0;  // pieces loaded by this warp (lane 0's count)
  // Store piece @p m: wait for its stage, then its destination runs, one bulk group.
  auto retire = [&](kvjit_u64 m) {
    const int s = (int)(m % B::kStages);
    kvjit_tb_wait(kvjit_tb_smem(&bars[warp][s]), (unsigned)((m / B::kStages) & 1));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the landed bytes, for the stores' reads
    const kvjit_tb_piece pc = pieces[warp][s];
    const bool v = kHasV && pc.kv;
    const kvjit_i64 bytes = v ? C::kVSlice : C::kKSlice;
    const kvjit_t_row<DV, kLaid> dst = kvjit_t_row_of<DV, kLaid>(v ? l.dst_v : l.dst_k, pc.dst_slot,
                                                                 v ? p.dst_v_stride : p.dst_k_stride,
                                                                 v ? p.dst_v_view : p.dst_k_view);
    const unsigned src = kvjit_tb_smem(ring + s * B::kStageBytes);
    const kvjit_i64 first = (kvjit_i64)pc.slice * bytes;
    for (kvjit_i64 b = 0; b < bytes;) {
      const kvjit_i64 run = kvjit_tb_run<DV, kLaid, kDstAtom>(first + b, first + bytes);
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst.at(first + b)),
                   "r"(src + (unsigned)b), "r"((unsigned)run)
                   : "memory");
      b += run;
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  };
  // Load one piece into the next stage (lane 0).
  auto load = [&](const unsigned char *src_cache, kvjit_i64 src_stride, const kvjit_view_strides &src_view,
                  kvjit_i64 src_slot, kvjit_i64 dst_slot, int kv, int slice, kvjit_i64 bytes) {
    if (issued >= (kvjit_u64)B::kAhead) retire(issued - B::kAhead);
    // The stage's last stores (piece issued - kStages) have read it: at most kStages - kAhead
    // newer groups may still be reading.
    if (issued >= (kvjit_u64)B::kStages)
      asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(B::kStages - B::kAhead) : "memory");
    const int s = (int)(issued % B::kStages);
    const unsigned bar = kvjit_tb_smem(&bars[warp][s]), dst = kvjit_tb_smem(ring + s * B::kStageBytes);
    pieces[warp][s] = kvjit_tb_piece{dst_slot, kv, slice};
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"((unsigned)bytes)
                 : "memory");
    const kvjit_t_row<SV, kLaid> row = kvjit_t_row_of<SV, kLaid>(src_cache, src_slot, src_stride, src_view);
    const kvjit_i64 first = (kvjit_i64)slice * bytes;
    for (kvjit_i64 b = 0; b < bytes;) {
      const kvjit_i64 run = kvjit_tb_run<SV, kLaid, kSrcAtom>(first + b, first + bytes);
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
              dst + (unsigned)b),
          "l"(row.at(first + b)), "r"((unsigned)run), "r"(bar)
          : "memory");
      b += run;
    }
    ++issued;
  };

  // Round r: the warp's items gw + (32 r + lane) * tw; the next round's ids load while lane 0
  // issues this one's copies.
  auto ids = [&](kvjit_u64 round, kvjit_i64 &src_slot, kvjit_i64 &dst_slot) {
    const kvjit_u64 item = gw + (round * 32 + (kvjit_u64)lane) * tw;
    src_slot = dst_slot = -1;
    if (item < batch) {
      src_slot = kvjit_t_slot<C>(p.src_indices, item, p.src_index_stride);
      dst_slot = kvjit_t_slot<C>(p.dst_indices, item, p.dst_index_stride);
    }
  };
  kvjit_i64 next_src, next_dst;
  ids(0, next_src, next_dst);
  for (kvjit_u64 round = 0; gw + round * 32 * tw < batch; ++round) {
    const kvjit_i64 src_slot = next_src, dst_slot = next_dst;
    bool ok = src_slot >= 0 && dst_slot >= 0;  // negative (or past the batch): skipped
    if (ok && (src_slot >= p.src_num_slots || dst_slot >= p.dst_num_slots || !l.ok)) {
      atomicAdd(&kvjit_transfer_kv_oob, 1ull);
      ok = false;
    }
    const unsigned mask = __ballot_sync(0xffffffffu, ok);
    slots[warp][0][lane] = src_slot;
    slots[warp][1][lane] = dst_slot;
    __syncwarp();
    ids(round + 1, next_src, next_dst);
    if (lane == 0) {
      for (unsigned m = mask; m != 0; m &= m - 1) {
        const int j = __ffs((int)m) - 1;
        const kvjit_i64 s = slots[warp][0][j], d = slots[warp][1][j];
        for (int slice = 0; slice < C::kSplit; ++slice)
          load(l.src_k, p.src_k_stride, p.src_k_view, s, d, 0, slice, C::kKSlice);
        if constexpr (kHasV) {
          for (int slice = 0; slice < C::kSplit; ++slice)
            load(l.src_v, p.src_v_stride, p.src_v_view, s, d, 1, slice, C::kVSlice);
        }
      }
    }
    __syncwarp();
  }
  if (lane == 0) {
    for (kvjit_u64 m = issued > (kvjit_u64)B::kAhead ? issued - B::kAhead : 0; m < issued; ++m) retire(m);
    // Every store done (not only read) before the grid counts as complete for a dependent launch.
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
  __syncwarp();
}
