// Dequantize-then-FMA driver: a row tile or a k-major panel of W in a float32 scratch.
#pragma once
#include "cpu_level.h"
#include "float_avx2.h"

namespace {

// out[m, n] = dot(x[m, :], w[n, :]) for every row of x and one row of W (the portable path).
void rows_kernel_scalar(const float* x, int64_t M, int64_t K, const float* w, float* out, int64_t ldo) {
  for (int64_t m = 0; m < M; ++m) {
    float s = 0.f;
    for (int64_t k = 0; k < K; ++k) s += x[m * K + k] * w[k];
    out[m * ldo] = s;
  }
}

// Batches at least this large use k-major panels (no horizontal sums, x broadcast).
constexpr int64_t kPanelMinRows = 4;

// Shared driver: `dequant(n, dst)` writes output row n of W as K floats.
template <typename Dequant>
at::Tensor tiled_linear(const at::Tensor& x, int64_t N, bool avx2, Dequant dequant) {
  const int64_t M = x.size(0), K = x.size(1);
  at::Tensor out = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
#ifdef MSTAR_X86
  if (avx2 && M >= kPanelMinRows) {
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
#ifdef MSTAR_X86
      if (avx2) {
        for (; r + kNT <= rows; r += kNT)
          rows_kernel_avx2<kNT>(xp, M, K, scratch.data() + r * K, op + n0 + r, N);
        for (; r < rows; ++r) rows_kernel_avx2<1>(xp, M, K, scratch.data() + r * K, op + n0 + r, N);
      }
#endif
      for (; r < rows; ++r) rows_kernel_scalar(xp, M, K, scratch.data() + r * K, op + n0 + r, N);
    }
  });
  return out;
}

}  // namespace
