// Gated activations on the fused gate/up projection's output: x [..., 2n] (gate, then up) ->
// out [..., n] = T(T(act(gate)) * up), float32 math, rounded where the torch path rounds
// (act(gate) is one op in T, the product another).
//   silu:      g / (1 + e^-g)
//   gelu_tanh: g / 2 * (1 + tanh(u)), u = sqrt(2 / pi) * (g + 0.044715 g^3), computed as
//              g / (1 + e^-2u) (the same function, without 1 + tanh's cancellation for g < 0)
#pragma once
#include "fused_common.h"

namespace {

enum class Gate { kSilu, kGeluTanh };

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,f16c")
namespace activation_avx2 {
using namespace simd;

// g / (1 + e^-v): g * sigmoid(v).
inline __m256 times_sigmoid(__m256 g, __m256 v) {
  return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), exp(_mm256_sub_ps(_mm256_setzero_ps(), v))));
}

inline __m256 silu(__m256 g) { return times_sigmoid(g, g); }

inline __m256 gelu_tanh(__m256 g) {
  const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
  const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                 _mm256_add_ps(g, _mm256_mul_ps(_mm256_set1_ps(0.044715f), cube)));
  return times_sigmoid(g, _mm256_add_ps(u, u));
}

template <Gate kGate, typename T>
void gated_row(const T* x, T* out, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes) {
    const __m256 g = load_at(x, i, n), up = load_at(x + n, i, n);
    const __m256 act = round_as(out, kGate == Gate::kSilu ? silu(g) : gelu_tanh(g));
    store_at(out, i, n, _mm256_mul_ps(act, up));
  }
}

}  // namespace activation_avx2
MSTAR_TARGET_POP
#endif

template <Gate kGate>
at::Tensor gate_and_mul(const at::Tensor& x_in) {
  check_fused_supported();
  check_float_dtype(x_in, "x");
  TORCH_CHECK(x_in.dim() >= 1 && x_in.size(-1) % 2 == 0, "x must be [..., 2 * n] (gate, then up)");
  const at::Tensor x = rows_of(x_in).has_value() ? x_in : x_in.contiguous();
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() /= 2;
  at::Tensor out = at::empty(shape, x.options());
  const Rows in = *rows_of(x), outs = *rows_of(out);
#ifdef MSTAR_X86
  dispatch_float(x.scalar_type(), [&](auto x_type) {
    using T = decltype(x_type);
    at::parallel_for(0, in.count, row_grain(in.width), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        activation_avx2::gated_row<kGate>(in.row<T>(r), outs.row<T>(r), outs.width);
    });
  });
#endif
  return out;
}

at::Tensor silu_and_mul(const at::Tensor& x) { return gate_and_mul<Gate::kSilu>(x); }
at::Tensor gelu_tanh_and_mul(const at::Tensor& x) { return gate_and_mul<Gate::kGeluTanh>(x); }

}  // namespace
