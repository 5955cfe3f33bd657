// The wide-batch path of the quantized linears: y = x @ dequantize(W)^T with float32 x.
//
// At wide batches a linear is compute-bound, and the integer-dot kernels (qdot.h: int16 products
// plus a float scale per block) fall behind a float32 GEMM. So W is dequantized, a tile of rows at a time,
// into a float32 scratch buffer small enough to stay in cache, and an aten GEMM (MKL / oneDNN)
// multiplies x with that tile. Dequantizing is ~N*K work against the GEMM's 2*M*N*K flops. The
// activations stay float32 (no int16 rounding), so this path is the more accurate one. q4 weights
// come in x8 groups (q4_layout.h), put back to Q4_1 rows a group at a time before dequantizing. Python
// (quant/linear.py) and the decode layers (decode_layer.h) choose it from the batch size: from
// wide_rows(level) rows. On a level with avx512_bf16 the tiles are bf16 instead (dequant_bf16.h),
// and on one with AMX they are AMX's own tiles (dequant_amx.h).
#pragma once
#include "cpu_level.h"
#include "dequant_amx.h"
#include "dequant_bf16.h"
#include "q4_layout.h"
#include "weight_checks.h"

namespace {

// Rows of x from which the quantized linears dequantize W to tiles and run a GEMM; fewer rows run
// the integer-dot kernels (qdot.h). One constant per tile kind and weight format, each chosen by
// measurement: benchmark/cpu_kernels.py --threads 1 --batches 1,2,4,8,16,24,32,64,128 on the
// built-in model's shapes (qkv 960 x 576, o 576 x 576, gate_up 3072 x 576, down 576 x 1536, the
// LM head 49152 x 576), best of 5 sweeps; docs/engine.rst "Quantized weights at wide batches".
// - float32 tiles (every level without avx512_bf16): the integer-dot panels beat them at every
//   shape from 64 to 512 rows on AVX2, so only long prefill chunks take them.
constexpr int64_t kWideRowsF32 = 512;
// - bf16 tiles (avx512_bf16; AMD EPYC with 2 cores, 1 thread, 4 MiB tiles), q4: at 16 rows the
//   integer dot took 0.76-0.93x the tiles' time on every shape; at 24 it was mixed (the dot 0.92x
//   to 1.11x); at 32 the tiles took 0.86-1.00x the dot's (gate_up 946 against 1064 us).
constexpr int64_t kWideRowsBf16Q4 = 32;
// - bf16 tiles, int8: at 4 rows mixed (the tiles 0.87-1.31x the dot's time); at 8 the tiles took
//   0.66-0.91x on every shape (the LM head: 6.3 against 9.6 ms).
// Rechecked with 2 threads and 2 MiB tiles, summed over a decode step of the built-in model: q4
// at 24 rows a tie (958 against 954 us per layer), at 32 the tiles 0.93x; int8 at 4 rows the dot
// ahead (14.9 against 17.3 ms), at 8 the tiles 0.87x (19.7 against 22.6 ms).
constexpr int64_t kWideRowsBf16Int8 = 8;
// - AMX tiles (Intel Xeon with AMX, 1 thread, 2026-12-05): q4 at 6 rows the integer dot took
//   0.74x the tiles' time summed over the four layer linears (396 against 537 us), at 8 1.06x
//   (611 against 574); int8 at 4 rows the dot ahead on every shape (the LM head 4006 against 4304
//   us), at 6 the tiles (4360 against 5187).
constexpr int64_t kWideRowsAmxQ4 = 8;
constexpr int64_t kWideRowsAmxInt8 = 6;

// The rows from which a q4 (else int8) linear takes the wide path at `level` (-1: the CPU's).
int64_t wide_rows(bool q4, int64_t level) {
  const int64_t resolved = resolve_level(level);
  if (level_uses(resolved, kFeatAmx)) return q4 ? kWideRowsAmxQ4 : kWideRowsAmxInt8;
  if (!level_uses(resolved, kFeatAvx512Bf16)) return kWideRowsF32;
  return q4 ? kWideRowsBf16Q4 : kWideRowsBf16Int8;
}

constexpr int64_t kWideTileFloats = 1 << 19;  // scratch per tile: 2 MiB of float32 weights
constexpr int64_t kDequantRowGrain = 16;       // weight rows per parallel work item, at least

namespace dequant_scalar {

// Q4_1 rows [n_begin, n_end) of `blocks` into out [n_end - n_begin, K].
void q4_rows(const uint8_t* blocks, int64_t K, int64_t n_begin, int64_t n_end, float* out) {
  const int64_t nb = K / kQ4Block;
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = blocks + (n * nb + b) * kQ4BlockBytes;
      const float d = half_to_float(block), m = half_to_float(block + 2);
      float* dst = out + (n - n_begin) * K + b * kQ4Block;
      for (int j = 0; j < 16; ++j) {
        dst[j] = static_cast<float>(block[4 + j] & 0x0F) * d + m;
        dst[j + 16] = static_cast<float>(block[4 + j] >> 4) * d + m;
      }
    }
}

// int8 rows [n_begin, n_end) times their group scales into out [n_end - n_begin, K].
void int8_rows(const int8_t* weight, const float* scales, int64_t K, int64_t groups, int64_t n_begin,
               int64_t n_end, float* out) {
  const int64_t group = K / groups;
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t k = 0; k < K; ++k)
      out[(n - n_begin) * K + k] = static_cast<float>(weight[n * K + k]) * scales[n * groups + k / group];
}

}  // namespace dequant_scalar

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,fma,f16c")
namespace dequant_avx2 {

inline __m256 widen8(__m128i bytes8, bool is_signed) {  // the low 8 bytes as 8 floats
  return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(bytes8) : _mm256_cvtepu8_epi32(bytes8));
}

void q4_rows(const uint8_t* blocks, int64_t K, int64_t n_begin, int64_t n_end, float* out) {
  const int64_t nb = K / kQ4Block;
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = blocks + (n * nb + b) * kQ4BlockBytes;
      const __m256 d = _mm256_set1_ps(half_to_float(block)), m = _mm256_set1_ps(half_to_float(block + 2));
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 4));
      const __m128i nibbles[2] = {_mm_and_si128(bytes, mask), _mm_and_si128(_mm_srli_epi16(bytes, 4), mask)};
      float* dst = out + (n - n_begin) * K + b * kQ4Block;
      for (int h = 0; h < 2; ++h) {  // h = 0: weights 0..15 (low nibbles), h = 1: 16..31
        _mm256_storeu_ps(dst + 16 * h, _mm256_fmadd_ps(widen8(nibbles[h], false), d, m));
        _mm256_storeu_ps(dst + 16 * h + 8, _mm256_fmadd_ps(widen8(_mm_srli_si128(nibbles[h], 8), false), d, m));
      }
    }
}

void int8_rows(const int8_t* weight, const float* scales, int64_t K, int64_t groups, int64_t n_begin,
               int64_t n_end, float* out) {
  const int64_t group = K / groups;  // a multiple of 32
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t k = 0; k < K; k += 16) {
      const __m256 s = _mm256_set1_ps(scales[n * groups + k / group]);
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(weight + n * K + k));
      float* dst = out + (n - n_begin) * K + k;
      _mm256_storeu_ps(dst, _mm256_mul_ps(widen8(bytes, true), s));
      _mm256_storeu_ps(dst + 8, _mm256_mul_ps(widen8(_mm_srli_si128(bytes, 8), true), s));
    }
}

}  // namespace dequant_avx2
MSTAR_TARGET_POP
#endif

// x [M, K] times the N weight rows that `dequant(begin, end, dst)` writes as float32: a tile of
// rows at a time, dequantized in parallel into a reused scratch, then one GEMM per tile.
template <typename Dequant>
at::Tensor dequant_gemm(const at::Tensor& x_in, int64_t N, int64_t K, Dequant dequant) {
  check_input(x_in, K);
  const at::Tensor x = x_in.contiguous();
  at::Tensor out = at::empty({x.size(0), N}, x.options());
  const int64_t tile = std::max<int64_t>(1, std::min(N, kWideTileFloats / K));
  thread_local std::vector<float> scratch;  // the caller's thread: one tile, reused across calls
  scratch.resize(tile * K);
  float* sp = scratch.data();
  for (int64_t n0 = 0; n0 < N; n0 += tile) {
    const int64_t rows = std::min(tile, N - n0);
    at::parallel_for(n0, n0 + rows, kDequantRowGrain,
                     [&](int64_t begin, int64_t end) { dequant(begin, end, sp + (begin - n0) * K); });
    at::Tensor w = at::from_blob(sp, {rows, K}, x.options());
    at::Tensor y = out.narrow(1, n0, rows);
    at::mm_out(y, x, w.t());
  }
  return out;
}

// Rows [begin, end) of x8 q4 groups (q4_layout.h) as float32 into dst: each group's rows back to
// Q4_1 rows in a scratch first (the tail rows are Q4_1 already), then `q4_rows` dequantizes them.
template <typename Q4Rows>
void x8_rows(const uint8_t* blocks, int64_t N, int64_t K, int64_t begin, int64_t end, float* dst, Q4Rows q4_rows) {
  const int64_t nb = K / kQ4Block, row_bytes = nb * kQ4BlockBytes;
  thread_local std::vector<uint8_t> rows;
  rows.resize(kGroupRows * row_bytes);
  for (int64_t n = begin; n < end;) {
    const int64_t first = n / kGroupRows * kGroupRows, stop = std::min(end, first + kGroupRows);
    const uint8_t* src = blocks + first * row_bytes;
    if (first + kGroupRows <= N) {
      deinterleave_group(src, nb, rows.data());
      src = rows.data();
    }
    q4_rows(src, K, n - first, stop - first, dst + (n - begin) * K);
    n = stop;
  }
}

at::Tensor q4_linear_wide(const at::Tensor& x, const at::Tensor& blocks, int64_t K, int64_t level) {
  check_q4(blocks, K);
  const uint8_t* bp = blocks.data_ptr<uint8_t>();
  const int64_t N = blocks.size(0);
  const int64_t resolved = resolve_level(level);
  if (level_uses(resolved, kFeatAmx)) return q4_linear_amx_tiles(x, bp, N, K);
  if (level_uses(resolved, kFeatAvx512Bf16)) return q4_linear_bf16_tiles(x, bp, N, K);
  const bool simd = level_uses(resolved, kFeatAvx2);
  return dequant_gemm(x, N, K, [&](int64_t begin, int64_t end, float* dst) {
#ifdef MSTAR_X86
    if (simd) return x8_rows(bp, N, K, begin, end, dst, dequant_avx2::q4_rows);
#endif
    x8_rows(bp, N, K, begin, end, dst, dequant_scalar::q4_rows);
  });
}

at::Tensor int8_linear_wide(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scales, int64_t level) {
  check_int8(weight, scales);
  const int64_t N = weight.size(0), K = weight.size(1);
  const int8_t* wp = weight.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  const int64_t groups = scales.size(1);
  const int64_t resolved = resolve_level(level);
  if (level_uses(resolved, kFeatAmx)) return int8_linear_amx_tiles(x, wp, sp, N, K, groups);
  if (level_uses(resolved, kFeatAvx512Bf16)) return int8_linear_bf16_tiles(x, wp, sp, N, K, groups);
  const bool simd = level_uses(resolved, kFeatAvx2);
  return dequant_gemm(x, N, K, [&](int64_t begin, int64_t end, float* dst) {
#ifdef MSTAR_X86
    if (simd) return dequant_avx2::int8_rows(wp, sp, K, groups, begin, end, dst);
#endif
    dequant_scalar::int8_rows(wp, sp, K, groups, begin, end, dst);
  });
}

}  // namespace
