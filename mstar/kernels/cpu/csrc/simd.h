// The SIMD helpers every AVX2 kernel shares: horizontal sums and maxima of a 256-bit register.
//
// Compiled for plain AVX2, the subset of every SIMD region (common.h's MSTAR_TARGET_PUSH), so each
// region's kernels inline them, the regions that leave out FMA on purpose (fused_simd.h) included.
#pragma once
#include "common.h"

namespace {

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2")
namespace simd {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace simd
MSTAR_TARGET_POP
#endif

}  // namespace
