// The canonical sum of squares (SPEC §3.2) against a literal simulation of the spec, on rows
// chosen so that a contracted FMA, another lane order or another tree order gives another answer.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/rmsnorm.h"
#include "oracle.h"

namespace {

using oracle::bits;

// SPEC §3.2 step by step: pad to whole 8-element chunks with zeros, 256 virtual lanes owning
// chunks l, l+256, ... each accumulating round(p + round(s*s)), then the butterfly. Each fp32
// operation is forced to round by storing through a volatile float.
float spec_sumsq(const std::vector<float>& row) {
  std::vector<float> s(row);
  while (s.size() % 8) s.push_back(0.0f);
  const size_t chunks = s.size() / 8;
  std::vector<float> p(256, 0.0f);
  for (size_t l = 0; l < 256; ++l) {
    for (size_t c = l; c < chunks; c += 256) {
      for (size_t i = 0; i < 8; ++i) {
        volatile float sq = s[8 * c + i] * s[8 * c + i];
        volatile float sum = p[l] + sq;
        p[l] = sum;
      }
    }
  }
  for (size_t d : {128, 64, 32, 16, 8, 4, 2, 1}) {
    for (size_t l = 0; l < d; ++l) {
      volatile float sum = p[l] + p[l + d];
      p[l] = sum;
    }
  }
  return p[0];
}

float core_sumsq(const std::vector<float>& row) {
  return mxf::canonical_sumsq_host(row.data(), static_cast<int64_t>(row.size()));
}

TEST(CanonicalSumsq, HandComputed) {
  EXPECT_EQ(core_sumsq({3.0f}), 9.0f);
  EXPECT_EQ(core_sumsq({1.0f, 2.0f, 3.0f}), 14.0f);
  EXPECT_EQ(core_sumsq(std::vector<float>(8, 0.5f)), 2.0f);
  EXPECT_EQ(core_sumsq(std::vector<float>(13, -2.0f)), 52.0f);  // N not a multiple of 8
  EXPECT_EQ(core_sumsq(std::vector<float>(4096 + 3, 1.0f)), 4099.0f);
  EXPECT_EQ(bits(core_sumsq({0.0f, -0.0f})), 0u);  // partials start at +0
  EXPECT_EQ(bits(core_sumsq({-0.0f})), 0u);
}

// s0 = 1 + 2^-13: s0^2 = 1 + 2^-12 + 2^-26 rounds to p = 1 + 2^-12.
// s1 = 1 + 3*2^-13: s1^2 = 1 + 3*2^-12 + 9*2^-26 rounds to 1 + 3*2^-12 + 2^-23.
// Separately rounded: p + that = 2 + 2^-10 + 2^-23, a tie at ulp 2^-22, to even: 2 + 2^-10.
// Fused, the extra 2^-26 breaks the tie upwards: 2 + 2^-10 + 2^-22.
TEST(CanonicalSumsq, NoFmaContraction) {
  const float s0 = 1.0f + std::ldexp(1.0f, -13), s1 = 1.0f + std::ldexp(3.0f, -13);
  const std::vector<float> row = {s0, s1};
  const float want = 2.0f + std::ldexp(1.0f, -10);
  const float fused = std::fma(s1, s1, s0 * s0);
  ASSERT_NE(bits(fused), bits(want));  // the row does tell the two apart
  EXPECT_EQ(bits(spec_sumsq(row)), bits(want));
  EXPECT_EQ(bits(core_sumsq(row)), bits(want));
}

// Lane 0 holds 2^24 (4096^2), lanes 1..255 hold 1. The butterfly first adds p[128] = 1 to 2^24:
// a tie, to even 2^24; meanwhile the other lanes pair up exactly, so p[0] then gains 2, 4, ...,
// 128: 2^24 + 254. Summing lanes left to right instead loses every 1 (2^24), and the exact sum
// is 2^24 + 255.
TEST(CanonicalSumsq, ButterflyOrder) {
  std::vector<float> row(256 * 8, 0.0f);
  row[0] = 4096.0f;
  for (int l = 1; l < 256; ++l) row[8 * l] = 1.0f;
  const float want = 16777216.0f + 254.0f;
  float sequential = 0.0f;
  for (float v : row) sequential += v * v;
  ASSERT_NE(sequential, want);
  EXPECT_EQ(spec_sumsq(row), want);
  EXPECT_EQ(core_sumsq(row), want);
}

// Lane 0 owns chunks 0, 256 and 512, in that order: 2^24 + 1 + 1 rounds back to 2^24 twice.
// Had it added the two 1s first (or let other lanes hold them), the answer would be 2^24 + 2.
TEST(CanonicalSumsq, LaneOwnsChunksInIncreasingOrder) {
  std::vector<float> row(512 * 8 + 5, 0.0f);
  row[0] = 4096.0f;
  row[256 * 8] = 1.0f;
  row[512 * 8 + 4] = 1.0f;  // in the partial last chunk
  EXPECT_EQ(spec_sumsq(row), 16777216.0f);
  EXPECT_EQ(core_sumsq(row), 16777216.0f);
}

TEST(CanonicalSumsq, RandomRowsMatchSpec) {
  std::mt19937 rng(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int n : {1, 2, 7, 8, 9, 15, 100, 255, 2047, 2048, 2049, 2055, 4100, 6144, 8191, 70001}) {
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<float> row(n);
      // rep 0/1: fp32 values; rep 2: bf16 values; rep 3: wide dynamic range.
      for (float& v : row) {
        v = normal(rng);
        if (rep == 2) v = oracle::from_bits(bits(v) & 0xffff0000u);
        if (rep == 3) v = std::ldexp(v, static_cast<int>(rng() % 40) - 20);
      }
      EXPECT_EQ(bits(core_sumsq(row)), bits(spec_sumsq(row))) << "n=" << n << " rep=" << rep;
    }
  }
}

}  // namespace
