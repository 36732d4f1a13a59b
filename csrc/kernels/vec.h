// 16-byte chunk access shared by the kernels: 8 bf16/fp16 elements (or 8 fp32 in two vectors),
// with a scalar twin for misaligned or ragged rows that reads missing elements as 0.
#pragma once

#include "../core/half_types.h"
#include "../core/mx.h"
#include "../core/platform.h"

namespace mxf::kernels {

struct Chunk8 {
  float v[8];
};

// The raw bits of elements [c*8, c*8+8) of a row: 16-bit dtypes use `lo`, fp32 `lo` and `hi`.
// Loading raw bits first and converting later lets a thread put all its loads in flight at once.
struct RawChunk {
  uint4 lo, hi;
};

// `vec` promises 16-byte alignment and a full chunk; otherwise missing elements read as +0.
MXF_DEV RawChunk load_raw(const void* row, int64_t c, int64_t n, Dtype d, bool vec) {
  RawChunk r{};
  if (vec) {
    if (d == Dtype::kFP32) {
      const uint4* p = reinterpret_cast<const uint4*>(static_cast<const float*>(row) + c * 8);
      r.lo = p[0];
      r.hi = p[1];
    } else {
      r.lo = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(row) + c * 8);
    }
    return r;
  }
  uint32_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t e = c * 8 + i;
    if (e >= n) continue;
    if (d == Dtype::kFP32) {
      w[i] = static_cast<const uint32_t*>(row)[e];
    } else {
      w[i / 2] |= static_cast<uint32_t>(static_cast<const uint16_t*>(row)[e]) << (16 * (i % 2));
    }
  }
  r.lo = make_uint4(w[0], w[1], w[2], w[3]);
  r.hi = make_uint4(w[4], w[5], w[6], w[7]);
  return r;
}

MXF_DEV Chunk8 unpack(const RawChunk& r, Dtype d) {
  Chunk8 out;
  const uint32_t lo[4] = {r.lo.x, r.lo.y, r.lo.z, r.lo.w};
  if (d == Dtype::kFP32) {
    const uint32_t hi[4] = {r.hi.x, r.hi.y, r.hi.z, r.hi.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out.v[i] = u2f(lo[i]);
      out.v[4 + i] = u2f(hi[i]);
    }
    return out;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint16_t a = static_cast<uint16_t>(lo[i]), b = static_cast<uint16_t>(lo[i] >> 16);
    out.v[2 * i] = d == Dtype::kBF16 ? bf16_to_f32(a) : fp16_to_f32(a);
    out.v[2 * i + 1] = d == Dtype::kBF16 ? bf16_to_f32(b) : fp16_to_f32(b);
  }
  return out;
}

MXF_DEV Chunk8 load_chunk(const void* row, int64_t c, int64_t n, Dtype d, bool vec) {
  return unpack(load_raw(row, c, n, d, vec), d);
}

MXF_DEV uint32_t pack2(float lo, float hi, Dtype d) {
  return d == Dtype::kBF16 ? pack2_bf16(lo, hi) : pack2_fp16(lo, hi);
}

// 8 values rounded to a 16-bit dtype, packed in pairs.
MXF_DEV uint4 narrow8(const Chunk8& x, Dtype d) {
  return make_uint4(pack2(x.v[0], x.v[1], d), pack2(x.v[2], x.v[3], d), pack2(x.v[4], x.v[5], d),
                    pack2(x.v[6], x.v[7], d));
}

MXF_DEV Chunk8 widen8(uint4 q, Dtype d) { return unpack(RawChunk{q, make_uint4(0, 0, 0, 0)}, d); }

// Store a packed chunk of a 16-bit dtype (`vec`: one 16-byte store; else elements below n).
MXF_DEV void store_packed(void* row, int64_t c, int64_t n, bool vec, uint4 q) {
  uint16_t* p = static_cast<uint16_t*>(row) + c * 8;
  if (vec) {
    *reinterpret_cast<uint4*>(p) = q;
    return;
  }
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (c * 8 + i < n) p[i] = static_cast<uint16_t>(w[i / 2] >> (16 * (i % 2)));
  }
}

// Store 8 values rounded to dtype d (16-bit or fp32).
MXF_DEV void store_chunk(void* row, int64_t c, int64_t n, Dtype d, bool vec, const Chunk8& x) {
  if (d != Dtype::kFP32) {
    store_packed(row, c, n, vec, narrow8(x, d));
    return;
  }
  float* p = static_cast<float*>(row) + c * 8;
  if (vec) {
    reinterpret_cast<float4*>(p)[0] = make_float4(x.v[0], x.v[1], x.v[2], x.v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(x.v[4], x.v[5], x.v[6], x.v[7]);
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (c * 8 + i < n) p[i] = x.v[i];
  }
}

// Largest |v| of a packed 16-bit chunk, as fp32 bits: abs bit patterns order like the values
// (NaN above Inf), so a per-half integer max finds it; missing elements are +0.
MXF_DEV uint32_t amax_bits16(uint4 q, Dtype d) {
  constexpr uint32_t kAbs = 0x7fff7fffu;
  const uint32_t m = max_u16x2(max_u16x2(q.x & kAbs, q.y & kAbs), max_u16x2(q.z & kAbs, q.w & kAbs));
  const uint32_t h = (m & 0xffffu) > (m >> 16) ? (m & 0xffffu) : (m >> 16);
  return d == Dtype::kBF16 ? h << 16 : f2u(fp16_to_f32(static_cast<uint16_t>(h)));
}

MXF_DEV uint32_t amax_bits32(const Chunk8& x) {
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) m = max_u32(m, abs_bits(x.v[i]));
  return m;
}

MXF_HD bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

#if defined(MXF_GPU)
// The 4 threads of a 32-element block (consecutive chunks, lanes 4q .. 4q + 3) share their
// largest |v| (fp32 bits, as scale_from_amax_bits takes it).
MXF_DEV uint32_t block_amax(uint32_t amax) {
  amax = max_u32(amax, shfl_xor32(amax, 1));
  return max_u32(amax, shfl_xor32(amax, 2));
}
#endif

// CTAs of `threads` threads for one thread per item (the element-wise launches).
inline unsigned blocks_for(int64_t items, int threads) {
  return static_cast<unsigned>((items + threads - 1) / threads);
}

}  // namespace mxf::kernels
