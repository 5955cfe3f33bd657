// The wide-batch path of the quantized linears on a level with avx512_bf16: y = x @ dequantize(W)^T
// with W dequantized a tile of rows at a time straight to bf16, x rounded to bf16 once per call,
// and one aten bf16 GEMM (oneDNN's avx512_bf16 matmul) per tile.
//
// Products of bf16 numbers are exact in float32 and oneDNN sums them in float32; each output is
// rounded to bf16 once (aten's bf16 GEMM returns bf16) and returned as float32. So the error
// against float32 x times the float32-dequantized W is that of bf16-rounded activations, weights
// and outputs: a relative 2^-8 of the terms' magnitudes, the arithmetic of a bf16 model's linears.
// A bf16 tile holds twice the weights of the float32 one (dequant_gemm.h) in the same 2 MiB.
//
// q4 weights are read in their x8 groups (q4_layout.h) without putting them back to Q4_1 rows:
// one vpermt2w gathers 4 rows' 16 nibble bytes of a block from the group's 8 chunks.
#pragma once
#include "cpu_level.h"
#include "q4_layout.h"
#include "weight_checks.h"

namespace {

// Weights per tile of a thread: 2 MiB of bf16 scratch (the float32 tile's bytes, twice its
// weights). Each tile costs one GEMM call (about 15 us of overhead at M = 1), so larger tiles won
// until they left the cache. Measured at M = 32, best of 5 (benchmark/cpu_kernels.py), tiles of
// 256K, 512K, 1M and 2M weights: 2 threads, q4 gate_up 530, 482, 457, 461 us, the int8 LM head
// 7.5, 6.8, 6.6, 7.0 ms; 1 thread, gate_up 1039, 979, 924, 912 us, the LM head 16.5, 15.6, 15.2,
// 14.5 ms (4M weights: 19.2 ms). Threads run the tiles, so 1M weights.
constexpr int64_t kBf16TileWeights = 1 << 20;

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")
namespace dequant_bf16_avx512 {

// 32 weights from 32 floats: lo the first 16, hi the last 16 (vcvtne2ps2bf16: round to nearest even).
inline void store_bf16(__m512 lo, __m512 hi, uint16_t* dst) {
  _mm512_storeu_si512(dst, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
}

// One Q4_1 block's 16 nibble bytes (byte j: weight j low, weight j + 16 high) with d, m -> 32 bf16.
inline void q4_block(__m128i bytes, float d, float m, uint16_t* dst) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m512 vd = _mm512_set1_ps(d), vm = _mm512_set1_ps(m);
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(bytes, mask)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask)));
  store_bf16(_mm512_fmadd_ps(lo, vd, vm), _mm512_fmadd_ps(hi, vd, vm), dst);
}

// One full x8 group (8 rows, nb blocks) into dst [8, K].
void q4_group(const uint8_t* group, int64_t nb, uint16_t* dst) {
  const int64_t K = nb * kQ4Block;
  // Chunk j's 16-bit word c holds row c's nibble bytes 2j, 2j + 1: row c's 16 bytes are words
  // 8j + c (j = 0..7) of the 64 words in the two halves of the chunks; rows r0..r0 + 3 in one vector.
  static const struct Order {
    alignas(64) uint16_t words[2][32];
    Order() {
      for (int half = 0; half < 2; ++half)
        for (int r = 0; r < 4; ++r)
          for (int j = 0; j < 8; ++j) words[half][8 * r + j] = static_cast<uint16_t>(8 * j + 4 * half + r);
    }
  } order;
  const __m512i idx[2] = {_mm512_load_si512(order.words[0]), _mm512_load_si512(order.words[1])};
  alignas(32) float d[kGroupRows], m[kGroupRows];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = group + b * kGroupBlockBytes;
    _mm256_store_ps(d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb))));
    _mm256_store_ps(m, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 2 * kGroupRows))));
    const __m512i a = _mm512_loadu_si512(gb + kGroupNibbles), c = _mm512_loadu_si512(gb + kGroupNibbles + 64);
    for (int half = 0; half < 2; ++half) {
      const __m512i rows = _mm512_permutex2var_epi16(a, idx[half], c);
      alignas(64) uint8_t bytes[64];
      _mm512_store_si512(bytes, rows);
      for (int r = 0; r < 4; ++r) {
        const int row = 4 * half + r;
        q4_block(_mm_load_si128(reinterpret_cast<const __m128i*>(bytes + 16 * r)), d[row], m[row],
                 dst + row * K + b * kQ4Block);
      }
    }
  }
}

// `rows` plain Q4_1 rows (a weight's last N % 8) into dst [rows, K].
void q4_rows(const uint8_t* blocks, int64_t rows, int64_t nb, uint16_t* dst) {
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = blocks + (n * nb + b) * kQ4BlockBytes;
      q4_block(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 4)), half_to_float(block),
               half_to_float(block + 2), dst + n * nb * kQ4Block + b * kQ4Block);
    }
}

// int8 rows [n_begin, n_end) times their group scales (groups of a multiple of 32) into dst.
void int8_rows(const int8_t* weight, const float* scales, int64_t K, int64_t groups, int64_t n_begin,
               int64_t n_end, uint16_t* dst) {
  const int64_t group = K / groups;
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t k = 0; k < K; k += kQ4Block) {
      const __m512 s = _mm512_set1_ps(scales[n * groups + k / group]);
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weight + n * K + k));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(bytes)));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(bytes, 1)));
      store_bf16(_mm512_mul_ps(lo, s), _mm512_mul_ps(hi, s), dst + (n - n_begin) * K + k);
    }
}

}  // namespace dequant_bf16_avx512
MSTAR_TARGET_POP
#endif

// y [M, cols] bf16 into columns of out (row stride ld) as float32. Raw pointers, not a tensor copy:
// the worker threads of a parallel region run outside the caller's InferenceMode, where an
// in-place copy into its (inference) output is refused.
inline void widen_columns(const at::BFloat16* y, int64_t M, int64_t cols, float* out, int64_t ld) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < cols; ++j) out[m * ld + j] = static_cast<float>(y[m * cols + j]);
}

// x [M, K] times the N weight rows that `dequant(begin, end, dst)` writes as bf16 (begin and end
// multiples of `grain` rows, but for N). The rows are split over the threads once, and each
// thread runs its own rows a tile at a time: dequantize into its scratch, one single-threaded bf16
// GEMM (a GEMM inside a parallel region runs on the calling thread), widen into y. So a call has
// one parallel region, as the integer-dot kernels do: with a region per step (dequantize, GEMM,
// widen) on each tile, a thread descheduled by another process stalled every region's barrier,
// and offline c=32 ran at half speed on a 2-core machine with other work on it.
template <typename Dequant>
at::Tensor dequant_gemm_bf16(const at::Tensor& x_in, int64_t N, int64_t K, int64_t grain, Dequant dequant) {
  check_input(x_in, K);
  const at::Tensor x = x_in.to(at::kBFloat16).contiguous();
  const int64_t M = x.size(0);
  at::Tensor out = at::empty({M, N}, x_in.options());
  const int64_t tile = std::max<int64_t>(1, kBf16TileWeights / K / grain) * grain;
  at::parallel_for(0, (N + grain - 1) / grain, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<uint16_t> scratch;  // each thread's tile, reused across calls
    const int64_t n_end = std::min(end * grain, N);
    const int64_t rows_max = std::min(tile, n_end - begin * grain);
    if (static_cast<int64_t>(scratch.size()) < rows_max * K) scratch.resize(rows_max * K);
    for (int64_t n0 = begin * grain; n0 < n_end; n0 += tile) {
      const int64_t rows = std::min(tile, n_end - n0);
      dequant(n0, n0 + rows, scratch.data());
      const at::Tensor w = at::from_blob(scratch.data(), {rows, K}, x.options());
      const at::Tensor y = at::mm(x, w.t());  // [M, rows] bf16
      widen_columns(y.data_ptr<at::BFloat16>(), M, rows, out.data_ptr<float>() + n0, N);
    }
  });
  return out;
}

#ifdef MSTAR_X86
// The dequantizers of both bf16 wide paths (these tiles and dequant_amx.h's): rows [begin, end)
// of W as bf16 into dst [end - begin, K], begin a multiple of kGroupRows.
// q4: x8 groups (and the tail's Q4_1 rows).
inline auto q4_bf16_rows(const uint8_t* blocks, int64_t N, int64_t K) {
  return [=](int64_t begin, int64_t end, uint16_t* dst) {
    const int64_t nb = K / kQ4Block;
    for (int64_t n = begin; n < end; n += kGroupRows, dst += kGroupRows * K) {
      const uint8_t* src = blocks + n * nb * kQ4BlockBytes;  // a group starts where its first row did
      if (n + kGroupRows <= N)
        dequant_bf16_avx512::q4_group(src, nb, dst);
      else
        dequant_bf16_avx512::q4_rows(src, std::min(end, N) - n, nb, dst);
    }
  };
}

// int8 rows times their group scales.
inline auto int8_bf16_rows(const int8_t* weight, const float* scales, int64_t K, int64_t groups) {
  return [=](int64_t begin, int64_t end, uint16_t* dst) {
    dequant_bf16_avx512::int8_rows(weight, scales, K, groups, begin, end, dst);
  };
}
#endif

// The q4 wide path on avx512_bf16.
at::Tensor q4_linear_bf16_tiles(const at::Tensor& x, const uint8_t* blocks, int64_t N, int64_t K) {
#ifdef MSTAR_X86
  return dequant_gemm_bf16(x, N, K, kGroupRows, q4_bf16_rows(blocks, N, K));
#else
  TORCH_CHECK(false, "the avx512_bf16 kernels need an x86-64 build");
#endif
}

// The int8 wide path on avx512_bf16.
at::Tensor int8_linear_bf16_tiles(const at::Tensor& x, const int8_t* weight, const float* scales, int64_t N,
                                  int64_t K, int64_t groups) {
#ifdef MSTAR_X86
  return dequant_gemm_bf16(x, N, K, kGroupRows, int8_bf16_rows(weight, scales, K, groups));
#else
  TORCH_CHECK(false, "the avx512_bf16 kernels need an x86-64 build");
#endif
}

}  // namespace
