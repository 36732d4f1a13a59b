// Block scale rules (SPEC §2) against their exact definitions, and whole-block quantization.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/mx.h"
#include "oracle.h"

namespace {

using mxf::ScaleRule;
using oracle::bits;
using oracle::from_bits;

constexpr long double kVmaxE4M3 = 448.0L;
constexpr long double kVmaxE2M3 = 7.5L;

// amax bit patterns at every boundary of both rules, for every fp32 exponent: the powers of two,
// the 1.75 / 1.875 mantissa boundaries and Vmax * 2^k, each with its fp32 neighbours; the
// subnormals, zero, FLT_MIN, FLT_MAX, Inf and NaNs; and random patterns.
std::vector<uint32_t> amax_inputs() {
  std::vector<uint32_t> out;
  for (uint32_t e = 0; e < 256; ++e) {
    for (uint32_t m : {0x000000u, 0x000001u, 0x5fffffu, 0x600000u, 0x600001u, 0x6fffffu,
                       0x700000u, 0x700001u, 0x7ffffeu, 0x7fffffu}) {
      out.push_back((e << 23) | m);
    }
  }
  for (int k = -160; k <= 130; ++k) {
    for (long double vmax : {kVmaxE4M3, kVmaxE2M3}) {
      const float f = static_cast<float>(vmax * std::ldexp(1.0L, k));
      if (!std::isfinite(f) || f == 0.0f || static_cast<long double>(f) != vmax * std::ldexp(1.0L, k)) continue;
      for (uint32_t u : {bits(f) - 1, bits(f), bits(f) + 1}) out.push_back(u);
    }
  }
  std::mt19937 rng(99);
  for (int i = 0; i < 200000; ++i) out.push_back(rng() & 0x7fffffffu);
  return out;
}

void check_rule(uint8_t (*fn)(uint32_t, ScaleRule), ScaleRule rule, long double vmax, int emax,
                const char* name) {
  int failures = 0;
  int saw_low_clamp = 0, saw_nan = 0;
  for (uint32_t u : amax_inputs()) {
    const float amax = from_bits(u);
    const int want = rule == ScaleRule::kCeil ? oracle::scale_ceil(amax, vmax)
                                              : oracle::scale_floor(amax, emax);
    const int got = fn(u, rule);
    saw_low_clamp += want == 0 && std::isfinite(amax) && amax > 0;
    saw_nan += want == 0xff;
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << name << "(amax " << amax << " = 0x" << std::hex << u << std::dec
                    << ") = " << got << ", expected " << want;
    }
  }
  EXPECT_EQ(failures, 0) << name;
  EXPECT_GT(saw_low_clamp, 0) << name;
  EXPECT_GT(saw_nan, 0) << name;
}

TEST(ScaleRule, E4M3CeilExact) {
  check_rule(mxf::scale_from_amax_bits<mxf::E4M3>, ScaleRule::kCeil, kVmaxE4M3, 8, "E4M3 ceil");
}
TEST(ScaleRule, E4M3FloorExact) {
  check_rule(mxf::scale_from_amax_bits<mxf::E4M3>, ScaleRule::kFloor, kVmaxE4M3, 8, "E4M3 floor");
}
TEST(ScaleRule, E2M3CeilExact) {
  check_rule(mxf::scale_from_amax_bits<mxf::E2M3>, ScaleRule::kCeil, kVmaxE2M3, 2, "E2M3 ceil");
}
TEST(ScaleRule, E2M3FloorExact) {
  check_rule(mxf::scale_from_amax_bits<mxf::E2M3>, ScaleRule::kFloor, kVmaxE2M3, 2, "E2M3 floor");
}

// The boundaries named in SPEC §2, spelled out.
TEST(ScaleRule, NamedBoundaries) {
  auto e4 = [](float a, ScaleRule r) { return mxf::scale_from_amax_bits<mxf::E4M3>(bits(a), r); };
  auto e2 = [](float a, ScaleRule r) { return mxf::scale_from_amax_bits<mxf::E2M3>(bits(a), r); };
  const ScaleRule C = ScaleRule::kCeil, F = ScaleRule::kFloor;
  EXPECT_EQ(e4(448.0f, C), 127);                              // 448 * 2^0 fits exactly
  EXPECT_EQ(e4(std::nextafter(448.0f, 1e9f), C), 128);        // one ulp above: next scale
  EXPECT_EQ(e4(std::nextafter(448.0f, 0.0f), C), 127);
  EXPECT_EQ(e4(448.0f * 1024.0f, C), 137);
  EXPECT_EQ(e4(std::nextafter(448.0f * 1024.0f, 1e9f), C), 138);
  EXPECT_EQ(e4(224.0f, C), 126);                              // 448 * 2^-1
  EXPECT_EQ(e4(std::nextafter(224.0f, 1e9f), C), 127);
  EXPECT_EQ(e4(256.0f, F), 127);                              // floor steps at powers of two
  EXPECT_EQ(e4(std::nextafter(256.0f, 0.0f), F), 126);
  EXPECT_EQ(e4(448.0f, F), 127);                              // floor: E - 8 + 127
  EXPECT_EQ(e4(511.9f, F), 127);
  EXPECT_EQ(e4(512.0f, F), 128);
  EXPECT_EQ(e2(7.5f, C), 127);
  EXPECT_EQ(e2(std::nextafter(7.5f, 1e9f), C), 128);          // past 1.875 * 2^2
  EXPECT_EQ(e2(7.5f, F), 127);
  EXPECT_EQ(e2(7.9f, F), 127);                                // floor keeps 7.9 (saturates later)
  EXPECT_EQ(e2(8.0f, F), 128);
  // Below FLT_MIN everything clamps to FLT_MIN first, and both rules clamp at 0.
  for (float a : {0.0f, from_bits(1), from_bits(0x007fffffu), 1.17549435e-38f}) {
    EXPECT_EQ(e4(a, C), 0) << a;
    EXPECT_EQ(e4(a, F), 0) << a;
    EXPECT_EQ(e2(a, C), 0) << a;
    EXPECT_EQ(e2(a, F), 0) << a;
  }
  // The largest finite amax never reaches the 254 clamp: ceil gives 247 (E4M3) / 253 (E2M3).
  const float fmax = from_bits(0x7f7fffffu);
  EXPECT_EQ(e4(fmax, C), 247);
  EXPECT_EQ(e2(fmax, C), 253);
  EXPECT_EQ(e4(fmax, F), 246);
  EXPECT_EQ(e2(fmax, F), 252);
  for (uint32_t u : {0x7f800000u, 0x7f800001u, 0x7fc00000u, 0xffffffffu}) {
    EXPECT_EQ(mxf::scale_from_amax_bits<mxf::E4M3>(u, C), 0xff);
    EXPECT_EQ(mxf::scale_from_amax_bits<mxf::E4M3>(u, F), 0xff);
    EXPECT_EQ(mxf::scale_from_amax_bits<mxf::E2M3>(u, C), 0xff);
  }
}

// Whole blocks (SPEC §2): sb from the amax, codes = convert(v * 2^(127 - sb)). The oracle scales
// in double (exact) and rounds with the brute-force table search.
TEST(ScaleRule, QuantizeBlockMatchesDefinition) {
  const auto t4 = oracle::mx_table(oracle::kE4M3), t2 = oracle::mx_table(oracle::kE2M3);
  std::mt19937 rng(5);
  int failures = 0;
  for (int it = 0; it < 20000; ++it) {
    float v[32];
    const int e = static_cast<int>(rng() % 265) - 150;  // blocks from subnormal to 2^126
    for (float& x : v) {
      const uint32_t bf16 = rng() & 0x807fu;
      // A bf16 value with a random mantissa in [1, 2), times 2^(e + 0..11).
      x = std::ldexp(from_bits(((bf16 & 0x807fu) << 16) | 0x3f800000u),
                     e + static_cast<int>(rng() % 12));
      if (rng() % 8 == 0) x = 0.0f;
    }
    float amax = 0.0f;
    for (float x : v) amax = std::max(amax, std::fabs(x));
    // Scale byte and codes of one format against the definition.
    const auto check = [&](int want_sb, int got_sb, const uint8_t (&codes)[32],
                           const oracle::MxFormat& fmt, const std::vector<double>& table) {
      failures += got_sb != want_sb;
      for (int i = 0; i < 32; ++i) {
        const double scaled = std::ldexp(static_cast<double>(v[i]), 127 - want_sb);
        const float sf = static_cast<float>(scaled);
        if (static_cast<double>(sf) != scaled) continue;  // fp32 product inexact: not defined here
        failures += codes[i] != oracle::mx_encode(fmt, table, sf);
      }
    };
    for (ScaleRule rule : {ScaleRule::kCeil, ScaleRule::kFloor}) {
      const bool ceil = rule == ScaleRule::kCeil;
      uint8_t codes[32];
      const int got4 = mxf::e4m3_quantize_block(v, codes, rule);
      check(ceil ? oracle::scale_ceil(amax, kVmaxE4M3) : oracle::scale_floor(amax, 8), got4, codes,
            oracle::kE4M3, t4);
      const int got2 = mxf::e2m3_quantize_block(v, codes, rule);
      check(ceil ? oracle::scale_ceil(amax, kVmaxE2M3) : oracle::scale_floor(amax, 2), got2, codes,
            oracle::kE2M3, t2);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(ScaleRule, QuantizeBlockSpecialBlocks) {
  float v[32];
  uint8_t codes[32];
  for (int i = 0; i < 32; ++i) v[i] = i % 2 ? -0.0f : 0.0f;  // all-zero: sb 0, signs of -0 kept
  EXPECT_EQ(mxf::e4m3_quantize_block(v, codes, ScaleRule::kCeil), 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(codes[i], i % 2 ? 0x80 : 0x00);
  EXPECT_EQ(mxf::e2m3_quantize_block(v, codes, ScaleRule::kFloor), 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(codes[i], i % 2 ? 0x20 : 0x00);
  for (float bad : {NAN, INFINITY, -INFINITY}) {  // any non-finite: sb 0xFF, every code 0x7F
    for (int i = 0; i < 32; ++i) v[i] = static_cast<float>(i);
    v[17] = bad;
    EXPECT_EQ(mxf::e4m3_quantize_block(v, codes, ScaleRule::kCeil), 0xff);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(codes[i], 0x7f);
    EXPECT_TRUE(std::isnan(mxf::e4m3_dequantize(0x38, 0xff)));
  }
  // A bf16 subnormal scaled by 2^127 survives (SPEC §1): sb 0 multiplies by 2^127.
  for (int i = 0; i < 32; ++i) v[i] = 0.0f;
  v[3] = std::ldexp(1.0f, -133);
  EXPECT_EQ(mxf::e4m3_quantize_block(v, codes, ScaleRule::kCeil), 0);
  EXPECT_EQ(codes[3], 0x08);  // 2^-6, the smallest normal E4M3
  EXPECT_EQ(mxf::e4m3_dequantize(codes[3], 0), std::ldexp(1.0f, -133));
}

}  // namespace
