// The SIMD helpers every AVX2 kernel shares: horizontal sums and maxima of a 256-bit register,
// and for the fused per-token ops 8 floats loaded from float32 or bfloat16, stored back with the
// same rounding as torch, and exp.
//
// Compiled for plain AVX2, the subset of every SIMD region (common.h's MSTAR_TARGET_PUSH), so each
// region's kernels inline them. The region leaves out "fma" on purpose, as do the fused ops'
// regions, so the compiler cannot contract a*b+c into one rounding: the fused ops round where
// torch's separate ops round.
#pragma once
#include <c10/util/BFloat16.h>

#include "common.h"

namespace {

using c10::BFloat16;

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

constexpr int kLanes = 8;

inline __m256 load(const float* p) { return _mm256_loadu_ps(p); }

inline __m256 load(const BFloat16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// The 16-bit patterns of v rounded to bfloat16, nearest even (NaN stays NaN), in 32-bit lanes.
inline __m256i bf16_bits(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), nan);
}

inline void store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }

inline void store(BFloat16* p, __m256 v) {
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_bits(v), bf16_bits(v)), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

// v rounded to T and widened back to float32 (what torch holds after an op in T).
inline __m256 round_as(const float*, __m256 v) { return v; }
inline __m256 round_as(const BFloat16*, __m256 v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits(v), 16));
}

// The first n (< 8) elements, the rest zero; and the store of the first n.
template <typename T>
inline __m256 load_part(const T* p, int64_t n) {
  T buf[kLanes] = {};
  std::memcpy(buf, p, n * sizeof(T));
  return load(buf);
}

template <typename T>
inline void store_part(T* p, __m256 v, int64_t n) {
  T buf[kLanes];
  store(buf, v);
  std::memcpy(p, buf, n * sizeof(T));
}

// Element i .. i + 7 of a row of n, zero past its end.
template <typename T>
inline __m256 load_at(const T* p, int64_t i, int64_t n) {
  return i + kLanes <= n ? load(p + i) : load_part(p + i, n - i);
}

template <typename T>
inline void store_at(T* p, int64_t i, int64_t n, __m256 v) {
  if (i + kLanes <= n)
    store(p + i, v);
  else
    store_part(p + i, v, n - i);
}

// e^x to about 2 ulp (Cephes' expf): x = n ln2 + r, e^r by a degree-6 polynomial, times 2^n.
// Inputs are clamped to [-87.3, 88.7], so the result is never inf or a denormal.
inline __m256 exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  const float coefficients[] = {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                                5.0000001201e-1f};
  for (float c : coefficients) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
  p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), _mm256_set1_ps(1.f));
  // 2^n: n + 127 in the exponent bits; n in [-126, 128], so 2^n is split in two factors.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 b = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, a), b);
}

}  // namespace simd
MSTAR_TARGET_POP
#endif

}  // namespace
