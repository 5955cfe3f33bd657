// The wide path of the quantized linears on a CPU with AMX: y = x @ dequantize(W)^T with W
// dequantized straight into the A tiles of AMX's bf16 multiply (tdpbf16ps), no GEMM library call.
//
// The bf16 tiles (dequant_bf16.h) hand each dequantized tile to oneDNN, which reorders it into its
// own blocked layout before multiplying: a second pass over every weight on every call, the cost
// that left q4 at 0.81x a prepacked bf16 model at 32 streams. Here the weights need no reorder: an
// A tile is 16 rows of 32 bf16, and a Q4_1 block (or 32 int8 weights of a group) is exactly one
// such row. So a thread dequantizes a strip of 32 weight rows (dequant_bf16.h's functions) into a
// cache-resident scratch, and each 32-weight step of K loads two A tiles from it, while x (few
// rows, packed once a call) is the B side: 16 rows of x as 16 columns of bf16 pairs (AMX's VNNI
// layout). C tiles are [16 weight rows, 16 rows of x] in float32, written transposed into y.
//
// The arithmetic is the bf16 tiles': x and W rounded to bf16, products exact, sums in float32; the
// output is not rounded to bf16 (it stays float32), so this path is at least as close to float32.
// Linux lends a process the AMX registers only on request (cpu_level.h asks once, at detection).
#pragma once
#include "cpu_level.h"
#include "dequant_bf16.h"

namespace {

constexpr int64_t kAmxTileRows = 16;                  // rows of every tile configured here
constexpr int64_t kAmxStep = 32;                       // bf16 per A-tile row: one Q4_1 block of K
constexpr int64_t kAmxStripRows = 2 * kAmxTileRows;    // weight rows a thread dequantizes at once

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16,amx-tile,amx-bf16")
namespace amx {

// Tiles 0-3: C (float32 sums), 4-5: A (weights), 6-7: B (x); each 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void configure() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.colsb[t] = 64, config.rows[t] = kAmxTileRows;
  // GCC 12's ldtilecfg builtin does not say it reads the config: without this barrier the stores
  // above are dropped as dead and the tiles are left unconfigured (SIGILL at the first tile use).
  asm volatile("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
}

void release() { _tile_release(); }

// x [M, K] bf16 into B tiles: block b of 16 rows of x is K/2 rows of 16 pairs, pair j of row r
// being x[16b + j][2r], x[16b + j][2r + 1] (zero past M).
void pack_x(const uint32_t* x, int64_t M, int64_t K, uint32_t* dst) {
  const int64_t pairs = K / 2, blocks = (M + kAmxTileRows - 1) / kAmxTileRows;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t r = 0; r < pairs; ++r)
      for (int64_t j = 0; j < kAmxTileRows; ++j) {
        const int64_t m = b * kAmxTileRows + j;
        dst[(b * pairs + r) * kAmxTileRows + j] = m < M ? x[m * pairs + r] : 0;
      }
}

// A stored C tile c (weight rows i, rows of x j) into y[m0 + j, n0 + i] for the rows that exist.
// (The tile intrinsics take their tile number as a literal: STORE_C stores tile t, then this.)
inline void store_transposed(const float (*c)[kAmxTileRows], float* y, int64_t M, int64_t N, int64_t m0,
                             int64_t n0) {
  const int64_t rows = std::min(kAmxTileRows, M - m0), cols = std::min(kAmxTileRows, N - n0);
  if (cols <= 0) return;  // a strip's second tile past N
  const __mmask16 mask = cols == kAmxTileRows ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
  const __m512i column = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(kAmxTileRows));
  for (int64_t j = 0; j < rows; ++j)  // column j of c is row m0 + j of y
    _mm512_mask_storeu_ps(y + (m0 + j) * N + n0, mask,
                          _mm512_i32gather_ps(_mm512_add_epi32(column, _mm512_set1_epi32(j)), &c[0][0], 4));
}

#define MSTAR_AMX_STORE_C(t, m0, n0)          \
  do {                                        \
    _tile_stored(t, c, 64);                   \
    store_transposed(c, y, M, N, m0, n0);     \
  } while (0)

// One strip: w [32, K] bf16 (rows past N zero) times every block of packed x, into y.
void strip(const uint16_t* w, const uint32_t* xp, int64_t M, int64_t N, int64_t K, int64_t n0, float* y) {
  const int64_t steps = K / kAmxStep, stride = 2 * K, block = K / 2 * kAmxTileRows;
  const int64_t blocks = (M + kAmxTileRows - 1) / kAmxTileRows;
  const uint16_t* w1 = w + kAmxTileRows * K;
  alignas(64) float c[kAmxTileRows][kAmxTileRows];
  for (int64_t b = 0; b < blocks; b += 2) {
    const uint32_t* x0 = xp + b * block;
    _tile_zero(0);
    _tile_zero(1);
    if (b + 1 < blocks) {  // two blocks of x: four C tiles
      const uint32_t* x1 = x0 + block;
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t s = 0; s < steps; ++s) {
        _tile_loadd(4, w + s * kAmxStep, stride);
        _tile_loadd(5, w1 + s * kAmxStep, stride);
        _tile_loadd(6, x0 + s * kAmxStep / 2 * kAmxTileRows, 64);
        _tile_loadd(7, x1 + s * kAmxStep / 2 * kAmxTileRows, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 5, 6);
        _tile_dpbf16ps(2, 4, 7);
        _tile_dpbf16ps(3, 5, 7);
      }
      MSTAR_AMX_STORE_C(2, (b + 1) * kAmxTileRows, n0);
      MSTAR_AMX_STORE_C(3, (b + 1) * kAmxTileRows, n0 + kAmxTileRows);
    } else {
      for (int64_t s = 0; s < steps; ++s) {
        _tile_loadd(4, w + s * kAmxStep, stride);
        _tile_loadd(5, w1 + s * kAmxStep, stride);
        _tile_loadd(6, x0 + s * kAmxStep / 2 * kAmxTileRows, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 5, 6);
      }
    }
    MSTAR_AMX_STORE_C(0, b * kAmxTileRows, n0);
    MSTAR_AMX_STORE_C(1, b * kAmxTileRows, n0 + kAmxTileRows);
  }
}

#undef MSTAR_AMX_STORE_C
}  // namespace amx
MSTAR_TARGET_POP
#endif

// x [M, K] (K a multiple of 32) times the N weight rows that `dequant(begin, end, dst)` writes as
// bf16 [end - begin, K] (begin a multiple of 32, end of 8 but for N). One parallel region a call
// (see dequant_gemm_bf16 on why one), whose threads claim strips of 32 rows (claimed_parallel).
template <typename Dequant>
at::Tensor amx_gemm_bf16(const at::Tensor& x_in, int64_t N, int64_t K, Dequant dequant) {
  check_input(x_in, K);
  TORCH_CHECK(K % kAmxStep == 0, "the AMX tiles need K a multiple of ", kAmxStep, ", got ", K);
  at::Tensor out = at::empty({x_in.size(0), N}, x_in.options().dtype(at::kFloat));
#ifdef MSTAR_X86
  const at::Tensor x = x_in.to(at::kBFloat16).contiguous();
  const int64_t M = x.size(0), blocks = (M + kAmxTileRows - 1) / kAmxTileRows;
  std::vector<uint32_t> packed(blocks * kAmxTileRows * K / 2);
  amx::pack_x(reinterpret_cast<const uint32_t*>(x.data_ptr<at::BFloat16>()), M, K, packed.data());
  float* y = out.data_ptr<float>();
  const int64_t strips = (N + kAmxStripRows - 1) / kAmxStripRows;
  claimed_parallel(strips, [&](const auto& claim) {
    thread_local std::vector<uint16_t> scratch;
    if (static_cast<int64_t>(scratch.size()) < kAmxStripRows * K + 32) scratch.resize(kAmxStripRows * K + 32);
    // 64-byte aligned rows: K * 2 bytes is a multiple of 64
    uint16_t* w = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t{63});
    amx::configure();
    for (int64_t s = claim(); s < strips; s = claim()) {
      const int64_t n0 = s * kAmxStripRows, rows = std::min(kAmxStripRows, N - n0);
      dequant(n0, n0 + rows, w);
      if (rows < kAmxStripRows) std::fill(w + rows * K, w + kAmxStripRows * K, uint16_t{0});
      amx::strip(w, packed.data(), M, N, K, n0, y);
    }
    amx::release();
  });
#else
  TORCH_CHECK(false, "the AMX kernels need an x86-64 build");
#endif
  return out;
}

// The q4 wide path on AMX.
at::Tensor q4_linear_amx_tiles(const at::Tensor& x, const uint8_t* blocks, int64_t N, int64_t K) {
#ifdef MSTAR_X86
  return amx_gemm_bf16(x, N, K, q4_bf16_rows(blocks, N, K));
#else
  TORCH_CHECK(false, "the AMX kernels need an x86-64 build");
#endif
}

// The int8 wide path on AMX.
at::Tensor int8_linear_amx_tiles(const at::Tensor& x, const int8_t* weight, const float* scales, int64_t N, int64_t K,
                                 int64_t groups) {
#ifdef MSTAR_X86
  return amx_gemm_bf16(x, N, K, int8_bf16_rows(weight, scales, K, groups));
#else
  TORCH_CHECK(false, "the AMX kernels need an x86-64 build");
#endif
}

}  // namespace
