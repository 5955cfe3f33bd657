// bf16 weights times bf16 activations with avx512_bf16's dot product (vdpbf16ps): y = x @ W^T
// (+ bias) for the few rows of a decode step, W bfloat16 [N, K] in its own row-major layout (the
// nn.Linear weight, so a tied LM head reads the embedding's rows and nothing is repacked).
//
// vdpbf16ps multiplies 32 bf16 pairs and adds each pair's two products into one of 16 float32
// lanes: a weight row's 32 features (64 bytes, one cache line) against the same 32 of a row of x
// fill one accumulator, summed across its lanes once at the end of the row. A tile of MT rows of x
// times NT rows of W loads each weight line once for MT products and each line of x once for NT;
// with M <= 8 every row of x is in one tile, so the weights stream from memory once per call. A
// K tail (K not a multiple of 32) is read with masked loads that zero the rest.
//
// Output rows are split over the threads in blocks that stay in L2 while every tile of x passes
// over them (M > 8). Products are exact in float32 (bf16 x bf16), the sums float32: the same
// arithmetic as oneDNN's bf16 linear, in another summation order.
#pragma once
#include "cpu_level.h"

namespace {

// One call's operands: x bf16 bits [M, K], w bf16 bits [N, K], bias float32 [N] or nullptr.
struct Bf16DotProblem {
  const uint16_t* x;
  const uint16_t* w;
  const float* bias;
  at::BFloat16* out;  // [M, N]: each float32 sum rounded once (to nearest even, as Tensor.to)
  int64_t M, N, K;
};

constexpr int64_t kDotChunk = 32;       // features per vdpbf16ps (64 bytes of bf16)
constexpr int kDotMaxRows = 8;          // rows of x in one tile
constexpr int64_t kDotRowBlock = 64;    // rows of W per work item at M > kDotMaxRows (72 KB at K = 576)
// Consecutive tiles read consecutive rows of W, one contiguous stream per thread: each weight
// line is prefetched into L2 kDotAhead features (32 KB) before it is read (past the end of W on
// the last tiles: a prefetch never faults). Measured, one thread, best of 10 rounds on a shared
// VM: 2 KB ahead into L1 ran at 0.7-1.0x oneDNN, 16 to 128 KB into L2 at 1.1-1.9x; 32 KB is in
// the middle (docs/engine.rst).
constexpr int64_t kDotAhead = 16384;

#ifdef __clang__
#define MSTAR_UNROLL MSTAR_PRAGMA(unroll)
#else
#define MSTAR_UNROLL MSTAR_PRAGMA(GCC unroll 64)
#endif

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")
namespace bf16_dot_avx512 {

// MT rows of x (from m0) times NT rows of W (from n0) -> out.
template <int MT, int NT>
void tile(const Bf16DotProblem& p, int64_t m0, int64_t n0) {
  const int64_t K = p.K;
  // Every loop over the tile unrolled, so that the accumulators live in registers (GCC turns a
  // rolled zeroing loop into a memset of a stack array and then keeps the array in memory).
  __m512 acc[MT * NT];  // row i of x, row j of W: acc[i * NT + j]
  MSTAR_UNROLL
  for (int a = 0; a < MT * NT; ++a) acc[a] = _mm512_setzero_ps();
  const uint16_t* w = p.w + n0 * K;
  const uint16_t* x = p.x + m0 * K;
  // One loop body for the whole chunks and the tail (a lambda called twice kept the
  // accumulators on the stack): the mask is all ones but on the last, partial chunk.
  const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (K % kDotChunk)) - 1);
  for (int64_t c = 0; c < K; c += kDotChunk) {
    const __mmask32 mask = c + kDotChunk <= K ? ~__mmask32{0} : tail;
    __m512i wv[NT];
    MSTAR_UNROLL
    for (int j = 0; j < NT; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(w + j * K + c + kDotAhead), _MM_HINT_T1);
      wv[j] = _mm512_maskz_loadu_epi16(mask, w + j * K + c);
    }
    MSTAR_UNROLL
    for (int i = 0; i < MT; ++i) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + i * K + c);
      MSTAR_UNROLL
      for (int j = 0; j < NT; ++j) acc[i * NT + j] = _mm512_dpbf16_ps(acc[i * NT + j], xv, (__m512bh)wv[j]);
    }
  }
  MSTAR_UNROLL
  for (int i = 0; i < MT; ++i)
    MSTAR_UNROLL
    for (int j = 0; j < NT; ++j)
      p.out[(m0 + i) * p.N + n0 + j] =
          at::BFloat16(_mm512_reduce_add_ps(acc[i * NT + j]) + (p.bias ? p.bias[n0 + j] : 0.f));
}

// Rows of W per tile for MT rows of x: up to 16 accumulators, with the weight registers and
// one of x within the 32 zmm registers. One row of x streams 8 rows of W at once.
template <int MT>
constexpr int tile_rows() { return MT == 1 ? 8 : MT == 2 ? 6 : MT <= 4 ? 4 : 2; }

// Rows [m, m + MT) of x against rows [n_begin, n_end) of W.
template <int MT>
void tiles(const Bf16DotProblem& p, int64_t m, int64_t n_begin, int64_t n_end) {
  constexpr int NT = tile_rows<MT>();
  int64_t n = n_begin;
  for (; n + NT <= n_end; n += NT) tile<MT, NT>(p, m, n);
  for (; n < n_end; ++n) tile<MT, 1>(p, m, n);
}

// Rows [m, m + rows) of x (1 <= rows <= kDotMaxRows) against rows [n_begin, n_end) of W.
template <int MT = kDotMaxRows>
void tiles_of(const Bf16DotProblem& p, int64_t m, int64_t rows, int64_t n_begin, int64_t n_end) {
  if constexpr (MT > 0) {
    if (rows == MT) return tiles<MT>(p, m, n_begin, n_end);
    tiles_of<MT - 1>(p, m, rows, n_begin, n_end);
  }
}

void rows(const Bf16DotProblem& p, int64_t n_begin, int64_t n_end) {
  if (p.M <= kDotMaxRows) return tiles_of(p, 0, p.M, n_begin, n_end);
  for (int64_t block = n_begin; block < n_end; block += kDotRowBlock) {
    const int64_t block_end = std::min(block + kDotRowBlock, n_end);
    for (int64_t m = 0; m < p.M; m += kDotMaxRows)  // the block of W stays in cache across tiles of x
      tiles_of(p, m, std::min<int64_t>(kDotMaxRows, p.M - m), block, block_end);
  }
}

}  // namespace bf16_dot_avx512
MSTAR_TARGET_POP
#endif

// y = x @ W^T (+ bias) at a level that uses avx512_bf16 (bf16_linear checks the level and the
// operands): x bfloat16 [M, K], weight bfloat16 [N, K] contiguous, bias float32 [N] or undefined;
// bfloat16 [M, N]. Work items of `block_rows` rows of W.
at::Tensor bf16_dot_linear(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias,
                           int64_t block_rows) {
  const at::Tensor x = x_in.contiguous();
  const int64_t M = x.size(0), N = weight.size(0), K = weight.size(1);
  at::Tensor out = at::empty({M, N}, x.options());
#ifdef MSTAR_X86
  const Bf16DotProblem p{reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>()),
                         reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>()),
                         bias.defined() ? bias.data_ptr<float>() : nullptr, out.data_ptr<at::BFloat16>(), M, N, K};
  at::parallel_for(0, (N + block_rows - 1) / block_rows, 1, [&](int64_t begin, int64_t end) {
    bf16_dot_avx512::rows(p, begin * block_rows, std::min(end * block_rows, N));
  });
#else
  TORCH_CHECK(false, "the avx512_bf16 kernel needs an x86-64 build");
#endif
  return out;
}

}  // namespace
