// Independent oracles for the csrc/core tests, written from SPEC.md and IEEE 754 alone. Nothing
// here calls csrc/core: every expected value comes from exact double / long double arithmetic
// or from tables built from the format definitions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace oracle {

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A narrow MX element format with 3 mantissa bits, described only by its field widths.
struct MxFormat {
  int exp_bits;    // 4 (E4M3) or 2 (E2M3)
  int bias;        // 7 or 1
  bool top_is_nan; // E4M3: magnitude 0x7F is NaN; E2M3 has no NaN
  int sign_bit() const { return exp_bits + 3; }
  int num_magnitudes() const { return 1 << (exp_bits + 3); }
};
constexpr MxFormat kE4M3{4, 7, true};
constexpr MxFormat kE2M3{2, 1, false};

// Value of a magnitude code from its fields: subnormal m * 2^(1-bias-3), normal (1+m/8) 2^(e-bias).
inline double mx_magnitude(const MxFormat& f, int mag) {
  const int e = mag >> 3, m = mag & 7;
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - f.bias - 3);
  return std::ldexp(1.0 + m / 8.0, e - f.bias);
}

// Every finite non-negative value of the format, indexed by magnitude code.
inline std::vector<double> mx_table(const MxFormat& f) {
  std::vector<double> t;
  const int n = f.num_magnitudes() - (f.top_is_nan ? 1 : 0);
  for (int mag = 0; mag < n; ++mag) t.push_back(mx_magnitude(f, mag));
  return t;
}

// Nearest finite value by brute force over the whole table, ties to the even code. At or past
// the largest value that value is the nearest (satfinite), and is taken directly: there, far
// past the table, the double distances would round and could tie. Below it, |x| - v is exact in
// double for the two entries nearest x (x has 24 significant bits and sits within a few binades
// of them, or the entry is 0); farther entries may round, but rounding is monotonic, so they never
// tie with or beat the nearest ones.
inline uint32_t mx_encode(const MxFormat& f, const std::vector<double>& table, float x) {
  const uint32_t sign = (bits(x) >> 31) << f.sign_bit();
  if (std::isnan(x)) return f.top_is_nan ? 0x7fu : (sign | (table.size() - 1));
  if (std::isinf(x)) return sign | static_cast<uint32_t>(table.size() - 1);
  const double a = std::fabs(static_cast<double>(x));
  if (a >= table.back()) return sign | static_cast<uint32_t>(table.size() - 1);
  uint32_t best = 0;
  double best_d = INFINITY;
  for (uint32_t c = 0; c < table.size(); ++c) {
    const double d = std::fabs(a - table[c]);
    if (d < best_d || (d == best_d && (c & 1u) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return sign | best;
}

// Exact value of a binary16-style pattern with `mbits` mantissa bits and `ebits` exponent bits
// (bf16: 8/7, fp16: 5/10); Inf and NaN as IEEE.
inline double ieee16_value(uint16_t h, int ebits, int mbits) {
  const int bias = (1 << (ebits - 1)) - 1;
  const int s = h >> 15, e = (h >> mbits) & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
  double v;
  if (e == (1 << ebits) - 1) {
    v = m ? NAN : INFINITY;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - mbits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -mbits), e - bias);
  }
  return s ? -v : v;
}

// IEEE round-to-nearest-even of a finite x to a format with p significant bits (mbits + 1),
// minimum normal exponent emin and maximum exponent emax: exact in double, because x / quantum is
// an integer of at most 53 bits and rint rounds ties to even (the default rounding mode).
// Returns +-Inf on overflow (|x| >= max + half an ulp).
inline double ieee_round(double x, int mbits, int emin, int emax) {
  if (x == 0.0) return x;
  int e;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  const int q = (e - 1 < emin ? emin : e - 1) - mbits;
  const double r = std::ldexp(std::rint(std::ldexp(std::fabs(x), -q)), q);
  const double max = std::ldexp(2.0 - std::ldexp(1.0, -mbits), emax);
  const double v = r > max ? INFINITY : r;
  return std::signbit(x) ? -v : v;
}

// Exact definition of the "ceil" scale byte (SPEC §2): the smallest integer k with
// amax <= vmax * 2^(k-127), amax clamped below at FLT_MIN, k clamped to [0, 254]. Searched
// upwards in long double, where every candidate vmax * 2^(k-127) is exact, from a k that
// provably fails (vmax < 2^9).
inline int scale_ceil(float amax, long double vmax) {
  if (!std::isfinite(amax)) return 0xff;
  long double a = std::fabs(static_cast<long double>(amax));
  if (a < std::ldexp(1.0L, -126)) a = std::ldexp(1.0L, -126);
  int e;
  std::frexp(a, &e);  // a < 2^e; the search starts where vmax * 2^(k-127) < 2^(e-1) <= a
  for (int k = e + 127 - 20;; ++k) {
    if (a <= vmax * std::ldexp(1.0L, k - 127)) return k < 0 ? 0 : (k > 254 ? 254 : k);
  }
}

// "floor" (OCP MX v1.0 §6.3): 2^(floor(log2 amax) - emax), amax clamped below at FLT_MIN.
inline int scale_floor(float amax, int emax) {
  if (!std::isfinite(amax)) return 0xff;
  long double a = std::fabs(static_cast<long double>(amax));
  if (a < std::ldexp(1.0L, -126)) a = std::ldexp(1.0L, -126);
  int e;
  std::frexp(a, &e);
  while (std::ldexp(1.0L, e + 1) <= a) ++e;  // largest e with 2^e <= a
  while (std::ldexp(1.0L, e) > a) --e;
  const int k = e - emax + 127;
  return k < 0 ? 0 : (k > 254 ? 254 : k);
}

}  // namespace oracle
