// Dequantize-then-FMA kernels: a row tile or a k-major panel of W in a float32 scratch.
#pragma once
#include "common.h"

namespace {

// out[m, n] = dot(x[m, :], w[n, :]) for an MT x NT tile; K is a multiple of 8.
template <int MT, int NT>
void micro_kernel(const float* x, int64_t ldx, const float* w, int64_t K, float* out, int64_t ldo) {
#ifdef MSTAR_AVX2
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
#else
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) {
      float s = 0.f;
      for (int64_t k = 0; k < K; ++k) s += x[i * ldx + k] * w[j * K + k];
      out[i * ldo + j] = s;
    }
#endif
}

template <int NT>
void rows_kernel(const float* x, int64_t M, int64_t K, const float* w, float* out, int64_t ldo) {
  int64_t m = 0;
  for (; m + kMT <= M; m += kMT) micro_kernel<kMT, NT>(x + m * K, K, w, K, out + m * ldo, ldo);
  for (; m < M; ++m) micro_kernel<1, NT>(x + m * K, K, w, K, out + m * ldo, ldo);
}

#ifdef MSTAR_AVX2
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
#endif

// Batches at least this large use k-major panels (no horizontal sums, x broadcast).
constexpr int64_t kPanelMinRows = 4;

// Shared driver: `dequant(n, dst)` writes output row n of W as K floats.
template <typename Dequant>
at::Tensor tiled_linear(const at::Tensor& x, int64_t N, Dequant dequant) {
  const int64_t M = x.size(0), K = x.size(1);
  at::Tensor out = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
#ifdef MSTAR_AVX2
  if (M >= kPanelMinRows) {
    const int64_t panels = (N + kPanel - 1) / kPanel;
    at::parallel_for(0, panels, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> rows(kPanel * K, 0.f), panel(kPanel * K);
      for (int64_t t = begin; t < end; ++t) {
        const int64_t n0 = t * kPanel, valid = std::min(kPanel, N - n0);
        for (int64_t r = 0; r < valid; ++r) dequant(n0 + r, rows.data() + r * K);
        to_panel(rows.data(), K, panel.data());
        panel_rows<kMR>(xp, M, K, panel.data(), op + n0, N, valid);
      }
    });
    return out;
  }
#endif
  const int64_t tiles = (N + kRowTile - 1) / kRowTile;
  at::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(kRowTile * K);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * kRowTile, rows = std::min(kRowTile, N - n0);
      for (int64_t r = 0; r < rows; ++r) dequant(n0 + r, scratch.data() + r * K);
      int64_t r = 0;
      for (; r + kNT <= rows; r += kNT)
        rows_kernel<kNT>(xp, M, K, scratch.data() + r * K, op + n0 + r, N);
      for (; r < rows; ++r) rows_kernel<1>(xp, M, K, scratch.data() + r * K, op + n0 + r, N);
    }
  });
  return out;
}

}  // namespace
