// Integer dot products on activations quantized per block of 32 (like llama.cpp's Q8_1, but to
// int16: int8 activations moved the built-in model's greedy answers, see docs/engine.rst):
//   x ~ dx * qx per block, so  x . w = sum over blocks of dx * dw * (qx . qw)  [+ mw * dx * sum qx
//   for Q4_1's minimum], with qx . qw exact in int32.
// The SIMD levels share one kernel source (qdot_kernel.h) compiled once per level; the scalar
// level is plain C++ with the same arithmetic, for CPUs without AVX2.
#pragma once
#include "cpu_level.h"
#include "simd.h"
#include "q4_layout.h"

namespace {

// q4 weights come in x8 groups (q4_layout.h): under kPanelRows rows of x, tiles of kQ4TileRows rows
// multiply two groups as stored (one vpmaddwd per activation pair gives 8 outputs' products).
// int8 weights: batches under kQdotMT rows stream W one row at a time; up to kPanelRows rows, tiles
// of kQdotMT rows of x times kQdotNT rows of W unpack each weight block once per tile. From
// kPanelRows rows, 8 rows of W at a time are expanded into an int16 panel in L1 (a pair of adjacent
// weights of each of the 8 rows per 256-bit word) that every tile of kPanelMT rows of x then
// multiplies: one int32 vector sums a block's products for 8 outputs, so converting and scaling
// costs 3 instructions per 8 outputs and block, not per output.
constexpr int kQdotMT = 4;
constexpr int kPrefetchBlocks = 8;  // q4: x8 group blocks read ahead
constexpr int kQ4TileRows = 2;  // q4 under kPanelRows rows: rows of x per tile of two x8 groups
constexpr int kQdotNT = 2;
constexpr int kPanelRows = 8;
constexpr int kPanelMT = 4;    // rows of x per panel tile
constexpr int kPanelCols = 8;  // rows of W per panel: one 256-bit vector of float32 outputs
constexpr int kPairsPerBlock = kQ4Block / 2;

constexpr float kActMax = 32767.f;  // |qx| <= this

struct Activations {
  const int16_t* q;  // [M, K]
  const float* d;   // [M, K / 32] block scales
  const float* s;   // [M, K / 32] d * sum of the block's q
  int64_t M, K;
};

namespace qdot_scalar {

void quantize_rows(const float* x, int64_t M, int64_t K, int16_t* q, float* d, float* s) {
  for (int64_t b = 0; b < M * K / kQ4Block; ++b) {
    const float* src = x + b * kQ4Block;
    float a = 0.f;
    for (int k = 0; k < kQ4Block; ++k) a = std::max(a, std::fabs(src[k]));
    const float inv = a > 0.f ? kActMax / a : 0.f;
    int total = 0;
    for (int k = 0; k < kQ4Block; ++k) {
      const int v = static_cast<int>(std::nearbyint(src[k] * inv));
      q[b * kQ4Block + k] = static_cast<int16_t>(v);
      total += v;
    }
    d[b] = a / kActMax;
    s[b] = d[b] * static_cast<float>(total);
  }
}

void q4_rows(const Activations& a, const uint8_t* blocks, int64_t n_begin, int64_t n_end, float* out,
             int64_t N) {
  const int64_t nb = a.K / kQ4Block;
  for (int64_t n = n_begin; n < n_end; n += kGroupRows) {
    int rows;
    const uint8_t* group = group_at(blocks, n, N, nb, &rows);
    for (int c = 0; c < rows; ++c)
      for (int64_t i = 0; i < a.M; ++i) {
        float total = 0.f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* gb = group + b * kGroupBlockBytes;
          const int16_t* xq = a.q + i * a.K + b * kQ4Block;
          int dot = 0;
          for (int j = 0; j < kGroupChunks; ++j)
            for (int e = 0; e < 2; ++e) {
              const int byte = gb[kGroupNibbles + 16 * j + 2 * c + e];
              dot += (byte & 0x0F) * xq[2 * j + e] + (byte >> 4) * xq[2 * j + e + kQ4Block / 2];
            }
          total += half_to_float(gb + 2 * c) * a.d[i * nb + b] * static_cast<float>(dot) +
                   half_to_float(gb + 2 * kGroupRows + 2 * c) * a.s[i * nb + b];
        }
        out[i * N + n + c] = total;
      }
  }
}

void int8_rows(const Activations& a, const int8_t* weight, const float* scales, int64_t groups,
               int64_t n_begin, int64_t n_end, float* out, int64_t N) {
  const int64_t nb = a.K / kQ4Block, per_group = nb / groups;
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t i = 0; i < a.M; ++i) {
      float total = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* w = weight + n * a.K + b * kQ4Block;
        const int16_t* xq = a.q + i * a.K + b * kQ4Block;
        int dot = 0;
        for (int j = 0; j < kQ4Block; ++j) dot += w[j] * xq[j];
        total += scales[n * groups + b / per_group] * a.d[i * nb + b] * static_cast<float>(dot);
      }
      out[i * N + n] = total;
    }
}

}  // namespace qdot_scalar

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,fma,f16c")
#define MSTAR_QDOT_NS qdot_avx2
#define MSTAR_QDOT_DOT(w0, x0, w1, x1) _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1))
#define MSTAR_QDOT_ACC(acc, w, x) _mm256_add_epi32(acc, _mm256_madd_epi16(w, x))
#include "qdot_kernel.h"
#undef MSTAR_QDOT_ACC
#undef MSTAR_QDOT_DOT
#undef MSTAR_QDOT_NS
MSTAR_TARGET_POP

// Compilers that know AVX-VNNI (GCC 11, clang 12) build the VNNI levels; older ones skip them.
#if (defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11)
#define MSTAR_VNNI 1
MSTAR_TARGET_PUSH("avx2,fma,f16c,avxvnni")
#define MSTAR_QDOT_NS qdot_avxvnni
#define MSTAR_QDOT_DOT(w0, x0, w1, x1) _mm256_dpwssd_avx_epi32(_mm256_madd_epi16(w0, x0), w1, x1)
#define MSTAR_QDOT_ACC(acc, w, x) _mm256_dpwssd_avx_epi32(acc, w, x)
#include "qdot_kernel.h"
#undef MSTAR_QDOT_ACC
#undef MSTAR_QDOT_DOT
#undef MSTAR_QDOT_NS
MSTAR_TARGET_POP

MSTAR_TARGET_PUSH("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")
#define MSTAR_QDOT_NS qdot_avx512vnni
#define MSTAR_QDOT_DOT(w0, x0, w1, x1) _mm256_dpwssd_epi32(_mm256_madd_epi16(w0, x0), w1, x1)
#define MSTAR_QDOT_ACC(acc, w, x) _mm256_dpwssd_epi32(acc, w, x)
#include "qdot_kernel.h"
#undef MSTAR_QDOT_ACC
#undef MSTAR_QDOT_DOT
#undef MSTAR_QDOT_NS
MSTAR_TARGET_POP
#endif
#endif

// One level's functions.
struct QdotLevel {
  void (*quantize)(const float*, int64_t, int64_t, int16_t*, float*, float*);
  void (*q4_rows)(const Activations&, const uint8_t*, int64_t, int64_t, float*, int64_t);
  void (*int8_rows)(const Activations&, const int8_t*, const float*, int64_t, int64_t, int64_t, float*,
                    int64_t);
};

#define MSTAR_QDOT_LEVEL(ns) QdotLevel{&ns::quantize_rows, &ns::q4_rows, &ns::int8_rows}

// The functions of `level` (already checked against the CPU), chosen by the features it has: a
// VNNI level this build lacks (an older compiler) runs the AVX2 kernels, which every level but
// the scalar one has.
QdotLevel qdot_level(int64_t level) {
#ifdef MSTAR_X86
#ifdef MSTAR_VNNI
  if (level_uses(level, kFeatAvx512Vnni)) return MSTAR_QDOT_LEVEL(qdot_avx512vnni);
  if (level_uses(level, kFeatAvxVnni)) return MSTAR_QDOT_LEVEL(qdot_avxvnni);
#endif
  if (level_uses(level, kFeatAvx2)) return MSTAR_QDOT_LEVEL(qdot_avx2);
#endif
  return MSTAR_QDOT_LEVEL(qdot_scalar);
}

}  // namespace
