// MXFP6 E2M3 weight layout (SPEC §4): 32 six-bit codes per 24-byte group, code i at bits
// [6i, 6i+5] of the little-endian 192-bit word; 16x128 tiles of 64 groups, stored row-tile major.
#pragma once

#include <cstdint>

#include "platform.h"

namespace mxf {

constexpr int kFp6GroupBytes = 24;
constexpr int kFp6TileRows = 16;
constexpr int kFp6TileCols = 128;
constexpr int kFp6GroupsPerTileRow = kFp6TileCols / 32;  // 4
constexpr int kFp6TileBytes = kFp6TileRows * kFp6GroupsPerTileRow * kFp6GroupBytes;  // 1536

// Byte offset of group (row n, K-group g) in the packed tensor of a weight with k columns.
MXF_HD int64_t fp6_group_offset(int64_t n, int64_t g, int64_t k) {
  const int64_t tn = n / kFp6TileRows, r = n % kFp6TileRows;
  const int64_t tk = g / kFp6GroupsPerTileRow, gg = g % kFp6GroupsPerTileRow;
  return kFp6TileBytes * (tn * (k / kFp6TileCols) + tk) +
         kFp6GroupBytes * (r * kFp6GroupsPerTileRow + gg);
}

// Four codes (24 bits) go to three bytes; eight such quads make a group.
MXF_HD void fp6_pack_group(const uint8_t* codes, uint8_t* out) {
  for (int q = 0; q < 8; ++q) {
    const uint32_t w = (codes[4 * q] & 0x3fu) | ((codes[4 * q + 1] & 0x3fu) << 6) |
                       ((codes[4 * q + 2] & 0x3fu) << 12) | ((codes[4 * q + 3] & 0x3fu) << 18);
    out[3 * q] = static_cast<uint8_t>(w);
    out[3 * q + 1] = static_cast<uint8_t>(w >> 8);
    out[3 * q + 2] = static_cast<uint8_t>(w >> 16);
  }
}

MXF_HD void fp6_unpack_group(const uint8_t* in, uint8_t* codes) {
  for (int q = 0; q < 8; ++q) {
    const uint32_t w = in[3 * q] | (static_cast<uint32_t>(in[3 * q + 1]) << 8) |
                       (static_cast<uint32_t>(in[3 * q + 2]) << 16);
    for (int i = 0; i < 4; ++i) codes[4 * q + i] = static_cast<uint8_t>((w >> (6 * i)) & 0x3fu);
  }
}

}  // namespace mxf
