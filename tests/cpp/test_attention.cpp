// The attention front's per-element numerics (csrc/core/attention.h, SPEC §6) against double
// arithmetic: NeoX RoPE (each product rounded to fp32, the sum rounded once, then to the
// activation dtype) and the fp8 KV-cache encode (IEEE division, then e4m3 satfinite).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/attention.h"
#include "oracle.h"

namespace {

using oracle::bits;

// round_to_dtype(a*c - b*s) with each product rounded to fp32: the products of two floats are
// exact in double, and so is the difference of two floats whose exponents are close (the inputs
// below keep them within a few binades), so one rounding to float reproduces the fp32 result.
float rope_lo_oracle(float lo, float hi, float c, float s, mxf::Dtype act) {
  const float p1 = static_cast<float>(static_cast<double>(lo) * c);
  const float p2 = static_cast<float>(static_cast<double>(hi) * s);
  return mxf::round_to_dtype(static_cast<float>(static_cast<double>(p1) - p2), act);
}
float rope_hi_oracle(float lo, float hi, float c, float s, mxf::Dtype act) {
  const float p1 = static_cast<float>(static_cast<double>(hi) * c);
  const float p2 = static_cast<float>(static_cast<double>(lo) * s);
  return mxf::round_to_dtype(static_cast<float>(static_cast<double>(p1) + p2), act);
}

TEST(Rope, MatchesDoubleOracleOnRandomInputs) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f), angle(0.0f, 6.3f);
  for (const mxf::Dtype act : {mxf::Dtype::kBF16, mxf::Dtype::kFP16}) {
    for (int i = 0; i < 20000; ++i) {
      const float lo = mxf::round_to_dtype(u(rng), act), hi = mxf::round_to_dtype(u(rng), act);
      const float a = angle(rng), c = std::cos(a), s = std::sin(a);
      ASSERT_EQ(bits(mxf::rope_lo(lo, hi, c, s, act)), bits(rope_lo_oracle(lo, hi, c, s, act))) << i;
      ASSERT_EQ(bits(mxf::rope_hi(lo, hi, c, s, act)), bits(rope_hi_oracle(lo, hi, c, s, act))) << i;
    }
  }
}

TEST(Rope, ProductsAreRoundedSeparately) {
  // x*c is not exact in fp32 and s is its rounded value, so x*c - 1*s is 0 with the products
  // rounded on their own, and the rounding error of x*c (not 0) with a fused multiply-add.
  const float x = 1.0f + 0x1p-12f + 0x1p-23f, c = x;
  const float s = static_cast<float>(static_cast<double>(x) * c);
  EXPECT_EQ(bits(mxf::rope_lo(x, 1.0f, c, s, mxf::Dtype::kFP32)), bits(0.0f));
  EXPECT_NE(std::fma(x, c, -s), 0.0f);
}

TEST(KvCache, E4M3OfQuotientMatchesOracle) {
  const auto table = oracle::mx_table(oracle::kE4M3);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-600.0f, 600.0f);
  for (const float scale : {1.0f, 0.5f, 3.0f, 0.0078125f, 1.7f}) {
    for (int i = 0; i < 20000; ++i) {
      const float v = u(rng) * (i % 3 == 0 ? 1e-3f : 1.0f);
      const float q = static_cast<float>(static_cast<double>(v) / scale);  // IEEE division, RNE
      ASSERT_EQ(mxf::kv_cache_e4m3(v, scale), oracle::mx_encode(oracle::kE4M3, table, q)) << v << " / " << scale;
    }
  }
  EXPECT_EQ(mxf::kv_cache_e4m3(1000.0f, 1.0f), 0x7Eu);   // satfinite
  EXPECT_EQ(mxf::kv_cache_e4m3(-INFINITY, 1.0f), 0xFEu);
  EXPECT_EQ(mxf::kv_cache_e4m3(NAN, 1.0f), 0x7Fu);
  EXPECT_EQ(mxf::kv_cache_e4m3(1.0f, 0.0f), 0x7Eu);      // 1 / 0 = Inf saturates
}

TEST(KvCache, SlotValidity) {
  EXPECT_TRUE(mxf::kv_slot_valid(0, 4));
  EXPECT_TRUE(mxf::kv_slot_valid(3, 4));
  EXPECT_FALSE(mxf::kv_slot_valid(4, 4));
  EXPECT_FALSE(mxf::kv_slot_valid(-1, 4));
}

}  // namespace
