// bf16 / fp16 <-> fp32 (SPEC §1: RNE, NaN stays NaN) against field-by-field and rint oracles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/half_types.h"
#include "oracle.h"

namespace {

using oracle::bits;
using oracle::from_bits;

// bf16: 8 exponent bits, 7 mantissa bits; fp16: 5 and 10.
double bf16_value(uint16_t h) { return oracle::ieee16_value(h, 8, 7); }
double fp16_value(uint16_t h) { return oracle::ieee16_value(h, 5, 10); }

TEST(Bf16, WideningExhaustive) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float got = mxf::bf16_to_f32(static_cast<uint16_t>(h));
    const double want = bf16_value(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      // The payload and sign survive widening (the pattern moves to the high half).
      EXPECT_TRUE(std::isnan(got)) << h;
      EXPECT_EQ(bits(got) >> 16, h);
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << h;
    EXPECT_EQ(std::signbit(got), (h >> 15) != 0) << h;
  }
}

TEST(Fp16, WideningExhaustive) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float got = mxf::fp16_to_f32_portable(static_cast<uint16_t>(h));
    const double want = fp16_value(static_cast<uint16_t>(h));
    EXPECT_EQ(bits(mxf::fp16_to_f32(static_cast<uint16_t>(h))), bits(got)) << h;
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
      EXPECT_EQ(std::signbit(got), (h >> 15) != 0) << h;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << h;
    EXPECT_EQ(std::signbit(got), (h >> 15) != 0) << h;
  }
}

// fp32 inputs that sit on or next to every rounding boundary of a 16-bit format: each
// representable value, the exact midpoint to its successor (a tie), and the fp32 neighbours of
// both; plus fp32 values far below and above the format's range, and random patterns.
std::vector<float> boundary_inputs(double (*value)(uint16_t)) {
  std::vector<float> out;
  for (uint32_t h = 0; h < 0x7fffu; ++h) {
    const double a = value(static_cast<uint16_t>(h)), b = value(static_cast<uint16_t>(h + 1));
    if (!std::isfinite(a)) continue;
    // Past the largest finite value the "successor" is the next power of two (overflow).
    const double next = std::isfinite(b) ? b : std::ldexp(1.0, std::ilogb(a) + 1);
    for (double c : {a, (a + next) / 2}) {
      const float f = static_cast<float>(c);
      if (static_cast<double>(f) != c) continue;  // tie not representable in fp32
      for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, INFINITY)}) {
        out.push_back(g);
        out.push_back(-g);
      }
    }
  }
  for (uint32_t u : {0x00000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x33000000u, 0x33000001u,
                     0x337fffffu, 0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu}) {
    out.push_back(from_bits(u));
    out.push_back(from_bits(u | 0x80000000u));
  }
  std::mt19937 rng(42);
  for (int i = 0; i < 4000000; ++i) out.push_back(from_bits(rng()));
  return out;
}

// Expected narrowing of x: NaN gives the pattern the header names, everything else the IEEE RNE
// value (with overflow to Inf), checked by value and sign on the produced pattern.
template <typename Narrow>
void check_narrowing(Narrow narrow, double (*value)(uint16_t), int mbits, int emin, int emax,
                     uint16_t (*nan_pattern)(float), const char* name) {
  int failures = 0;
  int64_t ties = 0, overflow = 0, subnormal = 0;
  for (float x : boundary_inputs(value)) {
    const uint16_t got = narrow(x);
    bool ok;
    if (std::isnan(x)) {
      ok = got == nan_pattern(x);
    } else {
      const double want = oracle::ieee_round(x, mbits, emin, emax);
      const double g = value(got);
      ok = g == want && std::signbit(g) == std::signbit(want);
      overflow += std::isinf(want) && std::isfinite(x);
      subnormal += want != 0 && std::fabs(want) < std::ldexp(1.0, emin);
      const double ulp = std::ldexp(1.0, std::max(std::ilogb(x), emin) - mbits);
      ties += std::fabs(x) < std::ldexp(1.0, emax + 1) && std::isfinite(x) && x != 0 &&
              std::fmod(std::fabs(static_cast<double>(x)), ulp) == ulp / 2;
    }
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << name << "(" << x << " = 0x" << std::hex << bits(x) << ") = 0x" << got
                    << std::dec << " (" << value(got) << ")";
    }
  }
  EXPECT_EQ(failures, 0) << name;
  EXPECT_GT(ties, 10000) << name;
  EXPECT_GT(overflow, 10) << name;
  EXPECT_GT(subnormal, 1000) << name;
}

// Header comment: any NaN narrows to the canonical NaN 0x7FFF (what the GPU's packed conversions
// give), in both formats, whatever its sign and payload.
uint16_t bf16_nan(float) { return 0x7fffu; }
uint16_t fp16_nan(float) { return 0x7fffu; }

TEST(Bf16, NarrowingBoundariesAndRandom) {
  check_narrowing([](float x) { return mxf::f32_to_bf16(x); }, bf16_value, 7, -126, 127, bf16_nan,
                  "f32_to_bf16");
}

TEST(Fp16, NarrowingBoundariesAndRandom) {
  check_narrowing([](float x) { return mxf::f32_to_fp16_portable(x); }, fp16_value, 10, -14, 15,
                  fp16_nan, "f32_to_fp16_portable");
  check_narrowing([](float x) { return mxf::f32_to_fp16(x); }, fp16_value, 10, -14, 15, fp16_nan,
                  "f32_to_fp16");
}

// The compiler's own _Float16 conversion (libgcc, RNE) is a second, independent oracle.
TEST(Fp16, NarrowingMatchesCompilerFloat16) {
  std::mt19937 rng(7);
  int failures = 0;
  for (int i = 0; i < 4000000; ++i) {
    const float x = from_bits(rng());
    if (std::isnan(x)) continue;
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    failures += mxf::f32_to_fp16_portable(x) != want;
  }
  EXPECT_EQ(failures, 0);
}

// The two-at-once forms (lo in the low half) against the same oracles, and the per-half max.
TEST(HalfTypes, PackedPairs) {
  std::mt19937 rng(11);
  int failures = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float lo = from_bits(rng()), hi = from_bits(rng());
    const uint32_t b = mxf::pack2_bf16(lo, hi), h = mxf::pack2_fp16(lo, hi);
    const float xs[2] = {lo, hi};
    for (int k = 0; k < 2; ++k) {
      const uint16_t gb = static_cast<uint16_t>(b >> (16 * k)), gh = static_cast<uint16_t>(h >> (16 * k));
      if (std::isnan(xs[k])) {
        failures += gb != 0x7fffu || gh != 0x7fffu;
        continue;
      }
      const double wb = oracle::ieee_round(xs[k], 7, -126, 127);
      const double wh = oracle::ieee_round(xs[k], 10, -14, 15);
      failures += bf16_value(gb) != wb || std::signbit(bf16_value(gb)) != std::signbit(wb);
      failures += fp16_value(gh) != wh || std::signbit(fp16_value(gh)) != std::signbit(wh);
    }
    const uint32_t a = rng(), c = rng();
    const uint32_t m = mxf::max_u16x2(a, c);
    failures += (m & 0xffffu) != std::max(a & 0xffffu, c & 0xffffu);
    failures += (m >> 16) != std::max(a >> 16, c >> 16);
  }
  EXPECT_EQ(failures, 0);
}

TEST(HalfTypes, NamedCases) {
  EXPECT_EQ(mxf::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(mxf::f32_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(mxf::f32_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(mxf::f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to Inf
  EXPECT_EQ(mxf::f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(mxf::f32_to_bf16(from_bits(0x00000001u)), 0x0000);  // fp32 subnormal: RNE
  EXPECT_EQ(mxf::f32_to_bf16(from_bits(0x00008000u)), 0x0000);  // tie to even 0
  EXPECT_EQ(mxf::f32_to_bf16(from_bits(0x00018000u)), 0x0002);  // tie to even 2
  EXPECT_EQ(mxf::f32_to_bf16(-NAN), 0x7fff);
  EXPECT_EQ(mxf::f32_to_bf16(oracle::from_bits(0x7f800001u)), 0x7fff);
  EXPECT_EQ(mxf::f32_to_fp16_portable(65504.0f), 0x7bff);
  EXPECT_EQ(mxf::f32_to_fp16_portable(65519.99f), 0x7bff);
  EXPECT_EQ(mxf::f32_to_fp16_portable(65520.0f), 0x7c00);  // tie past max: to Inf
  EXPECT_EQ(mxf::f32_to_fp16_portable(-65520.0f), 0xfc00);
  EXPECT_EQ(mxf::f32_to_fp16_portable(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(mxf::f32_to_fp16_portable(std::ldexp(1.0f, -25)), 0x0000);  // tie to even 0
  EXPECT_EQ(mxf::f32_to_fp16_portable(std::ldexp(3.0f, -25)), 0x0002);  // tie to even 2
  EXPECT_EQ(mxf::f32_to_fp16_portable(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(mxf::f32_to_fp16_portable(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(mxf::f32_to_fp16_portable(std::ldexp(1023.5f, -24)), 0x0400);  // carry to normal
  EXPECT_EQ(mxf::f32_to_fp16_portable(-NAN), 0x7fff);
  EXPECT_EQ(mxf::f32_to_fp16_portable(NAN), 0x7fff);
  EXPECT_EQ(mxf::fp16_to_f32_portable(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(mxf::fp16_to_f32_portable(0x7bff), 65504.0f);
}

}  // namespace
