// The MXFP8 GEMM's block math (csrc/core/mx.h): ldexp_rn against the C library's ldexp in double
// (exact) followed by one conversion to float (correctly rounded), and one block term by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "core/mx.h"
#include "oracle.h"

namespace {

using oracle::bits;
using oracle::from_bits;

// v * 2^e rounded once: exact in double for these ranges, then one round to nearest even.
float want_ldexp(float v, int e) { return static_cast<float>(std::ldexp(static_cast<double>(v), e)); }

TEST(Ldexp, MatchesOneRoundingEverywhere) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const float v = from_bits(any_bits(rng));
    if (std::isnan(v)) continue;
    for (int e : {-300, -254, -200, -160, -152, -151, -150, -149, -140, -127, -126, -100, -24, -1,
                  0, 1, 24, 100, 127, 128, 200, 254, 300}) {
      const float got = mxf::ldexp_rn(v, e), want = want_ldexp(v, e);
      ASSERT_EQ(bits(got), bits(want)) << "v bits " << bits(v) << " e " << e;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000000);
}

TEST(Ldexp, TiesToEvenInTheSubnormals) {
  EXPECT_EQ(bits(mxf::ldexp_rn(1.5f, -149)), bits(std::ldexp(1.0f, -148)));  // 1.5 ulp -> 2
  EXPECT_EQ(bits(mxf::ldexp_rn(2.5f, -149)), bits(std::ldexp(1.0f, -148)));  // 2.5 ulp -> 2
  EXPECT_EQ(bits(mxf::ldexp_rn(1.0f, -150)), 0u);                             // half ulp -> 0
  EXPECT_EQ(bits(mxf::ldexp_rn(-1.0f, -150)), 0x80000000u);                   // signed zero
  EXPECT_EQ(bits(mxf::ldexp_rn(3.0f, -150)), bits(std::ldexp(1.0f, -148)));  // 1.5 ulp -> 2
  EXPECT_TRUE(std::isnan(mxf::ldexp_rn(std::nanf(""), 10)));
  EXPECT_TRUE(std::isinf(mxf::ldexp_rn(1.0f, 128)));
}

TEST(Mxfp8Mm, FastDecodeEqualsDecode) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float fast = mxf::e4m3_decode_fast(c), ref = mxf::e4m3_decode(static_cast<uint8_t>(c));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(fast)) << c;
    } else {
      EXPECT_EQ(bits(fast), bits(ref)) << c;
    }
  }
}

// The block term takes one multiply where 2^(sa + sb - 254) is a normal fp32 and ldexp_rn
// elsewhere: every scale pair gives ldexp_rn's bits, on dots that reach the subnormals with ties,
// overflow, and zero, Inf and NaN.
TEST(Mxfp8Mm, BlockTermIsLdexpForEveryScalePair) {
  const float dots[] = {0.0f, -0.0f, 1.0f, -3.0f, 1.5f, 2.5f * std::ldexp(1.0f, -18),
                        -448.0f * 448.0f * 32.0f, std::ldexp(1.0f, -18), 12345.678f,
                        mxf::u2f(0x7f800000u)};
  for (int sa = 0; sa < 255; ++sa) {
    for (int sb = 0; sb < 255; ++sb) {
      for (const float d : dots) {
        const float want = mxf::ldexp_rn(d, sa + sb - 254);
        const float got = mxf::mxfp8_block_term(d, static_cast<uint8_t>(sa), static_cast<uint8_t>(sb));
        ASSERT_EQ(bits(got), bits(want)) << "dot " << d << ", scales " << sa << ", " << sb;
      }
      const float nan_term = mxf::mxfp8_block_term(mxf::u2f(0x7fc00000u), static_cast<uint8_t>(sa),
                                                   static_cast<uint8_t>(sb));
      ASSERT_TRUE(std::isnan(nan_term));
    }
  }
  EXPECT_TRUE(std::isnan(mxf::mxfp8_block_term(1.0f, 255, 127)));
  EXPECT_TRUE(std::isnan(mxf::mxfp8_block_term(1.0f, 127, 255)));
}

TEST(Mxfp8Mm, BlockTermAndRow) {
  uint8_t a[64] = {}, b[64] = {};
  a[3] = 0x7e;  // 448
  b[3] = 0xfe;  // -448
  a[40] = 0x38;  // 1.0, block 1
  b[40] = 0x01;  // 2^-9
  EXPECT_EQ(mxf::e4m3_block_dot(a, b), -448.0f * 448.0f);
  const uint8_t sa[2] = {127, 127}, sb[2] = {130, 255};
  EXPECT_EQ(mxf::mxfp8_block_term(-448.0f * 448.0f, 127, 130), -448.0f * 448.0f * 8.0f);
  EXPECT_TRUE(std::isnan(mxf::mxfp8_row_dot(a, sa, b, sb, 2)));  // NaN scale on block 1
  const uint8_t sb2[2] = {130, 127};
  EXPECT_EQ(mxf::mxfp8_row_dot(a, sa, b, sb2, 2), -448.0f * 448.0f * 8.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(bits(mxf::canonical_nan(mxf::u2f(0xffc00001u))), 0x7fc00000u);
}

}  // namespace
