// Weight-only quantized linear layers for CPU: y = x @ dequantize(W)^T, x and y float32.
//
// Each thread takes a tile of output rows, dequantizes them into a small float32 scratch that
// stays in L1/L2, then runs a register-blocked FMA micro-kernel over every row of x. The weights
// are read from memory once per call, whatever the batch size. Batches of 4 rows and more
// transpose the tile into a k-major panel and broadcast x (no horizontal sums), the layout BLAS
// kernels use; smaller ones dequantize in registers (see block_dots).
//
// q4: GGUF Q4_1 blocks of 20 bytes per 32 weights: fp16 scale d, fp16 minimum m, 16 bytes of
//     nibbles (byte j holds weight j in its low nibble and weight j + 16 in its high nibble);
//     weight = q * d + m.
// int8: int8 weights [N, K] with float32 scales [N, G], one per group of K / G weights.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define MSTAR_AVX2 1
#endif

namespace {

constexpr int64_t kQ4Block = 32;
constexpr int64_t kQ4BlockBytes = 20;
constexpr int64_t kRowTile = 8;  // output rows dequantized together
constexpr int kMT = 6;           // micro-kernel: rows of x ...
constexpr int kNT = 2;           // ... times rows of W

inline float half_to_float(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
#ifdef MSTAR_AVX2
  return _cvtsh_ss(bits);
#else
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
#endif
}

void dequant_q4_row(const uint8_t* row, int64_t K, float* out) {
  for (int64_t b = 0; b < K / kQ4Block; ++b) {
    const uint8_t* block = row + b * kQ4BlockBytes;
    const float d = half_to_float(block), m = half_to_float(block + 2);
    const uint8_t* qs = block + 4;
    float* o = out + b * kQ4Block;
#ifdef MSTAR_AVX2
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(bytes, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    auto put = [&](float* dst, __m128i q8) {
      _mm256_storeu_ps(dst, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q8)), vd, vm));
    };
    put(o, lo);
    put(o + 8, _mm_srli_si128(lo, 8));
    put(o + 16, hi);
    put(o + 24, _mm_srli_si128(hi, 8));
#else
    for (int j = 0; j < 16; ++j) {
      o[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
      o[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
#endif
  }
}

void dequant_int8_row(const int8_t* row, const float* scales, int64_t K, int64_t group, float* out) {
  for (int64_t g = 0; g < K / group; ++g) {
    const float s = scales[g];
    const int8_t* q = row + g * group;
    float* o = out + g * group;
    int64_t k = 0;
#ifdef MSTAR_AVX2
    const __m256 vs = _mm256_set1_ps(s);
    for (; k + 8 <= group; k += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + k));
      _mm256_storeu_ps(o + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), vs));
    }
#endif
    for (; k < group; ++k) o[k] = static_cast<float>(q[k]) * s;
  }
}

#ifdef MSTAR_AVX2
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// out[m, n] = dot(x[m, :], w[n, :]) for an MT x NT tile; K is a multiple of 8.
template <int MT, int NT>
void micro_kernel(const float* x, int64_t ldx, const float* w, int64_t K, float* out, int64_t ldo) {
#ifdef MSTAR_AVX2
  __m256 acc[MT][NT];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k += 8) {
    __m256 wv[NT];
    for (int j = 0; j < NT; ++j) wv[j] = _mm256_loadu_ps(w + j * K + k);
    for (int i = 0; i < MT; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + k);
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) out[i * ldo + j] = hsum(acc[i][j]);
#else
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) {
      float s = 0.f;
      for (int64_t k = 0; k < K; ++k) s += x[i * ldx + k] * w[j * K + k];
      out[i * ldo + j] = s;
    }
#endif
}

template <int NT>
void rows_kernel(const float* x, int64_t M, int64_t K, const float* w, float* out, int64_t ldo) {
  int64_t m = 0;
  for (; m + kMT <= M; m += kMT) micro_kernel<kMT, NT>(x + m * K, K, w, K, out + m * ldo, ldo);
  for (; m < M; ++m) micro_kernel<1, NT>(x + m * K, K, w, K, out + m * ldo, ldo);
}

#ifdef MSTAR_AVX2
inline void transpose8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

constexpr int64_t kPanel = 16;  // output rows of one k-major panel (two vectors)
constexpr int kMR = 6;          // rows of x per panel micro-kernel

// rows [16][K] (row-major) -> panel [K][16] (k-major)
void to_panel(const float* rows, int64_t K, float* panel) {
  for (int64_t k0 = 0; k0 < K; k0 += 8)
    for (int64_t j0 = 0; j0 < kPanel; j0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(rows + (j0 + i) * K + k0);
      transpose8(r);
      for (int t = 0; t < 8; ++t) _mm256_storeu_ps(panel + (k0 + t) * kPanel + j0, r[t]);
    }
}

// out[i, 0:valid] = x[i, :] @ panel for MR rows of x: broadcast x, two weight vectors per k.
template <int MR>
void panel_kernel(const float* x, int64_t K, const float* panel, float* out, int64_t ldo,
                  int64_t valid) {
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w0 = _mm256_loadu_ps(panel + k * kPanel), w1 = _mm256_loadu_ps(panel + k * kPanel + 8);
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_broadcast_ss(x + i * K + k);
      acc[i][0] = _mm256_fmadd_ps(xv, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xv, w1, acc[i][1]);
    }
  }
  alignas(32) float row[kPanel];
  for (int i = 0; i < MR; ++i) {
    float* dst = out + i * ldo;
    if (valid == kPanel) {
      _mm256_storeu_ps(dst, acc[i][0]);
      _mm256_storeu_ps(dst + 8, acc[i][1]);
    } else {
      _mm256_store_ps(row, acc[i][0]);
      _mm256_store_ps(row + 8, acc[i][1]);
      std::memcpy(dst, row, valid * sizeof(float));
    }
  }
}

template <int MR>
void panel_rows(const float* x, int64_t M, int64_t K, const float* panel, float* out, int64_t ldo,
                int64_t valid) {
  int64_t m = 0;
  for (; m + MR <= M; m += MR) panel_kernel<MR>(x + m * K, K, panel, out + m * ldo, ldo, valid);
  for (; m < M; ++m) panel_kernel<1>(x + m * K, K, panel, out + m * ldo, ldo, valid);
}
#endif

#ifdef MSTAR_AVX2
// Small batches are bound by reading the weights: they dequantize in registers, never through a
// scratch buffer, and factor the q4 minimum out of the block (sum x * (q d + m) = d sum x q +
// m sum x), so each block costs one conversion and one FMA per 8 weights.
std::vector<float> block_sums(const float* x, int64_t M, int64_t K) {
  std::vector<float> sums(M * K / kQ4Block);
  for (size_t i = 0; i < sums.size(); ++i) {
    const float* src = x + i * kQ4Block;
    __m256 total = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8)),
                                 _mm256_add_ps(_mm256_loadu_ps(src + 16), _mm256_loadu_ps(src + 24)));
    sums[i] = hsum(total);
  }
  return sums;
}

inline __m256 u8_to_ps(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }
inline __m256 i8_to_ps(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Dot products of 32 weights (as floats w[0..3]) with each of the M (< 4) rows of x at block b.
inline void block_dots(const __m256* w, const float* x, int64_t M, int64_t K, int64_t k0, __m256* dots) {
  for (int64_t i = 0; i < M; ++i) {
    const float* xb = x + i * K + k0;
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(xb), w[0]);
    p = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 8), w[1], p);
    p = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 16), w[2], p);
    dots[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 24), w[3], p);
  }
}

void q4_small_batch(const float* x, const std::vector<float>& sums, int64_t M, int64_t K,
                    const uint8_t* blocks_base, int64_t n_begin, int64_t n_end, float* out, int64_t N) {
  const int64_t nb = K / kQ4Block;
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* row = blocks_base + n * nb * kQ4BlockBytes;
    __m256 acc[3] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    float mins[3] = {0.f, 0.f, 0.f};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = row + b * kQ4BlockBytes;
      const float d = half_to_float(block), m = half_to_float(block + 2);
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 4));
      const __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
      const __m256 w[4] = {u8_to_ps(lo), u8_to_ps(_mm_srli_si128(lo, 8)), u8_to_ps(hi),
                           u8_to_ps(_mm_srli_si128(hi, 8))};
      __m256 dots[3];
      block_dots(w, x, M, K, b * kQ4Block, dots);
      const __m256 vd = _mm256_set1_ps(d);
      for (int64_t i = 0; i < M; ++i) {
        acc[i] = _mm256_fmadd_ps(dots[i], vd, acc[i]);
        mins[i] += m * sums[i * nb + b];
      }
    }
    for (int64_t i = 0; i < M; ++i) out[i * N + n] = hsum(acc[i]) + mins[i];
  }
}

// The same for int8 weights with scales per group of `group` (a multiple of 32) weights.
void int8_small_batch(const float* x, int64_t M, int64_t K, const int8_t* weight,
                      const float* scales, int64_t groups, int64_t n_begin, int64_t n_end,
                      float* out, int64_t N) {
  const int64_t nb = K / kQ4Block, per_group = nb / groups;
  for (int64_t n = n_begin; n < n_end; ++n) {
    const int8_t* row = weight + n * K;
    __m256 acc[3] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* q = row + b * kQ4Block;
      const __m256 w[4] = {i8_to_ps(q), i8_to_ps(q + 8), i8_to_ps(q + 16), i8_to_ps(q + 24)};
      __m256 dots[3];
      block_dots(w, x, M, K, b * kQ4Block, dots);
      const __m256 vs = _mm256_set1_ps(scales[n * groups + b / per_group]);
      for (int64_t i = 0; i < M; ++i) acc[i] = _mm256_fmadd_ps(dots[i], vs, acc[i]);
    }
    for (int64_t i = 0; i < M; ++i) out[i * N + n] = hsum(acc[i]);
  }
}
#endif

// Batches at least this large use k-major panels (no horizontal sums, x broadcast).
constexpr int64_t kPanelMinRows = 4;

// Shared driver: `dequant(n, dst)` writes output row n of W as K floats.
template <typename Dequant>
at::Tensor tiled_linear(const at::Tensor& x, int64_t N, Dequant dequant) {
  const int64_t M = x.size(0), K = x.size(1);
  at::Tensor out = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
#ifdef MSTAR_AVX2
  if (M >= kPanelMinRows) {
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
      for (; r + kNT <= rows; r += kNT)
        rows_kernel<kNT>(xp, M, K, scratch.data() + r * K, op + n0 + r, N);
      for (; r < rows; ++r) rows_kernel<1>(xp, M, K, scratch.data() + r * K, op + n0 + r, N);
    }
  });
  return out;
}

void check_input(const at::Tensor& x, int64_t K) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.dim() == 2,
              "x must be a 2-d float32 CPU tensor");
  TORCH_CHECK(x.size(1) == K, "x has ", x.size(1), " features, the weight ", K);
}

at::Tensor q4_linear(const at::Tensor& x_in, const at::Tensor& blocks, int64_t K) {
  TORCH_CHECK(K % kQ4Block == 0, "q4 needs in_features divisible by 32");
  TORCH_CHECK(blocks.scalar_type() == at::kByte && blocks.dim() == 2 && blocks.is_contiguous() &&
                  blocks.size(1) == K / kQ4Block * kQ4BlockBytes,
              "q4 blocks must be contiguous uint8 [N, K / 32 * 20]");
  at::Tensor x = x_in.contiguous();
  check_input(x, K);
  const uint8_t* bp = blocks.data_ptr<uint8_t>();
  const int64_t row_bytes = blocks.size(1);
#ifdef MSTAR_AVX2
  if (x.size(0) < kPanelMinRows) {
    const int64_t M = x.size(0), N = blocks.size(0);
    at::Tensor out = at::empty({M, N}, x.options());
    const float* xp = x.data_ptr<float>();
    const std::vector<float> sums = block_sums(xp, M, K);
    float* op = out.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
      q4_small_batch(xp, sums, M, K, bp, begin, end, op, N);
    });
    return out;
  }
#endif
  return tiled_linear(x, blocks.size(0),
                      [&](int64_t n, float* dst) { dequant_q4_row(bp + n * row_bytes, K, dst); });
}

at::Tensor int8_linear(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& scales) {
  TORCH_CHECK(weight.scalar_type() == at::kChar && weight.dim() == 2 && weight.is_contiguous(),
              "int8 weight must be contiguous int8 [N, K]");
  const int64_t N = weight.size(0), K = weight.size(1);
  TORCH_CHECK(K % 8 == 0, "int8 needs in_features divisible by 8");
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.dim() == 2 && scales.is_contiguous() &&
                  scales.size(0) == N && K % scales.size(1) == 0,
              "int8 scales must be contiguous float32 [N, G] with G dividing in_features");
  at::Tensor x = x_in.contiguous();
  check_input(x, K);
  const int8_t* wp = weight.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  const int64_t groups = scales.size(1), group = K / groups;
#ifdef MSTAR_AVX2
  if (x.size(0) < kPanelMinRows && group % kQ4Block == 0) {
    const int64_t M = x.size(0);
    at::Tensor out = at::empty({M, N}, x.options());
    const float* xp = x.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
      int8_small_batch(xp, M, K, wp, sp, groups, begin, end, op, N);
    });
    return out;
  }
#endif
  return tiled_linear(x, N, [&](int64_t n, float* dst) {
    dequant_int8_row(wp + n * K, sp + n * groups, K, group, dst);
  });
}

}  // namespace

TORCH_LIBRARY(mstar_quant, m) {
  m.def("q4_linear(Tensor x, Tensor blocks, int in_features) -> Tensor");
  m.def("int8_linear(Tensor x, Tensor weight, Tensor scales) -> Tensor");
}

TORCH_LIBRARY_IMPL(mstar_quant, CPU, m) {
  m.impl("q4_linear", &q4_linear);
  m.impl("int8_linear", &int8_linear);
}
