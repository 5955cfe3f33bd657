// bf16 weights, float32 arithmetic: y = x @ W^T (+ bias) with W stored bfloat16 [N, K] (half the
// bytes of float32) and x float32 or bfloat16; y has x's dtype. For CPUs without native bf16
// (AVX2 only), where torch emulates bf16 matmuls several times slower than float32 at batch.
//
// A bf16 number is the upper half of a float32, so widening is a 16-bit shift. The AVX2 kernel
// loads 16 weights (32 bytes) at once: shifting each 32-bit lane left by 16 gives the even
// weights as float32, masking off the low half gives the odd ones. x is copied once per call into
// the same order (per 16 features: the 8 even, then the 8 odd ones, as float32), so each register
// of widened weights meets its activations without a shuffle; the dot products run in float32 FMA.
// Tiles of 5 rows of x times 2 rows of W share every weight and activation load; output rows
// are split over the threads in blocks of kBfRowBlock rows of W, which stay in L2 while every tile
// of x passes over them. A single row of x streams 8 rows of W per tile instead.
//
// At a level with avx512_bf16, bf16 activations run vdpbf16ps instead (bf16_dot.h): the same
// products, exact in float32, and float32 sums. float32 activations keep this kernel there too, so
// that they are never rounded to bf16.
#pragma once
#include "bf16_dot.h"
#include "cpu_level.h"
#include "simd.h"

namespace {

constexpr int64_t kBfChunk = 16;     // features per weight load (32 bytes of bf16)
// Rows of x per tile times rows of W: 10 accumulators, 4 widened weights and 2 activations fill
// the 16 AVX2 registers (5 x 2 measured ahead of 4 x 2, 3 x 3 and 6 x 2 at M = 8 to 64).
constexpr int kBfMT = 5;
constexpr int kBfNT = 2;
// One row of x streams this many rows of W at a time, each prefetched kBfPrefetch weights (1 KB)
// ahead (measured with 4 rows and without prefetch: the same within the noise of a loaded VM).
constexpr int kBfStreams = 8;
constexpr int64_t kBfPrefetch = 512;
constexpr int64_t kBfRowBlock = 64;  // rows of W per work item (about 72 KB at K = 576: in L2)

inline float bf16_to_float(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, 4);
  return value;
}

// One call's operands. xp: x as float32 [M, K], each whole chunk of 16 features reordered to its
// 8 even then 8 odd features (the tail past the last whole chunk in order).
struct Bf16Problem {
  const float* xp;
  const uint16_t* w;     // [N, K]
  const float* bias;     // [N] or nullptr
  float* out;            // [M, N] float32
  int64_t M, N, K;
};

// x (float32 or bf16 bits) row-major -> the reordered float32 copy.
template <typename T>
void reorder_activations(const T* x, int64_t M, int64_t K, float* xp) {
  const int64_t whole = K / kBfChunk * kBfChunk;
  for (int64_t m = 0; m < M; ++m) {
    const T* src = x + m * K;
    float* dst = xp + m * K;
    for (int64_t c = 0; c < whole; c += kBfChunk)
      for (int j = 0; j < kBfChunk / 2; ++j) {
        dst[c + j] = static_cast<float>(src[c + 2 * j]);
        dst[c + kBfChunk / 2 + j] = static_cast<float>(src[c + 2 * j + 1]);
      }
    for (int64_t k = whole; k < K; ++k) dst[k] = static_cast<float>(src[k]);
  }
}

namespace bf16_scalar {

// Output rows [n_begin, n_end) for every row of x, the same products in plain C++.
void rows(const Bf16Problem& p, int64_t n_begin, int64_t n_end) {
  const int64_t whole = p.K / kBfChunk * kBfChunk;
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint16_t* w = p.w + n * p.K;
    for (int64_t m = 0; m < p.M; ++m) {
      const float* x = p.xp + m * p.K;
      float total = p.bias ? p.bias[n] : 0.f;
      for (int64_t c = 0; c < whole; c += kBfChunk)
        for (int j = 0; j < kBfChunk / 2; ++j)
          total += bf16_to_float(w[c + 2 * j]) * x[c + j] +
                   bf16_to_float(w[c + 2 * j + 1]) * x[c + kBfChunk / 2 + j];
      for (int64_t k = whole; k < p.K; ++k) total += bf16_to_float(w[k]) * x[k];
      p.out[m * p.N + n] = total;
    }
  }
}

}  // namespace bf16_scalar

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,fma")
namespace bf16_avx2 {

// MT rows of x (from m0) times NT rows of W (from n0) -> out.
template <int MT, int NT>
void tile(const Bf16Problem& p, int64_t m0, int64_t n0) {
  const int64_t K = p.K, whole = K / kBfChunk * kBfChunk;
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  __m256 acc[MT][NT];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
  const uint16_t* w = p.w + n0 * K;
  const float* x = p.xp + m0 * K;
  for (int64_t c = 0; c < whole; c += kBfChunk) {
    if constexpr (MT == 1) {  // one row of x: each weight register is used once, right away
      const __m256 xe = _mm256_loadu_ps(x + c), xo = _mm256_loadu_ps(x + c + 8);
      for (int j = 0; j < NT; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(w + j * K + c + kBfPrefetch), _MM_HINT_T0);
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * K + c));
        acc[0][j] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(raw, 16)), xe, acc[0][j]);
        acc[0][j] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(raw, high)), xo, acc[0][j]);
      }
      continue;
    }
    __m256 even[NT], odd[NT];
    for (int j = 0; j < NT; ++j) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * K + c));
      even[j] = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
      odd[j] = _mm256_castsi256_ps(_mm256_and_si256(raw, high));
    }
    for (int i = 0; i < MT; ++i) {
      const __m256 xe = _mm256_loadu_ps(x + i * K + c), xo = _mm256_loadu_ps(x + i * K + c + 8);
      for (int j = 0; j < NT; ++j)
        acc[i][j] = _mm256_fmadd_ps(odd[j], xo, _mm256_fmadd_ps(even[j], xe, acc[i][j]));
    }
  }
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) {
      float total = simd::hsum(acc[i][j]) + (p.bias ? p.bias[n0 + j] : 0.f);
      for (int64_t k = whole; k < K; ++k) total += bf16_to_float(w[j * K + k]) * x[i * K + k];
      p.out[(m0 + i) * p.N + n0 + j] = total;
    }
}

// Rows [m, m + rows) of x (rows <= MT) against NT rows of W from n0, as one tile.
template <int MT, int NT>
void tile_of(const Bf16Problem& p, int64_t m, int64_t n0, int64_t rows) {
  if constexpr (MT > 0) {
    if (rows == MT) return tile<MT, NT>(p, m, n0);
    tile_of<MT - 1, NT>(p, m, n0, rows);
  }
}

// Rows [m, m + rows) of x against rows [n_begin, n_end) of W, NT rows of W per tile.
template <int MT, int NT>
void tiles(const Bf16Problem& p, int64_t m, int64_t rows, int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  for (; n + NT <= n_end; n += NT) tile_of<MT, NT>(p, m, n, rows);
  for (; n < n_end; ++n) tile_of<MT, 1>(p, m, n, rows);
}

void rows(const Bf16Problem& p, int64_t n_begin, int64_t n_end) {
  if (p.M == 1) return tiles<1, kBfStreams>(p, 0, 1, n_begin, n_end);
  for (int64_t block = n_begin; block < n_end; block += kBfRowBlock) {
    const int64_t block_end = std::min(block + kBfRowBlock, n_end);
    for (int64_t m = 0; m < p.M; m += kBfMT)  // the block of W stays in cache across tiles of x
      tiles<kBfMT, kBfNT>(p, m, std::min<int64_t>(kBfMT, p.M - m), block, block_end);
  }
}

}  // namespace bf16_avx2
MSTAR_TARGET_POP
#endif

using Bf16Rows = void (*)(const Bf16Problem&, int64_t, int64_t);

// The row function of `level` (already checked against the CPU): every level with AVX2 shares one kernel.
Bf16Rows bf16_level(int64_t level) {
#ifdef MSTAR_X86
  if (level_uses(level, kFeatAvx2)) return &bf16_avx2::rows;
#endif
  return &bf16_scalar::rows;
}

// Rows of W per work item: at most kBfRowBlock, and a multiple of `threads` items so that every
// thread gets as many (N = 576 on 2 threads: 10 items of 58 rows rather than 9 of 64).
int64_t bf16_block_rows(int64_t N, int64_t threads) {
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t items = ceil_div(ceil_div(N, kBfRowBlock), threads) * threads;
  return ceil_div(ceil_div(N, items), 2) * 2;
}

// y = x @ W^T (+ bias): x float32 or bfloat16 [M, K], weight bfloat16 [N, K], bias [N] or None.
at::Tensor bf16_linear(const at::Tensor& x_in, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                       int64_t level) {
  TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == at::kBFloat16 && weight.dim() == 2 &&
                  weight.is_contiguous(),
              "weight must be a contiguous bfloat16 [N, K] CPU tensor");
  TORCH_CHECK(x_in.device().is_cpu() && x_in.dim() == 2 &&
                  (x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kBFloat16),
              "x must be a 2-d float32 or bfloat16 CPU tensor");
  const int64_t M = x_in.size(0), N = weight.size(0), K = weight.size(1);
  TORCH_CHECK(x_in.size(1) == K, "x has ", x_in.size(1), " features, the weight ", K);
  const int64_t resolved = resolve_level(level);
  at::Tensor b;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == N, "bias must have ", N, " elements");
    b = bias->to(at::kFloat).contiguous();
  }
  const int64_t block = bf16_block_rows(N, at::get_num_threads());
  if (x_in.scalar_type() == at::kBFloat16 && level_uses(resolved, kFeatAvx512Bf16))
    return bf16_dot_linear(x_in, weight, b, block);
  const Bf16Rows rows = bf16_level(resolved);
  const at::Tensor x = x_in.contiguous();
  at::Tensor xp = at::empty({M, K}, x.options().dtype(at::kFloat));
  if (x.scalar_type() == at::kFloat)
    reorder_activations(x.data_ptr<float>(), M, K, xp.data_ptr<float>());
  else
    reorder_activations(x.data_ptr<at::BFloat16>(), M, K, xp.data_ptr<float>());
  at::Tensor out = at::empty({M, N}, xp.options());
  const Bf16Problem p{xp.data_ptr<float>(), reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>()),
                      b.defined() ? b.data_ptr<float>() : nullptr, out.data_ptr<float>(), M, N, K};
  at::parallel_for(0, (N + block - 1) / block, 1, [&](int64_t begin, int64_t end) {
    rows(p, begin * block, std::min(end * block, N));
  });
  return x.scalar_type() == at::kFloat ? out : out.to(at::kBFloat16);
}

}  // namespace
