// Shared pieces of the quantized-linear kernels (see ops.cpp): formats, dequantization.
#pragma once
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define MSTAR_AVX2 1
#endif

namespace {

constexpr int64_t kQ4Block = 32;
constexpr int64_t kQ4BlockBytes = 20;
constexpr int64_t kRowTile = 8;  // output rows dequantized together
constexpr int kMT = 6;           // micro-kernel: rows of x ...
constexpr int kNT = 2;           // ... times rows of W

inline float half_to_float(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
#ifdef MSTAR_AVX2
  return _cvtsh_ss(bits);
#else
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
#endif
}

void dequant_q4_row(const uint8_t* row, int64_t K, float* out) {
  for (int64_t b = 0; b < K / kQ4Block; ++b) {
    const uint8_t* block = row + b * kQ4BlockBytes;
    const float d = half_to_float(block), m = half_to_float(block + 2);
    const uint8_t* qs = block + 4;
    float* o = out + b * kQ4Block;
#ifdef MSTAR_AVX2
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(bytes, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    auto put = [&](float* dst, __m128i q8) {
      _mm256_storeu_ps(dst, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q8)), vd, vm));
    };
    put(o, lo);
    put(o + 8, _mm_srli_si128(lo, 8));
    put(o + 16, hi);
    put(o + 24, _mm_srli_si128(hi, 8));
#else
    for (int j = 0; j < 16; ++j) {
      o[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
      o[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
#endif
  }
}

void dequant_int8_row(const int8_t* row, const float* scales, int64_t K, int64_t group, float* out) {
  for (int64_t g = 0; g < K / group; ++g) {
    const float s = scales[g];
    const int8_t* q = row + g * group;
    float* o = out + g * group;
    int64_t k = 0;
#ifdef MSTAR_AVX2
    const __m256 vs = _mm256_set1_ps(s);
    for (; k + 8 <= group; k += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + k));
      _mm256_storeu_ps(o + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), vs));
    }
#endif
    for (; k < group; ++k) o[k] = static_cast<float>(q[k]) * s;
  }
}

#ifdef MSTAR_AVX2
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

}  // namespace
