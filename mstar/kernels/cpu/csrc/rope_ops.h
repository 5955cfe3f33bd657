// Rotary embedding (HF's non-interleaved halves, every family mstar runs), in place on the q and k
// heads: x [tokens, heads, head_dim] rotates its leading `rotary_dim` dims with the token's rows of
// RotaryEmbedding's table, cos = [c, c] and sin = [-s, s] (each [tokens, ..., rotary_dim]):
//   x[:h] = T(T(x[:h] * cos[:h]) + T(x[h:] * sin[:h])),  x[h:] = T(T(x[h:] * cos[h:]) + T(x[:h] * sin[h:]))
// with h = rotary_dim / 2: the torch path's x * cos + swap_halves(x) * sin, rounded as it rounds.
#pragma once
#include "fused_common.h"

namespace {

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,f16c")
namespace rope_avx2 {
using namespace simd;

template <typename T>
void rotate(T* x, const T* cos, const T* sin, int64_t half) {
  for (int64_t i = 0; i < half; i += kLanes) {
    const __m256 x1 = load_at(x, i, half), x2 = load_at(x + half, i, half);
    const __m256 a = _mm256_add_ps(round_as(x, _mm256_mul_ps(x1, load_at(cos, i, half))),
                                   round_as(x, _mm256_mul_ps(x2, load_at(sin, i, half))));
    const __m256 b = _mm256_add_ps(round_as(x, _mm256_mul_ps(x2, load_at(cos + half, i, half))),
                                   round_as(x, _mm256_mul_ps(x1, load_at(sin + half, i, half))));
    store_at(x, i, half, a);
    store_at(x + half, i, half, b);
  }
}

}  // namespace rope_avx2
MSTAR_TARGET_POP
#endif

void check_rope_table(const at::Tensor& t, const at::Tensor& x, const char* name) {
  TORCH_CHECK(t.scalar_type() == x.scalar_type() && t.dim() >= 2 && t.size(0) == x.size(0) &&
                  t.size(-1) % 2 == 0 && t.size(-1) <= x.size(2) && t.stride(-1) == 1 &&
                  t.numel() == t.size(0) * t.size(-1),
              name, " must be [tokens, ..., rotary_dim] in x's dtype, rotary_dim even and at most head_dim");
}

void rotary_embedding(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  check_fused_supported();
  check_float_dtype(x, "x");
  TORCH_CHECK(x.dim() == 3 && x.stride(2) == 1, "x must be [tokens, heads, head_dim], head_dim contiguous");
  check_rope_table(cos, x, "cos");
  check_rope_table(sin, x, "sin");
  TORCH_CHECK(cos.size(-1) == sin.size(-1), "cos and sin must have the same rotary_dim");
  const int64_t tokens = x.size(0), heads = x.size(1), half = cos.size(-1) / 2;
#ifdef MSTAR_X86
  dispatch_float(x.scalar_type(), [&](auto x_type) {
    using T = decltype(x_type);
    T* xp = static_cast<T*>(x.data_ptr());
    const T* cp = static_cast<const T*>(cos.data_ptr());
    const T* sp = static_cast<const T*>(sin.data_ptr());
    at::parallel_for(0, tokens, row_grain(heads * half * 2), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        for (int64_t h = 0; h < heads; ++h)
          rope_avx2::rotate(xp + t * x.stride(0) + h * x.stride(1), cp + t * cos.stride(0),
                            sp + t * sin.stride(0), half);
    });
  });
#endif
}

}  // namespace
