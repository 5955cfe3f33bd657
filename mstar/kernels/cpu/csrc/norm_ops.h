// RMSNorm on CPU, alone or with the residual add before it (vLLM's fused_add_rms_norm, in place),
// in float32 math for float32 or bfloat16 rows, rounding where the torch path rounds
// (mstar/models/layers.py RMSNorm, mstar/models/offset_rmsnorm.py):
//   plain:   out = T(w * T(x * rstd))     (for float32 the inner rounding is the identity)
//   offset:  out = T(x * rstd * (1 + w))  (Gemma 3, Qwen3.5: weights centred on zero)
// with rstd = 1 / sqrt(mean(x^2) + eps); the fused add first stores residual = T(x + residual)
// and normalizes that.
#pragma once
#include "fused_common.h"

namespace {

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,f16c")
namespace norm_avx2 {
using namespace simd;

template <typename T, typename W>
void normalize(const T* x, const W* w, T* out, int64_t n, float eps, bool offset, __m256 squares) {
  const __m256 rstd = _mm256_set1_ps(1.f / std::sqrt(hsum(squares) / static_cast<float>(n) + eps));
  const __m256 one = _mm256_set1_ps(1.f);
  for (int64_t i = 0; i < n; i += kLanes) {
    const __m256 v = _mm256_mul_ps(load_at(x, i, n), rstd), wv = load_at(w, i, n);
    store_at(out, i, n, offset ? _mm256_mul_ps(v, _mm256_add_ps(one, wv)) : _mm256_mul_ps(wv, round_as(out, v)));
  }
}

template <typename T, typename W>
void rms_norm_row(const T* x, const W* w, T* out, int64_t n, float eps, bool offset) {
  __m256 squares = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += kLanes) {
    const __m256 v = load_at(x, i, n);
    squares = _mm256_add_ps(squares, _mm256_mul_ps(v, v));
  }
  normalize(x, w, out, n, eps, offset, squares);
}

// residual = T(x + residual); x = the norm of the new residual.
template <typename T, typename W>
void add_rms_norm_row(T* x, T* residual, const W* w, int64_t n, float eps, bool offset) {
  __m256 squares = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += kLanes) {
    const __m256 v = round_as(x, _mm256_add_ps(load_at(x, i, n), load_at(residual, i, n)));
    store_at(residual, i, n, v);
    squares = _mm256_add_ps(squares, _mm256_mul_ps(v, v));
  }
  normalize(residual, w, x, n, eps, offset, squares);
}

}  // namespace norm_avx2
MSTAR_TARGET_POP
#endif

void check_norm_weight(const at::Tensor& weight, int64_t width) {
  check_float_dtype(weight, "weight");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == width && weight.is_contiguous(),
              "weight must be contiguous [", width, "], not ", weight.sizes());
}

Rows norm_rows(const at::Tensor& t, const char* name) {
  const std::optional<Rows> rows = rows_of(t);
  TORCH_CHECK(rows.has_value(), name, " needs evenly spaced rows with a contiguous last dimension");
  return *rows;
}

// Calls row(x_row, out_row, w) for every row, the weight as float or bfloat16.
template <typename T, typename Row>
void each_row(const Rows& in, const Rows& out, const at::Tensor& weight, Row row) {
  dispatch_float(weight.scalar_type(), [&](auto w_type) {
    using W = decltype(w_type);
    const W* w = static_cast<const W*>(weight.data_ptr());
    at::parallel_for(0, in.count, row_grain(in.width), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) row(in.row<T>(r), out.row<T>(r), w);
    });
  });
}

void rms_norm_into(const at::Tensor& x, const Rows& in, const Rows& out, const at::Tensor& weight, double eps,
                   bool offset) {
  check_fused_supported();
  check_float_dtype(x, "x");
  check_norm_weight(weight, in.width);
#ifdef MSTAR_X86
  dispatch_float(x.scalar_type(), [&](auto x_type) {
    using T = decltype(x_type);
    each_row<T>(in, out, weight, [&](const T* xr, T* outr, const auto* w) {
      norm_avx2::rms_norm_row(xr, w, outr, in.width, static_cast<float>(eps), offset);
    });
  });
#endif
}

at::Tensor rms_norm(const at::Tensor& x_in, const at::Tensor& weight, double eps, bool offset) {
  const at::Tensor x = rows_of(x_in).has_value() ? x_in : x_in.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  rms_norm_into(x, norm_rows(x, "x"), norm_rows(out, "out"), weight, eps, offset);
  return out;
}

void rms_norm_inplace(at::Tensor& x, const at::Tensor& weight, double eps, bool offset) {
  const Rows rows = norm_rows(x, "x");
  rms_norm_into(x, rows, rows, weight, eps, offset);
}

void fused_add_rms_norm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps, bool offset) {
  check_fused_supported();
  check_float_dtype(x, "x");
  TORCH_CHECK(residual.sizes() == x.sizes() && residual.scalar_type() == x.scalar_type(),
              "residual must have x's shape and dtype");
  const Rows xs = norm_rows(x, "x"), rs = norm_rows(residual, "residual");
  check_norm_weight(weight, xs.width);
#ifdef MSTAR_X86
  dispatch_float(x.scalar_type(), [&](auto x_type) {
    using T = decltype(x_type);
    each_row<T>(xs, rs, weight, [&](const T* xr, T* rr, const auto* w) {
      norm_avx2::add_rms_norm_row(const_cast<T*>(xr), rr, w, xs.width, static_cast<float>(eps), offset);
    });
  });
#endif
}

}  // namespace
