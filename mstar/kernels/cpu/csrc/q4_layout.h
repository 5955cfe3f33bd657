// The layout of q4 weights the native kernels take ("x8"): GGUF Q4_1 blocks repacked at load
// (mstar/models/quant/formats.py, interleave_q4) so that 8 output rows are interleaved per block
// of 32 weights. A group of 8 rows is nb = K / 32 blocks of 160 bytes (8 x 20: the same bytes as the
// 8 rows' Q4_1 blocks, so a group starts where its first row started):
//   bytes 0..15    the 8 rows' fp16 scales d          (one vcvtph2ps: 8 floats)
//   bytes 16..31   the 8 rows' fp16 minimums m
//   bytes 32..159  8 chunks of 16 bytes; chunk j, byte 2c + e holds row c's weight 2j + e in its low
//                  nibble and weight 2j + 16 + e in its high nibble.
// So one vpmovzxbw of chunk j, masked, holds pair j (weights 2j, 2j + 1) of each of the 8 rows, one
// int16 pair per 32-bit lane, and shifted right by 4 pair j + 8: against the activation pair
// broadcast to 8 lanes, one vpmaddwd gives a pair's products for 8 outputs. The last N % 8 rows
// stay plain Q4_1 rows; the kernels repack them into a zero-padded group when they run.
#pragma once
#include "common.h"

namespace {

constexpr int kGroupRows = 8;
constexpr int64_t kGroupBlockBytes = kGroupRows * kQ4BlockBytes;  // 160
constexpr int kGroupChunks = 8;                                    // 16-byte chunks per group block
constexpr int64_t kGroupNibbles = 2 * 2 * kGroupRows;              // byte offset of chunk 0: after d and m

// `rows` (at most 8) Q4_1 rows of nb blocks each into one group; rows past `rows` are zero.
inline void interleave_group(const uint8_t* q4_rows, int rows, int64_t nb, uint8_t* group) {
  std::memset(group, 0, nb * kGroupBlockBytes);
  for (int c = 0; c < rows; ++c)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* src = q4_rows + (c * nb + b) * kQ4BlockBytes;
      uint8_t* dst = group + b * kGroupBlockBytes;
      std::memcpy(dst + 2 * c, src, 2);
      std::memcpy(dst + 2 * kGroupRows + 2 * c, src + 2, 2);
      for (int j = 0; j < kGroupChunks; ++j) std::memcpy(dst + kGroupNibbles + 16 * j + 2 * c, src + 4 + 2 * j, 2);
    }
}

// The inverse: one group into its 8 Q4_1 rows.
inline void deinterleave_group(const uint8_t* group, int64_t nb, uint8_t* q4_rows) {
  for (int c = 0; c < kGroupRows; ++c)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* src = group + b * kGroupBlockBytes;
      uint8_t* dst = q4_rows + (c * nb + b) * kQ4BlockBytes;
      std::memcpy(dst, src + 2 * c, 2);
      std::memcpy(dst + 2, src + 2 * kGroupRows + 2 * c, 2);
      for (int j = 0; j < kGroupChunks; ++j) std::memcpy(dst + 4 + 2 * j, src + kGroupNibbles + 16 * j + 2 * c, 2);
    }
}

// The group holding output rows [n, n + 8) of a weight with N rows: in place when full, else the
// tail's Q4_1 rows repacked into this thread's scratch. Returns the group and its real row count.
inline const uint8_t* group_at(const uint8_t* blocks, int64_t n, int64_t N, int64_t nb, int* rows) {
  const int64_t row_bytes = nb * kQ4BlockBytes;
  *rows = static_cast<int>(std::min<int64_t>(kGroupRows, N - n));
  if (*rows == kGroupRows) return blocks + n * row_bytes;
  thread_local std::vector<uint8_t> tail;
  tail.resize(nb * kGroupBlockBytes);
  interleave_group(blocks + n * row_bytes, *rows, nb, tail.data());
  return tail.data();
}

}  // namespace
