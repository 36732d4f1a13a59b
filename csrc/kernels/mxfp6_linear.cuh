// MXFP6 E2M3 weights: pack / unpack / round (one thread per 32-element group) and the W6A16
// decode linear.
//
// Linear, fast path (NVIDIA sm_80+): a CTA owns one or two row tiles (16 weight rows each) and 8
// (M <= 8) or 16 rows of x. Its warps split the CTA's K range by tiles (virtual warp v of kVW
// takes k-tiles v, v + kVW, ...; a warp runs one or two virtual warps' chains), stream their
// packed tiles through a private cp.async ring (two-row-tile warps of one chain a row tile at a
// time, one in flight while the other decodes), and meet once at the end to add their partials
// in a fixed order. On sm_90 the kS CTAs of a thread-block cluster split K into contiguous
// ranges, so that small N still fills every SM, and push their partial sums into the leader
// CTA's shared memory, which adds them in a fixed order. The weights are the A operand of mma.m16n8k16
// (rows = output features), x is B (columns = tokens), so decode (M <= 8) uses one n8 block,
// M <= 16 two, and larger M four per CTA (32 rows of x: each decoded weight feeds four mmas).
// The k order inside an mma is permuted so each lane decodes the six contiguous
// bytes (8 codes) it owns within a group with byte permutes: lane t of a quad holds codes
// 8t..8t+7 of a group and pairs them (c0,c4) (c1,c5) (c2,c6) (c3,c7); x is loaded as 8
// contiguous values and permuted the same way. Codes decode exactly: the 5 magnitude bits are
// placed where a bf16 (f16) with a small exponent holds them and multiplied by 2^126 (2^14) with
// the code's sign; when every scale of a tile allows it, 2^(sb-127) is folded into that multiply
// (bf16), otherwise each group's two mma steps start from zero and are scaled in fp32. The launch
// shape depends on the weight shape only, so every row of x runs the same instruction sequence
// and summation order whatever M is: results are batch invariant.
//
// This header holds the whole linear and attention-front kernel family. It is compiled in several
// translation units, mxfp6_{linear,front}_{bf16,fp16}_m{8,16}.cu, one per activation dtype, x row
// block and params type (MXF_FP6_DEFINE_ENTRY), so that a parallel build compiles them at once;
// mxfp6.cu dispatches to them (mxfp6_entries.h). Everything here has internal linkage: each
// unit instantiates only the kernels its entry reaches.
#pragma once

#include <atomic>
#include <mutex>
#include <type_traits>

#include "../core/mxfp6_layout.h"
#include "../core/mx.h"
#include "../core/rmsnorm.h"
#include "arch.h"
#include "attention_front.h"
#include "front_steps.h"
#include "mxfp6.h"
#include "mxfp6_entries.h"
#include "vec.h"

namespace mxf::kernels {
namespace {

constexpr int kTileScaleBytes = kFp6TileRows * kFp6GroupsPerTileRow;   // 64
constexpr int kTileStageBytes = kFp6TileBytes + kTileScaleBytes;       // 1600
// Ring slots per warp: three tiles in flight while one decodes for one row tile per warp; with two
// row tiles per warp, two slots in flight (four warps per CTA) or one (eight warps, or four warps
// of two chains each) keep shared memory for five or three CTAs per SM. The two-chain kernel
// (M <= 16) was measured on the H200 with both: one slot in flight and the L1 cache the smaller
// rings leave to x was 3% faster at 12288 x 6144 and 5% at 9216 x 2048. Four warps with a K split
// over a cluster (the 2560 x 6144 shape, three k-tiles per warp) also keep one tile in flight:
// with all of a warp's tiles requested at once, every tile lands near the end of the burst and
// the decode cannot start before; one at a time, they land in order and the decode of one hides
// the load of the next (eighth session, benchmarks/results/experiments/h200_fp6_s8.md: at M = 8,
// 7.90 us with two tiles in flight, 7.23 us with one).
template <int kRT, int kW, int kV, int kS>
constexpr int kStagesFor = kRT == 1 ? 4 : kW == 4 && kV == 1 ? (kS > 1 ? 2 : 3) : 2;

// A warp's ring as linear_mma runs it: items of kItemRT row tiles (see there), kRingStages
// slots of kRingSlotBytes. Row-tile items keep one in flight while another decodes (more was
// slower, H200: docs/PERF_NOTES.md); a tile's first row-tile item also brings the second row
// tile's scale bytes (after its own), so that one fold decision covers the whole tile.
template <int kRT, int kW, int kV, int kS, int kItemRT>
constexpr int kRingStages = kRT == kItemRT ? kStagesFor<kRT, kW, kV, kS> : 2;
template <int kRT, int kItemRT>
constexpr int kRingSlotBytes = kItemRT * kTileStageBytes + (kRT / kItemRT == 2 ? kTileScaleBytes : 0);
// The fp32 partials of one chain per warp (kRT row tiles, kNB n8 blocks, 4 mma slots, 32 lanes).
template <int kNB, int kRT, int kW>
constexpr int kChainPartialBytes = kW * kRT * kNB * 4 * 32 * 4;

// The rings of items of kItemRT row tiles, or the last chain's partials that reuse their memory.
template <int kNB, int kRT, int kW, int kV, int kS, int kItemRT>
MXF_HD constexpr int linear_ring_bytes() {
  constexpr int ring = kW * kRingStages<kRT, kW, kV, kS, kItemRT> * kRingSlotBytes<kRT, kItemRT>;
  constexpr int red = kChainPartialBytes<kNB, kRT, kW>;
  return ring > red ? ring : red;
}

// Rings, and the partials of the kW * kV virtual warps: the last chain's in the rings' memory, the
// first chain's after them when there are two; then, in a cluster of kS CTAs, the CTA partials
// the other kS - 1 push to the leader (from linear_pushed_offset on). The rings are sized for
// whole-tile items; row-tile items (two 1664-byte slots per warp) use about half of that, and
// sizing shared memory to them measured the same (twelfth session, experiments/h200_fp6_s12.md).
template <int kNB, int kRT, int kW, int kV, int kS>
MXF_HD constexpr int linear_pushed_offset() {
  return linear_ring_bytes<kNB, kRT, kW, kV, kS, kRT>() + (kV > 1 ? kChainPartialBytes<kNB, kRT, kW> : 0);
}
template <int kNB, int kRT, int kW, int kV, int kS>
MXF_HD constexpr int linear_smem_bytes() {
  return linear_pushed_offset<kNB, kRT, kW, kV, kS>() + (kS - 1) * kChainPartialBytes<kNB, kRT, 1>;  // CTA sums
}

// ---- linear ---------------------------------------------------------------------------------

MXF_DEV float bias_at(const Fp6LinearParams& p, int64_t n) {
  return p.bias != nullptr ? load_as_f32(p.bias, n, p.bias_dtype) : 0.0f;
}

// Portable twin: one output per thread and step, exact-order fp32 sums per group.
MXF_DEV void linear_portable(const Fp6LinearParams& p, int64_t row0, int64_t m0, int rows_x) {
  const int64_t groups = p.k / kMxBlock;
  for (int e = threadIdx.x; e < kFp6TileRows * rows_x; e += blockDim.x) {
    const int64_t n = row0 + e % kFp6TileRows, m = m0 + e / kFp6TileRows;
    if (m >= p.m) continue;
    const char* xr = static_cast<const char*>(p.x) + m * p.x_stride * 2;
    float acc = 0.0f;
    uint8_t codes[kMxBlock];
    for (int64_t g = 0; g < groups; ++g) {
      fp6_unpack_group(p.packed + fp6_group_offset(n, g, p.k), codes);
      float part = 0.0f;
      for (int i = 0; i < kMxBlock; ++i) {
        part = add_rn(part, mul_rn(load_as_f32(xr, g * kMxBlock + i, p.act), e2m3_decode(codes[i])));
      }
      acc = add_rn(acc, mul_rn(part, e8m0_to_f32(p.scales[n * groups + g])));
    }
    store_from_f32(p.out, m * p.n + n, p.act, add_rn(acc, bias_at(p, n)));
  }
}

MXF_HD const Fp6LinearParams& linear_of(const Fp6LinearParams& p) { return p; }
MXF_HD const Fp6LinearParams& linear_of(const FrontParams& p) { return p.linear; }

// Lane partials of the canonical sums of up to kRowsX rows, shared by the prologue and epilogue.
template <int kRowsX>
MXF_DEV float (*front_red())[kVirtualLanes] {
  __shared__ float red[kRowsX][kVirtualLanes];
  return red;
}

// One tree for `rows` rows of lane partials (csrc/core/rmsnorm.h's order); totals in red[r][0].
MXF_DEV void front_tree(float (*red)[kVirtualLanes], int rows) {
  for (int d = kVirtualLanes / 2; d >= 1; d >>= 1) {
    for (int it = threadIdx.x; it < rows * d; it += blockDim.x) {
      const int r = it / d, l = it % d;
      red[r][l] = add_rn(red[r][l], red[r][l + d]);
    }
    __syncthreads();
  }
}

// Rows of one chunk column loaded per thread before any is used: a thread's loads of one round are
// in flight together, so a CTA pays one latency per round instead of one per chunk.
constexpr int kFrontBatch = 4;

// s = round(x + residual) of one chunk (SPEC §3), from the widened chunks of x and residual.
MXF_DEV Chunk8 front_s(const Chunk8& a, const Chunk8& b, Dtype act) {
  Chunk8 sv;
#pragma unroll
  for (int i = 0; i < kChunk; ++i) sv.v[i] = round_to_dtype(add_rn(a.v[i], b.v[i]), act);
  return sv;
}
// The same from the raw 16-bit chunks.
MXF_DEV Chunk8 front_s(uint4 x, uint4 r, Dtype act) { return front_s(widen8(x, act), widen8(r, act), act); }

// Attention front, before the projection: the rows the linear reads (its x, the call's y buffer),
// y = input norm of s = round(x + residual). Each row is normed once, by one CTA, and every CTA of
// the token block waits until all of the block's rows are in y. (Until the fortieth session every
// CTA normed all of its block's rows itself, in dependent rounds of loads of the same lines by all
// 288 CTAs at once: 6.6 us of the 21 us call at hidden 2048, M = 1, and 61 us of 120 at hidden
// 6144, M = 8, on the H200; docs/PERF_NOTES.md.)
//
// The block's word in f.counters (front_block_word) counts in its low bits the CTAs that have
// started the prologue, then those that have finished the projection (front_epilogue: the last one
// zeroes the word); bits kFrontReadyShift and up count the rows in y. The CTA that takes ticket t
// norms rows m0 + t, m0 + t + ctas, ... (ctas: the block's CTAs; a small weight may have fewer
// CTAs than the block has rows). A CTA waits only for rows whose CTAs hold a ticket, i.e. are
// running, so the wait cannot deadlock however many CTAs are resident at once. Nothing touches
// the word before the dependency wait (the previous call's kernel has finished then).
constexpr int kFrontReadyShift = 24;
constexpr int kFrontCountMask = (1 << kFrontReadyShift) - 1;
// Chunks a producing thread has in flight per round of loads. (More made the kernels spill: the
// prologue shares the linear's register budget.)
constexpr int kFrontRowBatch = 2;

// CTAs of one token block in one split of K: one per rows_w rows of the projection.
MXF_DEV int front_block_ctas(const FrontParams& f, int rows_w) { return static_cast<int>(f.linear.n / rows_w); }

MXF_DEV int* front_block_word(const FrontParams& f, int64_t m0, int rows_x) {
  const int64_t segs = f.linear.n / f.d;
  return f.counters + m0 / rows_x * (segs + 1) + segs;
}

// Row m of y, in the canonical order of csrc/core/rmsnorm.h: virtual lane l adds chunks l, l + 256,
// ... of s in order (thread t runs lanes t and, with 128 threads, t + 128), one tree, then
// y = norm_value(s, rstd, w + offset) rounded. This CTA is the only reader of row m of x and
// residual, so it also writes the new residual row (s) in place, in pass 1; pass 2 reads s back
// from there (each chunk by the thread that stored it).
template <int kRowsX>
MXF_DEV void front_norm_row(const FrontParams& f, int64_t m) {
  float (*const red)[kVirtualLanes] = front_red<kRowsX>();
  const Dtype act = f.linear.act;
  const int64_t k = f.linear.k;
  const int chunks = static_cast<int>(k / kChunk), nt = static_cast<int>(blockDim.x);
  const int t = static_cast<int>(threadIdx.x);
  const bool two = nt * 2 == kVirtualLanes;  // 128 threads: two lanes per thread
  const uint16_t* const xr = static_cast<const uint16_t*>(f.x) + m * f.x_stride;
  uint16_t* const rr = static_cast<uint16_t*>(f.residual) + m * f.r_stride;
  uint16_t* const yr = static_cast<uint16_t*>(const_cast<void*>(f.linear.x)) + m * f.linear.x_stride;
  const bool vx = aligned16(xr), vr = aligned16(rr), vy = aligned16(yr), vw = aligned16(f.norm_weight);
  const int items = t < chunks ? (chunks - t + nt - 1) / nt : 0;  // chunks t, t + nt, ...
  float p0 = 0.0f, p1 = 0.0f;  // lanes t and t + nt
  for (int j0 = 0; j0 < items; j0 += kFrontRowBatch) {
    uint4 a[kFrontRowBatch], b[kFrontRowBatch];
#pragma unroll
    for (int u = 0; u < kFrontRowBatch; ++u) {
      if (j0 + u < items) {
        const int c = t + (j0 + u) * nt;
        a[u] = load_raw(xr, c, k, act, vx).lo;
        b[u] = load_raw(rr, c, k, act, vr).lo;
      }
    }
#pragma unroll
    for (int u = 0; u < kFrontRowBatch; ++u) {
      const int j = j0 + u;
      if (j < items) {
        const Chunk8 sv = front_s(a[u], b[u], act);
        const bool second = two && (j & 1);
        float acc = second ? p1 : p0;
#pragma unroll
        for (int i = 0; i < kChunk; ++i) acc = sumsq_step(acc, sv.v[i]);
        if (second) {
          p1 = acc;
        } else {
          p0 = acc;
        }
        const uint4 sq = narrow8(sv, act);
        store_packed(rr, t + j * nt, k, vr, sq);
      }
    }
  }
  red[0][t] = p0;
  if (two) red[0][t + nt] = p1;
  __syncthreads();
  front_tree(red, 1);
  const float rstd = rstd_from_sumsq(red[0][0], k, f.eps);
  for (int j0 = 0; j0 < items; j0 += kFrontRowBatch) {
    RawChunk w[kFrontRowBatch];
    uint4 sq[kFrontRowBatch];
#pragma unroll
    for (int u = 0; u < kFrontRowBatch; ++u) {
      if (j0 + u < items) {
        const int c = t + (j0 + u) * nt;
        w[u] = load_raw(f.norm_weight, c, k, f.wdtype, vw);
        sq[u] = load_raw(rr, c, k, act, vr).lo;  // this thread's own stores
      }
    }
#pragma unroll
    for (int u = 0; u < kFrontRowBatch; ++u) {
      if (j0 + u < items) {
        const Chunk8 wv = unpack(w[u], f.wdtype), sv = widen8(sq[u], act);
        Chunk8 yv;
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          yv.v[i] = round_to_dtype(norm_value(sv.v[i], rstd, add_rn(wv.v[i], f.weight_offset)), act);
        }
        store_packed(yr, t + (j0 + u) * nt, k, vy, narrow8(yv, act));
      }
    }
  }
  __threadfence();  // this thread's y and residual stores, before the row is counted
  __syncthreads();  // red is reused
}

// The token block's word held a value no zeroed workspace can give (a ticket past the block's
// CTAs and split-0 arrivals, more rows counted than the block has), or a CTA waited past
// f.wait_limit for the block's rows. Either means the word was not zero when the call started (a
// workspace not from mxfuse.attention_front_workspace, or shared with a call that runs at the
// same time), so the kernel stops with an error instead of hanging or reading rows nobody wrote.
// A trap and no message: a device printf here (a call) made ptxas spill more in the linear's
// main loop (nvcc 13.0, sm_90a), and this path must cost nothing while it is not taken.
[[noreturn]] MXF_DEV void front_bad_workspace() { trap_kernel(); }

// rows_w: projection rows per CTA; kS: CTAs per cluster of the projection (each takes a ticket).
template <int kRowsX, int kS>
MXF_DEV void front_prologue(const FrontParams& f, int64_t m0, int rows_w) {
  __shared__ int ticket;
  const int block_ctas = front_block_ctas(f, rows_w), ctas = kS * block_ctas;
  static_assert(kVirtualLanes == 256, "one or two lanes per thread of 128 or 256");
  const int rows = static_cast<int>(f.linear.m - m0 < kRowsX ? f.linear.m - m0 : kRowsX);
  int* const word = front_block_word(f, m0, kRowsX);
  if (threadIdx.x == 0) {
    // A zeroed word gives tickets below ctas + block_ctas (a CTA that starts late may count
    // split-0 arrivals) and counts at most `rows` rows.
    const int old = atomicAdd(word, 1);
    ticket = old & kFrontCountMask;
    if (ticket >= ctas + block_ctas || (static_cast<unsigned>(old) >> kFrontReadyShift) > static_cast<unsigned>(rows)) {
      front_bad_workspace();
    }
  }
  __syncthreads();
  if (ticket < rows) {
    int done = 0;
    for (int r = ticket; r < rows; r += ctas, ++done) front_norm_row<kRowsX>(f, m0 + r);
    if (threadIdx.x == 0) atomicAdd(word, done << kFrontReadyShift);
  }
  if (threadIdx.x == 0) {
    const uint64_t t0 = f.wait_limit != 0 ? wall_ticks() : 0;
    for (;;) {
      const int w = *static_cast<volatile int*>(word);
      const unsigned ready = static_cast<unsigned>(w) >> kFrontReadyShift;
      if (ready == static_cast<unsigned>(rows)) break;
      if (ready > static_cast<unsigned>(rows) || (f.wait_limit != 0 && wall_ticks() - t0 > f.wait_limit)) {
        front_bad_workspace();
      }
      sleep_briefly();
    }
    __threadfence();  // the rows' stores, before this CTA's loads of them (after the barrier)
  }
  __syncthreads();
}

// Rows m .. m + nr - 1 of head segment sg of the projection output (written by other CTAs of this
// kernel: coherent loads) into hv [nr][d] as floats; 16-byte loads, kFrontBatch per thread at a
// time, when `vec` (d % 8 == 0 and aligned rows). The op's checks (head_dim % 16 == 0, a qkv
// buffer of its own) make `vec` true for every call today; the element loop keeps the function
// correct without them.
MXF_DEV void front_stage_head(const Fp6LinearParams& lp, int64_t sg, int64_t d, int64_t m, int nr, float* hv,
                              bool vec) {
  const Dtype act = lp.act;
  if (!vec) {
    for (int64_t it = threadIdx.x; it < nr * d; it += blockDim.x) {
      hv[it] = load_coherent(lp.out, (m + it / d) * lp.n + sg * d + it % d, act);
    }
    return;
  }
  const int dch = static_cast<int>(d / kChunk), total = nr * dch;
  const int threads = static_cast<int>(blockDim.x);
  for (int it0 = threadIdx.x; it0 < total; it0 += kFrontBatch * threads) {
    uint4 raw[kFrontBatch] = {};
#pragma unroll
    for (int u = 0; u < kFrontBatch; ++u) {
      const int it = it0 + u * threads;
      if (it < total) {
        raw[u] = load_coherent16(static_cast<const uint16_t*>(lp.out) + (m + it / dch) * lp.n + sg * d +
                                 it % dch * kChunk);
      }
    }
#pragma unroll
    for (int u = 0; u < kFrontBatch; ++u) {
      const int it = it0 + u * threads;
      if (it < total) {
        const Chunk8 v = widen8(raw[u], act);
#pragma unroll
        for (int i = 0; i < kChunk; ++i) hv[it * kChunk + i] = v.v[i];
      }
    }
  }
}

// Attention front, after the projection: the CTA that completes a head segment (d qkv rows) for
// its block of token rows runs that segment's steps: q and k heads are normed and rotated (q to
// its output, k to the cache), gate heads are copied, v heads go to the cache. Completion is
// counted in `f.counters` (zero on entry; each counter is reset by the CTA that completes it; the
// block's word, front_prologue's, by the last CTA of the block to finish its projection). kS: CTAs
// per cluster of the projection, each of which took a ticket.
// `smem_bytes` of dynamic shared memory (the rings, no longer in use) hold the head rows, staged
// with 16-byte coherent loads.
template <int kRowsX, int kS>
MXF_DEV void front_epilogue(const FrontParams& f, uint8_t* smem, int smem_bytes, int64_t row0, int rows_w,
                            int64_t m0) {
  __shared__ int duty[4];
  __shared__ int n_duty;
  const Fp6LinearParams& lp = f.linear;
  const Dtype act = lp.act;
  const int64_t d = f.d, segs = lp.n / d;
  const int rows = static_cast<int>(lp.m - m0 < kRowsX ? lp.m - m0 : kRowsX);
  int* const cnt = f.counters + m0 / kRowsX * (segs + 1);
  __threadfence();  // this CTA's qkv rows, before its arrival is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    int nd = 0;
    for (int64_t sg = row0 / d; sg <= (row0 + rows_w - 1) / d; ++sg) {
      const int arrivals = static_cast<int>(((sg + 1) * d - 1) / rows_w - sg * d / rows_w + 1);
      const int old = atomicAdd(cnt + sg, 1);
      if (old < 0 || old >= arrivals) front_bad_workspace();  // as in front_prologue
      if (old == arrivals - 1) {
        atomicExch(cnt + sg, 0);
        duty[nd++] = static_cast<int>(sg);
      }
    }
    // Tickets of every split, then arrivals of split 0: the last arrival zeroes the block's word.
    // cnt + segs: the block's word (front_block_word).
    const int count = atomicAdd(cnt + segs, 1) & kFrontCountMask, last = (kS + 1) * front_block_ctas(f, rows_w) - 1;
    if (count > last) front_bad_workspace();
    if (count == last) atomicExch(cnt + segs, 0);
    n_duty = nd;
  }
  __syncthreads();
  if (n_duty == 0) return;
  __threadfence();  // the other CTAs' qkv rows, after their arrivals
  float (*const red)[kVirtualLanes] = front_red<kRowsX>();
  float* const hv = reinterpret_cast<float*>(smem);  // [rb][d]
  const int rb = static_cast<int>(smem_bytes / 4 / d < rows ? smem_bytes / 4 / d : rows);
  const int64_t q_segs = f.q_heads * (f.output_gate ? 2 : 1), row_elems = f.kv_heads * d;
  const bool vq = d % kChunk == 0 && lp.n % kChunk == 0 && aligned16(lp.out);
  const int threads = static_cast<int>(blockDim.x);
  for (int t = 0; t < n_duty; ++t) {
    const int64_t sg = duty[t];
    const bool is_q = sg < q_segs && !(f.output_gate && sg % 2 == 1);
    const bool is_gate = sg < q_segs && !is_q;
    const bool is_k = sg >= q_segs && sg < q_segs + f.kv_heads;
    if (!is_q && !is_k) {  // copies: the gate heads, or v to the cache
      for (int r0 = 0; r0 < rows; r0 += rb) {
        const int nr = rows - r0 < rb ? rows - r0 : rb;
        front_stage_head(lp, sg, d, m0 + r0, nr, hv, vq);
        __syncthreads();
        for (int64_t it = threadIdx.x; it < nr * d; it += threads) {
          const int64_t m = m0 + r0 + it / d, j = it % d;
          if (is_gate) {
            store_from_f32(f.gate, (m * f.q_heads + sg / 2) * d + j, act, hv[it]);
            continue;
          }
          const int64_t slot = f.cache.slot_mapping[m];
          if (kv_slot_valid(slot, f.cache.slots)) {
            cache_store(f.cache.value_cache, slot * row_elems + (sg - q_segs - f.kv_heads) * d + j, hv[it],
                        f.cache.v_scale, f.cache.fp8, act);
          }
        }
        __syncthreads();  // hv is reused
      }
      continue;
    }
    // q or k: Gemma RMSNorm of the head (rb rows at a time), rounded, then RoPE.
    const void* w = is_q ? f.q_norm_weight : f.k_norm_weight;
    const Dtype wd = is_q ? f.q_wdtype : f.k_wdtype;
    const int64_t chunks = (d + kChunk - 1) / kChunk;
    for (int r0 = 0; r0 < rows; r0 += rb) {
      const int nr = rows - r0 < rb ? rows - r0 : rb;
      front_stage_head(lp, sg, d, m0 + r0, nr, hv, vq);
      __syncthreads();
      for (int it = threadIdx.x; it < nr * kVirtualLanes; it += threads) {
        const int r = it / kVirtualLanes, l = it % kVirtualLanes;
        float acc = 0.0f;
        for (int64_t c = l; c < chunks; c += kVirtualLanes) {
          const int64_t e_end = (c + 1) * kChunk < d ? (c + 1) * kChunk : d;
          for (int64_t e = c * kChunk; e < e_end; ++e) acc = sumsq_step(acc, hv[r * d + e]);
        }
        red[r][l] = acc;
      }
      __syncthreads();
      front_tree(red, nr);
      for (int64_t it = threadIdx.x; it < nr * d; it += threads) {
        const int r = static_cast<int>(it / d);
        const int64_t j = it % d;
        const float rstd = rstd_from_sumsq(red[r][0], d, f.eps);
        hv[it] = round_to_dtype(norm_value(hv[it], rstd, add_rn(load_as_f32(w, j, wd), f.weight_offset)), act);
      }
      __syncthreads();
      for (int64_t it = threadIdx.x; it < nr * d; it += threads) {
        const int r = static_cast<int>(it / d);
        const int64_t j = it % d, m = m0 + r0 + r, pos = f.rope.positions[m];
        const float o = rope_value(hv + r * d, j, pos, f.rope, act);
        if (is_q) {
          store_from_f32(f.q, (m * f.q_heads + (f.output_gate ? sg / 2 : sg)) * d + j, act, o);
        } else {
          const int64_t slot = f.cache.slot_mapping[m];
          if (kv_slot_valid(slot, f.cache.slots)) {
            cache_store(f.cache.key_cache, slot * row_elems + (sg - q_segs) * d + j, o, f.cache.k_scale,
                        f.cache.fp8, act);
          }
        }
      }
      __syncthreads();  // red and hv are reused
    }
  }
}

#if defined(MXF_HAS_MMA_PIPE)
MXF_DEV uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {  // (a & b) | c, all registers
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// v << s for s >= 0, v >> -s otherwise. The right shift is a multiply-high so that it issues on
// the FMA pipe like the compiler's left shifts (IMAD.SHL), keeping the integer ALU pipe, which
// bounds the decode, for the permutes and masks.
template <int kS>
MXF_DEV uint32_t shift_by(uint32_t v) {
  if constexpr (kS >= 0) {
    return v << kS;
  } else {
    return __umulhi(v, 1u << (32 + kS));
  }
}

// a * b + c and hi32(a * b) + c, written as multiplies so that they issue on the FMA pipe (IMAD)
// and not as shift-and-add on the integer ALU pipe, which bounds the decode.
MXF_DEV uint32_t mad_lo(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("mad.lo.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
MXF_DEV uint32_t mad_hi(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("mad.hi.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Eight codes (six bytes b0..b5 of the window w0:w1, starting at byte `par` = 0 or 2) -> four
// packed pairs of values (c0,c4) (c1,c5) (c2,c6) (c3,c7). The 5 magnitude bits go where a bf16
// (f16) with a tiny exponent holds them, the sign (code bit 5) to bit 15 of each half; one
// multiply by 2^e per pair then gives code value * 2^(e - 126) exactly (2^(e - 14) for f16).
// `pow` holds the exponent field of 2^e in both halves (sign bit clear).
//
// bf16: the magnitude sits 6 bits below the sign in the code, and bf16 wants it at bits 4..8 with
// the sign at 15: 6 bits apart too. So a pair's code, isolated by one mask, is moved by a single
// multiply that adds two shifted copies of it (code at bits 4..9 and at 10..15 of each half; the
// copies cannot overlap or carry), and one more mask keeps bits 4..8 of the first and 15 of the
// second. Codes c0, c3, c4, c7 each lie within one byte, so one permute serves two pairs:
// 5 instructions per pair (4 for two of them) instead of 6 (kSpread), but a longer dependency
// chain per pair. Measured on the H200 (docs/PERF_NOTES.md), the spread form is faster where
// registers are tight (two n8 blocks) and slower with one n8 block; both give the same bits.
template <bool kBF16, bool kSpread>
MXF_DEV void decode8(uint32_t w0, uint32_t w1, uint32_t par, uint32_t pow, uint32_t (&out)[4]) {
  if constexpr (kBF16 && kSpread) {
    constexpr uint32_t kKeep = 0x81f081f0u;  // sign and magnitude of both halves
    // [b0, b2, b3, b5]: c0 at bits 0..5, c3 at 10..15, c4 at 16..21, c7 at 26..31.
    const uint32_t v03 = prmt(w0, w1, 0x5320u + par);
    const uint32_t v1 = prmt(w0, w1, 0x4310u + par);  // [b0, b1, b3, b4]: c1 at 6..11, c5 at 22..27
    const uint32_t v2 = prmt(w0, w1, 0x5421u + par);  // [b1, b2, b4, b5]: c2 at 4..9, c6 at 20..25
    const uint32_t c0 = v03 & 0x003f003fu, c3 = v03 & 0xfc00fc00u;
    const uint32_t c1 = v1 & 0x0fc00fc0u, c2 = v2 & 0x03f003f0u;
    // The right shifts are multiply-highs by 2^(32 - s) + 1: the + 1 adds c * 2^-32 < 1 to a
    // product whose low word is zero (c has no bits below s), so the result is exact, and it keeps
    // ptxas from turning them into LEA.HI on the ALU pipe.
    const uint32_t m0 = mad_lo(c0, (1u << 4) + (1u << 10), 0u);  // c << 4 + c << 10
    const uint32_t m1 = mad_lo(mad_hi(c1, (1u << 30) + 1u, 0u), 1u + (1u << 6), 0u);  // c >> 2, then as c2
    const uint32_t m2 = mad_lo(c2, 1u + (1u << 6), 0u);  // c + c << 6
    const uint32_t m3 = mad_hi(c3, (1u << 26) + 1u, c3);  // c >> 6 + c
    out[0] = mul2<true>(m0 & kKeep, pow);
    out[1] = mul2<true>(m1 & kKeep, pow);
    out[2] = mul2<true>(m2 & kKeep, pow);
    out[3] = mul2<true>(m3 & kKeep, pow);
  } else {
    // Magnitude and sign are shifted and masked separately (f16 wants the magnitude at bits
    // 7..11, only 3 bits below the sign, so the spread copies would overlap); after the permute,
    // the code LSBs of pairs 0..2 sit at bits 0/16, 6/22, 4/20. Codes c3 and c7 fill the top six
    // bits of bytes b2 and b5, so their sign is the byte's MSB: the permute's sign-replicate mode
    // (selector nibble 8 + byte) fills the byte above each with it, and one shift then puts the
    // magnitude in place with the sign still at bit 15 (bits 10..17 are all sign): 4 instructions
    // for that pair instead of 6.
    constexpr uint32_t kMag = kBF16 ? 0x01f001f0u : 0x0f800f80u;
    constexpr int kPos = kBF16 ? 4 : 7;
    const uint32_t v0 = prmt(w0, w1, 0x3300u + par), v1 = prmt(w0, w1, 0x4310u + par);
    const uint32_t v2 = prmt(w0, w1, 0x5421u + par);
    const uint32_t v3 = prmt(w0, w1, 0xd5a2u + par);  // [b2, sign(b2), b5, sign(b5)]
    out[0] = mul2<kBF16>(shift_by<kPos - 0>(v0) & kMag, lop3_and_or(v0 << 10, 0x80008000u, pow));
    out[1] = mul2<kBF16>(shift_by<kPos - 6>(v1) & kMag, lop3_and_or(v1 << 4, 0x80008000u, pow));
    out[2] = mul2<kBF16>(shift_by<kPos - 4>(v2) & kMag, lop3_and_or(v2 << 6, 0x80008000u, pow));
    out[3] = mul2<kBF16>(shift_by<kPos - 2>(v3) & (kMag | 0x80008000u), pow);
  }
}

// All four E8M0 bytes of `s` in [1, 128]: then 2^(sb-1) is a normal bf16 and the scale can be
// folded into the decode multiply (the product is the W6 value, exact in bf16, SPEC §5).
MXF_DEV bool scales_foldable(uint32_t s) { return ((s - 0x01010101u) & 0x80808080u) == 0; }

// x is read with plain loads: the compiler treats a read-only (__ldg) load as invariant and
// hoisted the first ones above grid_dep_wait(), i.e. before the previous kernel had written x
// (seen in the sm_90a SASS and as wrong bits in the PDL chain test).
MXF_DEV uint4 load_x(const uint4* p) { return *p; }

// One k-tile (4 groups) of kRT row tiles from the ring slot `st`. kFold: scales folded into the
// decode multiply and one mma chain per row tile; otherwise every group's product starts from
// zero and is scaled in fp32. xq holds this tile's x on entry (per n8 block and group) and the
// next tile's on exit when `more`: each group's registers are refilled as soon as they are
// permuted, so every x load has a whole tile of decode to land in. The x permutes are shared by
// the kRT row tiles.
//
// Streaming one row tile per ring item, the kernel calls it once per row tile (row tiles [kR0,
// kR0 + kRN) of acc; `st` points at that row tile's slot). kX says what xq holds and gets:
//   kXWhole: this tile's x on entry, the next tile's on exit (the whole-tile form above);
//   kXKeep:  this tile's x on entry, the same x permuted on exit (for the next row tile);
//   kXNext:  this tile's x permuted on entry, the next tile's on exit (each group refilled once
//            its mmas are issued).
enum XMode { kXWhole, kXKeep, kXNext };
template <bool kBF16, bool kFold, int kNB, int kRT, int kR0 = 0, int kRN = kRT, XMode kX = kXWhole,
          bool kSpread = kNB == 2>
MXF_DEV void mma_tile(const uint8_t* st, uint4 (&xq)[kNB][4], const uint4* const (&xnext)[kNB],
                      bool more, uint32_t par, uint32_t (&s_lo)[kRT],
                      uint32_t (&s_hi)[kRT], float (&acc)[kRT][kNB][4]) {
  constexpr uint32_t kPowUnscaled = kBF16 ? 0x7e807e80u : 0x74007400u;  // 2^126 / 2^14
  // Folded: each byte + 126 (no carries: every byte is <= 128 here) is the bf16 exponent field
  // of 2^(sb-1).
  if constexpr (kFold) {
#pragma unroll
    for (int r = kR0; r < kR0 + kRN; ++r) {
      s_lo[r] += 0x7e7e7e7eu;
      s_hi[r] += 0x7e7e7e7eu;
    }
  }
#pragma unroll
  for (int j = 0; j < kFp6GroupsPerTileRow; ++j) {
    uint32_t b[kNB][4];  // x pairs (x0,x4) (x1,x5) (x2,x6) (x3,x7), matching the code pairs
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      const uint4 xc = xq[nb][j];
      if constexpr (kX == kXNext) {
        b[nb][0] = xc.x;
        b[nb][1] = xc.y;
        b[nb][2] = xc.z;
        b[nb][3] = xc.w;
      } else {
        b[nb][0] = prmt(xc.x, xc.z, 0x5410u);
        b[nb][1] = prmt(xc.x, xc.z, 0x7632u);
        b[nb][2] = prmt(xc.y, xc.w, 0x5410u);
        b[nb][3] = prmt(xc.y, xc.w, 0x7632u);
      }
      if constexpr (kX == kXWhole) {
        if (more) xq[nb][j] = load_x(xnext[nb] + j * 4);
      } else if constexpr (kX == kXKeep) {
        xq[nb][j] = make_uint4(b[nb][0], b[nb][1], b[nb][2], b[nb][3]);
      }
    }
#pragma unroll
    for (int r = kR0; r < kR0 + kRN; ++r) {
      // `st` already points at this lane's row g and window; row g + 8 is 8 rows further.
      const uint8_t* lo = st + (r - kR0) * kTileStageBytes + kFp6GroupBytes * j;
      const uint8_t* hi = lo + kFp6GroupBytes * kFp6GroupsPerTileRow * 8;
      // Folded: byte j of s (sb + 126) into both halves' exponent field: 2^(sb-1) as bf16x2.
      const uint32_t sel = 0x4040u + 0x0101u * j;  // bytes j, 0, j, 0 (byte 4 = zero)
      const uint32_t pow_lo = kFold ? prmt(s_lo[r], 0u, sel) << 7 : kPowUnscaled;
      const uint32_t pow_hi = kFold ? prmt(s_hi[r], 0u, sel) << 7 : kPowUnscaled;
      uint32_t a_lo[4], a_hi[4];
      decode8<kBF16, kSpread>(*reinterpret_cast<const uint32_t*>(lo), *reinterpret_cast<const uint32_t*>(lo + 4),
                              par, pow_lo, a_lo);
      decode8<kBF16, kSpread>(*reinterpret_cast<const uint32_t*>(hi), *reinterpret_cast<const uint32_t*>(hi + 4),
                              par, pow_hi, a_hi);
      const uint32_t a0[4] = {a_lo[0], a_hi[0], a_lo[1], a_hi[1]};
      const uint32_t a1[4] = {a_lo[2], a_hi[2], a_lo[3], a_hi[3]};
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        if constexpr (kFold) {
          mma_16816<kBF16>(acc[r][nb], a0, b[nb][0], b[nb][1], acc[r][nb]);
          mma_16816<kBF16>(acc[r][nb], a1, b[nb][2], b[nb][3], acc[r][nb]);
        } else {
          const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          float part[4];
          mma_16816<kBF16>(part, a0, b[nb][0], b[nb][1], zero);
          mma_16816<kBF16>(part, a1, b[nb][2], b[nb][3], part);
          const float f_lo = e8m0_to_f32(static_cast<uint8_t>(s_lo[r] >> (8 * j)));
          const float f_hi = e8m0_to_f32(static_cast<uint8_t>(s_hi[r] >> (8 * j)));
          acc[r][nb][0] = fmaf(part[0], f_lo, acc[r][nb][0]);
          acc[r][nb][1] = fmaf(part[1], f_lo, acc[r][nb][1]);
          acc[r][nb][2] = fmaf(part[2], f_hi, acc[r][nb][2]);
          acc[r][nb][3] = fmaf(part[3], f_hi, acc[r][nb][3]);
        }
      }
    }
    if constexpr (kX == kXNext) {
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        if (more) xq[nb][j] = load_x(xnext[nb] + j * 4);
      }
    }
  }
}

// kRT row tiles (16 weight rows each) and 8 * kNB rows of x. The summation order is fixed by kS
// and kVW = kW * kV "virtual warps": the kS CTAs of a cluster split K into contiguous ranges,
// and virtual warp v sums tiles v, v + kVW, ... of its CTA's range in one fp32 mma chain. Warp w
// runs the chains of virtual warps w, w + kW, ... one after the other (kV > 1 lets a kernel with
// more accumulator registers per warp keep the order of one with more warps). Each warp streams
// its packed tiles and their 64 scale bytes through a private cp.async ring (without a break
// between chains); x is read straight from global memory (L2-resident: every CTA reads the same
// rows). Each CTA adds its kVW partials in virtual-warp order; the other CTAs of the cluster push
// that sum into the leader's shared memory (distributed shared memory, one cluster barrier), and
// the leader adds the kS sums in rank order: (v0 + ... + v_kVW-1) of rank 0, + that of rank 1, ...
//
// kItemRT row tiles go through the ring as one item: all kRT (whole tiles), or one (a row tile
// at a time, for two-row-tile kernels of one chain per warp). One row tile at a time keeps half
// the bytes in flight per warp and lets the decode of a tile's first row tile start when that
// lands; the mma sequence of every row tile, and so every bit of the result, is the same.
template <Dtype kAct, int kNB, int kRT, int kW, int kV, int kS, int kItemRT = kRT, typename P = Fp6LinearParams,
          bool kWide = false>
MXF_DEV void linear_mma(const P& pp, uint8_t* smem, int64_t row0, int64_t m0, int split) {
  const Fp6LinearParams& p = linear_of(pp);
  // The attention front reads x and the residual in its prologue: never mode 3.
  [[maybe_unused]] const int pdl =
      std::is_same_v<P, Fp6LinearParams> ? p.pdl : (p.pdl < 2 ? p.pdl : 2);
#if defined(MXF_HAS_CLUSTER)
  if constexpr (kS > 1) cluster_arrive_relaxed();  // "started", waited for before the partials are pushed
  // The previous kernel in the stream may still run (programmatic dependent launch): nothing in
  // global memory is touched before grid_dep_wait(), except the weights with pdl == 2, and the
  // weights and x with pdl == 3, where only the bias and the stores wait. The next kernel may
  // start once every CTA has passed its wait (grid_dep_launch() right after it), not earlier: then
  // every kernel before this one has finished when the next one starts, which the host's capture
  // check relies on (launch_mxfp6_linear). With pdl == 3 it may start at once; the host has
  // checked that none of the kernels that may still run then writes this one's x or weights.
  if (pdl < 2) {
    grid_dep_wait();
    grid_dep_launch();
  } else if (pdl == 3) {
    grid_dep_launch();
  }
#endif
  constexpr bool kBF16 = kAct == Dtype::kBF16;
  // The spread decode needs fewer registers and has longer dependency chains: it pays with two n8
  // blocks at 128 registers (third session), not with the room of the kWide kernels, where the
  // shift decode was 2-4% faster (twenty-fifth session; the spread one gained nothing there).
  constexpr bool kSpread = kNB == 2 && !kWide;
  static_assert(kItemRT == kRT || (kItemRT == 1 && kRT == 2 && kV == 1), "whole tiles, or row tiles of one chain");
  constexpr int kSub = kRT / kItemRT;  // ring items per k-tile
  constexpr int kStages = kRingStages<kRT, kW, kV, kS, kItemRT>;
  constexpr int kSlot = kRingSlotBytes<kRT, kItemRT>;
  constexpr int kVW = kW * kV;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const int64_t ktiles = p.k / kFp6TileCols, sgroups = p.k / kMxBlock;
  const int64_t t_begin = ktiles * split / kS, t_end = ktiles * (split + 1) / kS;
  // The warp's stream of tiles: chain 0 (tiles tk0, tk0 + kVW, ...), then for kV = 2 chain 1
  // (tk0 + kW, tk0 + kW + kVW, ...), which starts at position cnt0. Pointers step kVW tiles, and
  // `jump` tiles from the last tile of chain 0 to the first of chain 1.
  static_assert(kV == 1 || kV == 2, "one or two chains per warp");
  const int64_t tk0 = t_begin + warp;
  const auto chain_count = [&](int64_t v0) {
    return v0 < t_end ? static_cast<int>((t_end - v0 + kVW - 1) / kVW) : 0;
  };
  const int cnt0 = chain_count(tk0);
  const int count = cnt0 + (kV > 1 ? chain_count(tk0 + kW) : 0);
  const int jump = kW - kVW * (cnt0 - 1);
  const auto step_at = [&](int f) { return kV > 1 && f == cnt0 ? jump : kVW; };  // tile f-1 -> f
  uint8_t* const ring = smem + warp * kStages * kSlot;

  // Per tile and row tile: three 16-byte copies per lane of packed codes, and one 4-byte copy of
  // a row's four scale bytes for lanes 0..15. Issues go in stream order (position f).
  const uint8_t* src = p.packed + ((row0 / kFp6TileRows) * ktiles + tk0) * kFp6TileBytes + lane * 16;
  const uint8_t* ssrc = p.scales + (row0 + (lane & 15)) * sgroups + tk0 * 4;
  const int64_t rt_stride = ktiles * kFp6TileBytes, srt_stride = kFp6TileRows * sgroups;
  const uint32_t dst0 = smem_addr(ring) + lane * 16;  // shared addresses: no conversion per copy
  const uint32_t sdst0 = smem_addr(ring) + kFp6TileBytes + (lane & 15) * 4;
  int issue_slot = 0;
  // The codes are read once: evict-first in L2, so that they do not push out the scale words
  // (a 32-byte sector serves eight k-tiles, i.e. several warps), x and the previous kernel's
  // outputs. H100, same process: 1.00-1.07x per call after a kernel, up to 1.11x in the layer front;
  // the scales evict-first too were slower (docs/PERF_NOTES.md, fifty-fourth session).
  const uint64_t policy = l2_evict_first_policy();
  // Item f: row tiles [h * kItemRT, (h + 1) * kItemRT) of the tile at stream position f / kSub,
  // h = f % kSub.
  const auto issue = [&](int f) {
    const int h = f % kSub, pos = f / kSub;
    if (pos > 0 && h == 0) {
      const int d = step_at(pos);
      src += d * kFp6TileBytes;
      ssrc += d * 4;
    }
    const int off = issue_slot * kSlot;
#pragma unroll
    for (int r = 0; r < kItemRT; ++r) {
      const int rr = h * kItemRT + r;
#pragma unroll
      for (int q = 0; q < 3; ++q) {
        cp_async16_to(dst0 + off + r * kTileStageBytes + q * 512, src + rr * rt_stride + q * 512, policy);
      }
      if constexpr (kSub == 1) {
        if (lane < kFp6TileRows) cp_async4_to(sdst0 + off + r * kTileStageBytes, ssrc + rr * srt_stride);
      } else if (h == 0) {  // lanes 16..31: the second row tile's
        cp_async4_to(sdst0 + off + (lane >> 4) * kTileScaleBytes, ssrc + (lane >> 4) * srt_stride);
      }
    }
    issue_slot = issue_slot + 1 == kStages ? 0 : issue_slot + 1;
  };

  // x (the attention front's: its y rows, front_prologue's): lane (g, t) feeds column g of each
  // n8 block with 8 contiguous values per group. Columns past M read the last real row (their
  // outputs are never stored; mma columns are independent).
  const uint4* xptr[kNB];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) {
    const int64_t m = m0 + nb * 8 + g < p.m ? m0 + nb * 8 + g : p.m - 1;
    xptr[nb] = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.x) + m * p.x_stride +
                                              tk0 * kFp6TileCols + 8 * t);
  }
  constexpr int kXTile = kFp6TileCols / 8;  // uint4 per k-tile

  // Lane t's six bytes of a group start at byte 6t; w0:w1 are the aligned 8 bytes around them,
  // so for odd t the permutes pick bytes two positions further in.
  const uint32_t par = (t & 1) ? 0x2222u : 0u;
  // This lane's codes of row g in a slot, and its scale words of rows g and g + 8.
  const int lane_codes = kFp6GroupBytes * kFp6GroupsPerTileRow * g + ((6 * t) & ~3);
  const int lane_scale_lo = kFp6TileBytes + g * 4, lane_scale_hi = kFp6TileBytes + (g + 8) * 4;

  // Partials: partial_of(v)[idx * 32 + lane] for virtual warp v, idx = (r * kNB + nb) * 4 + i
  // (mma slots). The last chain of each warp (v >= kW * (kV - 1)) reuses the rings' memory after
  // the last tile; chain 0 of a two-chain warp ends while other warps still stream, so its
  // partials sit after the rings (kW * kPer floats: as little shared memory as possible, which
  // leaves the L1 cache, that x is read through, larger).
  constexpr int kPer = kRT * kNB * 4;
  float* const red_ring = reinterpret_cast<float*>(smem);
  float* const red_extra = reinterpret_cast<float*>(smem + kW * kStages * kSlot);
  const auto partial_of = [&](int v) {
    return kV > 1 && v < kW ? red_extra + v * kPer * 32 : red_ring + (v - (kV - 1) * kW) * kPer * 32;
  };
  float acc[kRT][kNB][4];
  const auto zero_acc = [&]() {
#pragma unroll
    for (int r = 0; r < kRT; ++r)
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[r][nb][i] = 0.0f;
  };
  const auto store_acc = [&](int v) {
#pragma unroll
    for (int r = 0; r < kRT; ++r)
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) partial_of(v)[((r * kNB + nb) * 4 + i) * 32 + lane] = acc[r][nb][i];
  };
  zero_acc();

  const int items = count * kSub;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < items) issue(s);
    cp_async_commit();
  }
#if defined(MXF_HAS_CLUSTER)
  if (pdl == 2) {  // x and out only after the previous kernel has finished
    grid_dep_wait();
    grid_dep_launch();
  }
#endif
  if constexpr (std::is_same_v<P, FrontParams>) {
    front_prologue<8 * kNB, kS>(pp, m0, kRT * kFp6TileRows);
  }
  uint4 xq[kNB][4];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
    for (int j = 0; j < 4; ++j) xq[nb][j] = count > 0 ? load_x(xptr[nb] + j * 4) : make_uint4(0, 0, 0, 0);

  int slot = 0;
  for (int i = 0; i < count; ++i) {
    const bool more = i + 1 < count;
    uint32_t s_lo[kRT], s_hi[kRT];
    bool folded = false;
#pragma unroll
    for (int h = 0; h < kSub; ++h) {
      const int f = i * kSub + h;
      cp_async_wait<kStages - 2>();
      sync_lanes();
      if (f + kStages - 1 < items) issue(f + kStages - 1);
      cp_async_commit();
      const uint8_t* st = ring + slot * kSlot;
      slot = slot + 1 == kStages ? 0 : slot + 1;
      if (h == 0) {
        const int xstep = step_at(i + 1) * kXTile;
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb) xptr[nb] += xstep;  // now the next tile's x
        // Scale bytes of the lane's two rows (g and g + 8) of each row tile for the tile's 4
        // groups, and one decision for the whole tile: fold only if every scale allows it.
        bool fold = kBF16;
#pragma unroll
        for (int r = 0; r < kRT; ++r) {
          const uint8_t* sr = st + r * (kSub == 1 ? kTileStageBytes : kTileScaleBytes);
          s_lo[r] = *reinterpret_cast<const uint32_t*>(sr + lane_scale_lo);
          s_hi[r] = *reinterpret_cast<const uint32_t*>(sr + lane_scale_hi);
          fold = fold && scales_foldable(s_lo[r]) && scales_foldable(s_hi[r]);
        }
        folded = __all_sync(0xffffffffu, fold);
      }
      // Row tiles [kR0, kR0 + kRN) of the tile from this slot, with the tile's fold decision.
      const auto decode = [&](auto r0, auto rn, auto x) {
        constexpr int kR0 = decltype(r0)::value, kRN = decltype(rn)::value;
        constexpr XMode kX = decltype(x)::value;
        const uint8_t* const sc = st + lane_codes;
        if (folded) {
          mma_tile<kBF16, true, kNB, kRT, kR0, kRN, kX, kSpread>(sc, xq, xptr, more, par, s_lo, s_hi, acc);
        } else {
          mma_tile<kBF16, false, kNB, kRT, kR0, kRN, kX, kSpread>(sc, xq, xptr, more, par, s_lo, s_hi, acc);
        }
      };
      using std::integral_constant;
      if constexpr (kSub == 1) {
        decode(integral_constant<int, 0>(), integral_constant<int, kRT>(), integral_constant<XMode, kXWhole>());
      } else if (h == 0) {  // row tile 0: permute this tile's x and keep it for row tile 1
        decode(integral_constant<int, 0>(), integral_constant<int, 1>(), integral_constant<XMode, kXKeep>());
      } else {  // row tile 1: then load the next tile's x
        decode(integral_constant<int, 1>(), integral_constant<int, 1>(), integral_constant<XMode, kXNext>());
      }
    }
    if (kV > 1 && i + 1 == cnt0) {  // chain 0 ends: its partial goes out, chain 1 starts from zero
      store_acc(warp);
      zero_acc();
    }
  }
  cp_async_wait<0>();
  if (kV > 1 && cnt0 == 0) store_acc(warp);  // no tiles at all: chain 0's partial is zero (so is chain 1's)
  __syncthreads();  // the last chains' partials overwrite the rings
  store_acc(warp + (kV - 1) * kW);
  __syncthreads();
  // Each mma slot's CTA partial: its virtual warps added in order. The thread's q-th slot is
  // slot_at(q) (none when >= kSlots).
  constexpr int kSlots = kPer * 32, kEl = (kPer + kW - 1) / kW;
  const auto slot_at = [](int q) -> int { return threadIdx.x + q * kW * 32; };
  float v[kEl];
#pragma unroll
  for (int q = 0; q < kEl; ++q) {
    const int e = slot_at(q);
    if (e >= kSlots) continue;
    v[q] = partial_of(0)[e];
#pragma unroll
    for (int w = 1; w < kVW; ++w) v[q] = add_rn(v[q], partial_of(w)[e]);
  }
#if defined(MXF_HAS_CLUSTER)
  if constexpr (kS > 1) {
    // The other CTAs push their partials into the leader's shared memory (after the rings and the
    // leader's own partials), one cluster barrier, and the leader adds them in rank order.
    float* const pushed = reinterpret_cast<float*>(smem + linear_pushed_offset<kNB, kRT, kW, kV, kS>());
    cluster_wait();  // every CTA of the cluster has started (arrived at the kernel's start)
    if (split != 0) {
#pragma unroll
      for (int q = 0; q < kEl; ++q) {
        const int e = slot_at(q);
        if (e < kSlots) st_cluster_f32(pushed + (split - 1) * kSlots + e, 0, v[q]);
      }
    }
    cluster_sync();
    if (split != 0) return;
#pragma unroll
    for (int q = 0; q < kEl; ++q) {
      const int e = slot_at(q);
      if (e >= kSlots) continue;
#pragma unroll
      for (int s = 1; s < kS; ++s) v[q] = add_rn(v[q], pushed[(s - 1) * kSlots + e]);
    }
  }
  if (pdl == 3) grid_dep_wait();  // out only after the previous kernel has finished
#endif
  // Bias in fp32, one rounding.
#pragma unroll
  for (int q = 0; q < kEl; ++q) {
    const int e = slot_at(q);
    if (e >= kSlots) continue;
    const int idx = e / 32, ln = e % 32;
    const int r = idx / (kNB * 4), nb = (idx / 4) % kNB, i = idx % 4;
    const int64_t n = row0 + r * kFp6TileRows + (ln >> 2) + (i >= 2 ? 8 : 0);
    const int64_t m = m0 + nb * 8 + 2 * (ln & 3) + (i & 1);
    if (m < p.m) store_from_f32(p.out, m * p.n + n, kAct, add_rn(v[q], bias_at(p, n)));
  }
}
#endif  // MXF_HAS_MMA_PIPE

// Registers per thread the launch bounds allow: 64 for one row tile and one n8 block (32 warps
// per SM), about 96 for two row tiles or two n8 blocks (85 with eight warps, so that three CTAs
// fit), 128 for both. The M > 16 kernels (four n8 blocks: x of a whole tile ahead is 64 registers)
// of four warps are held to three CTAs per SM with one chain per warp (168 registers; nvcc 13.0,
// sm_90a: up to 68 bytes of spill) and two with two chains (235-243, no spill); eight warps, one.
// H200, against two CTAs for both (experiments/h200_s32.md): one chain 1.07-1.31x faster at
// 2560 x 6144, M = 17 .. 1024; two chains (12288 x 6144) 1.08x at M = 17 but 6-8% slower at
// M = 64 and 1024.
template <int kNB, int kRT, int kW, int kV>
constexpr int kMinBlocks = kNB >= 4 ? (kW == 4 ? (kV == 1 ? 3 : 2) : 1)
                           : kRT == 2 && kW == 8 ? 3 : (kNB * kRT == 1 ? 32 : kNB * kRT == 2 ? 21 : 16) / kW;
// kWide: a bf16 linear of two row tiles and two n8 blocks per warp, four warps, held to three CTAs
// per SM (168 registers instead of 128) for grids that need no more than three per SM; with that
// room it decodes without the spread form (linear_mma). Same mma sequence, same bits.
template <int kNB, int kRT, int kW, int kV, bool kWide>
constexpr int kMinBlocksFor = kWide ? 3 : kMinBlocks<kNB, kRT, kW, kV>;
template <Dtype kAct, int kNB, int kRT, int kW, typename P>
constexpr bool kHasWide =
    kAct == Dtype::kBF16 && kNB == 2 && kRT == 2 && kW == 4 && std::is_same_v<P, Fp6LinearParams>;

// Grid: one CTA per (kRT row tiles, block of x rows, K split); the kS CTAs of one split form a
// cluster (consecutive block indices).
template <Dtype kAct, int kNB, int kRT, int kW, int kV, int kS, int kItemRT, typename P, bool kWide = false>
__global__ void __launch_bounds__(kW * 32, (kMinBlocksFor<kNB, kRT, kW, kV, kWide>))
    fp6_linear_kernel(const P pp) {
  constexpr bool kFront = std::is_same_v<P, FrontParams>;
  const Fp6LinearParams& p = linear_of(pp);
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kRowsX = 8 * kNB;
  const int64_t mblocks = (p.m + kRowsX - 1) / kRowsX;
  const int64_t unit = blockIdx.x / kS;
  [[maybe_unused]] const int split = static_cast<int>(blockIdx.x % kS);
  const int64_t row0 = (unit / mblocks) * kFp6TileRows * kRT;
  const int64_t m0 = (unit % mblocks) * kRowsX;
#if defined(MXF_HAS_MMA_PIPE)
  if (!p.force_portable) {
#if !defined(MXF_HAS_CLUSTER)
    if constexpr (kS > 1) __trap();  // never launched: the host asks for clusters on sm_90+ only
#endif
    linear_mma<kAct, kNB, kRT, kW, kV, kS, kItemRT, P, kWide>(pp, smem, row0, m0, split);
    if constexpr (kFront) {
      if (split == 0) {
        front_epilogue<kRowsX, kS>(pp, smem, linear_smem_bytes<kNB, kRT, kW, kV, kS>(), row0, kRT * kFp6TileRows, m0);
      }
    }
    return;
  }
#endif
  if constexpr (kS == 1) {
#if defined(MXF_HAS_CLUSTER)
    grid_dep_wait();
#endif
    if constexpr (kFront) front_prologue<kRowsX, 1>(pp, m0, kRT * kFp6TileRows);
    for (int r = 0; r < kRT; ++r) linear_portable(p, row0 + r * kFp6TileRows, m0, kRowsX);
    if constexpr (kFront) {
      front_epilogue<kRowsX, 1>(pp, smem, linear_smem_bytes<kNB, kRT, kW, kV, kS>(), row0, kRT * kFp6TileRows, m0);
    }
  }
}

template <Dtype kAct, int kNB, int kRT, int kW, int kV, int kS, int kItemRT, typename P>
error_t launch_linear_cfg(const P& pp, stream_t stream) {
  const Fp6LinearParams& p = linear_of(pp);
  constexpr int kRowsX = 8 * kNB;
  const int64_t ctas = p.n / (kFp6TileRows * kRT) * ((p.m + kRowsX - 1) / kRowsX) * kS;
  int smem = linear_smem_bytes<kNB, kRT, kW, kV, kS>();
  // The register-wide twin (kMinBlocksFor) where the grid needs no more than the three CTAs per SM
  // it allows: 1.02-1.04x at M = 9 and 16 in `on` (H200, 2560 x 6144, 12288 x 6144, 9216 x 2048,
  // 8192 x 8192; 1.01x at 4096 x 4096; experiments/h200_s25.md).
  bool wide = false;
  if constexpr (kHasWide<kAct, kNB, kRT, kW, P>) {
    wide = p.wide_override == 2 || (p.wide_override != 1 && ctas <= 3LL * p.num_sms);
  }
  const auto kernel = wide ? fp6_linear_kernel<kAct, kNB, kRT, kW, kV, kS, kItemRT, P, kHasWide<kAct, kNB, kRT, kW, P>>
                           : fp6_linear_kernel<kAct, kNB, kRT, kW, kV, kS, kItemRT, P>;
#if defined(MXF_CUDA)
  if constexpr (std::is_same_v<P, Fp6LinearParams>) {  // for launch_mxfp6_linear's capture check
    static const bool noted = [] {
      note_fp6_linear_kernel(reinterpret_cast<const void*>(fp6_linear_kernel<kAct, kNB, kRT, kW, kV, kS, kItemRT, P>));
      if constexpr (kHasWide<kAct, kNB, kRT, kW, P>) {
        note_fp6_linear_kernel(reinterpret_cast<const void*>(fp6_linear_kernel<kAct, kNB, kRT, kW, kV, kS, kItemRT, P, true>));
      }
      return true;
    }();
    (void)noted;
  }
#endif
  // The shared-memory cap is per kernel and smem differs between its calls (the PDL padding), so
  // each launch sets the cap it needs and launches under one lock: another host
  // thread's smaller setting in between would have the launch refused.
  static std::mutex launch_mu;
  std::lock_guard<std::mutex> lock(launch_mu);
  error_t e = set_max_dynamic_smem(kernel, smem);
  if (e != kSuccess) return e;
#if defined(MXF_CUDA)
  // With programmatic dependent launch the next kernel's CTAs are placed while this one's still
  // run, on the SMs with room at that moment, which can stack several on one SM (measured on the
  // H200: 2048 x 4096, M = 1, 5.7 -> 10.2 us). When an SM could hold more than the even share
  // ceil(CTAs / SMs), the shared memory is padded just enough that it holds no more: the next
  // kernel's CTAs then take the slots this one's leave, one for one. (Just enough: a larger
  // shared-memory carveout leaves less L1 cache for x.)
  if (p.clusters && p.pdl > 0 && p.smem_per_sm > 0) {
    const int64_t share = (ctas + p.num_sms - 1) / p.num_sms;
    // CTAs per SM the unpadded kernel allows, asked once per kernel, device and shared-memory
    // size: the query costs host time on every eager launch otherwise.
    static KeyedMemo<16> fits;
    const int fit = device_keyed_memo(fits, static_cast<uint64_t>(smem) * 2 + (wide ? 1 : 0), [&] {
      int f = 0;
      return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f, kernel, kW * 32, smem) == cudaSuccess ? f : -1;
    });
    if (fit < 0) return last_error();
    if (fit > share) {
      const int64_t pad = (p.smem_per_sm / (share + 1) - p.smem_reserved + 16) & ~int64_t{15};
      if (pad > smem && pad <= p.smem_optin) {
        smem = static_cast<int>(pad);
        e = set_max_dynamic_smem(kernel, smem);
        if (e != kSuccess) return e;
      }
    }
  }
  // sm_90+ launches (the host sets p.clusters only there) may carry a cluster shape and the
  // programmatic-dependent-launch attribute.
  if (kS > 1 || (p.clusters && p.pdl > 0)) {
    return launch_ex(kernel, dim3(static_cast<unsigned>(ctas)), dim3(kW * 32), smem, stream, kS,
                     p.clusters && p.pdl > 0, pp);
  }
#else
  if constexpr (kS > 1) return launch_linear_cfg<kAct, kNB, kRT, kW, kV, 1, kItemRT>(pp, stream);
#endif
  kernel<<<static_cast<unsigned>(ctas), kW * 32, smem, stream>>>(pp);
  return last_error();
}

// Launch shape from the weight shape only, never from M: every row of x runs the same instruction
// sequence and the same summation order for any batch size (batch invariance).
struct LinearShape {
  // Row tiles per warp, warps per CTA (the summation order: a kernel may run them as fewer warps
  // with several chains each), CTAs per cluster splitting K.
  int rt, warps, split;
};

LinearShape linear_shape(const Fp6LinearParams& p) {
  // Measured on the H200 (benchmarks/sweep_mxfp6_linear.py): one wave of CTAs that all stream
  // for the whole kernel beats more, shorter CTAs (each later wave pays the load latency again),
  // so the shape aims for as many resident warps as the weight's row tiles allow:
  //   >= 4 row tiles per SM: two row tiles per warp (x and loop overhead shared), 8 warps (the
  //      M <= 16 kernel runs them as 4 warps of two chains);
  //   1 to 1.5 per SM, >= 48 k-tiles, and clusters of 4 with slots to spare (below): two row
  //      tiles per warp, 4 warps and K split over clusters of 4 (at most three CTAs per SM, one
  //      wave; >= 3 k-tiles per warp);
  //   1.5 to 4 per SM (with clusters): two row tiles per warp; up to 3 per SM K split over
  //      clusters of 2 (one wave of at most three CTAs per SM) with 8 warps, or 4 below 32
  //      k-tiles; 8 warps unsplit above;
  //   otherwise >= 1 per SM: one row tile per warp, 4 warps, K split over a cluster of 2 below 2
  //      per SM;
  //   fewer: 8 warps, and K split over a cluster as far as the SMs and K allow.
  // The same order serves M <= 8 and M <= 16 (batch invariance); the row tiles per warp only
  // group rows and do not change any row's sums.
  const int64_t row_tiles = p.n / kFp6TileRows, ktiles = p.k / kFp6TileCols, sms = p.num_sms;
  LinearShape s{1, 4, 1};
  // Clusters of 4 only where at least 9% of the CTA slots (ceil(CTAs / SMs) per SM, the PDL
  // padding below) stay free; with fewer the next call's clusters are not placed early.
  // Twentieth session (experiments/h200_fp6_s20.md), `on`, M = 1, this shape against one row
  // tile per warp and clusters of 2: 2880 x 6144 (90 clusters, 9.1% free) 7.00 vs 7.48 us, but
  // 2912 x 6144 (91, 8.1%) 7.75 vs 7.48, 2944 x 6144 (92) 8.64 vs 7.51, 3072 x 6144 (96) 10.98
  // vs 7.61, and 2112 x 6144 (66 clusters filling two CTAs per SM) 10.16 vs 6.27.
  const int64_t mid_ctas = row_tiles / 2 * 4, mid_share = (mid_ctas + sms - 1) / sms;
  const bool mid_clusters = p.clusters && row_tiles >= sms && row_tiles % 2 == 0 && mid_ctas <= 3 * sms &&
                            ktiles >= 48 && 100 * mid_ctas <= 91 * mid_share * sms;
  if (row_tiles >= 4 * sms && row_tiles % 2 == 0) {
    s.rt = 2;
    s.warps = 8;
  } else if (mid_clusters) {
    // 2560 x 6144: two row tiles per warp, 4 warps and clusters of 4 (one wave; three k-tiles per
    // warp, loaded one at a time). Eighth session (experiments/h200_fp6_s8.md): 5% faster at
    // M <= 8 and 3.6% at M = 16 than 8 warps (1.5 k-tiles per warp, the sixth session's choice,
    // which had beaten one row tile per warp and clusters of 2 by up to 8% at M = 8 and 16).
    s.rt = 2;
    s.warps = 4;
    s.split = 4;
  } else if (p.clusters && 2 * row_tiles > 3 * sms && row_tiles % 2 == 0) {
    // 3584 .. 8192 rows (twentieth session, experiments/h200_fp6_s20.md; `on`, M = 1 / 8 / 16,
    // against one row tile per warp, 4 warps): 4096 x 4096 1.15 / 1.16 / 1.14x, 4096 x 14336
    // 1.11 / 1.12 / 1.06x, 5120 x 3072 1.08 / 1.12 / 1.08x (4 warps: two k-tiles each), 8192 x
    // 8192 1.11 / 1.12 / 1.08x (unsplit).
    s.rt = 2;
    s.warps = 8;
    if (row_tiles <= 3 * sms) {
      s.split = 2;
      if (ktiles < 32) s.warps = 4;
    }
  } else if (row_tiles >= sms) {
    s.split = row_tiles < 2 * sms ? 2 : 1;
  } else {
    s.warps = 8;
    while (s.split < 8 && row_tiles * s.split * 2 <= sms) s.split *= 2;
  }
  // Every warp should own at least two k-tiles (the mid_clusters branch already gives it three).
  while (s.split > 1 && ktiles < 2LL * s.split * s.warps) s.split /= 2;
  if (s.warps == 8 && ktiles < 2LL * s.split * s.warps) s.warps = 4;
  if (p.rt_override == 1 || (p.rt_override == 2 && row_tiles % 2 == 0)) s.rt = p.rt_override;
  if (p.warps_override == 4 || p.warps_override == 8) s.warps = p.warps_override;
  if (p.split_override == 1 || p.split_override == 2 || p.split_override == 4 || p.split_override == 8) {
    s.split = p.split_override;
  }
  if (!p.clusters || p.force_portable) s.split = 1;
  return s;
}

template <Dtype kAct, int kNB, int kRT, int kW, int kV, int kItemRT, typename P>
error_t launch_linear_items(const P& p, int split, stream_t stream) {
  switch (split) {
    case 8:
      return launch_linear_cfg<kAct, kNB, kRT, kW, kV, 8, kItemRT, P>(p, stream);
    case 4:
      return launch_linear_cfg<kAct, kNB, kRT, kW, kV, 4, kItemRT, P>(p, stream);
    case 2:
      return launch_linear_cfg<kAct, kNB, kRT, kW, kV, 2, kItemRT, P>(p, stream);
    default:
      return launch_linear_cfg<kAct, kNB, kRT, kW, kV, 1, kItemRT, P>(p, stream);
  }
}

template <Dtype kAct, int kNB, int kRT, int kW, int kV = 1, typename P>
error_t launch_linear_split(const P& pp, int split, stream_t stream) {
  [[maybe_unused]] const Fp6LinearParams& p = linear_of(pp);
  // Two-row-tile kernels of one chain per warp stream a row tile at a time, except when the
  // weight stream starts before the dependency wait (pdl >= 2): there whole tiles, twice the bytes
  // in flight before the wait, were faster (H200, docs/PERF_NOTES.md, eleventh session). Only the
  // mma path streams (NVIDIA); elsewhere the portable body runs, the same for both.
#if defined(MXF_CUDA)
  if constexpr (kRT == 2 && kV == 1) {
    if (p.item_rt == 1 || (p.item_rt != 2 && p.pdl < 2)) {
      return launch_linear_items<kAct, kNB, kRT, kW, kV, 1>(pp, split, stream);
    }
  }
#endif
  return launch_linear_items<kAct, kNB, kRT, kW, kV, kRT>(pp, split, stream);
}

template <Dtype kAct, int kNB, typename P>
error_t launch_linear_typed(const P& pp, stream_t stream) {
  const LinearShape s = linear_shape(linear_of(pp));
#if !defined(MXF_CUDA)
  // No mma path off NVIDIA: every launch shape runs the same portable body (one output per thread
  // and step, exact-order sums per output), so one shape gives every weight the same bits as any
  // other would, and the HIP build compiles one kernel per dtype and row block instead of dozens.
  (void)s;
  return launch_linear_cfg<kAct, kNB, 1, 4, 1, 1, 1, P>(pp, stream);
#else
  if (s.rt == 2) {
    if (s.warps == 4) return launch_linear_split<kAct, kNB, 2, 4>(pp, s.split, stream);
    // Eight warps with two row tiles and two n8 blocks would spill at the register count that
    // fits three CTAs per SM: four warps run the eight warps' chains, two each.
    if constexpr (kNB == 1) {
      return launch_linear_split<kAct, kNB, 2, 8>(pp, s.split, stream);
    } else {
      return launch_linear_split<kAct, kNB, 2, 4, 2>(pp, s.split, stream);
    }
  }
  return s.warps == 8 ? launch_linear_split<kAct, kNB, 1, 8>(pp, s.split, stream)
                      : launch_linear_split<kAct, kNB, 1, 4>(pp, s.split, stream);
#endif
}

}  // namespace

}  // namespace mxf::kernels

// The body of one entry of mxfp6_entries.h: the launch of the kernels for activation dtype ACT
// (Dtype::kBF16 or kFP16), NB n8 blocks of x rows per CTA (1: M <= 8, 2: M <= 16, 4: larger M, the
// linear only) and params type P.
#define MXF_FP6_DEFINE_ENTRY(NAME, ACT, NB, P)                      \
  namespace mxf::kernels::fp6 {                                    \
  error_t NAME(const P& p, stream_t stream) {                      \
    return launch_linear_typed<Dtype::ACT, NB>(p, stream);         \
  }                                                                \
  }
