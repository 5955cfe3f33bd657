// Greedy decoding's argmax over float32 logits [rows, vocab]: the index of each row's largest
// value, the first one on a tie, and the first NaN in a row that has one: Tensor.argmax(dim=-1)'s
// answer. At 32 rows of the built-in model's 49,152 logits torch's reduction took about 1.1 ms on
// 2 threads (AMX machine), 4% of an offline decode step at c=32; this one 0.27 ms. It keeps 8
// running maxima with their indices per row (a compare and two blends per 8 logits), the rows
// split over the threads.
#pragma once
#include "fused_common.h"

namespace {

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,fma,f16c")
namespace argmax_avx2 {

// The first index of row[0 .. n)'s largest value (no NaN in the row), or -1 when it has a NaN.
inline int64_t row_argmax(const float* row, int64_t n) {
  const int64_t lanes = 8, full = n / lanes * lanes;
  int64_t best_i = 0;
  float best = row[0];
  if (full) {
    __m256 top = _mm256_loadu_ps(row);
    __m256i top_i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), index = top_i;
    __m256 nan = _mm256_cmp_ps(top, top, _CMP_UNORD_Q);
    const __m256i step = _mm256_set1_epi32(lanes);
    for (int64_t j = lanes; j < full; j += lanes) {
      index = _mm256_add_epi32(index, step);
      const __m256 v = _mm256_loadu_ps(row + j);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      const __m256 greater = _mm256_cmp_ps(v, top, _CMP_GT_OQ);  // strictly: a lane keeps its first
      top = _mm256_blendv_ps(top, v, greater);
      top_i = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(top_i), _mm256_castsi256_ps(index), greater));
    }
    if (_mm256_movemask_ps(nan)) return -1;
    alignas(32) float tops[8];
    alignas(32) int32_t indices[8];
    _mm256_store_ps(tops, top);
    _mm256_store_si256(reinterpret_cast<__m256i*>(indices), top_i);
    best = tops[0], best_i = indices[0];
    for (int l = 1; l < 8; ++l)  // the largest lane; of equal ones, the first index
      if (tops[l] > best || (tops[l] == best && indices[l] < best_i)) best = tops[l], best_i = indices[l];
  }
  for (int64_t j = full; j < n; ++j) {
    if (std::isnan(row[j])) return -1;
    if (row[j] > best) best = row[j], best_i = j;
  }
  return best_i;
}

}  // namespace argmax_avx2
MSTAR_TARGET_POP
#endif

// Rows with a NaN, and CPUs without AVX2: one pass in order, a NaN beating everything.
inline int64_t row_argmax_scalar(const float* row, int64_t n) {
  int64_t best_i = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (std::isnan(row[j])) return j;
    if (row[j] > row[best_i]) best_i = j;
  }
  return best_i;
}

at::Tensor greedy_argmax(const at::Tensor& logits) {
  TORCH_CHECK(logits.device().is_cpu() && logits.scalar_type() == at::kFloat && logits.dim() == 2 &&
                  logits.size(1) >= 1 && logits.stride(1) == 1,
              "logits must be a float32 CPU tensor [rows, vocab] (vocab at least 1, contiguous)");
  const int64_t rows = logits.size(0), n = logits.size(1), stride = logits.stride(0);
  at::Tensor out = at::empty({rows}, logits.options().dtype(at::kLong));
  const float* base = logits.data_ptr<float>();
  int64_t* tokens = out.data_ptr<int64_t>();
  const bool avx2 = fused_ops_supported();
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = base + r * stride;
      int64_t best = -1;
#ifdef MSTAR_X86
      if (avx2) best = argmax_avx2::row_argmax(row, n);
#endif
      tokens[r] = best >= 0 ? best : row_argmax_scalar(row, n);
    }
  });
  return out;
}

}  // namespace
