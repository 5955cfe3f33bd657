// Kernels for batches of fewer than kPanelMinRows rows: dequantize in registers.
#pragma once
#include "common.h"

namespace {

#ifdef MSTAR_AVX2
// Small batches are bound by reading the weights: they dequantize in registers, never through a
// scratch buffer, and factor the q4 minimum out of the block (sum x * (q d + m) = d sum x q +
// m sum x), so each block costs one conversion and one FMA per 8 weights.
std::vector<float> block_sums(const float* x, int64_t M, int64_t K) {
  std::vector<float> sums(M * K / kQ4Block);
  for (size_t i = 0; i < sums.size(); ++i) {
    const float* src = x + i * kQ4Block;
    __m256 total = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8)),
                                 _mm256_add_ps(_mm256_loadu_ps(src + 16), _mm256_loadu_ps(src + 24)));
    sums[i] = hsum(total);
  }
  return sums;
}

inline __m256 u8_to_ps(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }
inline __m256 i8_to_ps(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Dot products of 32 weights (as floats w[0..3]) with each of the M (< 4) rows of x at block b.
inline void block_dots(const __m256* w, const float* x, int64_t M, int64_t K, int64_t k0, __m256* dots) {
  for (int64_t i = 0; i < M; ++i) {
    const float* xb = x + i * K + k0;
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(xb), w[0]);
    p = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 8), w[1], p);
    p = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 16), w[2], p);
    dots[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 24), w[3], p);
  }
}

void q4_small_batch(const float* x, const std::vector<float>& sums, int64_t M, int64_t K,
                    const uint8_t* blocks_base, int64_t n_begin, int64_t n_end, float* out, int64_t N) {
  const int64_t nb = K / kQ4Block;
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* row = blocks_base + n * nb * kQ4BlockBytes;
    __m256 acc[3] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    float mins[3] = {0.f, 0.f, 0.f};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = row + b * kQ4BlockBytes;
      const float d = half_to_float(block), m = half_to_float(block + 2);
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 4));
      const __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
      const __m256 w[4] = {u8_to_ps(lo), u8_to_ps(_mm_srli_si128(lo, 8)), u8_to_ps(hi),
                           u8_to_ps(_mm_srli_si128(hi, 8))};
      __m256 dots[3];
      block_dots(w, x, M, K, b * kQ4Block, dots);
      const __m256 vd = _mm256_set1_ps(d);
      for (int64_t i = 0; i < M; ++i) {
        acc[i] = _mm256_fmadd_ps(dots[i], vd, acc[i]);
        mins[i] += m * sums[i * nb + b];
      }
    }
    for (int64_t i = 0; i < M; ++i) out[i * N + n] = hsum(acc[i]) + mins[i];
  }
}

// The same for int8 weights with scales per group of `group` (a multiple of 32) weights.
void int8_small_batch(const float* x, int64_t M, int64_t K, const int8_t* weight,
                      const float* scales, int64_t groups, int64_t n_begin, int64_t n_end,
                      float* out, int64_t N) {
  const int64_t nb = K / kQ4Block, per_group = nb / groups;
  for (int64_t n = n_begin; n < n_end; ++n) {
    const int8_t* row = weight + n * K;
    __m256 acc[3] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* q = row + b * kQ4Block;
      const __m256 w[4] = {i8_to_ps(q), i8_to_ps(q + 8), i8_to_ps(q + 16), i8_to_ps(q + 24)};
      __m256 dots[3];
      block_dots(w, x, M, K, b * kQ4Block, dots);
      const __m256 vs = _mm256_set1_ps(scales[n * groups + b / per_group]);
      for (int64_t i = 0; i < M; ++i) acc[i] = _mm256_fmadd_ps(dots[i], vs, acc[i]);
    }
    for (int64_t i = 0; i < M; ++i) out[i * N + n] = hsum(acc[i]);
  }
}
#endif

}  // namespace
