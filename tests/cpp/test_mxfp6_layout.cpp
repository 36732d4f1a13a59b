// MXFP6 group bit order and tile offsets (SPEC §4), against layouts built from the rule itself.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "core/mxfp6_layout.h"

namespace {

// SPEC §4 literally: bit b of code i is bit 6i+b of the group's little-endian 192-bit word.
std::vector<uint8_t> pack_by_rule(const uint8_t* codes) {
  std::vector<uint8_t> out(24, 0);
  for (int i = 0; i < 32; ++i) {
    for (int b = 0; b < 6; ++b) {
      const int bit = 6 * i + b;
      if ((codes[i] >> b) & 1) out[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
    }
  }
  return out;
}

TEST(Mxfp6Layout, CodesZeroTo31) {
  uint8_t codes[32];
  for (int i = 0; i < 32; ++i) codes[i] = static_cast<uint8_t>(i);
  // By hand for the first quad: byte0 = c0 | c1<<6 = 0x40; byte1 = c1>>2 | c2<<4 = 0x20;
  // byte2 = c2>>4 | c3<<2 = 0x0C. Code 5 straddles bytes 3 and 4: byte3 = c4 | (c5 & 3)<<6 =
  // 0x44, byte4 = c5>>2 | (c6 & 15)<<4 = 0x61.
  const uint8_t want[24] = {0x40, 0x20, 0x0c, 0x44, 0x61, 0x1c, 0x48, 0xa2, 0x2c,
                            0x4c, 0xe3, 0x3c, 0x50, 0x24, 0x4d, 0x54, 0x65, 0x5d,
                            0x58, 0xa6, 0x6d, 0x5c, 0xe7, 0x7d};
  EXPECT_EQ(std::vector<uint8_t>(want, want + 24), pack_by_rule(codes));
  uint8_t got[24];
  mxf::fp6_pack_group(codes, got);
  EXPECT_EQ(0, std::memcmp(got, want, 24));
  uint8_t back[32];
  mxf::fp6_unpack_group(got, back);
  EXPECT_EQ(0, std::memcmp(back, codes, 32));
}

TEST(Mxfp6Layout, RandomGroupsRoundTrip) {
  std::mt19937 rng(6);
  for (int it = 0; it < 10000; ++it) {
    uint8_t codes[32], got[24], back[32];
    for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() & 0x3f);
    mxf::fp6_pack_group(codes, got);
    EXPECT_EQ(std::vector<uint8_t>(got, got + 24), pack_by_rule(codes));
    mxf::fp6_unpack_group(got, back);
    ASSERT_EQ(0, std::memcmp(back, codes, 32));
  }
  // One code with all bits set at each position finds every straddle.
  for (int i = 0; i < 32; ++i) {
    uint8_t codes[32] = {}, got[24], back[32];
    codes[i] = 0x3f;
    mxf::fp6_pack_group(codes, got);
    EXPECT_EQ(std::vector<uint8_t>(got, got + 24), pack_by_rule(codes)) << i;
    mxf::fp6_unpack_group(got, back);
    EXPECT_EQ(0, std::memcmp(back, codes, 32)) << i;
  }
}

// The offsets of a packed [N/16, K/128, 1536] tensor, by walking it in storage order: tiles
// row-tile major, then the 16 rows of a tile, then its 4 K-groups, 24 bytes each.
TEST(Mxfp6Layout, GroupOffsetsWalkStorageOrder) {
  EXPECT_EQ(mxf::kFp6TileBytes, 1536);
  for (int64_t n : {16, 48}) {
    for (int64_t k : {128, 384, 1024}) {
      std::vector<int64_t> want(n * (k / 32), -1);
      int64_t offset = 0;
      for (int64_t tn = 0; tn < n / 16; ++tn) {
        for (int64_t tk = 0; tk < k / 128; ++tk) {
          for (int64_t r = 0; r < 16; ++r) {
            for (int64_t g = 0; g < 4; ++g) {
              want[(tn * 16 + r) * (k / 32) + tk * 4 + g] = offset;
              offset += 24;
            }
          }
        }
      }
      ASSERT_EQ(offset, (n / 16) * (k / 128) * 1536);
      for (int64_t row = 0; row < n; ++row) {
        for (int64_t g = 0; g < k / 32; ++g) {
          EXPECT_EQ(mxf::fp6_group_offset(row, g, k), want[row * (k / 32) + g])
              << "n=" << n << " k=" << k << " row=" << row << " g=" << g;
        }
      }
    }
  }
  // Named spots: group (r, g) of tile (tn, tk) at 1536 * (tn * K/128 + tk) + 24 * (r * 4 + g).
  EXPECT_EQ(mxf::fp6_group_offset(0, 0, 256), 0);
  EXPECT_EQ(mxf::fp6_group_offset(0, 1, 256), 24);
  EXPECT_EQ(mxf::fp6_group_offset(1, 0, 256), 96);
  EXPECT_EQ(mxf::fp6_group_offset(0, 4, 256), 1536);
  EXPECT_EQ(mxf::fp6_group_offset(16, 0, 256), 3072);
  EXPECT_EQ(mxf::fp6_group_offset(31, 7, 256), 3072 + 1536 + 24 * 63);
}

}  // namespace
