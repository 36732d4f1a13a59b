// E4M3 / E2M3 encode and decode, E8M0 decode (SPEC §1) against the brute-force oracles.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/mx.h"
#include "oracle.h"

namespace {

using oracle::bits;
using oracle::from_bits;

// fp32 inputs: every bf16 and every fp16 pattern widened, each also times 2^k for k in
// [-140, 130], where the product is finite. The product is taken in fp32 (as a kernel would),
// so it may round when it lands in fp32's subnormal range; the oracle sees the same fp32 value.
std::vector<float> exhaustive_inputs() {
  std::vector<float> base;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    base.push_back(from_bits(h << 16));                                     // bf16
    base.push_back(static_cast<float>(oracle::ieee16_value(h, 5, 10)));   // fp16
  }
  std::vector<float> out;
  for (int k = -140; k <= 130; ++k) {
    const float scale = static_cast<float>(std::ldexp(1.0, k));
    if (scale == 0.0f || std::isinf(scale)) continue;
    for (float b : base) {
      const float v = b * scale;
      // Keep NaN and Inf once (k == 0) and the finite products; the range limit of the
      // products keeps the oracle's work bounded without skipping any interesting value.
      if (std::isfinite(v) || k == 0) out.push_back(v);
    }
  }
  return out;
}

const std::vector<float>& inputs() {
  static const std::vector<float> v = exhaustive_inputs();
  return v;
}

// Values whose oracle answer is trivially 0 or max are checked too, but cheaply: the
// brute-force search only runs on magnitudes in [2^-14, 2^12], where every code lives.
template <typename Encode>
void check_encode(const oracle::MxFormat& f, Encode encode, const char* name) {
  const auto table = oracle::mx_table(f);
  const uint32_t sign = 1u << f.sign_bit();
  const uint32_t max = static_cast<uint32_t>(table.size() - 1);
  int64_t failures = 0, ties = 0, sat = 0, sub = 0;
  for (float v : inputs()) {
    const double a = std::fabs(static_cast<double>(v));
    uint32_t want;
    if (std::isfinite(v) && a < std::ldexp(1.0, -14)) {
      want = std::signbit(v) ? sign : 0u;  // below a quarter of the smallest subnormal
    } else if (std::isfinite(v) && a > std::ldexp(1.0, 12)) {
      want = (std::signbit(v) ? sign : 0u) | max;
    } else {
      want = oracle::mx_encode(f, table, v);
    }
    const uint32_t got = encode(v);
    if (std::isfinite(v)) {
      const uint32_t mag = want & ~sign;
      sub += (mag >> 3) == 0 && (mag & 7u) != 0;
      sat += mag == max && a > table[max];
      ties += (mag > 0 && a == (table[mag - 1] + table[mag]) / 2) ||
              (mag < max && a == (table[mag] + table[mag + 1]) / 2);
    }
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << name << "(" << v << " = 0x" << std::hex << bits(v) << ") = 0x" << got
                    << ", expected 0x" << want << std::dec;
    }
  }
  EXPECT_EQ(failures, 0) << name << ": mismatches out of " << inputs().size();
  // The input set must actually exercise the edge cases it claims to.
  EXPECT_GT(ties, 1000) << name;
  EXPECT_GT(sat, 1000) << name;
  EXPECT_GT(sub, 1000) << name;
}

TEST(E4M3, EncodeExhaustiveBf16Fp16TimesPow2) {
  check_encode(oracle::kE4M3, [](float v) { return static_cast<uint32_t>(mxf::e4m3_encode(v)); },
               "e4m3_encode");
  check_encode(oracle::kE4M3, [](float v) { return mxf::encode_portable<mxf::E4M3>(v); },
               "encode_portable<E4M3>");
}

TEST(E2M3, EncodeExhaustiveBf16Fp16TimesPow2) {
  check_encode(oracle::kE2M3, [](float v) { return static_cast<uint32_t>(mxf::e2m3_encode(v)); },
               "e2m3_encode");
  check_encode(oracle::kE2M3, [](float v) { return mxf::encode_portable<mxf::E2M3>(v); },
               "encode_portable<E2M3>");
}

// Random fp32 patterns carry mantissa bits below fp16's, so round/sticky bits are all exercised.
TEST(E4M3E2M3, EncodeRandomFp32) {
  const auto t4 = oracle::mx_table(oracle::kE4M3), t2 = oracle::mx_table(oracle::kE2M3);
  std::mt19937 rng(1234);
  int failures = 0;
  for (int i = 0; i < 2000000; ++i) {
    // Exponents concentrated where the codes live, plus the full range now and then.
    uint32_t u = rng();
    if (i % 4 != 0) u = (u & 0x807fffffu) | ((112u + rng() % 24u) << 23);
    const float v = from_bits(u);
    const uint32_t want4 = oracle::mx_encode(oracle::kE4M3, t4, v);
    const uint32_t want2 = oracle::mx_encode(oracle::kE2M3, t2, v);
    const uint32_t got4 = mxf::e4m3_encode(v), got2 = mxf::e2m3_encode(v);
    if ((got4 != want4 || got2 != want2) && ++failures <= 10) {
      ADD_FAILURE() << "x = " << v << " (0x" << std::hex << u << "): e4m3 0x" << got4
                    << " expected 0x" << want4 << ", e2m3 0x" << got2 << " expected 0x" << want2
                    << std::dec;
    }
  }
  EXPECT_EQ(failures, 0);
}

// The branch-free e2m3_encode equals the generic encoder (itself checked against the oracle
// through the E2M3 tests before the branch-free one replaced it) for every fp32 bit pattern.
TEST(E2M3, BranchFreeEncodeEqualsGenericForAllFp32) {
  int failures = 0;
  uint32_t u = 0;
  do {
    const float v = from_bits(u);
    const uint32_t got = mxf::e2m3_encode(v), want = mxf::encode_portable<mxf::E2M3>(v);
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << "0x" << std::hex << u << ": 0x" << got << " expected 0x" << want << std::dec;
    }
  } while (++u != 0);
  EXPECT_EQ(failures, 0);
}

// Two codes at once (lo in bits 0-7) against the oracle.
TEST(E4M3, EncodePairs) {
  const auto t4 = oracle::mx_table(oracle::kE4M3);
  std::mt19937 rng(77);
  int failures = 0;
  for (int i = 0; i < 500000; ++i) {
    const float lo = from_bits((rng() & 0x807fffffu) | ((112u + rng() % 24u) << 23));
    const float hi = i % 3 ? from_bits(rng()) : -lo;
    const uint32_t got = mxf::e4m3_encode2(lo, hi);
    failures += got != (oracle::mx_encode(oracle::kE4M3, t4, lo) |
                        (oracle::mx_encode(oracle::kE4M3, t4, hi) << 8));
  }
  EXPECT_EQ(failures, 0);
}

TEST(E4M3, EncodeSpecialCases) {
  EXPECT_EQ(mxf::e4m3_encode(NAN), 0x7f);
  EXPECT_EQ(mxf::e4m3_encode(-NAN), 0x7f);
  EXPECT_EQ(mxf::e4m3_encode(from_bits(0x7f800001u)), 0x7f);  // signalling NaN
  EXPECT_EQ(mxf::e4m3_encode(INFINITY), 0x7e);
  EXPECT_EQ(mxf::e4m3_encode(-INFINITY), 0xfe);
  EXPECT_EQ(mxf::e4m3_encode(448.0f), 0x7e);
  EXPECT_EQ(mxf::e4m3_encode(463.9f), 0x7e);
  EXPECT_EQ(mxf::e4m3_encode(1e30f), 0x7e);
  EXPECT_EQ(mxf::e4m3_encode(-1e30f), 0xfe);
  EXPECT_EQ(mxf::e4m3_encode(0.0f), 0x00);
  EXPECT_EQ(mxf::e4m3_encode(-0.0f), 0x80);
  EXPECT_EQ(mxf::e4m3_encode(std::ldexp(1.0f, -9)), 0x01);       // smallest subnormal
  EXPECT_EQ(mxf::e4m3_encode(std::ldexp(1.0f, -10)), 0x00);      // tie with 0: even
  EXPECT_EQ(mxf::e4m3_encode(std::ldexp(3.0f, -10)), 0x02);      // tie 1 / 2: even
  EXPECT_EQ(mxf::e4m3_encode(-std::ldexp(1.0f, -10)), 0x80);     // tie to -0
  EXPECT_EQ(mxf::e4m3_encode(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(mxf::e4m3_encode(std::ldexp(15.0f, -10)), 0x08);     // 7.5 steps: carry to 2^-6
  EXPECT_EQ(mxf::e4m3_encode(1.0625f), 0x38);                    // 1 + 1/16: tie to 1.0
  EXPECT_EQ(mxf::e4m3_encode(1.1875f), 0x3a);                    // 1.125 / 1.25: tie to 1.25
  EXPECT_EQ(mxf::e4m3_encode(from_bits(0x00000001u)), 0x00);     // fp32 subnormal
  EXPECT_EQ(mxf::e4m3_encode(from_bits(0x80000001u)), 0x80);
}

TEST(E2M3, EncodeSpecialCases) {
  EXPECT_EQ(mxf::e2m3_encode(7.5f), 0x1f);
  EXPECT_EQ(mxf::e2m3_encode(7.75f), 0x1f);
  EXPECT_EQ(mxf::e2m3_encode(1e30f), 0x1f);
  EXPECT_EQ(mxf::e2m3_encode(-1e30f), 0x3f);
  EXPECT_EQ(mxf::e2m3_encode(INFINITY), 0x1f);  // no Inf in E2M3: saturates (header comment)
  EXPECT_EQ(mxf::e2m3_encode(-INFINITY), 0x3f);
  EXPECT_EQ(mxf::e2m3_encode(NAN), 0x1f);       // no NaN in E2M3: saturates, sign kept
  EXPECT_EQ(mxf::e2m3_encode(-NAN), 0x3f);
  EXPECT_EQ(mxf::e2m3_encode(0.0f), 0x00);
  EXPECT_EQ(mxf::e2m3_encode(-0.0f), 0x20);
  EXPECT_EQ(mxf::e2m3_encode(0.125f), 0x01);    // smallest subnormal
  EXPECT_EQ(mxf::e2m3_encode(0.0625f), 0x00);   // tie with 0: even
  EXPECT_EQ(mxf::e2m3_encode(0.1875f), 0x02);   // tie 1 / 2: even
  EXPECT_EQ(mxf::e2m3_encode(0.9375f), 0x08);   // 7.5 steps: carry to 1.0
  EXPECT_EQ(mxf::e2m3_encode(-5.25f), 0x3a);    // tie 5.0 / 5.5 -> 5.0 (even mantissa)
  EXPECT_EQ(mxf::e2m3_encode(5.75f), 0x1c);     // tie 5.5 / 6.0 -> 6.0
}

TEST(E4M3, DecodeAll256) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float got = mxf::e4m3_decode(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    double want = oracle::mx_magnitude(oracle::kE4M3, static_cast<int>(c & 0x7f));
    if (c & 0x80) want = -want;
    EXPECT_EQ(bits(got), bits(static_cast<float>(want))) << "code " << c;
    EXPECT_EQ(mxf::decode<mxf::E4M3>(c), got);
  }
  EXPECT_EQ(mxf::e4m3_decode(0x7e), 448.0f);
  EXPECT_EQ(mxf::e4m3_decode(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(bits(mxf::e4m3_decode(0x80)), 0x80000000u);
}

TEST(E2M3, DecodeAll64) {
  for (uint32_t c = 0; c < 64; ++c) {
    double want = oracle::mx_magnitude(oracle::kE2M3, static_cast<int>(c & 0x1f));
    if (c & 0x20) want = -want;
    const float got = mxf::e2m3_decode(static_cast<uint8_t>(c));
    EXPECT_EQ(bits(got), bits(static_cast<float>(want))) << "code " << c;
  }
  EXPECT_EQ(mxf::e2m3_decode(0x1f), 7.5f);
  EXPECT_EQ(mxf::e2m3_decode(0x01), 0.125f);
  EXPECT_EQ(bits(mxf::e2m3_decode(0x20)), 0x80000000u);
}

// The branch-free decode behind e2m3_dequantize: the bits of e2m3_decode for every code, and
// e2m3_dequantize is that value times 2^(sb-127) rounded once for every code under every scale
// byte (subnormal and underflowing products), NaN for the NaN scale.
TEST(E2M3, FastDecodeEqualsDecodeAll64AllScales) {
  for (uint32_t c = 0; c < 64; ++c) {
    const float v = mxf::e2m3_decode(static_cast<uint8_t>(c));
    EXPECT_EQ(bits(mxf::e2m3_decode_fast(c)), bits(v)) << c;
    for (uint32_t sb = 0; sb < 256; ++sb) {
      const float got = mxf::e2m3_dequantize(c, static_cast<uint8_t>(sb));
      const float want = sb == 255 ? mxf::u2f(mxf::kF32QNaN)
                                   : mxf::mul_rn(v, mxf::pow2f(static_cast<int>(sb) - 127));
      EXPECT_EQ(bits(got), bits(want)) << "code " << c << " scale byte " << sb;
    }
  }
}

// Decoding then encoding every code gives the code back (NaN codes give the one NaN, 0x7F).
TEST(E4M3E2M3, RoundTripAllCodes) {
  for (uint32_t c = 0; c < 256; ++c) {
    const uint32_t want = (c & 0x7f) == 0x7f ? 0x7fu : c;
    EXPECT_EQ(mxf::e4m3_encode(mxf::e4m3_decode(static_cast<uint8_t>(c))), want) << c;
  }
  for (uint32_t c = 0; c < 64; ++c) {
    EXPECT_EQ(mxf::e2m3_encode(mxf::e2m3_decode(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(E8M0, ToF32All256) {
  for (int sb = 0; sb < 255; ++sb) {
    const float want = static_cast<float>(std::ldexp(1.0, sb - 127));  // exact, 2^-127 included
    EXPECT_EQ(bits(mxf::e8m0_to_f32(static_cast<uint8_t>(sb))), bits(want)) << sb;
  }
  EXPECT_EQ(bits(mxf::e8m0_to_f32(0)), 0x00400000u);  // 2^-127: an fp32 subnormal
  EXPECT_EQ(mxf::e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(bits(mxf::e8m0_to_f32(254)), 0x7f000000u);  // 2^127
  EXPECT_TRUE(std::isnan(mxf::e8m0_to_f32(0xff)));
}

}  // namespace
