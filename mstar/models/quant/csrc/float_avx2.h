// The float32 (dequantize-then-FMA) kernels for AVX2 + FMA + F16C CPUs, compiled for that level
// only (see common.h); tiled.h and ops.cpp call them after checking cpu_level().
#pragma once
#include "common.h"

#ifdef MSTAR_X86
namespace {
MSTAR_TARGET_PUSH("avx2,fma,f16c")

inline float half_to_float_avx2(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

void dequant_q4_row_avx2(const uint8_t* row, int64_t K, float* out) {
  for (int64_t b = 0; b < K / kQ4Block; ++b) {
    const uint8_t* block = row + b * kQ4BlockBytes;
    const float d = half_to_float_avx2(block), m = half_to_float_avx2(block + 2);
    const uint8_t* qs = block + 4;
    float* o = out + b * kQ4Block;
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
  }
}

void dequant_int8_row_avx2(const int8_t* row, const float* scales, int64_t K, int64_t group, float* out) {
  for (int64_t g = 0; g < K / group; ++g) {
    const float s = scales[g];
    const int8_t* q = row + g * group;
    float* o = out + g * group;
    int64_t k = 0;
    const __m256 vs = _mm256_set1_ps(s);
    for (; k + 8 <= group; k += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + k));
      _mm256_storeu_ps(o + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), vs));
    }
    for (; k < group; ++k) o[k] = static_cast<float>(q[k]) * s;
  }
}

// Batches of fewer than kPanelMinRows rows are bound by reading the weights: they dequantize in
// registers, never through a scratch buffer, and factor the q4 minimum out of the block (sum x * (q d + m) = d sum x q +
// m sum x), so each block costs one conversion and one FMA per 8 weights.
void block_sums(const float* x, int64_t M, int64_t K, float* sums) {
  for (int64_t i = 0; i < M * K / kQ4Block; ++i) {
    const float* src = x + i * kQ4Block;
    __m256 total = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8)),
                                 _mm256_add_ps(_mm256_loadu_ps(src + 16), _mm256_loadu_ps(src + 24)));
    sums[i] = hsum(total);
  }
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

void q4_small_batch(const float* x, const float* sums, int64_t M, int64_t K,
                    const uint8_t* blocks_base, int64_t n_begin, int64_t n_end, float* out, int64_t N) {
  const int64_t nb = K / kQ4Block;
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* row = blocks_base + n * nb * kQ4BlockBytes;
    __m256 acc[3] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    float mins[3] = {0.f, 0.f, 0.f};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = row + b * kQ4BlockBytes;
      const float d = half_to_float_avx2(block), m = half_to_float_avx2(block + 2);
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

// out[m, n] = dot(x[m, :], w[n, :]) for an MT x NT tile; K is a multiple of 8.
template <int MT, int NT>
void micro_kernel_avx2(const float* x, int64_t ldx, const float* w, int64_t K, float* out, int64_t ldo) {
  __m256 acc[MT][NT];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k += 8) {
    __m256 wv[NT];
    for (int j = 0; j < NT; ++j) wv[j] = _mm256_loadu_ps(w + j * K + k);
    for (int i = 0; i < MT; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + k);
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) out[i * ldo + j] = hsum(acc[i][j]);
}

template <int NT>
void rows_kernel_avx2(const float* x, int64_t M, int64_t K, const float* w, float* out, int64_t ldo) {
  int64_t m = 0;
  for (; m + kMT <= M; m += kMT) micro_kernel_avx2<kMT, NT>(x + m * K, K, w, K, out + m * ldo, ldo);
  for (; m < M; ++m) micro_kernel_avx2<1, NT>(x + m * K, K, w, K, out + m * ldo, ldo);
}

inline void transpose8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

constexpr int64_t kPanel = 16;  // output rows of one k-major panel (two vectors)
constexpr int kMR = 6;          // rows of x per panel micro-kernel

// rows [16][K] (row-major) -> panel [K][16] (k-major)
void to_panel(const float* rows, int64_t K, float* panel) {
  for (int64_t k0 = 0; k0 < K; k0 += 8)
    for (int64_t j0 = 0; j0 < kPanel; j0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(rows + (j0 + i) * K + k0);
      transpose8(r);
      for (int t = 0; t < 8; ++t) _mm256_storeu_ps(panel + (k0 + t) * kPanel + j0, r[t]);
    }
}

// out[i, 0:valid] = x[i, :] @ panel for MR rows of x: broadcast x, two weight vectors per k.
template <int MR>
void panel_kernel(const float* x, int64_t K, const float* panel, float* out, int64_t ldo,
                  int64_t valid) {
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w0 = _mm256_loadu_ps(panel + k * kPanel), w1 = _mm256_loadu_ps(panel + k * kPanel + 8);
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_broadcast_ss(x + i * K + k);
      acc[i][0] = _mm256_fmadd_ps(xv, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xv, w1, acc[i][1]);
    }
  }
  alignas(32) float row[kPanel];
  for (int i = 0; i < MR; ++i) {
    float* dst = out + i * ldo;
    if (valid == kPanel) {
      _mm256_storeu_ps(dst, acc[i][0]);
      _mm256_storeu_ps(dst + 8, acc[i][1]);
    } else {
      _mm256_store_ps(row, acc[i][0]);
      _mm256_store_ps(row + 8, acc[i][1]);
      std::memcpy(dst, row, valid * sizeof(float));
    }
  }
}

template <int MR>
void panel_rows(const float* x, int64_t M, int64_t K, const float* panel, float* out, int64_t ldo,
                int64_t valid) {
  int64_t m = 0;
  for (; m + MR <= M; m += MR) panel_kernel<MR>(x + m * K, K, panel, out + m * ldo, ldo, valid);
  for (; m < M; ++m) panel_kernel<1>(x + m * K, K, panel, out + m * ldo, ldo, valid);
}
MSTAR_TARGET_POP
}  // namespace
#endif
